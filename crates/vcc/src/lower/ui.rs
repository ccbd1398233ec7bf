//! The UI view (`.min.txt`): what the user saw. User and assistant turns only, thinking removed,
//! tool calls collapsed to one summary line with pointers, consecutive assistant sections merged,
//! long text truncated with a pointer to the full text.

use super::{LineWriter, short_name};
use memex_pointer::LineRange;

use crate::ir::{Block, BlockKind, Body, Chain, Section, SectionRole, Speaker};
use crate::text::{is_meta_user_text, py_split_whitespace, py_strip, strip_noise_xml, truncate_tokens};
use serde::Serialize;
use std::collections::HashMap;

/// UI view options (the CLI's `-t` and `-tu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UiOptions {
    /// Token limit for non-user text; 0 disables truncation.
    pub truncate: i64,
    /// Token limit for user text; 0 disables truncation.
    pub truncate_user: i64,
}

impl Default for UiOptions {
    fn default() -> Self {
        UiOptions { truncate: 128, truncate_user: 256 }
    }
}

/// A rendered UI view and the pointers it cites.
#[derive(Debug, Clone, Serialize)]
pub struct UiView {
    pub text: String,
    /// Number of lines (the reference's list length).
    pub lines: u32,
    pub pointers: Vec<UiPointer>,
}

/// A pointer printed in the UI view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UiPointer {
    /// 1-based line of the UI view where the pointer is printed.
    pub ui_line: u32,
    /// Index of the block in [`Chain::blocks`].
    pub block: usize,
    #[serde(flatten)]
    pub kind: UiPointerKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "pointer", rename_all = "snake_case")]
pub enum UiPointerKind {
    /// `* Name "value" (file:call,result)`.
    ToolCall {
        #[serde(serialize_with = "crate::manifest::start_end::range")]
        call: LineRange,
        #[serde(serialize_with = "crate::manifest::start_end::opt")]
        result: Option<LineRange>,
    },
    /// `...(truncated from file:range)`.
    Truncated {
        #[serde(serialize_with = "crate::manifest::start_end::range")]
        range: LineRange,
    },
}

/// Memex kinds shown in the UI view (extension kinds `x-…` are not).
const UI_LABELS: [&str; 4] = ["decision", "constraint", "report", "note"];
/// Tools whose calls the UI view leaves out entirely.
const HIDDEN_TOOLS: [&str; 2] = ["TodoWrite", "ToolSearch"];
/// Sections consisting only of these texts are hidden.
const HIDDEN_TEXTS: [&str; 2] = ["Continue from where you left off.", "No response requested."];

impl Chain {
    /// Lowers the chain to the UI view.
    pub fn ui_view(&self, opts: &UiOptions) -> UiView {
        let visible: Vec<bool> = self.sections.iter().map(|s| self.ui_visible(s)).collect();
        let merged = merged_sections(&self.sections, &visible);
        let ctx = UiContext { chain: self, opts, short: short_name(&self.names.full), results: self.result_ranges() };
        let mut out = LineWriter::default();
        let mut pointers = Vec::new();
        let mut prev: Option<(usize, bool)> = None;
        let mut any_visible = false;
        for (i, section) in self.sections.iter().enumerate() {
            if !visible[i] {
                continue;
            }
            if i > 0 && !merged[i] && any_visible {
                out.push("");
                prev = None;
            }
            if !merged[i] {
                out.push(&section.header);
                out.push("");
            }
            for b in section.block_indices() {
                let Some(lowered) = ctx.block(b) else {
                    continue;
                };
                let is_summary = matches!(self.blocks[b].kind, BlockKind::ToolCall { .. });
                if prev.is_some_and(|(pb, ps)| pb != b && !(ps && is_summary)) {
                    out.push("");
                }
                let first = out.next_line();
                for line in &lowered.lines {
                    out.push(line);
                }
                if let Some(kind) = lowered.pointer {
                    let ui_line = first + lowered.pointer_line;
                    pointers.push(UiPointer { ui_line, block: b, kind });
                }
                prev = Some((b, is_summary));
            }
            any_visible = true;
        }
        out.push("");
        UiView { text: out.text, lines: out.lines, pointers }
    }

    fn ui_visible(&self, s: &Section) -> bool {
        let shown_role = match &s.role {
            SectionRole::User | SectionRole::Assistant => true,
            SectionRole::Other(label) => UI_LABELS.contains(&label.as_str()),
            _ => false,
        };
        let blocks = &self.blocks[s.block_indices()];
        shown_role
            && blocks.iter().any(has_visible_node)
            && !(s.role == SectionRole::User && user_hidden(blocks))
            && !exact_hidden(blocks)
    }

    /// `short id → result section range`, the last result section with that id winning.
    fn result_ranges(&self) -> HashMap<&str, LineRange> {
        let mut out = HashMap::new();
        for s in &self.sections {
            if !(s.header.starts_with("[tool]") || s.header.starts_with("[tool_error]")) {
                continue;
            }
            if let Some((_, id)) = s.header.rsplit_once(':') {
                out.insert(id, s.range());
            }
        }
        out
    }
}

