//! Parser: records → sections and blocks of one chain (the reference's `parse`), incrementally.
//!
//! Two things are only known at the end of a chain or file, so they stay pending until
//! [`ChainBuilder::finish`]: a tool result's header and body depend on the tool's name, which the
//! reference looks up in a map built over the *whole* chain; media file names depend on whether
//! the file has more than one chain (`_1` suffix).

use crate::diag::Diags;
use crate::ir::{BlockKind, Body, SectionRole, Speaker, string_map_bytes, vec_bytes};
use crate::json::Value;
use crate::media::{MediaKind, b64decode, media_ext};
use crate::pyfmt::to_py_str;
use crate::stats::ChainStats;
use crate::text::sanitize;
use crate::tool::{emit_params, tool_summary};
use std::collections::HashMap;
use std::sync::Arc;

mod finish;

/// How a tool result finds its tool's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolNames {
    /// The reference: a map over all tool calls of the chain, last one wins.
    WholeChain,
    /// The lexer put the name in the result block (`"name"`), as resolved from calls already seen.
    /// Appending records then never renames an earlier result (stable pointers).
    InResult,
}

#[derive(Debug, Clone)]
enum PendingHeader {
    Done(Arc<str>),
    Tool { is_error: bool, id_key: String, id: String, explicit: Option<String> },
}

#[derive(Debug, Clone)]
enum PendingBody {
    Done(Body),
    Media(usize),
    ToolParts(Vec<Part>),
}

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Media(usize),
}

#[derive(Debug, Clone)]
struct PendingSection {
    role: SectionRole,
    header: PendingHeader,
    blocks: std::ops::Range<u32>,
    timestamp: Option<Arc<str>>,
}

impl PendingSection {
    fn block_indices(&self) -> std::ops::Range<usize> {
        self.blocks.start as usize..self.blocks.end as usize
    }
}

#[derive(Debug, Clone)]
struct PendingBlock {
    kind: BlockKind,
    body: PendingBody,
    section: u32,
    tool_id_key: Option<String>,
    /// Input line of the record the block came from.
    source_line: u32,
}

#[derive(Debug, Clone)]
struct PendingMedia {
    kind: MediaKind,
    index: u32,
    ext: String,
    bytes: Option<Vec<u8>>,
}

/// An assistant record whose streamed chunks are still arriving.
#[derive(Debug, Clone)]
struct OpenAssistant {
    first_block: u32,
    has_content: bool,
    timestamp: Option<String>,
}

/// Builds one chain.
#[derive(Debug, Clone)]
pub(crate) struct ChainBuilder {
    sections: Vec<PendingSection>,
    blocks: Vec<PendingBlock>,
    media: Vec<PendingMedia>,
    tool_names: HashMap<String, String>,
    open: Option<OpenAssistant>,
    pub stats: ChainStats,
    /// Input line of the record being parsed; stamped on every block it produces.
    source_line: u32,
    /// What snapshots have finished for good (see [`ChainBuilder::snapshot`]).
    finished: finish::Finished,
}

impl ChainBuilder {
    pub fn new() -> Self {
        ChainBuilder {
            sections: Vec::new(),
            blocks: Vec::new(),
            media: Vec::new(),
            tool_names: HashMap::new(),
            open: None,
            stats: ChainStats::default(),
            source_line: 0,
            finished: finish::Finished::default(),
        }
    }

