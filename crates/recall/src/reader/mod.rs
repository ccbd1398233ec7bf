//! The reader tools (VC §3.5) over the derived memory: `find_quote`, `query_facts`,
//! `expand_topic`, `remember_when`, `recall_all`, plus `list_topics`, `get_fact` and the status.
//! Every answer cites pointers into the full view. The server's MemoryService calls these and
//! only translates.
mod facts;
mod quotes;
mod topics;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use memex_pointer::{FullView, LineRange};
use memex_store::Store;
use memex_tokens::TokenCounter;
use uuid::Uuid;

use crate::RecallError;
use crate::config::MemoryConfig;
use crate::vectors::SharedVectors;

pub use facts::FactQuery;
pub use quotes::{QuoteRequest, TimeRange, resolve_range};
pub use topics::Expanded;

/// A search over a namespace's events, as FindQuote needs it (the server plugs the hybrid index
/// in; without one, FindQuote ranks segment summaries by BM25).
pub trait EventSearch: Send + Sync {
    fn search<'a>(&'a self, ns: Uuid, q: &'a SearchQuery) -> BoxFuture<'a, Result<SearchHits, RecallError>>;
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchQuery {
    pub query: String,
    pub sessions: Vec<Uuid>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub limit: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub session: Uuid,
    pub seq: u64,
    pub kind: String,
    pub score: f32,
    pub text: String,
    pub lines: Option<LineRange>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SearchHits {
    pub hits: Vec<SearchHit>,
    pub vectors_used: bool,
}

/// A fact as answers carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct FactView {
    pub id: Uuid,
    pub fact_type: String,
    pub subject: String,
    pub verb: String,
    pub object: String,
    pub what: String,
    pub who: String,
    pub when: DateTime<Utc>,
    pub place: String,
    pub why: String,
    pub status: String,
    pub session: Uuid,
    pub first_seq: u64,
    pub last_seq: u64,
    pub pointer: String,
    pub superseded_by: Option<Uuid>,
    pub superseded_at: Option<DateTime<Utc>>,
    pub source: String,
}

/// A line of a summary with its pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineView {
    pub text: String,
    pub session: Uuid,
    pub seq: u64,
    pub pointer: String,
}

/// A segment as answers carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentView {
    pub id: Uuid,
    pub session: Uuid,
    pub first_seq: u64,
    pub last_seq: u64,
    pub pointer: String,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub turns: u32,
    pub tags: Vec<String>,
    pub primary_tag: String,
    pub summary: Vec<LineView>,
    pub summary_tokens: u32,
    pub group_seq: u64,
    pub closed: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Quote {
    /// None for a hit in events the worker has not read yet.
    pub segment: Option<SegmentView>,
    pub match_type: &'static str,
    pub excerpt: String,
    pub hit_pointer: String,
    pub hit_session: Uuid,
    pub hit_seq: u64,
    pub score: f32,
    pub facts: Vec<FactView>,
    pub superseded: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Quotes {
    pub quotes: Vec<Quote>,
    pub already_presented: u32,
    pub vectors_used: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicView {
    pub tag: String,
    pub aliases: Vec<String>,
    pub parent: Option<String>,
    pub segments: u32,
    pub turns: u32,
    pub sessions: u32,
    pub first_time: Option<DateTime<Utc>>,
    pub last_time: Option<DateTime<Utc>>,
    pub broad: bool,
    pub in_cover: bool,
    pub description: String,
    pub summary: Vec<LineView>,
    pub summary_tokens: u32,
    pub facts: u32,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recalled {
    pub topics: Vec<TopicView>,
    pub text: String,
    pub tokens: u32,
    pub omitted: u32,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopicPage {
    pub topics: Vec<TopicView>,
    pub next_page_token: String,
    pub total: u32,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Status {
    pub interpreter: String,
    pub lag_events: u64,
    pub sessions: u64,
    pub segments: u64,
    pub facts: u64,
    pub topics: u64,
    pub topics_current: bool,
}

/// A namespace's distinct verbs with their vectors, and when they were read.
pub(crate) type VerbCache = (std::time::Instant, Arc<Vec<(String, Vec<f32>)>>);

/// The memory as readers see it.
#[derive(Clone)]
pub struct Memory {
    pub(crate) store: Store,
    pub(crate) config: Arc<MemoryConfig>,
    pub(crate) view: Arc<dyn FullView>,
    pub(crate) search: Option<Arc<dyn EventSearch>>,
    pub(crate) vectors: SharedVectors,
    pub(crate) counter: Arc<dyn TokenCounter>,
    /// Distinct verbs per namespace, for verb expansion by vector (refreshed every minute).
    pub(crate) verbs: Arc<std::sync::Mutex<std::collections::HashMap<Uuid, VerbCache>>>,
}

impl Memory {
    pub fn new(
        store: Store,
        config: MemoryConfig,
        view: Arc<dyn FullView>,
        search: Option<Arc<dyn EventSearch>>,
        vectors: SharedVectors,
        counter: Arc<dyn TokenCounter>,
    ) -> Memory {
        Memory { store, config: Arc::new(config), view, search, vectors, counter, verbs: Default::default() }
    }

    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    fn check_enabled(&self) -> Result<(), RecallError> {
        if self.config.enabled { Ok(()) } else { Err(RecallError::Disabled) }
    }

    fn count(&self, text: &str) -> usize {
        self.counter.count(text)
    }

    /// How far the worker has got in `ns`, and what the memory holds.
    pub async fn status(&self, ns: Uuid) -> Result<Status, RecallError> {
        let pool = self.store.pool();
        let lag = crate::tables::backlog(pool, Some(&[ns])).await?;
        // Counts the worker keeps as it writes (counting the tables took seconds at 1M events).
        let (sessions, segments, facts, topics, current): (i64, i64, i64, i64, bool) = sqlx::query_as(
            "SELECT sessions, segments, facts, topics, version <= built_version FROM memory_namespaces
             WHERE namespace_id = $1",
        )
        .bind(ns)
        .fetch_optional(pool)
        .await?
        .unwrap_or((0, 0, 0, 0, true));
        Ok(Status {
            interpreter: self.config.interpreter_name(),
            lag_events: lag,
            sessions: sessions as u64,
            segments: segments as u64,
            facts: facts as u64,
            topics: topics as u64,
            topics_current: current,
        })
    }
}

/// Checks a reader's name (an agent id).
pub(crate) fn check_reader(reader: &str) -> Result<(), RecallError> {
    if reader.len() > 256 || reader.chars().any(char::is_control) {
        return Err(RecallError::invalid("reader", "at most 256 characters, no control characters"));
    }
    Ok(())
}
