//! The two honest baselines of the needle benchmark, run over the same events, window budget and
//! tokenizer as memex:
//!
//! * **truncation** — the window drops its oldest events (system events stay) until it fits;
//! * **narrative** — when the window overflows, everything but the system events and the last
//!   turns is replaced by a fixed-size summary of the previous summary and the evicted events.
//!   The summary is extractive (no model): lines are ranked by the signals practitioners' handoff
//!   prompts ask to keep (errors, file paths, user requests, decisions, the agent's stated plans)
//!   and the best are kept, in order, within the size. Re-compaction summarizes the summary, as
//!   narrative compaction does (TRACE §10.1).
use std::collections::VecDeque;

use memex_compaction::error_line;
use memex_tokens::Tokenizer;

use super::traces::TraceEvent;

/// An event as the window holds it.
#[derive(Debug, Clone)]
struct Held {
    kind: &'static str,
    text: String,
    tokens: usize,
}

fn render(seq: usize, e: &TraceEvent) -> String {
    let mut h = format!("(s1@{seq}) [{}]", e.kind);
    if let Some(t) = &e.tool_name {
        h.push(' ');
        h.push_str(t);
    }
    format!("{h}\n{}\n", e.content.trim_end_matches('\n'))
}

/// Drop-oldest truncation.
pub struct Truncation {
    tokenizer: Tokenizer,
    target: usize,
    held: VecDeque<Held>,
    tokens: usize,
}

impl Truncation {
    pub fn new(tokenizer: Tokenizer, target: usize) -> Truncation {
        Truncation { tokenizer, target, held: VecDeque::new(), tokens: 0 }
    }

    pub fn push(&mut self, seq: usize, e: &TraceEvent) {
        let text = render(seq, e);
        let tokens = self.tokenizer.count(&text);
        self.tokens += tokens;
        self.held.push_back(Held { kind: e.kind, text, tokens });
        while self.tokens > self.target {
            let Some(i) = self.held.iter().position(|h| h.kind != "system") else { break };
            if i + 1 == self.held.len() {
                break; // never drop the newest event
            }
            if let Some(h) = self.held.remove(i) {
                self.tokens -= h.tokens;
            }
        }
    }

    pub fn text(&self) -> String {
        self.held.iter().map(|h| h.text.as_str()).collect()
    }
}

/// Narrative compaction with a fixed-size extractive summary.
pub struct Narrative {
    tokenizer: Tokenizer,
    target: usize,
    summary_tokens: usize,
    protected_turns: usize,
    summary: String,
    held: Vec<Held>,
    pub compactions: usize,
}

impl Narrative {
    pub fn new(tokenizer: Tokenizer, target: usize, summary_tokens: usize, protected_turns: usize) -> Narrative {
        Narrative {
            tokenizer,
            target,
            summary_tokens,
            protected_turns,
            summary: String::new(),
            held: Vec::new(),
            compactions: 0,
        }
    }

    fn tokens(&self) -> usize {
        self.tokenizer.count(&self.summary) + self.held.iter().map(|h| h.tokens).sum::<usize>()
    }

    pub fn push(&mut self, seq: usize, e: &TraceEvent) {
        let text = render(seq, e);
        let tokens = self.tokenizer.count(&text);
        self.held.push(Held { kind: e.kind, text, tokens });
        if self.tokens() > self.target {
            self.compact();
        }
    }

    /// Start of the protected tail: the `k`-th last turn (a user message, or the agent acting
    /// again after a tool returned), as memex counts turns.
    fn tail_start(&self) -> usize {
        let mut seen = 0;
        for i in (0..self.held.len()).rev() {
            let k = self.held[i].kind;
            let after_tool = i > 0 && matches!(self.held[i - 1].kind, "tool_result" | "tool_error");
            if k == "user_message" || (after_tool && matches!(k, "assistant_message" | "thinking" | "tool_call")) {
                seen += 1;
                if seen == self.protected_turns {
                    return i;
                }
            }
        }
        0
    }

