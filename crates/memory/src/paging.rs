//! Paging (§3.6): each reader agent has a working set of topics, each at a depth — its summary,
//! its segments' summaries, or its full text — under a token budget (default 30,000). Expanding
//! past the budget collapses the coldest topics (by the turn they were last touched) to their
//! summary first, then drops them. The `<context-topics>` hint lists every topic, its depth and
//! its cost: the reader's map of what it can page in.
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// How much of a topic is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Depth {
    /// The topic summary (~200 tokens).
    Summary,
    /// Its segments' summaries (~2,000 tokens).
    Segments,
    /// The original text (~8,000+ tokens).
    Full,
}

impl Depth {
    pub fn name(self) -> &'static str {
        match self {
            Depth::Summary => "summary",
            Depth::Segments => "segments",
            Depth::Full => "full",
        }
    }

    pub fn parse(s: &str) -> Option<Depth> {
        match s {
            "summary" => Some(Depth::Summary),
            "segments" => Some(Depth::Segments),
            "full" => Some(Depth::Full),
            _ => None,
        }
    }
}

/// One topic in a working set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub depth: Depth,
    /// Tokens at this depth.
    pub tokens: usize,
    /// Tokens at summary depth (what collapsing leaves).
    pub summary_tokens: usize,
    /// The reader's turn when it was last touched.
    pub last_turn: u64,
}

/// What paging did to make room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PageOut {
    Collapsed { tag: String, from: Depth, freed: usize },
    Dropped { tag: String, freed: usize },
}

/// A reader's working set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct WorkingSet {
    pub budget: usize,
    /// The reader's turn counter: advanced by every touch.
    pub turn: u64,
    pub entries: BTreeMap<String, Entry>,
}

/// The default budget of a working set (§3.5).
pub const DEFAULT_BUDGET: usize = 30_000;

impl WorkingSet {
    pub fn new(budget: usize) -> WorkingSet {
        WorkingSet { budget, turn: 0, entries: BTreeMap::new() }
    }

    pub fn used(&self) -> usize {
        self.entries.values().map(|e| e.tokens).sum()
    }

    /// Loads `tag` at `depth` (costing `tokens`; `summary_tokens` at summary depth) as the
    /// reader's newest turn, then pages out the coldest other topics until the set fits: each
    /// collapsed to its summary first (coldest first), then dropped (coldest first). A topic that
    /// alone exceeds the budget stays (the caller already cut its text to the budget).
    pub fn touch(&mut self, tag: &str, depth: Depth, tokens: usize, summary_tokens: usize) -> Vec<PageOut> {
        self.turn += 1;
        self.entries.insert(tag.to_owned(), Entry { depth, tokens, summary_tokens, last_turn: self.turn });
        let mut out = Vec::new();
        let mut cold: Vec<(u64, String)> =
            self.entries.iter().filter(|(t, _)| t.as_str() != tag).map(|(t, e)| (e.last_turn, t.clone())).collect();
        cold.sort();
        for (_, t) in &cold {
            if self.used() <= self.budget {
                return out;
            }
            if let Some(e) = self.entries.get_mut(t)
                && e.depth != Depth::Summary
            {
                let freed = e.tokens.saturating_sub(e.summary_tokens);
                out.push(PageOut::Collapsed { tag: t.clone(), from: e.depth, freed });
                e.depth = Depth::Summary;
                e.tokens = e.summary_tokens;
            }
        }
        for (_, t) in &cold {
            if self.used() <= self.budget {
                break;
            }
            if let Some(e) = self.entries.remove(t) {
                out.push(PageOut::Dropped { tag: t.clone(), freed: e.tokens });
            }
        }
        out
    }

    /// Collapses or drops one topic (a reader done with it).
    pub fn release(&mut self, tag: &str) -> Option<Entry> {
        self.entries.remove(tag)
    }
}

/// A topic as the hint lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintTopic {
    pub tag: String,
    pub segments: usize,
    pub sessions: usize,
    pub summary_tokens: usize,
}