/// A node other than delimiters, headers and thinking (a tool call counts only with parameters).
fn has_visible_node(b: &Block) -> bool {
    match b.kind {
        BlockKind::Thinking | BlockKind::RedactedThinking => false,
        BlockKind::ToolCall { .. } => b.body != Body::Empty,
        _ => true,
    }
}

/// The searchable nodes of a section's blocks, stripped.
fn searchable_texts(blocks: &[Block]) -> impl Iterator<Item = (&Block, &str)> {
    blocks.iter().filter(|b| b.kind.is_searchable() && b.body != Body::Empty).map(|b| (b, py_strip(b.body.joined())))
}

/// A user section whose every searchable text is empty, command/task noise, a skill preamble,
/// or nothing but stripped markup.
fn user_hidden(blocks: &[Block]) -> bool {
    let mut any = false;
    for (_, text) in searchable_texts(blocks) {
        any = true;
        let noise = text.is_empty()
            || is_meta_user_text(text)
            || text.starts_with("Base directory for this skill:")
            || strip_noise_xml(text).is_empty();
        if !noise {
            return false;
        }
    }
    any
}

/// A section whose searchable non-thinking texts are all "Continue from where you left off."
/// or "No response requested.".
fn exact_hidden(blocks: &[Block]) -> bool {
    let mut any = false;
    for (b, text) in searchable_texts(blocks) {
        if b.kind.is_thinking() {
            continue;
        }
        any = true;
        if !HIDDEN_TEXTS.contains(&text) {
            return false;
        }
    }
    any
}

/// Which visible assistant sections continue the previous visible (assistant) section.
fn merged_sections(sections: &[Section], visible: &[bool]) -> Vec<bool> {
    let mut merged = vec![false; sections.len()];
    let mut prev_visible_role: Option<&SectionRole> = None;
    for (i, s) in sections.iter().enumerate() {
        if !visible[i] {
            continue;
        }
        merged[i] = s.role == SectionRole::Assistant && prev_visible_role == Some(&SectionRole::Assistant);
        prev_visible_role = Some(&s.role);
    }
    merged
}

struct UiContext<'c> {
    chain: &'c Chain,
    opts: &'c UiOptions,
    short: String,
    results: HashMap<&'c str, LineRange>,
}

struct Lowered {
    lines: Vec<String>,
    pointer: Option<UiPointerKind>,
    /// Offset of the pointer's line within `lines`.
    pointer_line: u32,
}

impl UiContext<'_> {
    fn block(&self, index: usize) -> Option<Lowered> {
        let b = &self.chain.blocks[index];
        match &b.kind {
            BlockKind::Thinking | BlockKind::RedactedThinking | BlockKind::ToolResult | BlockKind::ToolError => None,
            BlockKind::ToolCall { summary, .. } => self.tool_call(b, summary),
            BlockKind::Image { .. } | BlockKind::Document { .. } => {
                Some(Lowered { lines: vec![b.body.joined().to_string()], pointer: None, pointer_line: 0 })
            }
            BlockKind::Text { speaker } => {
                let user = *speaker == Speaker::User;
                self.text(b, user)
            }
            BlockKind::CompactSummary => self.text(b, true),
        }
    }

    fn tool_call(&self, b: &Block, summary: &str) -> Option<Lowered> {
        let (open, _) = b.kind.delimiters()?;
        let mut words = py_split_whitespace(&open).skip(1);
        let target = words.next().unwrap_or("");
        let mut parts = target.split(':');
        let tool = parts.next().unwrap_or("");
        if HIDDEN_TOOLS.contains(&tool) {
            return None;
        }
        // `stid = parts[-1] if len(parts) >= 2 else ""`, looked up even when empty.
        let id = if target.contains(':') { target.rsplit(':').next().unwrap_or("") } else { "" };
        let call = b.range();
        let result = self.results.get(id).copied();
        let line = match result {
            Some(r) => format!("{summary} ({}:{call},{r})", self.short),
            None => format!("{summary} ({}:{call})", self.short),
        };
        Some(Lowered { lines: vec![line], pointer: Some(UiPointerKind::ToolCall { call, result }), pointer_line: 0 })
    }

    fn text(&self, b: &Block, user: bool) -> Option<Lowered> {
        let range = b.body_range()?;
        let raw = b.body.joined();
        let stripped;
        let text: &str = if user {
            stripped = strip_noise_xml(raw);
            if py_strip(&stripped).is_empty() {
                return None;
            }
            &stripped
        } else {
            raw
        };
        let limit = if user { self.opts.truncate_user } else { self.opts.truncate };
        let reference = format!("{}:{range}", self.short);
        let truncated = truncate_tokens(text, limit, &reference);
        let was_truncated = matches!(truncated, std::borrow::Cow::Owned(_));
        let mut lines: Vec<&str> = truncated.split('\n').collect();
        let leading = lines.iter().take_while(|l| l.is_empty()).count();
        lines.drain(..leading);
        if lines.is_empty() {
            return None;
        }
        let pointer_line = lines.len() as u32 - 1;
        Some(Lowered {
            lines: lines.into_iter().map(str::to_owned).collect(),
            pointer: was_truncated.then_some(UiPointerKind::Truncated { range }),
            pointer_line,
        })
    }
}
