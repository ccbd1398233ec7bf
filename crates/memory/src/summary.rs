//! Extractive summaries. A segment's summary is chosen from its own sentences, call lines and
//! key output lines, each kept verbatim (so exact numbers, identifiers and error strings survive)
//! and cited by seq: greedy coverage of the segment's weighted keywords, with a lift for what a
//! reader most needs (the user's words, errors, numbers, identifiers), up to ~15% of the
//! segment's tokens clamped to 200–2,000 (§3.3). A topic's summary is chosen the same way from
//! its segments' summaries, ~200 tokens, with a one-paragraph description.
use std::collections::BTreeSet;

use memex_tokens::TokenCounter;
use serde::{Deserialize, Serialize};

use crate::facts::dialogue_sentences;
use crate::model::{PartRole, Summary, SummaryLine, Turn};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SummaryConfig {
    /// Share of a segment's tokens its summary aims at.
    pub ratio: f64,
    /// The aim's bounds, in tokens.
    pub min_tokens: usize,
    pub max_tokens: usize,
    /// A topic summary's size, in tokens.
    pub topic_tokens: usize,
    /// A topic description's length, in words.
    pub description_words: usize,
}

impl Default for SummaryConfig {
    fn default() -> Self {
        SummaryConfig { ratio: 0.15, min_tokens: 200, max_tokens: 2_000, topic_tokens: 200, description_words: 80 }
    }
}

/// Longest unit a summary takes whole (characters); longer sentences are passed over.
const MAX_UNIT_CHARS: usize = 600;

/// A candidate line: where it came from, its text as rendered, its content terms.
struct Unit {
    seq: u64,
    text: String,
    terms: BTreeSet<String>,
    lift: f64,
    tokens: usize,
}

fn has_digit(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_digit())
}

fn has_identifier(s: &str) -> bool {
    s.contains('`')
        || s.contains("::")
        || s.contains('_')
        || s.contains('/')
        || s.split_whitespace().any(|w| {
            let w = w.trim_matches(|c: char| !c.is_alphanumeric());
            w.len() > 3 && w.chars().skip(1).any(char::is_uppercase) && w.chars().any(char::is_lowercase)
        })
}

fn lift_of(role: PartRole, text: &str) -> f64 {
    let mut l = match role {
        PartRole::User => 1.4,
        PartRole::Output => 1.5,
        PartRole::Note => 1.3,
        PartRole::Assistant => 1.0,
        PartRole::Call => 0.8,
    };
    if has_digit(text) {
        l *= 1.15;
    }
    if has_identifier(text) {
        l *= 1.15;
    }
    l
}

fn terms_of(text: &str) -> BTreeSet<String> {
    crate::tags::keywords(text).into_iter().collect()
}

/// The aim for a source of `tokens` tokens.
pub fn target_tokens(tokens: usize, cfg: &SummaryConfig) -> usize {
    let aim = (tokens as f64 * cfg.ratio).round() as usize;
    aim.clamp(cfg.min_tokens, cfg.max_tokens).min(tokens)
}

/// The units of a segment's turns: each sentence of what was said, each call line, each key
/// output line, labelled by role.
fn units(turns: &[Turn], counter: &dyn TokenCounter) -> Vec<Unit> {
    let mut out = Vec::new();
    for t in turns {
        for p in &t.parts {
            let pieces: Vec<String> = match p.role {
                PartRole::User | PartRole::Assistant | PartRole::Note => dialogue_sentences(&p.text),
                PartRole::Call | PartRole::Output => vec![p.text.clone()],
            };
            for s in pieces {
                if s.chars().count() > MAX_UNIT_CHARS || s.trim().is_empty() {
                    continue;
                }
                let text = format!("[{}] {}", p.role.label(), s.trim());
                let tokens = counter.count(&text) + 1;
                out.push(Unit { seq: p.seq, terms: terms_of(&s), lift: lift_of(p.role, &s), tokens, text });
            }
        }
    }
    out
}

