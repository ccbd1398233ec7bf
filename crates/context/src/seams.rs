//! The seams where other parts of memex plug into the context engine. Each has one honest default
//! that claims nothing it cannot know.
use futures::future::BoxFuture;
use memex_pointer::ViewBlock;
use uuid::Uuid;

use crate::ContextError;

/// The VCC full view of a session: where each event sits (its line range) and its lines there.
/// Pointers cite `(session:first-last)` when it answers, `(session@seq)` when it does not.
pub trait FullView: Send + Sync {
    /// One answer per event of the session (by seq), in order; `None` for one it cannot place.
    /// `head`: the session's last seq when the caller has just read it (at least every seq asked
    /// for), so the view of that version can be used without reading the session again.
    fn locate<'a>(
        &'a self,
        namespace_id: Uuid,
        session_id: Uuid,
        head: Option<u64>,
        seqs: &'a [u64],
    ) -> BoxFuture<'a, Result<Vec<Option<ViewBlock>>, ContextError>>;
}

/// No full view plugged in: every event is unplaced, pointers cite seqs.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFullView;

impl FullView for NoFullView {
    fn locate<'a>(
        &'a self,
        _: Uuid,
        _: Uuid,
        _: Option<u64>,
        seqs: &'a [u64],
    ) -> BoxFuture<'a, Result<Vec<Option<ViewBlock>>, ContextError>> {
        Box::pin(async move { Ok(vec![None; seqs.len()]) })
    }
}

/// What a pack asks the search layer.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchQuery {
    pub namespace_id: Uuid,
    /// The query text: user message, then the task's goals and next actions.
    pub text: String,
    pub terms: Vec<String>,
    /// Only events of these sessions.
    pub sessions: Vec<Uuid>,
    pub limit: usize,
    /// The sum of the last seqs of `sessions`, read with the pack's session (a source that
    /// catches up with the store need not read it again).
    pub heads_total: Option<u64>,
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
}

/// A candidate source backed by an index (lexical BM25, vectors).
pub trait CandidateSource: Send + Sync {
    fn name(&self) -> &'static str;
    fn search<'a>(&'a self, q: &'a SearchQuery) -> BoxFuture<'a, Result<Vec<SearchHit>, ContextError>>;
}

/// Compaction's Layer-1 check (A.4 line 3): an event may leave the window only once the search
/// index has it, so it can be found again.
pub trait IndexStatus: Send + Sync {
    /// The ids among `events` (session, seq, id) the index does not have yet.
    fn unindexed<'a>(
        &'a self,
        namespace_id: Uuid,
        events: &'a [(Uuid, u64, Uuid)],
    ) -> BoxFuture<'a, Result<Vec<Uuid>, ContextError>>;
}
