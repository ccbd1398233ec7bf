//! The TRACE context engine: the context window as a cache over the lossless store.
//!
//! * **Task state** ([`ContextEngine::update_task_state`]): versioned, compare-and-swap, every
//!   version kept, a hard token cap; events record the version they were written under.
//! * **Compaction** ([`ContextEngine::compact`]): evicts from an agent's window in the paper's
//!   order, checks the victims are persisted (and indexed, when a search index is plugged in), and
//!   stores a `PointerManifest` where they were; [`ContextEngine::expand_manifest`] returns them.
//! * **Retrieval packs** ([`ContextEngine::build_pack`]): candidates from the sources (search,
//!   key pointers, standing items, manifest anchors), scored, selected and packed under budgets by
//!   `memex-pack`, stored with every decision, fetchable again ([`ContextEngine::pack`]).
//! * **Planner / executor** ([`ContextEngine::delegate`], [`ContextEngine::report`],
//!   [`ContextEngine::watch_reports`]).
//!
//! This crate is the shell: it reads from and writes to `memex-store` and calls the pure cores
//! (`memex-task`, `memex-compaction`, `memex-pack`) to decide.
//!
//! **Architecture invariant:** no decision is made here that a pure core could make: scoring,
//! packing and victim choice live in `memex-pack` and `memex-compaction`; this crate loads their
//! inputs and stores their outputs.
//! **Architecture invariant:** other layers plug in through the seams in [`seams`] only
//! (`memex_pointer::FullView` for VCC coordinates, [`CandidateSource`] for search, [`IndexCatchUp`]
//! for the index watermark); nothing here fakes what a missing seam would answer.

mod erase;
mod error;
mod events;
mod layout;
mod pack;
mod planning;
mod recent;
mod scan;
pub mod seams;
mod stats;
mod stored;
mod task;
mod tokens;
mod window;
mod writer;

use std::sync::Arc;

use memex_pack::{Budgets, PackParams};
use memex_pointer::{FullView, NoFullView};
use memex_store::Store;
use memex_task::TaskStateLimits;
use memex_tokens::Tokenizer;
use uuid::Uuid;

pub use error::ContextError;
pub use events::{CACHE_ENTRY_BYTES, event_bytes, event_weight};
pub use memex_compaction::PointerManifest;
pub use pack::{BuildPack, BuiltPack};
pub use planning::{Delegate, DelegateOutcome, NewReport, REPORT_STATUSES};
pub use seams::{CandidateSource, IndexCatchUp, MemoryBlocks, SearchHit, SearchQuery, SourceHits};
pub use stats::{PHASES, pack_phase_totals};
pub use task::TaskStateUpdate;
pub use tokens::CachedCounter;
pub use window::{CompactOutcome, CompactRequest, Expansion, ResidentWindow, parse_manifest};

/// How `context.cache_bytes` is shared, in sixths: the store scan's word counts 2, events read by
/// id (packs' search hits, anchors and pointers) 2, sessions' newest events 1, their standing
/// items 1.
const SCAN_SIXTHS: u64 = 2;
const EVENT_SIXTHS: u64 = 2;
const RECENT_SIXTHS: u64 = 1;
/// Ids of stored pack chunks remembered (about 100 bytes each with moka's bookkeeping). A
/// session's consecutive packs share most chunks, so a few dozen per live session suffice: this
/// covers several thousand sessions in about 25 MiB (it was 1,000,000, some 100 MiB).
const STORED_CHUNK_IDS: u64 = 250_000;

pub type Result<T, E = ContextError> = std::result::Result<T, E>;

/// Most standing items (decisions, constraints, reports, pinned) per pack.
const STANDING_LIMIT: u32 = 200;
/// Most events one key pointer expands to.
const POINTER_LIMIT: u32 = 100;