/// Greedy weighted coverage over a segment's units (see [`greedy`]), terms interned here.
fn choose(units: Vec<Unit>, target: usize, must_first: Option<usize>) -> Vec<Unit> {
    let mut ids: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    let terms: Vec<Vec<u32>> = units
        .iter()
        .map(|u| {
            u.terms
                .iter()
                .map(|t| {
                    let n = ids.len() as u32;
                    *ids.entry(t.as_str()).or_insert(n)
                })
                .collect()
        })
        .collect();
    let lift: Vec<f64> = units.iter().map(|u| u.lift).collect();
    let tokens: Vec<usize> = units.iter().map(|u| u.tokens).collect();
    let picked = greedy(&terms, ids.len(), &lift, &tokens, target, must_first);
    let mut slots: Vec<Option<Unit>> = units.into_iter().map(Some).collect();
    picked.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// Greedy weighted coverage: pick the unit whose uncovered terms weigh most (times its lift, per
/// square root of its tokens) until `target` tokens are used or nothing new is covered. A term
/// weighs the number of units holding it. `terms[i]`: unit i's distinct term ids, each below
/// `n_terms`. Returns the chosen units' indices in order.
///
/// Gains are evaluated lazily: coverage only grows, so a unit's gain only falls, and a stale gain
/// is an upper bound — the unit at the top of the heap whose gain is still current is the best
/// (the same choice as recomputing every gain each round, ties to the earlier unit). Weights are
/// whole numbers, so a gain's sum is exact whatever the order of its terms.
fn greedy(
    terms: &[Vec<u32>],
    n_terms: usize,
    lift: &[f64],
    tokens: &[usize],
    target: usize,
    must_first: Option<usize>,
) -> Vec<usize> {
    let mut weight = vec![0.0f64; n_terms];
    for ts in terms {
        for &t in ts {
            weight[t as usize] += 1.0;
        }
    }
    let mut covered = vec![false; n_terms];
    let gain = |i: usize, covered: &[bool]| -> f64 {
        terms[i].iter().filter(|&&t| !covered[t as usize]).map(|&t| weight[t as usize]).sum::<f64>() * lift[i]
            / (tokens[i] as f64).sqrt()
    };
    let mut taken = vec![false; terms.len()];
    let mut order: Vec<usize> = Vec::new();
    let mut used = 0usize;
    if let Some(i) = must_first
        && i < terms.len()
        && tokens[i] <= target
    {
        used += tokens[i];
        taken[i] = true;
        for &t in &terms[i] {
            covered[t as usize] = true;
        }
        order.push(i);
    }
    // (gain, Reverse(index)): the highest gain first, then the earliest unit.
    let mut heap: std::collections::BinaryHeap<(OrdF64, std::cmp::Reverse<usize>)> = (0..terms.len())
        .filter(|&i| !taken[i])
        .map(|i| (OrdF64(gain(i, &covered)), std::cmp::Reverse(i)))
        .filter(|(g, _)| g.0 > 0.0)
        .collect();
    while let Some((OrdF64(g), std::cmp::Reverse(i))) = heap.pop() {
        if used + tokens[i] > target {
            continue; // only fewer tokens remain later
        }
        let now = gain(i, &covered);
        if now <= 0.0 {
            continue;
        }
        if now < g {
            heap.push((OrdF64(now), std::cmp::Reverse(i)));
            continue;
        }
        used += tokens[i];
        taken[i] = true;
        for &t in &terms[i] {
            covered[t as usize] = true;
        }
        order.push(i);
    }
    order.sort_unstable();
    order
}

/// A total order on finite gains, for the heap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);

impl Eq for OrdF64 {}

impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The chosen lines as a summary of at most `target` tokens: joining lines can add a token or
/// two over their sum, so lines are dropped from the end until it fits (one is always kept).
fn finish(lines: Vec<SummaryLine>, target: usize, counter: &dyn TokenCounter) -> Summary {
    let mut s = Summary { lines, tokens: 0 };
    s.tokens = counter.count(&s.render());
    while s.tokens > target && s.lines.len() > 1 {
        s.lines.pop();
        s.tokens = counter.count(&s.render());
    }
    s
}

/// A segment's extractive summary, aiming at [`target_tokens`] of its turns' tokens. The user's
/// first request in the segment is always kept when it fits.
pub fn summarize_segment(
    turns: &[Turn],
    segment_tokens: usize,
    cfg: &SummaryConfig,
    counter: &dyn TokenCounter,
) -> Summary {
    let target = target_tokens(segment_tokens, cfg).max(1);
    let units = units(turns, counter);
    let first_user = units.iter().position(|u| u.text.starts_with("[user]"));
    let chosen = choose(units, target, first_user);
    finish(chosen.into_iter().map(|u| SummaryLine { seq: u.seq, text: u.text }).collect(), target, counter)
}

/// The terms of one topic rebuild's segment summaries, interned once for all its topics, and
/// the scratch that maps a topic's terms to dense ids without hashing them again (a rebuild
/// summarises thousands of topics from the same lines).
#[derive(Debug, Default)]
pub struct TopicTerms {
    ids: std::collections::HashMap<String, u32>,
    /// `local[g]` is term g's id in the topic being summarised when `stamp[g] == pass`.
    local: Vec<u32>,
    stamp: Vec<u32>,
    pass: u32,
}

impl TopicTerms {
    pub fn new() -> TopicTerms {
        TopicTerms::default()
    }

    fn intern(&mut self, term: String) -> u32 {
        let n = self.ids.len() as u32;
        *self.ids.entry(term).or_insert(n)
    }

    /// Starts a topic: every term unmapped.
    fn begin(&mut self) {
        let n = self.ids.len();
        if self.stamp.len() < n {
            self.stamp.resize(n, 0);
            self.local.resize(n, 0);
        }
        self.pass = self.pass.wrapping_add(1);
        if self.pass == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.pass = 1;
        }
    }

    /// Term `g`'s dense id in this topic, `next` the count so far.
    fn local(&mut self, g: u32, next: &mut u32) -> u32 {
        let g = g as usize;
        if self.stamp[g] != self.pass {
            self.stamp[g] = self.pass;
            self.local[g] = *next;
            *next += 1;
        }
        self.local[g]
    }
}

