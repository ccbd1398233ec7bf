//! Advancing one session's memory by the events that arrived since the last time: the whole
//! write path of the memory worker, minus the database. Facts run ahead event by event; turns
//! close when the next one opens (or when the session goes quiet); closed turns are read by the
//! interpreter, joined into segments, summarised, and a segment that closes is merged back and
//! its turns' fact signals consolidated.
//!
//! The session's open segment is recomputed from its first seq on every call (its turns keep the
//! tags they were given), so processing a session in any number of pieces gives the memory of
//! one pass (property-tested in `tests/pieces.rs`).
use memex_tokens::TokenCounter;

use crate::facts::FactExtractor;
use crate::interpreter::{InterpretError, Interpreter, Lookback, TurnReading};
use crate::model::{Fact, MemEvent, Segment, SeqSpan, TaggedTurn, Turn};
use crate::segment::{Features, SegmentConfig, merge_back, segment_features, segment_ranges, segment_tags};
use crate::tags::{LOOKBACK, MAX_TAGS, keywords, normalize_tag};
use crate::turns::turns;

/// Tags of a segment compared for merge-back.
pub const SEGMENT_FEATURE_TAGS: usize = 10;
/// A closing segment is compared with at most this many earlier segments of its session (the
/// latest), so a job's work stays bounded however long the session.
pub const MERGE_BACK_WINDOW: usize = 64;

/// Where a session's memory stands.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Progress {
    /// Events up to here went through the fact extractor.
    pub fact_seq: u64,
    /// The last seq of the last closed turn.
    pub turn_seq: u64,
    /// The first seq of the open segment (0: none yet).
    pub open_seq: u64,
    pub extractor: FactExtractor,
}

impl Progress {
    /// The first seq the next call must be given events from.
    pub fn read_from(&self) -> u64 {
        if self.open_seq > 0 { self.open_seq } else { self.turn_seq + 1 }
    }
}

/// A closed turn as stored: its span, tags and fact signals.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoredTurn {
    pub span: SeqSpan,
    pub tags: Vec<String>,
    pub signals: Vec<Fact>,
}

/// What the store holds that this call needs.
#[derive(Debug, Clone, Default)]
pub struct Prior {
    /// The closed turns of the open segment, in order.
    pub open_turns: Vec<StoredTurn>,
    /// The session's last closed turns (up to [`LOOKBACK`]), in order, whatever their segment.
    pub recent: Vec<StoredTurn>,
    /// The session's closed segments before the open one: (group, features), in order.
    pub earlier: Vec<(u64, Features)>,
}

/// A segment as this call leaves it.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentOut {
    pub segment: Segment,
    pub closed: bool,
    pub features: Features,
}

/// What one call derived.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Advance {
    /// Facts completed by the new events, then facts consolidated from closed segments.
    pub facts: Vec<Fact>,
    /// Turns closed by this call, with how they were read.
    pub new_turns: Vec<StoredTurn>,
    /// The segments from the open segment's first seq on: rewritten, closed or new. The last is open.
    pub segments: Vec<SegmentOut>,
    pub progress: Progress,
}

/// Vectors of texts, one per text (None where there is none).
pub type VectorsFn = dyn Fn(&[String]) -> Vec<Option<Vec<f32>>>;

/// The tools a call works with.
pub struct Tools<'a> {
    pub interpreter: &'a dyn Interpreter,
    pub counter: &'a dyn TokenCounter,
    /// Vectors of turn texts (one per text), when an embedder is at hand.
    pub vectors: Option<&'a VectorsFn>,
    pub segment: &'a SegmentConfig,
}

/// A turn's tags as the interpreter gave them, normalised and capped.
fn clean_tags(raw: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in raw {
        if let Some(n) = normalize_tag(t)
            && !out.contains(&n)
        {
            out.push(n);
        }
        if out.len() >= MAX_TAGS {
            break;
        }
    }
    out
}

/// Whether `open`, a session's events from `progress.turn_seq + 1` on (its open turn and what
/// followed), close a turn (`close_last`: the session has gone quiet). When they do not,
/// [`advance`] given only `open` answers exactly what it answers given every event from
/// [`Progress::read_from`]: only facts move, and the open segment's closed turns, which only
/// re-segmenting reads, need not be read. Most jobs of a live session are such jobs.
pub fn closes_a_turn(open: &[MemEvent], close_last: bool) -> bool {
    !open.is_empty() && (close_last || turns(open).len() > 1)
}

