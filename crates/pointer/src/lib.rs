//! memex's coordinate vocabulary: pointers into the lossless store, the seam to the full view, and
//! the one form in which memex shows evidence to an agent.
//!
//! A session's **full view** (VCC) is memex's coordinate system: a [`Pointer`]
//! `session:first-last` names a [`LineRange`] in it, which `ReadLines` dereferences. Where an
//! event sits is asked through the [`FullView`] seam (compiled sessions answer it); an event it
//! cannot place is cited by seq instead, `(session@17)` or `(session@17-40)`, which `GetEvents`
//! dereferences. Every line range in memex — VCC's blocks, index hits, pack items, manifests —
//! is this one [`LineRange`].
//!
//! Every context item is rendered in the adaptive-view form: a header
//! `(s1:41-62) [tool_result] Bash`, then the lines. In a pack, sessions are cited by a short
//! alias (`s1`, `s2`, …) declared once per block by a legend line (`sessions: s1=<uuid>`): a
//! session UUID costs ~30 tokens, an alias 2.
//!
//! **Architecture invariant:** pure — plain data in, strings out; no I/O, no clock. The only async
//! item is the [`FullView`] trait, which others implement.

mod event;
mod full_view;
mod render;

pub use event::{ArtifactPointer, ContextEvent, EventFlags, ViewBlock};
pub use full_view::{FullView, FullViewError, NoFullView, SESSIONS_AT_ONCE, Stability, ViewLines};
pub use render::{SessionAliases, cite, event_header, render_event};

use std::fmt;

use memex_event::{FieldError, SessionId};

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

    pub fn contains(self, line: u32) -> bool {
        (self.first..=self.last).contains(&line)
    }
}

impl fmt::Display for LineRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// A pointer as an agent gives it back: `session:first-last`, or `session#chain:first-last` for a
/// later chain of a trace split by compactions; `ReadLines` dereferences it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pointer {
    pub session: SessionId,
    /// 1-based.
    pub chain: u32,
    pub range: LineRange,
}

impl Pointer {
    /// Parses the text form; the error names the field at fault (`pointer`, or `session_id` when
    /// only the session is not a UUID).
    pub fn parse(p: &str) -> Result<Pointer, FieldError> {
        let bad = || {
            FieldError::new(
                "pointer",
                format!("{p:?} is not \"session-id:first-last\" or \"session-id#chain:first-last\""),
            )
        };
        let (head, range) = p.rsplit_once(':').ok_or_else(bad)?;
        let (first, last) = range.split_once('-').ok_or_else(bad)?;
        let (session, chain) = match head.split_once('#') {
            Some((s, c)) => (s, c.parse().map_err(|_| bad())?),
            None => (head, 1),
        };
        let (first, last) = (first.parse().map_err(|_| bad())?, last.parse().map_err(|_| bad())?);
        let session = uuid::Uuid::try_parse(session)
            .map_err(|_| FieldError::new("session_id", format!("{session:?} is not a UUID")))?;
        Ok(Pointer { session: SessionId(session), chain, range: LineRange { first, last } })
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.chain == 1 {
            write!(f, "{}:{}", self.session, self.range)
        } else {
            write!(f, "{}#{}:{}", self.session, self.chain, self.range)
        }
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
    fn pointers_parse_and_print_both_forms() {
        let s = "0193a2b4-0000-7000-8000-000000000001";
        let p = Pointer::parse(&format!("{s}:41-62")).expect("plain");
        assert_eq!((p.session.to_string().as_str(), p.chain, p.range), (s, 1, LineRange { first: 41, last: 62 }));
        assert_eq!(p.to_string(), format!("{s}:41-62"));
        let p = Pointer::parse(&format!("{s}#2:3-4")).expect("chained");
        assert_eq!((p.chain, p.to_string()), (2, format!("{s}#2:3-4")));
        assert_eq!(Pointer::parse("nope").map_err(|e| e.field), Err("pointer".to_owned()));
        assert_eq!(Pointer::parse(&format!("{s}:4")).map_err(|e| e.field), Err("pointer".to_owned()));
        assert_eq!(Pointer::parse("s1:1-2").map_err(|e| e.field), Err("session_id".to_owned()));
    }

    #[test]
    fn line_ranges_display_like_vcc() {
        let r = LineRange::new(41, 62).expect("ordered");
        assert_eq!(r.to_string(), "41-62");
        assert!(LineRange::new(5, 4).is_none());
        assert_eq!(r.span(LineRange { first: 3, last: 5 }), LineRange { first: 3, last: 62 });
    }
}