/// A segment summary read for the topics it belongs to: each line's terms (interned in the
/// rebuild's [`TopicTerms`], sorted) and tokens, worked out once however many topics draw on it.
#[derive(Debug, Clone)]
pub struct TopicSource {
    lines: Vec<(SummaryLine, Vec<u32>, usize)>,
}

impl TopicSource {
    pub fn new(summary: &Summary, counter: &dyn TokenCounter, terms: &mut TopicTerms) -> TopicSource {
        TopicSource {
            lines: summary
                .lines
                .iter()
                .map(|l| {
                    let mut ids: Vec<u32> = terms_of(&l.text).into_iter().map(|t| terms.intern(t)).collect();
                    ids.sort_unstable();
                    (l.clone(), ids, counter.count(&l.text) + 1)
                })
                .collect(),
        }
    }
}

/// A topic's summary, chosen from its segments' summary lines (each keeps its seq and the index
/// of its segment in `segments`): lines that name the topic first, then coverage.
pub fn summarize_topic(
    tag: &str,
    segments: &[&TopicSource],
    terms: &mut TopicTerms,
    cfg: &SummaryConfig,
    counter: &dyn TokenCounter,
) -> (Summary, Vec<usize>) {
    // The tag's terms by id; a term no line holds means no line names the tag.
    let tag_terms: Option<Vec<u32>> = {
        let words = terms_of(&tag.replace(['-', '.', '/'], " "));
        (!words.is_empty())
            .then(|| words.iter().map(|w| terms.ids.get(w).copied()).collect::<Option<Vec<u32>>>())
            .flatten()
    };
    terms.begin();
    let mut next = 0u32;
    let (mut unit_terms, mut lift, mut tokens, mut at) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (si, s) in segments.iter().enumerate() {
        for (li, (l, ids, n)) in s.lines.iter().enumerate() {
            let names_tag = tag_terms.as_ref().is_some_and(|tt| tt.iter().all(|t| ids.binary_search(t).is_ok()));
            lift.push(if names_tag { 2.0 } else { 1.0 } * if l.text.starts_with("[user]") { 1.2 } else { 1.0 });
            unit_terms.push(ids.iter().map(|&g| terms.local(g, &mut next)).collect::<Vec<u32>>());
            tokens.push(*n);
            at.push((si, li));
        }
    }
    let picked = greedy(&unit_terms, next as usize, &lift, &tokens, cfg.topic_tokens, None);
    let owners = picked.iter().map(|&i| at[i].0).collect();
    let lines = picked
        .iter()
        .map(|&i| {
            let (si, li) = at[i];
            segments[si].lines[li].0.clone()
        })
        .collect();
    (finish(lines, cfg.topic_tokens, counter), owners)
}

