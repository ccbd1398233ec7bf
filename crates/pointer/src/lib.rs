//! Pointers into the lossless store, and the one form in which memex shows evidence to an agent.
//!
//! A session's **full view** (VCC) is memex's coordinate system: a pointer cites
//! `(session:first-last)`, a line range in it, which `ReadLines` dereferences. Until the VCC
//! full-view lookup is plugged in (see `memex-context`'s `FullView` seam), an event's
//! [`LineRange`] is unknown and pointers cite its seqs instead: `(session@17)` or
//! `(session@17-40)`, which `GetEvents` dereferences. Both forms are carried everywhere —
//! manifests, pack items, provenance — so nothing has to change but the lookup.
//!
//! Every context item is rendered in the adaptive-view form: a header
//! `(s1:41-62) [tool_result] Bash`, then the lines. In a pack, sessions are cited by a short
//! alias (`s1`, `s2`, …) declared once per block by a legend line (`sessions: s1=<uuid>`): a
//! session UUID costs ~30 tokens, an alias 2.
//!
//! **Architecture invariant:** pure — plain data in, strings out; no I/O, no clock, no async.

mod event;
mod render;

pub use event::{ArtifactPointer, ContextEvent, EventFlags, ViewBlock};
pub use render::{SessionAliases, cite, event_header, render_event};

use std::fmt;

/// An inclusive range of lines (1-based) of a session's full view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct LineRange {
    pub first: u32,
    pub last: u32,
}

impl LineRange {
    /// `None` when `last < first`.
    pub fn new(first: u32, last: u32) -> Option<LineRange> {
        (first <= last).then_some(LineRange { first, last })
    }

    /// The smallest range covering both.
    pub fn span(self, other: LineRange) -> LineRange {
        LineRange { first: self.first.min(other.first), last: self.last.max(other.last) }
    }
}

impl fmt::Display for LineRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// An inclusive range of seqs of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct SeqRange {
    pub first: u64,
    pub last: u64,
}

impl SeqRange {
    pub fn one(seq: u64) -> SeqRange {
        SeqRange { first: seq, last: seq }
    }

    pub fn new(first: u64, last: u64) -> Option<SeqRange> {
        (first <= last).then_some(SeqRange { first, last })
    }

    pub fn contains(&self, seq: u64) -> bool {
        (self.first..=self.last).contains(&seq)
    }

    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Display for SeqRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last { write!(f, "{}", self.first) } else { write!(f, "{}-{}", self.first, self.last) }
    }
}

/// Merges seqs (any order, duplicates allowed) into maximal runs of consecutive seqs.
pub fn seq_runs(seqs: impl IntoIterator<Item = u64>) -> Vec<SeqRange> {
    let mut v: Vec<u64> = seqs.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<SeqRange> = Vec::new();
    for s in v {
        match out.last_mut() {
            Some(r) if r.last + 1 == s => r.last = s,
            _ => out.push(SeqRange::one(s)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_consecutive_seqs() {
        let runs = seq_runs([7, 3, 4, 5, 9, 4, 10]);
        assert_eq!(runs, vec![SeqRange { first: 3, last: 5 }, SeqRange::one(7), SeqRange { first: 9, last: 10 }]);
        assert_eq!(runs[0].to_string(), "3-5");
        assert_eq!(runs[1].to_string(), "7");
        assert!(seq_runs([]).is_empty());
    }

    #[test]
    fn line_ranges_display_like_vcc() {
        let r = LineRange::new(41, 62).expect("ordered");
        assert_eq!(r.to_string(), "41-62");
        assert!(LineRange::new(5, 4).is_none());
        assert_eq!(r.span(LineRange { first: 3, last: 5 }), LineRange { first: 3, last: 62 });
    }
}
