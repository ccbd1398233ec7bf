//! The seam to a session's full view. Compiled sessions (`memex-views`) answer it; the search
//! index (stored hits' lines) and the context engine (placing pack items) ask it. One trait, so a
//! request never goes down into a consumer and back up into the server to learn where an event is.

use futures::StreamExt;
use futures::future::BoxFuture;
use memex_event::{NamespaceId, Seq, SessionId};

use crate::{LineRange, ViewBlock};

/// Sessions a [`FullView::lines_of_sessions`] looks up at once (a session's first lookup may
/// compile it).
pub const SESSIONS_AT_ONCE: usize = 8;

/// Where an event sits in its session's full views: a trace split by compactions has one full view
/// per chain (1-based), each with its own line numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ViewLines {
    pub chain: u32,
    pub range: LineRange,
}

/// Which lines a caller can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    /// The lines of the session's current version.
    Current,
    /// Only lines that can never move: an imported trace's (it takes no appends). A live session's
    /// last section still grows as events arrive, so a caller that stores the answer (the index,
    /// while indexing) gets `None` for its events.
    Final,
}

/// Why the full view could not answer; the kinds a caller acts on differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FullViewError {
    /// The session does not exist in the namespace.
    #[error("session {0} not found")]
    SessionNotFound(SessionId),
    /// The store could not be reached or is overloaded: retry.
    #[error("the full view is unavailable: {0}")]
    Unavailable(String),
    /// Stored data that no longer compiles, or a failed task: a bug, never the caller's fault.
    #[error("the full view failed: {0}")]
    Internal(String),
}

/// A session's full view, as the layers that cite it need it.
pub trait FullView: Send + Sync {
    /// Where each event (by seq) sits; `None` for an event that renders no lines (or, with
    /// [`Stability::Final`], whose lines may still move). One answer per seq, in order.
    fn lines<'a>(
        &'a self,
        namespace: NamespaceId,
        session: SessionId,
        seqs: &'a [Seq],
        stability: Stability,
    ) -> BoxFuture<'a, Result<Vec<Option<ViewLines>>, FullViewError>>;

    /// [`FullView::lines`] of several sessions, one answer per ask, in order (a session's error
    /// is its own); an implementation may answer them all in a few round trips.
    fn lines_of_sessions<'a>(
        &'a self,
        namespace: NamespaceId,
        asks: &'a [(SessionId, Vec<Seq>)],
        stability: Stability,
    ) -> BoxFuture<'a, Vec<Result<Vec<Option<ViewLines>>, FullViewError>>> {
        let work: Vec<_> =
            asks.iter().map(|(session, seqs)| self.lines(namespace, *session, seqs, stability)).collect();
        Box::pin(futures::stream::iter(work).buffered(SESSIONS_AT_ONCE).collect())
    }

    /// Makes later lookups of the session's lines cheap for every process, ahead of any reader:
    /// the memory worker calls it for each session it has read, so that an answer citing many
    /// sessions need not compile them on the request path. Returns whether it did work (the
    /// default has none to do).
    fn prepare<'a>(
        &'a self,
        _namespace: NamespaceId,
        _session: SessionId,
    ) -> BoxFuture<'a, Result<bool, FullViewError>> {
        Box::pin(async { Ok(false) })
    }

    /// Each event's block of the first chain (its range and its lines there), for rendering it
    /// as the agent will cite it; `None` for one that renders nothing or sits in a later chain
    /// (pointers cite one line space, so those are cited by seq). `head`: the session's last seq
    /// when the caller has just read it, so that version's view is used without reading it again.
    fn blocks<'a>(
        &'a self,
        namespace: NamespaceId,
        session: SessionId,
        head: Option<Seq>,
        seqs: &'a [Seq],
    ) -> BoxFuture<'a, Result<Vec<Option<ViewBlock>>, FullViewError>>;
}

/// No full view plugged in (an index benchmark, a unit test): nothing is placed, and pointers
/// cite seqs.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFullView;

impl FullView for NoFullView {
    fn lines<'a>(
        &'a self,
        _: NamespaceId,
        _: SessionId,
        seqs: &'a [Seq],
        _: Stability,
    ) -> BoxFuture<'a, Result<Vec<Option<ViewLines>>, FullViewError>> {
        Box::pin(async move { Ok(vec![None; seqs.len()]) })
    }

    fn blocks<'a>(
        &'a self,
        _: NamespaceId,
        _: SessionId,
        _: Option<Seq>,
        seqs: &'a [Seq],
    ) -> BoxFuture<'a, Result<Vec<Option<ViewBlock>>, FullViewError>> {
        Box::pin(async move { Ok(vec![None; seqs.len()]) })
    }
}
