//! The full view (`.txt`): every line of the chain, in the coordinates every pointer uses.

use super::LineWriter;
use crate::ir::{Chain, SEPARATOR};

impl Chain {
    /// The full view, byte for byte as the reference writes it (no final newline when the stats
    /// footer is present; a trailing `\n` otherwise).
    pub fn full_view(&self) -> String {
        let estimate: usize = self.blocks.iter().map(|b| b.body.joined().len() + 2).sum();
        let mut out = LineWriter::with_capacity(estimate + self.sections.len() * 40);
        for (i, section) in self.sections.iter().enumerate() {
            if i > 0 {
                out.push("");
                out.push(SEPARATOR);
            }
            out.push(&section.header);
            out.push("");
            for (j, block) in self.blocks[section.block_indices()].iter().enumerate() {
                if j > 0 {
                    out.push("");
                }
                let delimiters = block.kind.delimiters();
                if let Some((open, _)) = &delimiters {
                    out.push(open);
                }
                let n = block.body.line_count();
                if n > 0 {
                    out.push_counted(block.body.joined(), n);
                }
                if let Some((_, close)) = delimiters {
                    out.push(close);
                }
            }
        }
        out.push("");
        debug_assert_eq!(out.lines, self.body_lines);
        if let Some(footer) = &self.footer {
            out.push("");
            for line in footer {
                out.push(line);
            }
        }
        out.text
    }
}
