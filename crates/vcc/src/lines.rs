//! Line lookups into the full view: what a `ReadLines(session:start-end)` call serves.

use memex_pointer::LineRange;

use crate::ir::{Block, Chain, SEPARATOR, SectionRole};
use serde::Serialize;

/// What a full-view line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// The empty line or the `═══` line before a section.
    Separator,
    /// `[user]`, `[tool] Name:id`, … (and the empty line after it).
    Header,
    /// The empty line between two blocks.
    Blank,
    /// `>>>thinking`, `>>>tool_call Name:id`, …
    Open,
    /// A line of a block's body.
    Body,
    /// `<<<thinking`, `<<<tool_call`, …
    Close,
    /// The empty line ending the chain's sections.
    Trailer,
    /// The stats footer (not referenced by any pointer).
    Stats,
}

/// One full-view line with its place in the structure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineInfo {
    /// 1-based line number.
    pub number: u32,
    pub text: String,
    pub kind: LineKind,
    /// Index into [`Chain::sections`].
    pub section: Option<usize>,
    /// The section's role.
    pub role: Option<SectionRole>,
    /// Index into [`Chain::blocks`].
    pub block: Option<usize>,
    /// The block's node type (`user`, `thinking`, `tool_call`, …).
    pub node_type: Option<String>,
}

/// Where a line sits: its section (index, role) and block (index, block), when it has them.
type At<'a> = (Option<usize>, Option<&'a SectionRole>, Option<(usize, &'a Block)>);

/// Walks the lines of a range, handing each wanted one to `sink`.
struct Collector<'s> {
    range: LineRange,
    sink: &'s mut dyn FnMut(u32, &str, LineKind, At<'_>),
}

impl Collector<'_> {
    fn push(&mut self, n: u32, text: &str, kind: LineKind, at: At<'_>) {
        if self.range.contains(n) {
            (self.sink)(n, text, kind, at);
        }
    }
}

impl Chain {
    /// The full-view lines in `range` (clamped to the view), in order.
    pub fn read_lines(&self, range: LineRange) -> Vec<LineInfo> {
        let mut out = Vec::new();
        self.walk_lines(range, &mut |n, text, kind, (section, role, block)| {
            out.push(LineInfo {
                number: n,
                text: text.to_string(),
                kind,
                section,
                role: role.cloned(),
                block: block.map(|(i, _)| i),
                node_type: block.map(|(_, b)| b.kind().node_type()),
            })
        });
        out
    }

    /// The texts of [`Chain::read_lines`]: the same lines without their structure, for callers
    /// that only show them (context packs), at a fraction of the allocations.
    pub fn read_line_texts(&self, range: LineRange) -> Vec<String> {
        let mut out = Vec::new();
        self.walk_lines(range, &mut |_, text, _, _| out.push(text.to_string()));
        out
    }

    fn walk_lines(&self, range: LineRange, sink: &mut dyn FnMut(u32, &str, LineKind, At<'_>)) {
        let mut c = Collector { range, sink };
        let first = self.sections.partition_point(|s| s.last_line < range.first);
        for (i, s) in self.sections.iter().enumerate().skip(first) {
            if s.header_line.saturating_sub(2) > range.last {
                break;
            }
            let at = (Some(i), Some(&s.role), None);
            if i > 0 {
                c.push(s.header_line - 2, "", LineKind::Separator, at);
                c.push(s.header_line - 1, SEPARATOR, LineKind::Separator, at);
            }
            c.push(s.header_line, &s.header, LineKind::Header, at);
            c.push(s.header_line + 1, "", LineKind::Header, at);
            for (j, b) in s.block_indices().enumerate() {
                let block = &self.blocks[b];
                if j > 0 {
                    c.push(block.first_line - 1, "", LineKind::Blank, at);
                }
                self.block_lines(&mut c, (i, &s.role), (b, block));
            }
        }
        self.tail_lines(&mut c);
    }

    fn block_lines(&self, c: &mut Collector<'_>, section: (usize, &SectionRole), block: (usize, &Block)) {
        let b = block.1;
        if b.last_line < c.range.first || b.first_line > c.range.last {
            return;
        }
        let at = (Some(section.0), Some(section.1), Some(block));
        let delimiters = b.kind.delimiters();
        if let Some((open, _)) = &delimiters {
            c.push(b.first_line, open, LineKind::Open, at);
        }
        for (k, line) in b.body_lines().enumerate() {
            let n = b.body_start + k as u32;
            if n > c.range.last {
                break;
            }
            c.push(n, line, LineKind::Body, at);
        }
        if let Some((_, close)) = delimiters {
            c.push(b.last_line, close, LineKind::Close, at);
        }
    }

    fn tail_lines(&self, c: &mut Collector<'_>) {
        c.push(self.body_lines, "", LineKind::Trailer, (None, None, None));
        if let Some(footer) = &self.footer {
            c.push(self.body_lines + 1, "", LineKind::Stats, (None, None, None));
            for (k, line) in footer.iter().enumerate() {
                c.push(self.body_lines + 2 + k as u32, line, LineKind::Stats, (None, None, None));
            }
        }
    }
}
