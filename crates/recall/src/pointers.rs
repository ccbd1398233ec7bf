//! Seqs to pointers: every answer cites `session:first-last` in the session's full view. The
//! lines asked for are batched per session and asked once per answer.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use memex_event::{NamespaceId, Seq, SessionId};
use memex_pointer::{FullView, LineRange, Pointer, Stability, ViewLines};
use uuid::Uuid;

use crate::RecallError;

/// Most seqs asked at each end of a span: a span's pointer runs from its first placed event to
/// its last.
const ENDS: u64 = 24;
/// Longest span whose every seq [`PointerBatch::want_range`] asks for.
const WHOLE_SPAN: u64 = 256;

#[derive(Default)]
pub struct PointerBatch {
    wanted: BTreeMap<Uuid, BTreeSet<u64>>,
    known: HashMap<(Uuid, u64), ViewLines>,
    /// Seqs asked that place no lines, and sessions the view does not have: not asked again.
    absent: HashSet<(Uuid, u64)>,
    gone: HashSet<Uuid>,
}

impl PointerBatch {
    /// Asks for the seqs a span's pointer needs (its ends).
    pub fn want_span(&mut self, session: Uuid, first: u64, last: u64) {
        let set = self.wanted.entry(session).or_default();
        let (first, last) = (first.min(last), first.max(last));
        for s in first..=last.min(first + ENDS) {
            set.insert(s);
        }
        for s in last.saturating_sub(ENDS).max(first)..=last {
            set.insert(s);
        }
    }

    /// Asks for every seq of a span up to [`WHOLE_SPAN`] events (its ends beyond that): the
    /// seqs that what lies in it (a segment's summary lines, its facts) will want, asked before
    /// they are known.
    pub fn want_range(&mut self, session: Uuid, first: u64, last: u64) {
        let (first, last) = (first.min(last), first.max(last));
        if last - first >= WHOLE_SPAN {
            return self.want_span(session, first, last);
        }
        self.wanted.entry(session).or_default().extend(first..=last);
    }

    pub fn want(&mut self, session: Uuid, seq: u64) {
        self.wanted.entry(session).or_default().insert(seq);
    }

    /// Looks the wanted seqs up, all sessions in one call (the full view batches what it can;
    /// a session's first lookup may compile it). A session the full view cannot find (gone)
    /// leaves its pointers empty.
    pub async fn resolve(&mut self, ns: Uuid, view: &dyn FullView) -> Result<(), RecallError> {
        let asks: Vec<(SessionId, Vec<Seq>)> = std::mem::take(&mut self.wanted)
            .into_iter()
            .filter(|(session, _)| !self.gone.contains(session))
            .map(|(session, seqs)| {
                let seqs: Vec<Seq> = seqs
                    .into_iter()
                    .filter(|s| !self.known.contains_key(&(session, *s)) && !self.absent.contains(&(session, *s)))
                    .map(Seq)
                    .collect();
                (SessionId(session), seqs)
            })
            .filter(|(_, seqs)| !seqs.is_empty())
            .collect();
        if asks.is_empty() {
            return Ok(());
        }
        let answers = view.lines_of_sessions(NamespaceId(ns), &asks, Stability::Current).await;
        for ((session, seqs), lines) in asks.iter().zip(answers) {
            let lines = match lines {
                Ok(l) => l,
                Err(memex_pointer::FullViewError::SessionNotFound(_)) => {
                    self.gone.insert(session.0);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for (s, l) in seqs.iter().zip(lines) {
                match l {
                    Some(l) => {
                        self.known.insert((session.0, s.0), l);
                    }
                    None => {
                        self.absent.insert((session.0, s.0));
                    }
                }
            }
        }
        Ok(())
    }

    /// The pointer of a span: from its first placed event's first line to the last line of the
    /// last placed event in the same chain. Empty when none of its events renders lines.
    pub fn span(&self, session: Uuid, first: u64, last: u64) -> String {
        self.lines(session, first, last)
            .map(|l| Pointer { session: SessionId(session), chain: l.chain, range: l.range }.to_string())
            .unwrap_or_default()
    }

    /// The lines a span's pointer names (see `span`); `None` when none of its events renders lines.
    pub fn lines(&self, session: Uuid, first: u64, last: u64) -> Option<ViewLines> {
        let (first, last) = (first.min(last), first.max(last));
        let start = (first..=last.min(first + ENDS)).find_map(|s| self.known.get(&(session, s)))?;
        let end = (last.saturating_sub(ENDS).max(first)..=last)
            .rev()
            .filter_map(|s| self.known.get(&(session, s)))
            .find(|l| l.chain == start.chain && l.range.last >= start.range.first)
            .unwrap_or(start);
        let range = LineRange { first: start.range.first, last: end.range.last.max(start.range.first) };
        Some(ViewLines { chain: start.chain, range })
    }

    pub fn one(&self, session: Uuid, seq: u64) -> String {
        self.span(session, seq, seq)
    }
}