/// The `<context-topics>` block: every topic (those in the working set first, hottest first;
/// then the rest by size), its depth and cost, and how to page. Lines that would pass
/// `max_tokens` (by `count`) are left out and counted in a last line.
pub fn context_topics_hint(
    topics: &[HintTopic],
    set: &WorkingSet,
    max_tokens: usize,
    count: &dyn Fn(&str) -> usize,
) -> String {
    let mut order: Vec<&HintTopic> = topics.iter().collect();
    order.sort_by(|a, b| {
        let (ea, eb) = (set.entries.get(&a.tag), set.entries.get(&b.tag));
        eb.map(|e| e.last_turn).cmp(&ea.map(|e| e.last_turn)).then(b.segments.cmp(&a.segments)).then(a.tag.cmp(&b.tag))
    });
    let head =
        format!("<context-topics budget=\"{}\" used=\"{}\" topics=\"{}\">\n", set.budget, set.used(), topics.len());
    let tail = "Page in: expand_topic(tag, depth=summary|segments|full); search: find_quote(query), remember_when(query, range), query_facts(...); all summaries: recall_all().\n</context-topics>";
    let mut body = String::new();
    let mut left_out = 0usize;
    let fixed = count(&head) + count(tail) + 12;
    let mut used = fixed;
    for t in order {
        let mut line = String::new();
        match set.entries.get(&t.tag) {
            Some(e) => {
                let _ = writeln!(
                    line,
                    "- {} [{}] {} tokens; {} segments, {} sessions",
                    t.tag,
                    e.depth.name(),
                    e.tokens,
                    t.segments,
                    t.sessions
                );
            }
            None => {
                let _ = writeln!(
                    line,
                    "- {} ({} segments, {} sessions; summary {} tokens)",
                    t.tag, t.segments, t.sessions, t.summary_tokens
                );
            }
        }
        let n = count(&line);
        if left_out > 0 || used + n > max_tokens {
            left_out += 1;
            continue;
        }
        used += n;
        body.push_str(&line);
    }
    let mut out = head;
    out.push_str(&body);
    if left_out > 0 {
        let _ = writeln!(out, "… {left_out} more topics (list_topics)");
    }
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expanding_past_the_budget_collapses_then_drops_the_coldest() {
        let mut ws = WorkingSet::new(1_000);
        assert!(ws.touch("a", Depth::Segments, 400, 50).is_empty());
        assert!(ws.touch("b", Depth::Segments, 400, 60).is_empty());
        let out = ws.touch("c", Depth::Full, 500, 70);
        assert_eq!(out, vec![PageOut::Collapsed { tag: "a".into(), from: Depth::Segments, freed: 350 }]);
        assert_eq!(ws.used(), 950);
        let out = ws.touch("d", Depth::Full, 900, 80);
        assert_eq!(
            out,
            vec![
                PageOut::Collapsed { tag: "b".into(), from: Depth::Segments, freed: 340 },
                PageOut::Collapsed { tag: "c".into(), from: Depth::Full, freed: 430 },
                PageOut::Dropped { tag: "a".into(), freed: 50 },
                PageOut::Dropped { tag: "b".into(), freed: 60 },
            ]
        );
        assert!(ws.used() <= 1_000);
        assert_eq!(ws.entries.keys().collect::<Vec<_>>(), vec!["c", "d"]);
    }

    #[test]
    fn the_hint_fits_its_budget() {
        let topics: Vec<HintTopic> = (0..50)
            .map(|i| HintTopic { tag: format!("topic-{i:02}"), segments: 50 - i, sessions: 1, summary_tokens: 100 })
            .collect();
        let mut ws = WorkingSet::new(DEFAULT_BUDGET);
        ws.touch("topic-30", Depth::Segments, 900, 100);
        let words = |s: &str| s.split_whitespace().count();
        let hint = context_topics_hint(&topics, &ws, 120, &words);
        assert!(words(&hint) <= 120, "{}", words(&hint));
        assert!(hint.lines().nth(1).is_some_and(|l| l.starts_with("- topic-30 [segments]")));
        assert!(hint.contains("more topics"));
    }
}
