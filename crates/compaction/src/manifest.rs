//! The pointer manifest (TRACE §6.1): what compaction leaves where evicted events were. It is
//! structured and identifier-based — evicted seq ranges with their full-view line ranges, anchor
//! events, artifacts, retrieval hints, the task-state version — never a narrative summary, and
//! rendered in about 200 tokens.
use std::fmt::Write as _;

use memex_pointer::{ArtifactPointer, LineRange, SeqRange};
use memex_tokens::TokenCounter;
use uuid::Uuid;

use crate::hints::{AnchorKind, Hints, cut};

/// A run of consecutive evicted seqs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EvictedSpan {
    pub seqs: SeqRange,
    pub first_event_id: Uuid,
    pub last_event_id: Uuid,
    /// Full-view lines of the run, when VCC located both ends.
    pub lines: Option<LineRange>,
}

/// An evicted event worth naming: a decision, a constraint, an error, a user correction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Anchor {
    pub event_id: Uuid,
    pub seq: u64,
    pub kind: AnchorKind,
    pub lines: Option<LineRange>,
    /// One line: the exact error line, or the first line of the event.
    pub label: String,
}

/// The manifest of one compaction. Immutable once stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PointerManifest {
    pub id: Uuid,
    pub session_id: Uuid,
    /// The task-state version current when the manifest was made.
    pub task_state_version: Option<u64>,
    /// Every evicted run, in seq order; together they name every evicted event.
    pub spans: Vec<EvictedSpan>,
    pub evicted_events: u64,
    /// Window tokens the evicted events (and absorbed manifests) took.
    pub evicted_tokens: u64,
    pub anchors: Vec<Anchor>,
    pub artifacts: Vec<ArtifactPointer>,
    pub hints: Hints,
    /// Earlier manifests of this window folded into this one (their spans are in `spans`).
    pub absorbed: Vec<Uuid>,
}

/// How many anchors a manifest stores (it renders fewer).
pub const STORED_ANCHORS: usize = 32;

impl PointerManifest {
    /// True when `seq` is one of the evicted events.
    pub fn covers(&self, seq: u64) -> bool {
        self.spans.iter().any(|s| s.seqs.contains(seq))
    }

    /// The first evicted seq: where the manifest sits in the window.
    pub fn position(&self) -> u64 {
        self.spans.first().map(|s| s.seqs.first).unwrap_or(0)
    }

    /// The manifest as the agent reads it, within `max_tokens` (detail is dropped, least useful
    /// first, until it fits; the header line alone is always kept).
    pub fn render(&self, counter: &dyn TokenCounter, max_tokens: usize) -> String {
        let mut layout = Layout::FULL;
        loop {
            let text = self.render_with(&layout);
            if counter.count(&text) <= max_tokens || !layout.shrink() {
                return text;
            }
        }
    }

    fn render_with(&self, l: &Layout) -> String {
        let mut out = format!("[pointer manifest {}] {} events evicted", self.id, self.evicted_events);
        if let (Some(first), Some(last)) = (self.spans.first(), self.spans.last()) {
            let all = SeqRange { first: first.seqs.first, last: last.seqs.last };
            let _ = write!(out, " (seq {all}");
            if let (Some(a), Some(b)) = (first.lines, last.lines) {
                let _ = write!(out, ", lines {}", a.span(b));
            }
            out.push(')');
        }
        if let Some(v) = self.task_state_version {
            let _ = write!(out, " · task state v{v}");
        }
        out.push_str(" · ExpandManifest returns them\n");
        if self.spans.len() > 1 && l.spans > 0 {
            out.push_str("spans:");
            list(&mut out, self.spans.iter().map(span_text), l.spans, self.spans.len());
        }
        if l.anchors > 0 && !self.anchors.is_empty() {
            out.push_str("anchors:");
            let items =
                self.anchors.iter().map(|a| format!("{} @{} \"{}\"", a.kind.as_str(), a.seq, cut(&a.label, 90)));
            list(&mut out, items, l.anchors, self.anchors.len());
        }
        if l.artifacts > 0 && !self.artifacts.is_empty() {
            out.push_str("artifacts:");
            let items = self.artifacts.iter().map(|a| format!("{} ({} bytes)", a.id, a.size));
            list(&mut out, items, l.artifacts, self.artifacts.len());
        }
        let h = &self.hints;
        for (title, v, n) in [
            ("errors", &h.errors, l.errors),
            ("files", &h.files, l.files),
            ("identifiers", &h.identifiers, l.identifiers),
            ("tools", &h.tools, l.tools),
        ] {
            if n > 0 && !v.is_empty() {
                out.push_str(title);
                out.push(':');
                let quote = title == "errors";
                list(
                    &mut out,
                    v.iter().map(|s| if quote { format!("\"{}\"", cut(s, 120)) } else { s.clone() }),
                    n,
                    v.len(),
                );
            }
        }
        out
    }
}

fn span_text(s: &EvictedSpan) -> String {
    match s.lines {
        Some(l) => format!("seq {} (lines {l})", s.seqs),
        None => format!("seq {}", s.seqs),
    }
}

/// Appends ` a, b, c (+N more)\n`.
fn list(out: &mut String, items: impl Iterator<Item = String>, shown: usize, total: usize) {
    for (i, item) in items.take(shown).enumerate() {
        out.push_str(if i == 0 { " " } else { "; " });
        out.push_str(&item);
    }
    if total > shown {
        let _ = write!(out, " (+{} more)", total - shown);
    }
    out.push('\n');
}

/// How many entries of each section are rendered.
#[derive(Debug, Clone, Copy)]
struct Layout {
    spans: usize,
    anchors: usize,
    artifacts: usize,
    errors: usize,
    files: usize,
    identifiers: usize,
    tools: usize,
}

impl Layout {
    const FULL: Layout = Layout { spans: 4, anchors: 4, artifacts: 3, errors: 3, files: 6, identifiers: 6, tools: 4 };

    /// Drops one entry from the least useful section that still has one; false when only the
    /// header is left.
    fn shrink(&mut self) -> bool {
        let order: [&mut usize; 7] = [
            &mut self.identifiers,
            &mut self.tools,
            &mut self.files,
            &mut self.artifacts,
            &mut self.errors,
            &mut self.spans,
            &mut self.anchors,
        ];
        // Shrink the fullest of the cheap sections first so the card keeps some of everything.
        let mut best: Option<&mut usize> = None;
        for n in order {
            if *n > 0 && best.as_ref().is_none_or(|b| *n > **b) {
                best = Some(n);
            }
        }
        match best {
            Some(n) => {
                *n -= 1;
                true
            }
            None => false,
        }
    }
}
