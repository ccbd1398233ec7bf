//! Chunk merging and chain splitting (the reference's `merge_chunks` and `split_chains`), done
//! record by record so that no raw record outlives its input line.
//!
//! Merging: an assistant record with the same non-empty `message.id` as the open assistant
//! record continues it; discarded records (progress, …) do not interrupt the run, every other
//! record does. Splitting: a `compact_boundary` ends the chain; chains without records are
//! skipped.

use crate::diag::Diags;
use crate::ir::{Chain, ChainFiles};
use crate::json::Value;
use crate::lex::RecConsumer;
use crate::parse::{ChainBuilder, ToolNames};
use crate::record::{Rec, RecBody};

/// A chain whose records are all in and whose name is final; [`ReadyChain::finish`] (name
/// resolution, joins, line assignment) can run on any thread.
pub struct ReadyChain {
    builder: ChainBuilder,
    files: ChainFiles,
}

impl ReadyChain {
    pub fn finish(self) -> Chain {
        self.builder.finish(self.files)
    }
}

#[derive(Default, Clone)]
pub(crate) struct Assembler {
    done: Vec<ChainBuilder>,
    /// Chains already finished and handed out by [`Assembler::take_ready`].
    taken: usize,
    current: Option<ChainBuilder>,
    /// `message.id` of the open assistant record, when it has one.
    active_id: Option<Value<'static>>,
}

impl Assembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Approximate heap size, for cache weighers.
    pub fn size_bytes(&self) -> usize {
        self.done.iter().chain(self.current.iter()).map(ChainBuilder::size_bytes).sum::<usize>() + 64
    }

    /// What of [`Assembler::size_bytes`] is block text a snapshot's blocks share.
    pub fn text_bytes(&self) -> usize {
        self.done.iter().chain(self.current.iter()).map(ChainBuilder::text_bytes).sum()
    }

    fn chain(&mut self) -> &mut ChainBuilder {
        self.current.get_or_insert_with(ChainBuilder::new)
    }

    fn close_active(&mut self) {
        self.active_id = None;
        if let Some(chain) = self.current.as_mut() {
            chain.close_assistant();
        }
    }

    /// The remaining chains, with their final names (`_N` suffixes only when there are several),
    /// numbered after those already taken.
    pub fn finish(mut self, stem: &str) -> Vec<Chain> {
        self.close_active();
        self.done.extend(self.current.take());
        let n = self.taken + self.done.len();
        let first = self.taken;
        self.done
            .into_iter()
            .enumerate()
            .map(|(i, builder)| builder.finish(ChainFiles::new(stem, first + i, n)))
            .collect()
    }

    /// The chains [`Assembler::finish`] would give now, with the assembler left to go on (an
    /// open assistant record stays open: the next record may continue it).
    pub fn snapshot(&mut self, stem: &str) -> Vec<Chain> {
        let n = self.taken + self.done.len() + usize::from(self.current.is_some());
        let first = self.taken;
        let builders = self.done.iter_mut().chain(self.current.iter_mut());
        builders.enumerate().map(|(i, builder)| builder.snapshot(ChainFiles::new(stem, first + i, n))).collect()
    }

    /// Completed chains that can be finished now: once a second chain has started the file is
    /// known to have several, so every name (`_N`) is final. Returns `(index, chain)` pairs.
    pub fn take_ready(&mut self, stem: &str) -> Vec<(usize, ReadyChain)> {
        if self.taken + self.done.len() + usize::from(self.current.is_some()) < 2 {
            return Vec::new();
        }
        let first = self.taken;
        let ready = std::mem::take(&mut self.done);
        self.taken += ready.len();
        ready
            .into_iter()
            .enumerate()
            .map(|(i, builder)| {
                let files = ChainFiles::new(stem, first + i, 2);
                (first + i, ReadyChain { builder, files })
            })
            .collect()
    }
}

impl RecConsumer for Assembler {
    fn rec(&mut self, rec: Rec<'_>, d: &mut Diags) {
        d.line = rec.line;
        let ts = rec.meta.timestamp.clone();
        let names = if rec.explicit_tool_names { ToolNames::InResult } else { ToolNames::WholeChain };
        match rec.body {
            RecBody::Discard => {}
            RecBody::Assistant { id, content } => {
                let continues = id.truthy() && self.active_id.as_ref() == Some(&id);
                if continues && let Some(chain) = self.current.as_mut() {
                    chain.at_line(rec.line);
                    chain.stats.add_tool_uses(rec.stats.tool_uses);
                    chain.assistant_chunk(&content, d);
                    return;
                }
                self.close_active();
                let chain = self.chain();
                chain.at_line(rec.line);
                chain.stats.add(&rec.stats);
                chain.open_assistant(ts);
                chain.assistant_chunk(&content, d);
                if id.truthy() {
                    self.active_id = Some(id.into_owned());
                } else {
                    chain.close_assistant();
                }
            }
            RecBody::Boundary => {
                self.close_active();
                self.done.extend(self.current.take());
            }
            body => {
                self.close_active();
                let chain = self.chain();
                chain.at_line(rec.line);
                chain.stats.add(&rec.stats);
                match body {
                    RecBody::System(content) => chain.system(&content, ts, d),
                    RecBody::User(content) => chain.user(&content, names, ts, d),
                    RecBody::CompactSummary(content) => chain.compact_summary(&content, ts, d),
                    RecBody::Labeled { label, content } => chain.labeled(&label, &content, ts),
                    _ => {}
                }
            }
        }
    }
}