/// Advances a session. `events` are its events from `progress.read_from()` on, in seq order and
/// without gaps (or only those after `progress.turn_seq` when they close no turn:
/// [`closes_a_turn`]); `close_last` closes the last turn too (the session has gone quiet).
pub fn advance(
    progress: &Progress,
    prior: &Prior,
    events: &[MemEvent],
    close_last: bool,
    tools: &Tools<'_>,
) -> Result<Advance, InterpretError> {
    let mut out = Advance { progress: progress.clone(), ..Advance::default() };
    let Some(last) = events.last() else { return Ok(out) };
    // Facts, event by event.
    for e in events.iter().filter(|e| e.seq > progress.fact_seq) {
        out.facts.extend(out.progress.extractor.push(e));
    }
    out.progress.fact_seq = progress.fact_seq.max(last.seq);

    // Turns: those of the open segment (closed already, tags stored) and the new ones.
    let split = events.partition_point(|e| e.seq <= progress.turn_seq);
    let old_turns = turns(&events[..split]);
    let mut new_turns = turns(&events[split..]);
    if !close_last {
        new_turns.pop(); // may still grow
    }
    if new_turns.is_empty() {
        // The open segment changes only when a turn closes.
        return Ok(out);
    }
    // The stored reading of the open segment's turns (same spans: turns are cut the same way).
    let old: Vec<(Turn, StoredTurn)> = old_turns
        .into_iter()
        .map(|t| {
            let stored = prior
                .open_turns
                .iter()
                .find(|s| s.span == t.span)
                .cloned()
                .unwrap_or(StoredTurn { span: t.span, ..StoredTurn::default() });
            (t, stored)
        })
        .collect();
    let lookback: Vec<Lookback> = prior
        .recent
        .iter()
        .skip(prior.recent.len().saturating_sub(LOOKBACK))
        .map(|r| Lookback {
            turn: old.iter().find(|(t, _)| t.span == r.span).map(|(t, _)| t.clone()),
            tags: r.tags.clone(),
        })
        .collect();
    let readings: Vec<TurnReading> = if new_turns.is_empty() {
        Vec::new()
    } else {
        let r = tools.interpreter.read_turns(&new_turns, &lookback, &[])?;
        if r.len() != new_turns.len() {
            return Err(InterpretError::BadAnswer(format!("{} readings for {} turns", r.len(), new_turns.len())));
        }
        r
    };
    let mut all: Vec<(Turn, StoredTurn)> = old;
    for (t, r) in new_turns.into_iter().zip(readings) {
        let stored = StoredTurn { span: t.span, tags: clean_tags(&r.tags), signals: r.signals };
        out.new_turns.push(stored.clone());
        all.push((t, stored));
    }
    if let Some((t, _)) = all.last() {
        out.progress.turn_seq = out.progress.turn_seq.max(t.span.last);
    }

    // Segments from the open segment's first turn.
    let texts: Vec<String> = all.iter().map(|(t, _)| t.text()).collect();
    let vectors = tools.vectors.map(|f| f(&texts)).unwrap_or_default();
    let tagged: Vec<TaggedTurn> = all
        .iter()
        .zip(&texts)
        .enumerate()
        .map(|(i, ((t, s), text))| TaggedTurn {
            turn: t.clone(),
            tags: s.tags.clone(),
            keywords: keywords(text),
            vector: vectors.get(i).cloned().flatten(),
        })
        .collect();
    let ranges = segment_ranges(&tagged, tools.segment);
    let mut earlier = prior.earlier.clone();
    let n = ranges.len();
    for (i, r) in ranges.into_iter().enumerate() {
        let closed = i + 1 < n;
        let seg_turns = &tagged[r.clone()];
        let plain: Vec<Turn> = seg_turns.iter().map(|t| t.turn.clone()).collect();
        let tokens: usize = texts[r.clone()].iter().map(|t| tools.counter.count(t)).sum();
        let features = segment_features(seg_turns, SEGMENT_FEATURE_TAGS);
        let first = seg_turns[0].turn.span.first;
        let window = &earlier[earlier.len().saturating_sub(MERGE_BACK_WINDOW)..];
        let group = if closed { merge_back(first, &features, window, tools.segment) } else { first };
        let summary = tools.interpreter.summarize(&plain, tokens)?;
        let tags = segment_tags(seg_turns);
        let segment = Segment {
            span: SeqSpan::new(first, seg_turns[seg_turns.len() - 1].turn.span.last),
            start: seg_turns.iter().map(|t| t.turn.start).min().unwrap_or(seg_turns[0].turn.start),
            end: seg_turns.iter().map(|t| t.turn.end).max().unwrap_or(seg_turns[0].turn.end),
            turns: seg_turns.iter().map(|t| t.turn.span).collect(),
            primary_tag: tags.first().cloned(),
            tags,
            group,
            tokens,
            summary,
        };
        if closed {
            earlier.push((group, features.clone()));
            let signals: Vec<Fact> = all[r].iter().flat_map(|(_, s)| s.signals.iter().cloned()).collect();
            if !signals.is_empty() {
                out.facts.extend(tools.interpreter.consolidate(&plain, signals)?);
            }
        } else {
            out.progress.open_seq = first;
        }
        out.segments.push(SegmentOut { segment, closed, features });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ev;

    #[test]
    fn a_turn_closes_at_the_next_users_message_or_when_the_session_goes_quiet() {
        let open = [ev(5, "user_message", "fix the parser"), ev(6, "tool_call", "cargo test").tool("Bash", "c1")];
        assert!(!closes_a_turn(&open, false), "one turn, still open");
        assert!(closes_a_turn(&open, true), "the session went quiet");
        assert!(!closes_a_turn(&[], true), "nothing to close");
        let mut next = open.to_vec();
        next.push(ev(7, "user_message", "now the lexer"));
        assert!(closes_a_turn(&next, false), "the next request closes the first turn");
    }
}