    /// Approximate heap size, for cache weighers: vectors by their capacity, strings by theirs.
    pub fn size_bytes(&self) -> usize {
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
        let shared = |s: &str| s.len() + 2 * std::mem::size_of::<usize>();
        let blocks = vec_bytes(&self.blocks, |b| {
            let body = match &b.body {
                PendingBody::Done(body) => body.heap_bytes(),
                PendingBody::Media(_) => 0,
                PendingBody::ToolParts(parts) => vec_bytes(parts, |p| match p {
                    Part::Text(t) => t.capacity(),
                    Part::Media(_) => 0,
                }),
            };
            body + b.kind.heap_bytes() + text(&b.tool_id_key)
        });
        let sections = vec_bytes(&self.sections, |s| {
            let header = match &s.header {
                PendingHeader::Done(h) => shared(h),
                PendingHeader::Tool { id_key, id, explicit, .. } => id_key.capacity() + id.capacity() + text(explicit),
            };
            header + s.timestamp.as_deref().map_or(0, shared)
        });
        let media = vec_bytes(&self.media, |m| m.ext.capacity() + m.bytes.as_ref().map_or(0, Vec::capacity));
        let open = self.open.as_ref().map_or(0, |o| text(&o.timestamp));
        let finished = self.finished.size_bytes();
        std::mem::size_of::<Self>() + blocks + sections + media + string_map_bytes(&self.tool_names) + open + finished
    }

    /// What of [`ChainBuilder::size_bytes`] is block text a snapshot's blocks share.
    pub fn text_bytes(&self) -> usize {
        self.blocks
            .iter()
            .map(|b| match &b.body {
                PendingBody::Done(body) => body.heap_bytes(),
                PendingBody::Media(_) | PendingBody::ToolParts(_) => 0,
            })
            .sum()
    }

    /// Sets the input line of the record about to be parsed.
    pub fn at_line(&mut self, line: u32) {
        self.source_line = line;
    }

    fn section_index(&self) -> u32 {
        self.sections.len() as u32
    }

    fn push_section(&mut self, role: SectionRole, header: PendingHeader, first_block: u32, ts: Option<String>) {
        self.sections.push(PendingSection {
            role,
            header,
            blocks: first_block..self.blocks.len() as u32,
            timestamp: ts.map(Arc::from),
        });
    }

    fn push_block(&mut self, kind: BlockKind, body: PendingBody) {
        let section = self.section_index();
        self.blocks.push(PendingBlock { kind, body, section, tool_id_key: None, source_line: self.source_line });
    }

    /// A system record: `[system]` with a string or block list (skipped if falsy).
    pub fn system(&mut self, content: &Value<'_>, ts: Option<String>, d: &mut Diags) {
        if !content.truthy() {
            return;
        }
        let first = self.blocks.len() as u32;
        match content {
            Value::Array(blocks) => {
                self.emit_blocks(blocks, &Speaker::System, d);
            }
            Value::Str(s) => self.push_block(
                BlockKind::Text { speaker: Speaker::System },
                PendingBody::Done(Body::text(sanitize(s).into_owned())),
            ),
            other => {
                d.warn("system content is neither a string nor a list; rendered with str()");
                let text = to_py_str(other);
                self.push_block(
                    BlockKind::Text { speaker: Speaker::System },
                    PendingBody::Done(Body::text(sanitize(&text).into_owned())),
                );
            }
        }
        self.push_section(SectionRole::System, PendingHeader::Done("[system]".into()), first, ts);
    }

    /// A memex event kind with its own label: `[label]` and one text block.
    pub fn labeled(&mut self, label: &str, content: &Value<'_>, ts: Option<String>) {
        let first = self.blocks.len() as u32;
        let text = match content {
            Value::Str(s) => sanitize(s).into_owned(),
            other => sanitize(&to_py_str(other)).into_owned(),
        };
        let speaker = Speaker::Other(label.to_string());
        self.push_block(BlockKind::Text { speaker }, PendingBody::Done(Body::text(text)));
        let role = SectionRole::Other(label.to_string());
        self.push_section(role, PendingHeader::Done(format!("[{label}]").into()), first, ts);
    }

