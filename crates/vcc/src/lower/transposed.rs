//! The transposed view (the reference's stdout under `--grep`): every hit as a flat list,
//! newest first — last input, last chain, last block — each tagged with its node type.

use super::adaptive::match_lines;
use crate::ir::Chain;
use crate::predicate::Hit;

/// One chain's hits and how to cite its full view (the reference prints the `.txt` path
/// relative to the working directory).
pub struct TransposedEntry<'a> {
    pub reference: String,
    pub chain: &'a Chain,
    pub hits: &'a [Hit],
}

/// Renders entries given in input order; the output starts with the last entry's last hit.
/// Each line ends with `\n` (the reference `print`s them); hits are separated by an empty line.
pub fn transposed_view(entries: &[TransposedEntry<'_>]) -> String {
    let mut out = String::new();
    for entry in entries.iter().rev() {
        for hit in entry.hits.iter().rev() {
            let Some(block) = entry.chain.blocks.get(hit.block) else {
                continue;
            };
            let lines = match_lines(block, hit, &entry.reference);
            let Some((first, rest)) = lines.split_first() else {
                continue;
            };
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(first);
            out.push_str(" [");
            out.push_str(&block.kind.node_type());
            out.push_str("]\n");
            for line in rest {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}
