//! The intermediate representation: one [`Chain`] per conversation chain, made of sections
//! (one header each) and blocks (one searchable body each), with full-view line numbers.
//!
//! Line numbers are assigned once, by [`Chain::assign_lines`], and every view is a lowering of
//! the same chain: lowering selects, truncates or annotates, it never renumbers. That is what
//! makes every `(file:start-end)` pointer of every view resolve into the full view.
//!
//! A "line" is what the reference counts as one: an element of its line list. It is almost
//! always a physical line, except that a header or label built from an input string containing
//! `\n` (a tool name, a media type) stays one logical line, exactly as in the reference.

use std::sync::Arc;

use memex_pointer::LineRange;
use serde::Serialize;

/// The 30 × U+2550 separator line between sections.
pub const SEPARATOR: &str = "══════════════════════════════";

/// Who speaks in a section, i.e. which header it has. Finer than an event's role
/// (`memex_event::Role`): a tool error and each memex label keep their own header.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SectionRole {
    User,
    Assistant,
    System,
    /// `[tool] name:id` — a tool result.
    Tool,
    /// `[tool_error] name:id`.
    ToolError,
    /// A memex event kind with its own label (`decision`, `constraint`, `report`, `note`, `x-…`).
    Other(String),
}

impl SectionRole {
    /// The role name as used in JSON output and predicates.
    pub fn as_str(&self) -> &str {
        match self {
            SectionRole::User => "user",
            SectionRole::Assistant => "assistant",
            SectionRole::System => "system",
            SectionRole::Tool => "tool",
            SectionRole::ToolError => "tool_error",
            SectionRole::Other(label) => label,
        }
    }
}

/// The speaker a text, image or document block belongs to (the reference's `text_type`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Speaker {
    User,
    Assistant,
    System,
    Other(String),
}

impl Speaker {
    pub fn as_str(&self) -> &str {
        match self {
            Speaker::User => "user",
            Speaker::Assistant => "assistant",
            Speaker::System => "system",
            Speaker::Other(label) => label,
        }
    }
}

/// What a block is. Its [`BlockKind::node_type`] is the tag the transposed view prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BlockKind {
    Text {
        speaker: Speaker,
    },
    /// `[compact summary — N lines]`: not searchable.
    CompactSummary,
    Thinking,
    RedactedThinking,
    ToolCall {
        name: String,
        id: String,
        /// The UI view's `* Name "value"` line, without pointers.
        #[serde(skip)]
        summary: String,
    },
    ToolResult,
    ToolError,
    Image {
        speaker: Speaker,
    },
    Document {
        speaker: Speaker,
    },
}

impl BlockKind {
    /// What the kind holds on the heap (a tool call's name, id and summary).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            BlockKind::ToolCall { name, id, summary } => name.capacity() + id.capacity() + summary.capacity(),
            _ => 0,
        }
    }

    /// The reference's IR node type (`user`, `thinking`, `tool_call`, `assistant_image`, …).
    pub fn node_type(&self) -> String {
        match self {
            BlockKind::Text { speaker } => speaker.as_str().to_string(),
            BlockKind::CompactSummary => "user".into(),
            BlockKind::Thinking => "thinking".into(),
            BlockKind::RedactedThinking => "redacted_thinking".into(),
            BlockKind::ToolCall { .. } => "tool_call".into(),
            BlockKind::ToolResult => "tool_result".into(),
            BlockKind::ToolError => "tool_error".into(),
            BlockKind::Image { speaker } => format!("{}_image", speaker.as_str()),
            BlockKind::Document { speaker } => format!("{}_document", speaker.as_str()),
        }
    }

    /// `>>>name` / `<<<name` delimiters around the body, if the block has them.
    pub(crate) fn delimiters(&self) -> Option<(String, &'static str)> {
        match self {
            BlockKind::Thinking => Some((">>>thinking".into(), "<<<thinking")),
            BlockKind::RedactedThinking => Some((">>>redacted_thinking".into(), "<<<redacted_thinking")),
            BlockKind::ToolCall { name, id, .. } => {
                Some((format!(">>>tool_call {name}:{}", short_id(id)), "<<<tool_call"))
            }
            _ => None,
        }
    }

    pub fn is_searchable(&self) -> bool {
        !matches!(self, BlockKind::CompactSummary)
    }

    pub fn is_thinking(&self) -> bool {
        matches!(self, BlockKind::Thinking | BlockKind::RedactedThinking)
    }
}

/// The reference's `_short_tid`: the last six characters of a tool id.
pub(crate) fn short_id(id: &str) -> &str {
    match id.char_indices().rev().nth(5) {
        Some((at, _)) => &id[at..],
        None => id,
    }
}

/// A block's body: the lines of its searchable node. Shared, not copied, by the versions of a
/// live session that hold the block (a resumed compile hands out the same text again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    /// `text.split('\n')`, stored joined.
    Lines(Arc<str>),
    /// Exactly one logical line.
    Line(Arc<str>),
    /// No body node (a tool call whose input is empty).
    Empty,
}

