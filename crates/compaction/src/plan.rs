//! Choosing what leaves the window (A.4): oldest tool results first, then tool calls, then
//! dialogue; never system events, never the protected tail of recent turns. The task state and
//! the system block are outside the window's evictable part (`fixed_tokens`).
use memex_event::EventKind;
use memex_pointer::{ArtifactPointer, ContextEvent, LineRange, SeqRange};
use memex_tokens::TokenCounter;
use uuid::Uuid;

use crate::hints::{STORED_HINTS, anchor_kind, anchor_label, derive_hints};
use crate::manifest::{Anchor, EvictedSpan, PointerManifest, STORED_ANCHORS};

/// A resident event and what it costs in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowEvent {
    pub event: ContextEvent,
    /// Tokens of the event as rendered in the window.
    pub tokens: usize,
    pub lines: Option<LineRange>,
}

/// A manifest in the window and its rendered size.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowManifest {
    pub manifest: PointerManifest,
    pub tokens: usize,
}

/// An agent's window: what is resident (cache) over its session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// Resident events in seq order.
    pub events: Vec<WindowEvent>,
    /// Manifests in the window, oldest first.
    pub manifests: Vec<WindowManifest>,
}

impl Window {
    /// Tokens of the window plus `fixed` (system block, task state).
    pub fn tokens(&self, fixed: usize) -> usize {
        fixed
            + self.events.iter().map(|e| e.tokens).sum::<usize>()
            + self.manifests.iter().map(|m| m.tokens).sum::<usize>()
    }
}

/// The knobs of one compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionParams {
    /// B_ctx of the window.
    pub window_budget: usize,
    /// Tokens kept free (B_headroom); compaction brings the window to `window_budget - headroom`.
    pub headroom: usize,
    /// The last this many turns are never evicted.
    pub protected_turns: usize,
    /// Tokens outside the evictable window: system block and task-state card.
    pub fixed_tokens: usize,
    /// Cap on the rendered manifest (~200).
    pub manifest_max_tokens: usize,
}

impl CompactionParams {
    pub fn target(&self) -> usize {
        self.window_budget.saturating_sub(self.headroom)
    }
}