    /// A compact-summary user record: `[user]` + `[compact summary — N lines]`.
    pub fn compact_summary(&mut self, content: &Value<'_>, ts: Option<String>, d: &mut Diags) {
        let n = match content {
            Value::Str(s) if !s.is_empty() => memchr::memchr_iter(b'\n', s.as_bytes()).count() + 1,
            Value::Array(items) if !items.is_empty() => items.iter().filter(|i| i.as_str() == Some("\n")).count() + 1,
            v if v.truthy() => {
                d.warn("compact summary content is neither a string nor a list");
                1
            }
            _ => 0,
        };
        let first = self.blocks.len() as u32;
        let line = format!("[compact summary \u{2014} {n} lines]");
        self.push_block(BlockKind::CompactSummary, PendingBody::Done(Body::one(line)));
        self.push_section(SectionRole::User, PendingHeader::Done("[user]".into()), first, ts);
    }

    /// A user record: text first (one `[user]` section), then one section per tool result.
    pub fn user(&mut self, content: &Value<'_>, names: ToolNames, ts: Option<String>, d: &mut Diags) {
        match content {
            Value::Str(s) if !s.is_empty() => {
                let first = self.blocks.len() as u32;
                let kind = BlockKind::Text { speaker: Speaker::User };
                self.push_block(kind, PendingBody::Done(Body::text(sanitize(s).into_owned())));
                self.push_section(SectionRole::User, PendingHeader::Done("[user]".into()), first, ts);
            }
            Value::Array(items) => self.user_blocks(items, names, ts, d),
            Value::Str(_) | Value::Null => {}
            _ => d.warn("user content is neither a string nor a list; ignored"),
        }
    }

    fn user_blocks(&mut self, items: &[Value<'_>], names: ToolNames, ts: Option<String>, d: &mut Diags) {
        let is_result = |b: &&Value<'_>| b.type_str() == Some("tool_result");
        let others: Vec<&Value<'_>> = items.iter().filter(|b| !is_result(b)).collect();
        if !others.is_empty() {
            let (first, media_mark) = (self.blocks.len(), self.media.len());
            if self.emit_block_refs(&others, &Speaker::User, d) {
                let header = PendingHeader::Done("[user]".into());
                self.push_section(SectionRole::User, header, first as u32, ts.clone());
            } else {
                self.blocks.truncate(first);
                self.media.truncate(media_mark);
            }
        }
        for result in items.iter().filter(is_result) {
            self.tool_result(result, names, ts.clone(), d);
        }
    }

    fn tool_result(&mut self, block: &Value<'_>, names: ToolNames, ts: Option<String>, d: &mut Diags) {
        let id = block.get("tool_use_id").map_or_else(String::new, to_py_str);
        let id_key = block.get("tool_use_id").map_or_else(|| "''".into(), repr_key);
        let is_error = block.get("is_error").is_some_and(Value::truthy);
        let explicit = match names {
            ToolNames::InResult => block.get("name").map(to_py_str),
            ToolNames::WholeChain => None,
        };
        let mut parts = Vec::new();
        match block.get("content") {
            Some(Value::Str(s)) => parts.push(Part::Text(sanitize(s).into_owned())),
            Some(Value::Array(items)) => {
                for item in items {
                    self.result_item(item, &mut parts, d);
                }
            }
            Some(Value::Null) | None => {}
            Some(_) => d.warn("tool_result content is neither a string nor a list; ignored"),
        }
        let first = self.blocks.len() as u32;
        let kind = if is_error { BlockKind::ToolError } else { BlockKind::ToolResult };
        self.push_block(kind, PendingBody::ToolParts(parts));
        if let Some(b) = self.blocks.last_mut() {
            b.tool_id_key = Some(id_key.clone());
        }
        let role = if is_error { SectionRole::ToolError } else { SectionRole::Tool };
        let header = PendingHeader::Tool { is_error, id_key, id, explicit };
        self.push_section(role, header, first, ts);
    }

    fn result_item(&mut self, item: &Value<'_>, parts: &mut Vec<Part>, d: &mut Diags) {
        match item.type_str() {
            Some("text") => match item.get("text") {
                Some(Value::Str(s)) => parts.push(Part::Text(sanitize(s).into_owned())),
                Some(v) if v.truthy() => {
                    d.warn("tool_result text is not a string; rendered with str()");
                    parts.push(Part::Text(sanitize(&to_py_str(v)).into_owned()));
                }
                _ => parts.push(Part::Text(String::new())),
            },
            Some(kind @ ("image" | "document")) => {
                let kind = if kind == "image" { MediaKind::Image } else { MediaKind::Document };
                let source = item.get("source");
                if source.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("base64")
                    && let Some(i) = self.extract(kind, source, d)
                {
                    parts.push(Part::Media(i));
                }
            }
            _ => {}
        }
    }

    /// Opens an assistant record (the first of its streamed chunks).
    pub fn open_assistant(&mut self, ts: Option<String>) {
        self.open = Some(OpenAssistant { first_block: self.blocks.len() as u32, has_content: false, timestamp: ts });
    }

    /// Renders one chunk's blocks into the open assistant record.
    pub fn assistant_chunk(&mut self, content: &Value<'_>, d: &mut Diags) {
        let blocks: Vec<&Value<'_>> = match content {
            Value::Array(items) => items.iter().collect(),
            Value::Null => Vec::new(),
            other => {
                d.warn("assistant content is not a list; rendered as one text block");
                let text = to_py_str(other);
                self.assistant_text_fallback(&text);
                return;
            }
        };
        let has = blocks.iter().any(|b| renders_assistant_header(b));
        for b in &blocks {
            if b.type_str() == Some("tool_use") {
                self.remember_tool_name(b);
            }
        }
        self.emit_block_refs(&blocks, &Speaker::Assistant, d);
        if let Some(open) = self.open.as_mut() {
            open.has_content |= has;
        }
    }

