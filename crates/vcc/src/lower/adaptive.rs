//! The adaptive view (`.view.txt`): only the blocks a predicate selects, in conversation order,
//! each with its section header and delimiters and a `(file:start-end)` pointer to its body.

use super::{LineWriter, short_name};
use crate::ir::{Block, Chain, SEPARATOR};
use crate::predicate::{Candidate, Hit, Predicate};
use serde::Serialize;

/// A rendered adaptive view and the hits it shows.
#[derive(Debug, Clone, Serialize)]
pub struct AdaptiveView {
    pub text: String,
    pub lines: u32,
    /// Selected blocks, in chain order.
    pub hits: Vec<Hit>,
    /// For each hit, the adaptive-view line of its `(file:start-end)` pointer.
    pub pointer_lines: Vec<u32>,
}

impl Chain {
    /// Every searchable block, for a predicate to choose from.
    pub fn candidates(&self) -> Vec<Candidate<'_>> {
        self.blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.kind.is_searchable() && b.body.line_count() > 0)
            .map(|(i, b)| Candidate::new(i, b, &self.sections[b.section as usize].role))
            .collect()
    }

    /// The blocks `predicate` selects, sorted by position, one hit per block.
    pub fn select(&self, predicate: &dyn Predicate) -> Vec<Hit> {
        let mut hits = predicate.select(&self.candidates());
        hits.retain(|h| h.block < self.blocks.len());
        hits.sort_by_key(|h| h.block);
        hits.dedup_by_key(|h| h.block);
        hits
    }

    /// Lowers the chain to the adaptive view for `predicate`.
    pub fn adaptive_view(&self, predicate: &dyn Predicate) -> AdaptiveView {
        let hits = self.select(predicate);
        let short = short_name(&self.names.full);
        let mut by_block = vec![None; self.blocks.len()];
        for (i, h) in hits.iter().enumerate() {
            by_block[h.block] = Some(i);
        }
        let mut out = LineWriter::default();
        let mut pointer_lines = vec![0; hits.len()];
        let mut any_visible = false;
        for section in &self.sections {
            let shown: Vec<usize> = section.block_indices().filter(|&b| by_block[b].is_some()).collect();
            if shown.is_empty() {
                continue;
            }
            if any_visible {
                out.push("");
                out.push(SEPARATOR);
            }
            out.push(&section.header);
            out.push("");
            for (k, &b) in shown.iter().enumerate() {
                if k > 0 {
                    out.push("");
                }
                let Some(h) = by_block[b] else { continue };
                pointer_lines[h] = self.push_hit(&self.blocks[b], &hits[h], &short, &mut out);
            }
            any_visible = true;
        }
        AdaptiveView { text: out.text, lines: out.lines, hits, pointer_lines }
    }

    /// Delimiters around `match_lines`; returns the pointer's line.
    fn push_hit(&self, block: &Block, hit: &Hit, short: &str, out: &mut LineWriter) -> u32 {
        let delimiters = block.kind.delimiters();
        if let Some((open, _)) = &delimiters {
            out.push(open);
        }
        let at = out.next_line();
        for line in match_lines(block, hit, short) {
            out.push(&line);
        }
        if let Some((_, close)) = delimiters {
            out.push(close);
        }
        at
    }
}

/// The reference's `match_lines`: `(file:start-end)` then `  n: line` per selected line, or
/// `...(from file:start-end)` when the hit names no line.
pub(crate) fn match_lines(block: &Block, hit: &Hit, short: &str) -> Vec<String> {
    let Some(range) = block.body_range() else {
        return Vec::new();
    };
    if hit.lines.is_empty() {
        return vec![format!("...(from {short}:{range})")];
    }
    let mut out = Vec::with_capacity(hit.lines.len() + 1);
    out.push(format!("({short}:{range})"));
    let mut wanted = hit.lines.iter().peekable();
    for (i, line) in block.body_lines().enumerate() {
        if wanted.peek() == Some(&&(i as u32)) {
            wanted.next();
            out.push(format!("  {}: {line}", range.first + i as u32));
        }
    }
    out
}