/// What a compaction decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Compaction {
    /// The window is within its target; nothing to do.
    AlreadyFits {
        tokens: usize,
        target: usize,
    },
    /// Over target, but everything left is protected (system, recent turns) or a lone manifest.
    NothingEvictable {
        tokens: usize,
        target: usize,
    },
    Planned(Box<CompactionPlan>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompactionPlan {
    /// Evicted events, in seq order.
    pub victims: Vec<Uuid>,
    pub manifest: PointerManifest,
    pub rendered: String,
    pub manifest_tokens: usize,
    pub tokens_before: usize,
    pub tokens_after: usize,
    pub target: usize,
    /// False when even evicting everything evictable leaves the window over target.
    pub fits: bool,
}

/// The eviction class of a kind: lower goes first; `None` is never evicted.
fn class(kind: &EventKind) -> Option<u8> {
    match kind {
        EventKind::System => None,
        EventKind::ToolResult | EventKind::ToolError => Some(0),
        EventKind::ToolCall => Some(1),
        _ => Some(2),
    }
}

/// Index of the first event of the protected tail: the start of the `k`-th last turn. A turn
/// starts at a user message, or where the agent acts again after a tool returned.
pub fn protected_from(events: &[WindowEvent], k: usize) -> usize {
    if k == 0 {
        return events.len();
    }
    let mut seen = 0;
    for i in (0..events.len()).rev() {
        let kind = &events[i].event.kind;
        let after_tool = i > 0 && events[i - 1].event.kind.is_tool_output();
        let starts = *kind == EventKind::UserMessage
            || (after_tool && matches!(kind, EventKind::AssistantMessage | EventKind::Thinking | EventKind::ToolCall));
        if starts {
            seen += 1;
            if seen == k {
                return i;
            }
        }
    }
    0
}

/// Plans one compaction of `window` (TRACE A.4). Deterministic: the same window and parameters
/// give the same victims and the same manifest bytes.
pub fn plan_compaction(
    window: &Window,
    params: &CompactionParams,
    manifest_id: Uuid,
    session_id: Uuid,
    task_state_version: Option<u64>,
    counter: &dyn TokenCounter,
) -> Compaction {
    let target = params.target();
    let before = window.tokens(params.fixed_tokens);
    if before <= target {
        return Compaction::AlreadyFits { tokens: before, target };
    }
    let tail = protected_from(&window.events, params.protected_turns);
    let mut order: Vec<(u8, u64, usize)> = window.events[..tail]
        .iter()
        .enumerate()
        .filter_map(|(i, e)| class(&e.event.kind).map(|c| (c, e.event.seq, i)))
        .collect();
    order.sort_unstable();
    let reserve = params.manifest_max_tokens;
    let mut removed = 0usize;
    let mut victims: Vec<usize> = Vec::new();
    for (_, _, i) in order {
        if before - removed + reserve <= target {
            break;
        }
        removed += window.events[i].tokens;
        victims.push(i);
    }
    let mut absorbed: Vec<&WindowManifest> = Vec::new();
    for m in &window.manifests {
        if before - removed + reserve <= target {
            break;
        }
        removed += m.tokens;
        absorbed.push(m);
    }
    if victims.is_empty() && absorbed.len() < 2 {
        return Compaction::NothingEvictable { tokens: before, target };
    }
    victims.sort_unstable();
    let evicted: Vec<&WindowEvent> = victims.iter().map(|&i| &window.events[i]).collect();
    let manifest = build_manifest(manifest_id, session_id, task_state_version, &evicted, &absorbed);
    let rendered = manifest.render(counter, params.manifest_max_tokens);
    let manifest_tokens = counter.count(&rendered);
    let after = before - removed + manifest_tokens;
    Compaction::Planned(Box::new(CompactionPlan {
        victims: evicted.iter().map(|e| e.event.id).collect(),
        manifest,
        rendered,
        manifest_tokens,
        tokens_before: before,
        tokens_after: after,
        target,
        fits: after <= target,
    }))
}

fn build_manifest(
    id: Uuid,
    session_id: Uuid,
    task_state_version: Option<u64>,
    evicted: &[&WindowEvent],
    absorbed: &[&WindowManifest],
) -> PointerManifest {
    let mut spans: Vec<EvictedSpan> = evicted
        .iter()
        .map(|e| EvictedSpan {
            seqs: SeqRange::one(e.event.seq),
            first_event_id: e.event.id,
            last_event_id: e.event.id,
            lines: e.lines,
        })
        .chain(absorbed.iter().flat_map(|m| m.manifest.spans.iter().cloned()))
        .collect();
    spans.sort_by_key(|s| (s.seqs.first, s.seqs.last));
    let spans = merge_spans(spans);

    let mut anchors: Vec<Anchor> = evicted
        .iter()
        .filter_map(|e| {
            anchor_kind(&e.event).map(|kind| Anchor {
                event_id: e.event.id,
                seq: e.event.seq,
                kind,
                lines: e.lines,
                label: anchor_label(&e.event, kind, 160),
            })
        })
        .chain(absorbed.iter().flat_map(|m| m.manifest.anchors.iter().cloned()))
        .collect();
    anchors.sort_by_key(|a| (a.kind, a.seq));
    anchors.dedup_by_key(|a| a.event_id);
    anchors.truncate(STORED_ANCHORS);

    let mut artifacts: Vec<ArtifactPointer> = Vec::new();
    for a in evicted
        .iter()
        .filter_map(|e| e.event.artifact.clone())
        .chain(absorbed.iter().flat_map(|m| m.manifest.artifacts.iter().cloned()))
    {
        if !artifacts.iter().any(|x| x.id == a.id) {
            artifacts.push(a);
        }
    }

    let mut hints = derive_hints(evicted.iter().map(|e| &e.event));
    for m in absorbed {
        let h = &m.manifest.hints;
        for (mine, theirs) in [
            (&mut hints.files, &h.files),
            (&mut hints.identifiers, &h.identifiers),
            (&mut hints.errors, &h.errors),
            (&mut hints.tools, &h.tools),
        ] {
            for s in theirs {
                if mine.len() < STORED_HINTS && !mine.contains(s) {
                    mine.push(s.clone());
                }
            }
        }
    }

    PointerManifest {
        id,
        session_id,
        task_state_version,
        spans,
        evicted_events: evicted.len() as u64 + absorbed.iter().map(|m| m.manifest.evicted_events).sum::<u64>(),
        evicted_tokens: evicted.iter().map(|e| e.tokens as u64).sum::<u64>()
            + absorbed.iter().map(|m| m.manifest.evicted_tokens).sum::<u64>(),
        anchors,
        artifacts,
        hints,
        absorbed: absorbed.iter().map(|m| m.manifest.id).collect(),
    }
}

/// Merges sorted spans whose seqs touch or overlap.
fn merge_spans(sorted: Vec<EvictedSpan>) -> Vec<EvictedSpan> {
    let mut out: Vec<EvictedSpan> = Vec::with_capacity(sorted.len());
    for s in sorted {
        match out.last_mut() {
            Some(prev) if s.seqs.first <= prev.seqs.last + 1 => {
                if s.seqs.last > prev.seqs.last {
                    prev.seqs.last = s.seqs.last;
                    prev.last_event_id = s.last_event_id;
                }
                prev.lines = match (prev.lines, s.lines) {
                    (Some(a), Some(b)) => Some(a.span(b)),
                    _ => None,
                };
            }
            _ => out.push(s),
        }
    }
    out
}