/// A topic's description: where it occurs, then its summary's first lines, in at most
/// `description_words` words.
pub fn describe_topic(
    tag: &str,
    segments: usize,
    sessions: usize,
    span: &str,
    summary: &Summary,
    cfg: &SummaryConfig,
) -> String {
    let mut words: Vec<String> = format!(
        "{tag}: {segments} segment{} in {sessions} session{}, {span}.",
        if segments == 1 { "" } else { "s" },
        if sessions == 1 { "" } else { "s" }
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect();
    for l in &summary.lines {
        let text = l.text.split_once("] ").map_or(l.text.as_str(), |(_, t)| t);
        for w in text.split_whitespace() {
            if words.len() >= cfg.description_words {
                break;
            }
            words.push(w.to_owned());
        }
    }
    words.truncate(cfg.description_words);
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ev;
    use crate::turns::turns;
    use memex_tokens::Tokenizer;

    struct Counter;
    impl TokenCounter for Counter {
        fn count(&self, text: &str) -> usize {
            Tokenizer::O200kBase.count(text)
        }
    }

    #[test]
    fn a_summary_keeps_the_request_and_the_error_verbatim_within_its_aim() {
        let mut events =
            vec![ev(1, "user_message", "The importer crashes on files over 2 GiB; fix it without a new dependency.")];
        for i in 0..30u64 {
            events.push(ev(
                2 + 3 * i,
                "assistant_message",
                &format!("Looking at chunk reader step {i}, the buffer logic is subtle and long winded here."),
            ));
            events.push(ev(3 + 3 * i, "tool_call", "cargo test -p importer").tool("Bash", &format!("c{i}")));
            events.push(
                ev(
                    4 + 3 * i,
                    "tool_result",
                    if i == 5 { "error[E0308]: mismatched types in src/read.rs" } else { "ok" },
                )
                .call_id(&format!("c{i}")),
            );
        }
        let t = turns(&events);
        let tokens: usize = t.iter().map(|t| Counter.count(&t.text())).sum();
        let cfg = SummaryConfig { min_tokens: 60, ..SummaryConfig::default() };
        let s = summarize_segment(&t, tokens, &cfg, &Counter);
        assert!(s.tokens <= target_tokens(tokens, &cfg), "{} > {}", s.tokens, target_tokens(tokens, &cfg));
        assert_eq!(s.tokens, Counter.count(&s.render()));
        assert_eq!(
            s.lines[0].text,
            "[user] The importer crashes on files over 2 GiB; fix it without a new dependency."
        );
        assert!(
            s.lines.iter().any(|l| l.text == "[output] error[E0308]: mismatched types in src/read.rs" && l.seq == 19)
        );
        // Deterministic.
        assert_eq!(s, summarize_segment(&t, tokens, &cfg, &Counter));
    }

    /// The topic chooser, as first written: every gain recomputed each round over string sets.
    fn naive_topic(tag: &str, segments: &[Summary], cfg: &SummaryConfig) -> (Vec<SummaryLine>, Vec<usize>) {
        let tag_terms = terms_of(&tag.replace(['-', '.', '/'], " "));
        let mut units = Vec::new();
        for (si, s) in segments.iter().enumerate() {
            for l in &s.lines {
                let terms = terms_of(&l.text);
                let names = !tag_terms.is_empty() && tag_terms.is_subset(&terms);
                let lift = if names { 2.0 } else { 1.0 } * if l.text.starts_with("[user]") { 1.2 } else { 1.0 };
                units.push((si, l.clone(), terms, lift, Counter.count(&l.text) + 1));
            }
        }
        let mut weight: std::collections::HashMap<&str, f64> = std::collections::HashMap::new();
        for u in &units {
            for t in &u.2 {
                *weight.entry(t.as_str()).or_default() += 1.0;
            }
        }
        let (mut covered, mut taken, mut used) = (BTreeSet::new(), vec![false; units.len()], 0);
        loop {
            let mut best: Option<(f64, usize)> = None;
            for (i, u) in units.iter().enumerate() {
                if taken[i] || used + u.4 > cfg.topic_tokens {
                    continue;
                }
                let g = u.2.iter().filter(|t| !covered.contains(*t)).map(|t| weight[t.as_str()]).sum::<f64>() * u.3
                    / (u.4 as f64).sqrt();
                if g > 0.0 && best.is_none_or(|(b, _)| g > b) {
                    best = Some((g, i));
                }
            }
            let Some((_, i)) = best else { break };
            taken[i] = true;
            used += units[i].4;
            covered.extend(units[i].2.iter().cloned());
        }
        let chosen: Vec<usize> = (0..units.len()).filter(|&i| taken[i]).collect();
        let mut s = Summary { lines: chosen.iter().map(|&i| units[i].1.clone()).collect(), tokens: 0 };
        s.tokens = Counter.count(&s.render());
        let mut owners: Vec<usize> = chosen.iter().map(|&i| units[i].0).collect();
        while s.tokens > cfg.topic_tokens && s.lines.len() > 1 {
            s.lines.pop();
            owners.pop();
            s.tokens = Counter.count(&s.render());
        }
        (s.lines, owners)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Interned terms, lazy gains and one scratch for many topics choose what the plain
        /// greedy chooses, line for line.
        #[test]
        fn a_topic_summary_is_the_plain_greedy_choice(
            topics in proptest::collection::vec(
                (0usize..8, proptest::collection::vec(
                    proptest::collection::vec((proptest::bool::ANY, proptest::collection::vec(0usize..12, 1..7)), 0..6),
                    0..6)),
                1..5),
        ) {
            const WORDS: [&str; 12] = ["parser", "buffer", "overflow", "header", "migration", "index",
                "schema", "pytest", "timeout", "reader", "chunk", "decoder"];
            let cfg = SummaryConfig { topic_tokens: 40, ..SummaryConfig::default() };
            let mut terms = TopicTerms::new();
            let mut made = Vec::new();
            for (tag, segs) in &topics {
                let sums: Vec<Summary> = segs.iter().enumerate().map(|(si, lines)| Summary {
                    lines: lines.iter().enumerate().map(|(li, (user, words))| SummaryLine {
                        seq: (si * 10 + li) as u64,
                        text: format!("[{}] {}", if *user { "user" } else { "assistant" },
                            words.iter().map(|&w| WORDS[w]).collect::<Vec<_>>().join(" ")),
                    }).collect(),
                    tokens: 0,
                }).collect();
                let sources: Vec<TopicSource> = sums.iter().map(|s| TopicSource::new(s, &Counter, &mut terms)).collect();
                made.push((WORDS[*tag].to_owned(), sums, sources));
            }
            for (tag, sums, sources) in &made {
                let refs: Vec<&TopicSource> = sources.iter().collect();
                let (got, owners) = summarize_topic(tag, &refs, &mut terms, &cfg, &Counter);
                let (want, want_owners) = naive_topic(tag, sums, &cfg);
                proptest::prop_assert_eq!(&got.lines, &want);
                proptest::prop_assert_eq!(&owners[..got.lines.len()], &want_owners[..]);
                proptest::prop_assert_eq!(got.tokens, Counter.count(&got.render()));
            }
        }
    }
}
