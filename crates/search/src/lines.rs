//! The seam for full-view line ranges. memex's coordinate system is the VCC full view of a
//! session (one line-number space per session); a hit says which lines of that view its event
//! occupies, so a caller can open the view right there. The lookup belongs to the VCC compiler (the
//! server plugs in its view cache); [`UnknownLineRanges`] answers `0..=0`, "not known", for
//! callers without views (benchmarks of the index alone, unit tests).

use futures::future::BoxFuture;
use uuid::Uuid;

use crate::IndexError;

/// An inclusive range of full-view lines; `first_line = 0` means unknown (lines are 1-based).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LineRange {
    pub first_line: u64,
    pub last_line: u64,
}

impl LineRange {
    pub const UNKNOWN: LineRange = LineRange { first_line: 0, last_line: 0 };

    pub fn is_known(self) -> bool {
        self.first_line > 0
    }
}

/// One event of a session whose line range is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLines {
    pub event_id: Uuid,
    pub seq: u64,
}

/// Why a range is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineLookup {
    /// While indexing: the answer is stored in the index document, so only ranges that can never
    /// change are worth giving (a live session's last section still moves as events arrive).
    Indexing,
    /// For a query's hits whose stored range is unknown: the current range.
    Query,
}

/// Looks up where events sit in their session's full view.
///
/// Called when events are indexed (the range is stored in the index document) and again at query
/// time for hits whose stored range is unknown, so a lookup plugged in later fills hits without a
/// reindex. Must answer one range per input event, in order; `LineRange::UNKNOWN` is always allowed.
pub trait LineRanges: Send + Sync + 'static {
    fn line_ranges<'a>(
        &'a self,
        namespace_id: Uuid,
        session_id: Uuid,
        events: &'a [EventLines],
        when: LineLookup,
    ) -> BoxFuture<'a, Result<Vec<LineRange>, IndexError>>;
}

/// No lookup: every range is unknown.
#[derive(Debug, Clone, Copy, Default)]
pub struct UnknownLineRanges;

impl LineRanges for UnknownLineRanges {
    fn line_ranges<'a>(
        &'a self,
        _namespace_id: Uuid,
        _session_id: Uuid,
        events: &'a [EventLines],
        _when: LineLookup,
    ) -> BoxFuture<'a, Result<Vec<LineRange>, IndexError>> {
        Box::pin(async move { Ok(vec![LineRange::UNKNOWN; events.len()]) })
    }
}