impl Body {
    pub fn line_count(&self) -> u32 {
        match self {
            Body::Lines(text) => count_newlines(text) + 1,
            Body::Line(_) => 1,
            Body::Empty => 0,
        }
    }

    /// The body's lines (`"\n".join` of them is [`Body::joined`]).
    pub fn lines(&self) -> BodyLines<'_> {
        match self {
            Body::Lines(text) => BodyLines::Split(text.split('\n')),
            Body::Line(line) => BodyLines::One(Some(line)),
            Body::Empty => BodyLines::One(None),
        }
    }

    /// `"\n".join(lines)`.
    pub fn joined(&self) -> &str {
        match self {
            Body::Lines(text) | Body::Line(text) => text,
            Body::Empty => "",
        }
    }

    /// What its text takes on the heap (with the `Arc`'s two counters).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Body::Lines(s) | Body::Line(s) => s.len() + 2 * std::mem::size_of::<usize>(),
            Body::Empty => 0,
        }
    }

    pub(crate) fn text(text: impl Into<Arc<str>>) -> Body {
        Body::Lines(text.into())
    }

    pub(crate) fn one(text: impl Into<Arc<str>>) -> Body {
        Body::Line(text.into())
    }
}

fn count_newlines(text: &str) -> u32 {
    memchr::memchr_iter(b'\n', text.as_bytes()).count() as u32
}

/// Iterator over a body's lines.
pub(crate) enum BodyLines<'a> {
    Split(std::str::Split<'a, char>),
    One(Option<&'a str>),
}

impl<'a> Iterator for BodyLines<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        match self {
            BodyLines::Split(it) => it.next(),
            BodyLines::One(line) => line.take(),
        }
    }
}

/// One block with its full-view coordinates (1-based, inclusive).
#[derive(Debug, Clone)]
pub struct Block {
    pub(crate) kind: BlockKind,
    pub(crate) body: Body,
    pub(crate) section: u32,
    /// The opening delimiter, or the first body line.
    pub(crate) first_line: u32,
    pub(crate) body_start: u32,
    /// The closing delimiter, or the last body line.
    pub(crate) last_line: u32,
    /// 1-based input line of the record the block came from (for the `memex` format: the
    /// position of the event in the export, which is its seq when the export starts at seq 1).
    pub(crate) source_line: u32,
}

impl Block {
    pub fn kind(&self) -> &BlockKind {
        &self.kind
    }
    /// 1-based input line of the record this block came from.
    pub fn source_line(&self) -> u32 {
        self.source_line
    }
    /// Index of the section this block belongs to.
    pub fn section(&self) -> usize {
        self.section as usize
    }
    /// Full-view lines of the whole block, delimiters included.
    pub fn range(&self) -> LineRange {
        LineRange { first: self.first_line, last: self.last_line }
    }
    /// Full-view lines of the body (the searchable node); `None` for an empty tool call.
    pub fn body_range(&self) -> Option<LineRange> {
        let n = self.body.line_count();
        (n > 0).then(|| LineRange { first: self.body_start, last: self.body_start + n - 1 })
    }
    /// The body text, lines joined with `\n`.
    pub fn text(&self) -> &str {
        self.body.joined()
    }
    pub(crate) fn body_lines(&self) -> BodyLines<'_> {
        self.body.lines()
    }
}

/// One section: an optional separator, a header, blocks.
#[derive(Debug, Clone)]
pub struct Section {
    pub(crate) role: SectionRole,
    pub(crate) header: Arc<str>,
    pub(crate) blocks: std::ops::Range<u32>,
    pub(crate) header_line: u32,
    pub(crate) last_line: u32,
    pub(crate) timestamp: Option<Arc<str>>,
}

impl Section {
    pub fn role(&self) -> &SectionRole {
        &self.role
    }
    pub fn header(&self) -> &str {
        &self.header
    }
    /// Header line through the last content line (the separator before it excluded).
    pub fn range(&self) -> LineRange {
        LineRange { first: self.header_line, last: self.last_line }
    }
    /// Indices into [`Chain::blocks`].
    pub fn block_indices(&self) -> std::ops::Range<usize> {
        self.blocks.start as usize..self.blocks.end as usize
    }
    /// The input record's timestamp, when it had one.
    pub fn timestamp(&self) -> Option<&str> {
        self.timestamp.as_deref()
    }

    /// Its header's and timestamp's heap bytes (each with the `Arc`'s two counters).
    pub(crate) fn heap_bytes(&self) -> usize {
        let counters = 2 * std::mem::size_of::<usize>();
        self.header.len() + counters + self.timestamp.as_ref().map_or(0, |t| t.len() + counters)
    }
}

/// An extracted image or document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaFile {
    /// File name, e.g. `trace_1_img_0.png`.
    pub name: String,
    pub bytes: Vec<u8>,
}

