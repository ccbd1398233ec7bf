//! A session's memory is the same whether the worker reads it in one pass or in pieces (any
//! split points, any stops between them): the invariant that lets the worker stop, crash and
//! resume, and that makes a rebuilt memory equal the live one. Checked over real traces.
use std::collections::BTreeMap;

use memex_memory::session::{Advance, Prior, Progress, SegmentOut, StoredTurn, Tools, advance};
use memex_memory::{Fact, Heuristic, MemEvent, SegmentConfig, SummaryConfig};
use proptest::prelude::*;

mod common;
use common::{Counter, events_of};

/// The store, as the worker keeps it.
#[derive(Default, Debug, PartialEq)]
struct Store {
    progress: Progress,
    turns: BTreeMap<u64, StoredTurn>,
    segments: BTreeMap<u64, SegmentOut>,
    facts: Vec<Fact>,
}

impl Store {
    fn prior(&self) -> Prior {
        let open = self.progress.open_seq;
        Prior {
            open_turns: if open == 0 { Vec::new() } else { self.turns.range(open..).map(|(_, t)| t.clone()).collect() },
            recent: self.turns.values().rev().take(5).rev().cloned().collect(),
            earlier: self
                .segments
                .values()
                .filter(|s| s.closed && (open == 0 || s.segment.span.first < open))
                .map(|s| (s.segment.group, s.features.clone()))
                .collect(),
        }
    }

    fn apply(&mut self, a: Advance) {
        for t in a.new_turns {
            self.turns.insert(t.span.first, t);
        }
        for s in a.segments {
            self.segments.insert(s.segment.span.first, s);
        }
        self.facts.extend(a.facts);
        self.progress = a.progress;
    }

    fn run(&mut self, events: &[MemEvent], upto: u64, close_last: bool) {
        let heuristic = Heuristic { summary: SummaryConfig::default(), counter: Box::new(Counter) };
        let cfg = SegmentConfig::default();
        let tools = Tools { interpreter: &heuristic, counter: &Counter, vectors: None, segment: &cfg };
        let from = self.progress.read_from();
        let slice: Vec<MemEvent> = events.iter().filter(|e| e.seq >= from && e.seq <= upto).cloned().collect();
        let a = advance(&self.progress, &self.prior(), &slice, close_last, &tools).expect("the heuristic never fails");
        self.apply(a);
    }
}

fn one_pass(events: &[MemEvent]) -> Store {
    let mut s = Store::default();
    s.run(events, events.len() as u64, true);
    s
}

const TRACES: [&str; 3] = [
    "claude-code/spotter__tool_heavy.jsonl",
    "claude-code/spotter__short.jsonl",
    "claude-code/spotter__subagent-parent.jsonl",
];

#[test]
fn one_pass_derives_segments_and_facts() {
    let events = events_of(TRACES[2]);
    let s = one_pass(&events);
    assert!(s.segments.len() >= 2, "{} segments", s.segments.len());
    assert!(!s.facts.is_empty());
    assert_eq!(s.segments.values().filter(|s| !s.closed).count(), 1, "one open segment");
    // Segments tile the turns: each starts where the one before ended.
    let mut prev = 0;
    for seg in s.segments.values() {
        assert!(seg.segment.span.first > prev);
        prev = seg.segment.span.last;
        assert!(seg.segment.summary.tokens > 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn pieces_give_the_memory_of_one_pass(
        trace in 0..TRACES.len(),
        cuts in proptest::collection::vec(0.0f64..1.0, 1..6),
        quiet in proptest::collection::vec(0.0f64..1.0, 0..4),
    ) {
        let mut events = events_of(TRACES[trace]);
        let n = events.len() as u64;
        // Where the session went quiet, a live worker closed the last turn; a pass over it all
        // sees the same marks.
        let mut points: Vec<u64> = cuts.iter().map(|c| ((c * n as f64) as u64).clamp(1, n)).collect();
        for q in &quiet {
            let at = ((q * n as f64) as u64).clamp(1, n - 1);
            events[at as usize].after_quiet = true;
            points.push(at);
        }
        let whole = one_pass(&events);
        points.push(n);
        points.sort();
        points.dedup();
        let mut s = Store::default();
        for p in points {
            let closes = p == n || events[p as usize].after_quiet;
            s.run(&events, p, closes);
        }
        prop_assert_eq!(&s.facts, &whole.facts);
        prop_assert_eq!(&s.turns, &whole.turns);
        prop_assert_eq!(&s.segments, &whole.segments);
        prop_assert_eq!(&s.progress, &whole.progress);
    }
}
