//! The seams where the search layer plugs into the context engine (the full view's seam is
//! `memex_pointer::FullView`, shared with the index). With none plugged in, packs scan the store
//! and compaction checks persistence only.
use futures::future::BoxFuture;
use memex_event::{NamespaceId, SessionId};
use uuid::Uuid;

use crate::ContextError;

/// What a pack asks the search layer.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchQuery {
    pub namespace_id: Uuid,
    /// The query text: user message, then the task's goals and next actions.
    pub text: String,
    /// Its terms, as `memex_rank::query_terms` gives them (the index's analyzer).
    pub terms: Vec<String>,
    /// Only events of these sessions.
    pub sessions: Vec<Uuid>,
    pub limit: usize,
    /// The last seq of each of `sessions`, read with the pack's session (a source that catches up
    /// with the store need not read them again).
    pub heads: Option<Vec<(Uuid, u64)>>,
}

/// One search result.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    pub event_id: Uuid,
    /// BM25 score, from lexical search.
    pub lexical: Option<f32>,
    /// Cosine similarity, from vector search.
    pub vector: Option<f32>,
    pub embedding: Option<Vec<f32>>,
    /// The chunk of the event's artifact that matched best, when it was not the event's own text.
    pub artifact_match: Option<memex_pack::ArtifactMatch>,
}

/// What a source found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceHits {
    pub hits: Vec<SearchHit>,
    /// Whether it ranked by vectors as well (false when the model could not answer in time).
    pub vectors_used: bool,
}

/// A candidate source backed by an index (lexical BM25, vectors).
pub trait CandidateSource: Send + Sync {
    fn name(&self) -> &'static str;
    fn search<'a>(&'a self, q: &'a SearchQuery) -> BoxFuture<'a, Result<SourceHits, ContextError>>;
}

/// Memory's part of a pack (Virtual Context §3.6): the `<context-topics>` hint (every topic, its
/// depth and cost) within `hint_tokens`, then the reader's working set at its depths within
/// `content_tokens`. The pack core cuts the whole to the memory budget.
pub trait MemoryBlocks: Send + Sync {
    fn render<'a>(
        &'a self,
        namespace: Uuid,
        reader: &'a str,
        hint_tokens: usize,
        content_tokens: usize,
    ) -> BoxFuture<'a, Result<String, ContextError>>;
}

/// Compaction's Layer-1 check (A.4 line 3): an event may leave the window only once the search
/// index has it, so it can be found again.
pub trait IndexCatchUp: Send + Sync {
    /// Returns once every committed event of `sessions` is in the index (the same
    /// read-your-writes step every search takes).
    fn ensure_indexed<'a>(
        &'a self,
        namespace: NamespaceId,
        sessions: &'a [SessionId],
    ) -> BoxFuture<'a, Result<(), ContextError>>;
}