/// One compiled conversation chain: the full view's structure plus everything the other views
/// need. Immutable once built.
#[derive(Debug, Clone)]
pub struct Chain {
    pub(crate) sections: Vec<Section>,
    pub(crate) blocks: Vec<Block>,
    /// Full-view line count without the stats footer (the trailing empty line included).
    pub(crate) body_lines: u32,
    pub(crate) footer: Option<Vec<String>>,
    pub(crate) media: Vec<MediaFile>,
    pub(crate) names: ChainFiles,
}

/// The file names of one chain's outputs (`<stem><sfx>.txt`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainFiles {
    pub full: String,
    pub ui: String,
    pub adaptive: String,
    /// `<stem><sfx>`, the prefix of media file names.
    pub prefix: String,
}

impl ChainFiles {
    pub(crate) fn new(stem: &str, chain: usize, chains: usize) -> Self {
        let prefix = if chains > 1 { format!("{stem}_{}", chain + 1) } else { stem.to_string() };
        ChainFiles {
            full: format!("{prefix}.txt"),
            ui: format!("{prefix}.min.txt"),
            adaptive: format!("{prefix}.view.txt"),
            prefix,
        }
    }
}

impl Chain {
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }
    pub fn files(&self) -> &ChainFiles {
        &self.names
    }
    pub fn media(&self) -> &[MediaFile] {
        &self.media
    }
    /// The stats footer lines (after the separator), if the chain had API usage.
    pub fn footer(&self) -> Option<&[String]> {
        self.footer.as_deref()
    }
    /// Number of lines of the full view, stats footer included (the CLI's "N lines").
    pub fn full_line_count(&self) -> u32 {
        self.body_lines + self.footer.as_ref().map_or(0, |f| f.len() as u32 + 1)
    }

    /// Approximate heap size, for cache weighers: vectors by their capacity, strings by theirs
    /// (`tests/sizes.rs` holds it to what the allocator hands out).
    pub fn size_bytes(&self) -> usize {
        let blocks = vec_bytes(&self.blocks, |b| b.body.heap_bytes() + b.kind.heap_bytes());
        let sections = vec_bytes(&self.sections, Section::heap_bytes);
        let media = vec_bytes(&self.media, |m| m.bytes.capacity() + m.name.capacity());
        let footer = self.footer.as_ref().map_or(0, |f| vec_bytes(f, String::capacity));
        let n = &self.names;
        let names = n.full.capacity() + n.ui.capacity() + n.adaptive.capacity() + n.prefix.capacity();
        std::mem::size_of::<Chain>() + blocks + sections + media + footer + names
    }
}

/// The one line-assignment pass (see the module docs), for `sections`: the sections of a chain
/// from index `first` on, whose first line (its separator, unless it is the chain's first section)
/// is `line`; `blocks` are all the chain's blocks. Returns the line after the last section. Blocks are laid out as in the full view:
/// separator (2 lines) before every section but the first, header + empty line, blocks separated
/// by one empty line, a trailing empty line at the end. Lines depend only on what comes before,
/// so a resumed compile assigns the sections it adds and keeps the earlier ones.
pub(crate) fn assign_lines(sections: &mut [Section], blocks: &mut [Block], first: usize, mut line: u32) -> u32 {
    for (i, section) in sections.iter_mut().enumerate() {
        if first + i > 0 {
            line += 2;
        }
        section.header_line = line;
        line += 2;
        let mut last = line - 1;
        for (j, block) in blocks[section.block_indices()].iter_mut().enumerate() {
            if j > 0 {
                line += 1;
            }
            block.first_line = line;
            let delimited = block.kind.delimiters().is_some();
            if delimited {
                line += 1;
            }
            block.body_start = line;
            line += block.body.line_count();
            if delimited {
                line += 1;
            }
            block.last_line = line - 1;
            last = line - 1;
        }
        section.last_line = last;
    }
    line
}

/// Approximate heap size of a vector: its buffer by capacity, and what each item holds (`heap`).
pub(crate) fn vec_bytes<T>(v: &Vec<T>, heap: impl Fn(&T) -> usize) -> usize {
    v.capacity() * std::mem::size_of::<T>() + v.iter().map(heap).sum::<usize>()
}

/// Approximate heap size of a map of strings: its table (entries and control bytes) by its
/// capacity, and each key's and value's bytes.
pub(crate) fn string_map_bytes(map: &std::collections::HashMap<String, String>) -> usize {
    map.capacity() * (std::mem::size_of::<(String, String)>() + 1)
        + map.iter().map(|(k, v)| k.capacity() + v.capacity()).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_ids_keep_last_six_chars() {
        assert_eq!(short_id("toolu_018qV1Sc"), "8qV1Sc");
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(short_id("ééééééé"), "éééééé");
        assert_eq!(short_id(""), "");
    }

    #[test]
    fn chain_file_names() {
        let one = ChainFiles::new("s", 0, 1);
        assert_eq!((one.full.as_str(), one.ui.as_str()), ("s.txt", "s.min.txt"));
        let two = ChainFiles::new("s", 1, 2);
        assert_eq!((two.full.as_str(), two.prefix.as_str()), ("s_2.txt", "s_2"));
    }
}