    fn compact(&mut self) {
        let tail = self.tail_start();
        let mut pool: Vec<(usize, &str, String)> = Vec::new(); // (score, kind, line)
        for line in self.summary.lines().skip(1) {
            pool.push((line_score("summary", line), "summary", line.to_owned()));
        }
        let mut kept = Vec::new();
        for (i, h) in self.held.iter().enumerate() {
            if i >= tail || h.kind == "system" {
                kept.push(h.clone());
                continue;
            }
            for line in h.text.lines().skip(1).map(str::trim).filter(|l| !l.is_empty()) {
                pool.push((line_score(h.kind, line), h.kind, cut(line, 200)));
            }
        }
        self.summary = summarize(&self.tokenizer, &pool, self.summary_tokens);
        self.held = kept;
        self.compactions += 1;
    }

    pub fn text(&self) -> String {
        let mut t = self.summary.clone();
        for h in &self.held {
            t.push_str(&h.text);
        }
        t
    }
}

fn cut(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// What a handoff prompt asks to keep, as a score.
fn line_score(kind: &str, line: &str) -> usize {
    let mut s = 0;
    if error_line(line, 200).is_some() {
        s += 3;
    }
    if line.contains('/') || line.contains(".py") {
        s += 2;
    }
    if matches!(kind, "user_message" | "decision" | "constraint") {
        s += 2;
    }
    if kind == "assistant_message" && line.starts_with("THOUGHT") {
        s += 1;
    }
    if kind == "summary" {
        s += 1; // what survived one summary is likely to matter
    }
    s
}

/// The best lines, in their original order, within `max_tokens`.
fn summarize(t: &Tokenizer, pool: &[(usize, &str, String)], max_tokens: usize) -> String {
    let header = "[summary of earlier work]\n";
    let mut order: Vec<usize> = (0..pool.len()).collect();
    order.sort_by(|&a, &b| pool[b].0.cmp(&pool[a].0).then(a.cmp(&b)));
    let mut used = t.count(header);
    let mut chosen = Vec::new();
    for i in order {
        let cost = t.count(&pool[i].2) + 1;
        if used + cost > max_tokens {
            continue;
        }
        used += cost;
        chosen.push(i);
    }
    chosen.sort_unstable();
    let mut out = header.to_owned();
    for i in chosen {
        out.push_str(&pool[i].2);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_drops_the_oldest_but_keeps_system() {
        let t = Tokenizer::O200kBase;
        let mut w = Truncation::new(t, 60);
        w.push(1, &TraceEvent::new("system", "sys"));
        for i in 2..20 {
            w.push(i, &TraceEvent::new("assistant_message", format!("message number {i} with some words")));
        }
        let text = w.text();
        assert!(text.starts_with("(s1@1) [system]\nsys\n"));
        assert!(text.contains("message number 19") && !text.contains("message number 2 "));
    }

    #[test]
    fn narrative_keeps_a_fixed_size_summary() {
        let t = Tokenizer::O200kBase;
        let mut w = Narrative::new(t, 300, 80, 1);
        w.push(1, &TraceEvent::new("user_message", "fix the bug in astropy/modeling/separable.py"));
        for i in 0..30 {
            w.push(2 + 3 * i, &TraceEvent::new("assistant_message", format!("THOUGHT: step {i}")));
            w.push(3 + 3 * i, &TraceEvent::call("c", format!("cat file_{i}.txt")));
            w.push(4 + 3 * i, &TraceEvent::result("c", "lorem ipsum dolor sit amet\n".repeat(5)));
        }
        assert!(w.compactions >= 3);
        assert!(t.count(&w.summary) <= 80);
        assert!(w.summary.starts_with("[summary of earlier work]\n"));
        assert!(w.text().contains("astropy/modeling/separable.py"), "{}", w.summary);
    }
}