/// The engine's settings: the `[context]` section of `memex.toml` (the server embeds it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    /// Tokenizer of requests that name none: `o200k_base` or `cl100k_base`.
    pub tokenizer: Tokenizer,
    /// Hard cap on a rendered task-state card, in tokens.
    pub task_state_max_tokens: usize,
    /// Cap on a rendered pointer manifest, in tokens.
    pub manifest_max_tokens: usize,
    /// MMR trade-off between relevance and diversity.
    pub mmr_lambda: f64,
    /// Most items a retrieval block selects (K_max).
    pub max_pack_items: usize,
    /// Share of the retrieval budget a session's packs keep in place from turn to turn (the
    /// stable evidence, before the tail), so consecutive packs share their prefix; 0: none.
    pub stable_evidence_share: f64,
    /// When a session's anchored tail outgrows its budget, the new tail fills this share of it
    /// and grows from there; 1: the tail slides every turn (and no prefix is shared past it).
    pub tail_refill: f64,
    /// Newest events of a session read for a pack's recent tail.
    pub tail_events: u32,
    /// Hits asked of each search source per pack.
    pub search_limit: usize,
    /// With no search source plugged in, a pack scans (BM25, `memex_rank::bm25`) at most this
    /// many newest events of each session in its scope; 0: no scan, packs draw only on pointers,
    /// standing items and manifest anchors.
    pub scan_events: u32,
    /// Texts whose token counts are cached in memory.
    pub token_cache_entries: u64,
    /// Memory for the engine's caches of events, word counts, recent tails and standing items,
    /// in bytes (estimated); they fill over minutes of traffic and stay at this bound.
    pub cache_bytes: u64,
    /// Budgets of BuildPack requests that leave them unset (`[context.budgets]`).
    pub budgets: Budgets,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            tokenizer: Tokenizer::O200kBase,
            task_state_max_tokens: TaskStateLimits::default().max_tokens,
            manifest_max_tokens: 200,
            mmr_lambda: PackParams::default().lambda,
            max_pack_items: PackParams::default().max_items,
            stable_evidence_share: PackParams::default().stable_share,
            tail_refill: PackParams::default().tail_refill,
            tail_events: 200,
            search_limit: 50,
            scan_events: 2000,
            token_cache_entries: 200_000,
            cache_bytes: 768 * 1024 * 1024,
            budgets: Budgets::default(),
        }
    }
}

impl ContextConfig {
    /// What makes no sense, naming the key.
    pub fn check(&self) -> std::result::Result<(), String> {
        if !(0.0..=1.0).contains(&self.mmr_lambda) {
            return Err("context.mmr_lambda must be within 0..=1".into());
        }
        let refill_ok = self.tail_refill > 0.0 && self.tail_refill <= 1.0;
        if !(0.0..=1.0).contains(&self.stable_evidence_share) || !refill_ok {
            return Err("context.stable_evidence_share must be within 0..=1, context.tail_refill within (0, 1]".into());
        }
        if self.task_state_max_tokens < 50 || self.manifest_max_tokens < 50 || self.max_pack_items == 0 {
            return Err(
                "context.task_state_max_tokens and manifest_max_tokens must be >= 50, max_pack_items > 0".into()
            );
        }
        self.budgets.check().map_err(|e| format!("context.{e}"))
    }

    fn task_state(&self) -> TaskStateLimits {
        TaskStateLimits { max_tokens: self.task_state_max_tokens, ..TaskStateLimits::default() }
    }

    fn pack_params(&self) -> PackParams {
        PackParams {
            lambda: self.mmr_lambda,
            max_items: self.max_pack_items,
            stable_share: self.stable_evidence_share,
            tail_refill: self.tail_refill,
            ..PackParams::default()
        }
    }
}

/// The context engine. Cheap to clone.
#[derive(Clone)]
pub struct ContextEngine {
    store: Store,
    cfg: Arc<ContextConfig>,
    full_view: Arc<dyn FullView>,
    sources: Arc<Vec<Arc<dyn CandidateSource>>>,
    index: Option<Arc<dyn IndexCatchUp>>,
    /// Memory's blocks for packs with a memory budget (None: memory is off).
    memory: Option<Arc<dyn MemoryBlocks>>,
    counts: std::sync::Arc<tokens::CountMemo>,
    /// (namespace, task, version) → premises; versions are immutable.
    premises: moka::sync::Cache<(Uuid, String, u64), Arc<Vec<String>>>,
    /// (namespace, session) → the session's task; sessions never change task.
    session_tasks: moka::sync::Cache<(Uuid, Uuid), Option<String>>,
    /// Event id → its word counts for the store scan; events never change.
    words: moka::sync::Cache<Uuid, Arc<memex_rank::TermCounts>>,
    /// (namespace, event id) → the event; events never change.
    events: moka::sync::Cache<(Uuid, Uuid), Arc<memex_store::Event>>,
    /// (namespace, session) → its newest events, with the head they were read at.
    tails: moka::sync::Cache<(Uuid, Uuid), Arc<recent::Tail>>,
    /// (namespace, session) → the standing items of its last pack's scope, with the scope's heads.
    standing: moka::sync::Cache<(Uuid, Uuid), Arc<recent::Standing>>,
    /// (namespace, session, tool-call id) → the call's tool; calls never change.
    tool_names: moka::sync::Cache<(Uuid, Uuid, String), String>,
    /// (namespace, chunk id) of stored-pack chunks this process wrote or read: already in
    /// `pack_chunks` (append-only), so a pack need not send them. Expire so an operator's restore
    /// of an older database cannot leave a pack naming a chunk for long.
    stored_chunks: moka::sync::Cache<(Uuid, stored::ChunkId), ()>,
    reports: tokio::sync::broadcast::Sender<(Uuid, u64)>,
    /// Group commit of stored packs (None outside a runtime: each pack written on its own).
    writer: Option<Arc<writer::PackWriter>>,
}