    fn assistant_text_fallback(&mut self, text: &str) {
        let body = sanitize(text).into_owned();
        if !body.is_empty() {
            let kind = BlockKind::Text { speaker: Speaker::Assistant };
            self.push_block(kind, PendingBody::Done(Body::text(body)));
            if let Some(open) = self.open.as_mut() {
                open.has_content = true;
            }
        }
    }

    fn remember_tool_name(&mut self, b: &Value<'_>) {
        let key = b.get("id").map_or_else(|| "''".into(), repr_key);
        let name = b.get("name").map_or_else(|| "unknown".into(), to_py_str);
        self.tool_names.insert(key, name);
    }

    /// Closes the open assistant record: a section if any chunk had renderable content.
    pub fn close_assistant(&mut self) {
        let Some(open) = self.open.take() else { return };
        if open.has_content {
            let header = PendingHeader::Done("[assistant]".into());
            self.push_section(SectionRole::Assistant, header, open.first_block, open.timestamp);
        } else {
            debug_assert_eq!(self.blocks.len() as u32, open.first_block);
        }
    }

    fn emit_blocks(&mut self, blocks: &[Value<'_>], speaker: &Speaker, d: &mut Diags) -> bool {
        let refs: Vec<&Value<'_>> = blocks.iter().collect();
        self.emit_block_refs(&refs, speaker, d)
    }

    /// The reference's `_emit_blocks`; returns whether any block was emitted.
    fn emit_block_refs(&mut self, blocks: &[&Value<'_>], speaker: &Speaker, d: &mut Diags) -> bool {
        let mut any = false;
        for b in blocks {
            any |= self.emit_block(b, speaker, d);
        }
        any
    }

    fn emit_block(&mut self, b: &Value<'_>, speaker: &Speaker, d: &mut Diags) -> bool {
        if b.as_object().is_none() {
            d.warn("content block is not an object; ignored");
            return false;
        }
        match b.type_str() {
            Some("thinking") => self.text_like(b.get("thinking"), BlockKind::Thinking, d),
            Some("redacted_thinking") => {
                let body = Body::one("[content redacted by model provider]");
                self.push_block(BlockKind::RedactedThinking, PendingBody::Done(body));
                true
            }
            Some("text") => {
                let kind = BlockKind::Text { speaker: speaker.clone() };
                self.text_like(b.get("text"), kind, d)
            }
            Some("tool_use") => {
                self.tool_use(b, d);
                true
            }
            Some("image") => self.media_block(b, MediaKind::Image, speaker, d),
            Some("document") => self.media_block(b, MediaKind::Document, speaker, d),
            _ => false,
        }
    }

    fn text_like(&mut self, text: Option<&Value<'_>>, kind: BlockKind, d: &mut Diags) -> bool {
        let text = match text {
            Some(Value::Str(s)) => sanitize(s),
            Some(v) if v.truthy() => {
                d.warn("block text is not a string; rendered with str()");
                std::borrow::Cow::Owned(sanitize(&to_py_str(v)).into_owned())
            }
            _ => return false,
        };
        if text.is_empty() {
            return false;
        }
        self.push_block(kind, PendingBody::Done(Body::text(text.into_owned())));
        true
    }

    fn tool_use(&mut self, b: &Value<'_>, d: &mut Diags) {
        let name = b.get("name").map_or_else(|| "unknown".into(), to_py_str);
        let id = b.get("id").map_or_else(String::new, to_py_str);
        let empty = Value::Object(Default::default());
        let input = b.get("input").unwrap_or(&empty);
        let summary = tool_summary(&name, input);
        let body = if input.truthy() {
            if input.as_object().is_none() {
                d.warn("tool_use input is not an object; rendered with str()");
            }
            Body::text(emit_params(input))
        } else {
            Body::Empty
        };
        let kind = BlockKind::ToolCall { name, id, summary };
        self.push_block(kind, PendingBody::Done(body));
    }

    fn media_block(&mut self, b: &Value<'_>, kind: MediaKind, speaker: &Speaker, d: &mut Diags) -> bool {
        let source = b.get("source");
        let is_base64 = source.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("base64");
        let body = match (kind, is_base64) {
            (_, true) => match self.extract(kind, source, d) {
                Some(i) => PendingBody::Media(i),
                None => return false,
            },
            (MediaKind::Image, false) => return false,
            (MediaKind::Document, false) => PendingBody::Done(Body::one("[document]")),
        };
        let speaker = speaker.clone();
        let block = match kind {
            MediaKind::Image => BlockKind::Image { speaker },
            MediaKind::Document => BlockKind::Document { speaker },
        };
        self.push_block(block, body);
        true
    }

    /// Decodes a base64 source; the counter advances even if decoding fails (the label stays,
    /// the file is not written), so numbering never depends on payload validity.
    fn extract(&mut self, kind: MediaKind, source: Option<&Value<'_>>, d: &mut Diags) -> Option<usize> {
        let source = source?;
        let ext = match source.get("media_type") {
            Some(Value::Str(s)) => media_ext(s, kind),
            None => kind.default_ext().to_string(),
            Some(_) => {
                d.warn("media_type is not a string; default extension used");
                kind.default_ext().to_string()
            }
        };
        let bytes = match source.get("data") {
            Some(Value::Str(data)) => b64decode(data),
            None => Ok(Vec::new()),
            Some(_) => Err(crate::media::Base64Error::NonAscii),
        };
        let index = self.media.len() as u32;
        let bytes = match bytes {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                d.warn(format!("invalid base64 in {} block ({e}); media file not written", kind.label()));
                None
            }
        };
        self.media.push(PendingMedia { kind, index, ext, bytes });
        Some(self.media.len() - 1)
    }
}

/// A map key that distinguishes `"1"` from `1` as Python's dict does.
fn repr_key(v: &Value<'_>) -> String {
    let mut s = String::new();
    crate::pyfmt::py_repr(v, &mut s);
    s
}

/// The reference emits an `[assistant]` header if any block is non-empty thinking, redacted
/// thinking, non-empty text, a tool call, an image or a document.
fn renders_assistant_header(b: &Value<'_>) -> bool {
    match b.type_str() {
        Some("thinking") => b.get("thinking").is_some_and(Value::truthy),
        Some("text") => b.get("text").is_some_and(Value::truthy),
        Some("redacted_thinking" | "tool_use" | "image" | "document") => true,
        _ => false,
    }
}
