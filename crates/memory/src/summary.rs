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
    order: usize,
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
                let order = out.len();
                out.push(Unit { seq: p.seq, order, terms: terms_of(&s), lift: lift_of(p.role, &s), tokens, text });
            }
        }
    }
    out
}

/// Greedy weighted coverage: pick the unit whose uncovered terms weigh most (times its lift, per
/// square root of its tokens) until `target` tokens are used or nothing new is covered.
///
/// Terms are interned to indices, and gains are evaluated lazily: coverage only grows, so a
/// unit's gain only falls, and a stale gain is an upper bound — the unit at the top of the heap
/// whose gain is still current is the best (the same choice as recomputing every gain each round,
/// ties to the earlier unit).
fn choose(units: Vec<Unit>, target: usize, must_first: Option<usize>) -> Vec<Unit> {
    let mut ids: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let terms: Vec<Vec<usize>> = units
        .iter()
        .map(|u| {
            u.terms
                .iter()
                .map(|t| {
                    let n = ids.len();
                    *ids.entry(t.as_str()).or_insert(n)
                })
                .collect()
        })
        .collect();
    let mut weight = vec![0.0f64; ids.len()];
    for ts in &terms {
        for &t in ts {
            weight[t] += 1.0;
        }
    }
    let mut covered = vec![false; weight.len()];
    let gain = |i: usize, covered: &[bool]| -> f64 {
        terms[i].iter().filter(|&&t| !covered[t]).map(|&t| weight[t]).sum::<f64>() * units[i].lift
            / (units[i].tokens as f64).sqrt()
    };
    let mut taken = vec![false; units.len()];
    let mut order: Vec<usize> = Vec::new();
    let mut used = 0usize;
    if let Some(i) = must_first
        && i < units.len()
        && units[i].tokens <= target
    {
        used += units[i].tokens;
        taken[i] = true;
        for &t in &terms[i] {
            covered[t] = true;
        }
        order.push(i);
    }
    // (gain, Reverse(index)): the highest gain first, then the earliest unit.
    let mut heap: std::collections::BinaryHeap<(OrdF64, std::cmp::Reverse<usize>)> = (0..units.len())
        .filter(|&i| !taken[i])
        .map(|i| (OrdF64(gain(i, &covered)), std::cmp::Reverse(i)))
        .filter(|(g, _)| g.0 > 0.0)
        .collect();
    while let Some((OrdF64(g), std::cmp::Reverse(i))) = heap.pop() {
        if used + units[i].tokens > target {
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
        used += units[i].tokens;
        taken[i] = true;
        for &t in &terms[i] {
            covered[t] = true;
        }
        order.push(i);
    }
    let mut slots: Vec<Option<Unit>> = units.into_iter().map(Some).collect();
    let mut chosen: Vec<Unit> = order.into_iter().filter_map(|i| slots[i].take()).collect();
    chosen.sort_by_key(|u| u.order);
    chosen
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

fn finish(chosen: Vec<Unit>, counter: &dyn TokenCounter) -> Summary {
    let lines: Vec<SummaryLine> = chosen.into_iter().map(|u| SummaryLine { seq: u.seq, text: u.text }).collect();
    let mut s = Summary { lines, tokens: 0 };
    s.tokens = counter.count(&s.render());
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
    let mut summary = finish(choose(units, target, first_user), counter);
    // Joining lines can add a token or two over the sum; drop from the end until it fits.
    while summary.tokens > target && summary.lines.len() > 1 {
        summary.lines.pop();
        summary.tokens = counter.count(&summary.render());
    }
    summary
}

/// A segment summary read for the topics it belongs to: each line's terms and tokens, worked
/// out once however many topics draw on the segment.
#[derive(Debug, Clone)]
pub struct TopicSource {
    lines: Vec<(SummaryLine, BTreeSet<String>, usize)>,
}

impl TopicSource {
    pub fn new(summary: &Summary, counter: &dyn TokenCounter) -> TopicSource {
        TopicSource {
            lines: summary.lines.iter().map(|l| (l.clone(), terms_of(&l.text), counter.count(&l.text) + 1)).collect(),
        }
    }
}

/// A topic's summary, chosen from its segments' summary lines (each keeps its seq and the index
/// of its segment in `segments`): lines that name the topic first, then coverage.
pub fn summarize_topic(
    tag: &str,
    segments: &[&TopicSource],
    cfg: &SummaryConfig,
    counter: &dyn TokenCounter,
) -> (Summary, Vec<usize>) {
    let tag_terms: BTreeSet<String> = terms_of(&tag.replace(['-', '.', '/'], " "));
    let mut units = Vec::new();
    let mut owner = Vec::new();
    for (si, s) in segments.iter().enumerate() {
        for (l, terms, tokens) in &s.lines {
            let names_tag = !tag_terms.is_empty() && tag_terms.is_subset(terms);
            let lift = if names_tag { 2.0 } else { 1.0 } * if l.text.starts_with("[user]") { 1.2 } else { 1.0 };
            owner.push(si);
            units.push(Unit {
                seq: l.seq,
                order: units.len(),
                text: l.text.clone(),
                terms: terms.clone(),
                lift,
                tokens: *tokens,
            });
        }
    }
    let chosen = choose(units, cfg.topic_tokens, None);
    let owners = chosen.iter().map(|u| owner[u.order]).collect();
    let mut s = finish(chosen, counter);
    while s.tokens > cfg.topic_tokens && s.lines.len() > 1 {
        s.lines.pop();
        s.tokens = counter.count(&s.render());
    }
    (s, owners)
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
}