impl ContextEngine {
    pub fn new(store: Store, cfg: ContextConfig) -> ContextEngine {
        let (reports, _) = tokio::sync::broadcast::channel(1024);
        let writer = tokio::runtime::Handle::try_current().ok().map(|_| Arc::new(writer::PackWriter::start(&store)));
        ContextEngine {
            writer,
            counts: std::sync::Arc::new(tokens::CountMemo::new(cfg.token_cache_entries)),
            premises: moka::sync::Cache::builder().max_capacity(100_000).build(),
            session_tasks: moka::sync::Cache::builder().max_capacity(100_000).build(),
            tool_names: moka::sync::Cache::builder().max_capacity(500_000).build(),
            stored_chunks: moka::sync::Cache::builder()
                .max_capacity(STORED_CHUNK_IDS)
                .time_to_live(std::time::Duration::from_secs(3600))
                .build(),
            tails: moka::sync::Cache::builder()
                .weigher(|_, t: &Arc<recent::Tail>| recent::tail_weight(t))
                .max_capacity(cfg.cache_bytes / 6 * RECENT_SIXTHS)
                .build(),
            standing: moka::sync::Cache::builder()
                .weigher(|_, s: &Arc<recent::Standing>| recent::standing_weight(s))
                .max_capacity(cfg.cache_bytes / 6 * RECENT_SIXTHS)
                .build(),
            events: moka::sync::Cache::builder()
                .weigher(|_, e: &Arc<memex_store::Event>| events::event_weight(e))
                .max_capacity(cfg.cache_bytes / 6 * EVENT_SIXTHS)
                .build(),
            words: moka::sync::Cache::builder()
                .weigher(|_, w: &Arc<memex_rank::TermCounts>| u32::try_from(w.weight()).unwrap_or(u32::MAX))
                .max_capacity(cfg.cache_bytes / 6 * SCAN_SIXTHS)
                .build(),
            store,
            cfg: Arc::new(cfg),
            full_view: Arc::new(NoFullView),
            sources: Arc::new(Vec::new()),
            index: None,
            memory: None,
            reports,
        }
    }

    /// Plugs in the VCC full-view lookup.
    pub fn with_full_view(mut self, full_view: Arc<dyn FullView>) -> ContextEngine {
        self.full_view = full_view;
        self
    }

    /// Adds a search source (lexical, vector).
    pub fn with_source(mut self, source: Arc<dyn CandidateSource>) -> ContextEngine {
        let mut v: Vec<Arc<dyn CandidateSource>> = self.sources.as_ref().clone();
        v.push(source);
        self.sources = Arc::new(v);
        self
    }

    /// Plugs in memory, for packs with a memory budget.
    pub fn with_memory(mut self, memory: Arc<dyn MemoryBlocks>) -> ContextEngine {
        self.memory = Some(memory);
        self
    }

    /// Plugs in the search index's catch-up for compaction's "indexed" check.
    pub fn with_index_catch_up(mut self, index: Arc<dyn IndexCatchUp>) -> ContextEngine {
        self.index = Some(index);
        self
    }

    pub fn config(&self) -> &ContextConfig {
        &self.cfg
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A counter for `tokenizer` sharing the engine's cache.
    pub fn counter(&self, tokenizer: Tokenizer) -> CachedCounter {
        CachedCounter::new(tokenizer, self.counts.clone())
    }

    /// How full each of the engine's caches is (for the metrics; moka's counts are estimates).
    pub fn cache_sizes(&self) -> Vec<memex_store::CacheSize> {
        use memex_store::CacheUnit::{Bytes, Entries};
        vec![
            cache_size("context.events", &self.events, Bytes),
            cache_size("context.words", &self.words, Bytes),
            cache_size("context.tails", &self.tails, Bytes),
            cache_size("context.standing", &self.standing, Bytes),
            cache_size("context.stored_chunks", &self.stored_chunks, Entries),
            cache_size("context.tool_names", &self.tool_names, Entries),
            cache_size("context.premises", &self.premises, Entries),
            cache_size("context.session_tasks", &self.session_tasks, Entries),
        ]
    }

    /// Names of the search sources packs use: the plugged-in ones, else `store-scan` (the store's
    /// own BM25 scan of the scope's newest events) unless it is turned off.
    pub fn source_names(&self) -> Vec<&'static str> {
        if self.sources.is_empty() && self.cfg.scan_events > 0 {
            return vec![scan::STORE_SCAN];
        }
        self.sources.iter().map(|s| s.name()).collect()
    }
}

fn cache_size<K, V>(
    name: &'static str,
    c: &moka::sync::Cache<K, V>,
    unit: memex_store::CacheUnit,
) -> memex_store::CacheSize
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    memex_store::CacheSize {
        name,
        entries: c.entry_count(),
        weight: c.weighted_size(),
        capacity: c.policy().max_capacity().unwrap_or(0),
        unit,
    }
}
