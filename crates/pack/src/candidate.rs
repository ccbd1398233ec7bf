//! What the packer is given: candidates from the sources (A.2 lines 2–6) and the task context
//! they are judged against (A.3).
use memex_event::EventKind;
use memex_pointer::{ContextEvent, ViewBlock};
use memex_task::Phase;

/// Which sources proposed a candidate, with their raw scores.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sources {
    /// BM25 score from lexical search.
    pub lexical: Option<f32>,
    /// Cosine similarity from vector search.
    pub vector: Option<f32>,
    /// Named by a key pointer of the task state.
    pub pointer: bool,
    /// Pinned, or a standing item of the task (constraint, decision, report).
    pub pinned: bool,
    /// An anchor of a manifest in the agent's window.
    pub anchor: bool,
}

impl Sources {
    /// Combines what two sources said about the same event.
    pub fn merge(self, o: Sources) -> Sources {
        let max = |a: Option<f32>, b: Option<f32>| match (a, b) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        Sources {
            lexical: max(self.lexical, o.lexical),
            vector: max(self.vector, o.vector),
            pointer: self.pointer || o.pointer,
            pinned: self.pinned || o.pinned,
            anchor: self.anchor || o.anchor,
        }
    }
}

/// One memory that may enter the pack.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Candidate {
    pub event: ContextEvent,
    /// Its block in the full view (VCC), when located.
    pub view: Option<ViewBlock>,
    pub sources: Sources,
    /// A later event supersedes this one.
    pub superseded: bool,
    /// The premises of the task-state version it was written under (None: unknown / none).
    pub premises: Option<Vec<String>>,
    /// Its embedding, when vector search provided one (used for MMR redundancy).
    pub embedding: Option<Vec<f32>>,
    /// The part of its artifact the search matched, when that was the best match: an event keeps
    /// only the head and tail of a large output, so the pack shows this chunk instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_match: Option<ArtifactMatch>,
}

/// Lines `first_line..=last_line` (0-based) of an event's artifact, and their text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArtifactMatch {
    pub first_line: u32,
    pub last_line: u32,
    pub text: String,
}

impl Candidate {
    pub fn new(event: ContextEvent, sources: Sources) -> Candidate {
        Candidate {
            event,
            view: None,
            sources,
            superseded: false,
            premises: None,
            embedding: None,
            artifact_match: None,
        }
    }
}

/// Who is asking: a planner's pack favours decisions, reports, constraints and objectives; an
/// executor's favours its own task's artifacts and logs (TRACE §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentRole {
    #[default]
    Solo,
    Planner,
    Executor,
}

/// How another task relates to the task a pack is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// The task that delegated this one.
    Parent,
    /// A task this one delegated.
    Child,
}

/// The task a pack is conditioned on.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TaskContext {
    pub task_id: Option<String>,
    pub phase: Phase,
    pub self_assessment: bool,
    pub premises: Vec<String>,
    pub role: AgentRole,
    /// Other tasks whose items may cross into this pack.
    pub related: Vec<(String, Relation)>,
    /// Asked for old versions too ("what changed since…"): supersession does not demote.
    pub historical: bool,
}

/// The memory types of A.3, derived from the event kind and its utility tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemType {
    Constraint,
    Decision,
    Report,
    UserMessage,
    AssistantMessage,
    Thinking,
    ToolCall,
    ToolResult,
    ToolError,
    Note,
    System,
    Other,
}

impl ItemType {
    pub fn of(kind: &EventKind) -> ItemType {
        match kind {
            EventKind::Constraint => ItemType::Constraint,
            EventKind::Decision => ItemType::Decision,
            EventKind::Report => ItemType::Report,
            EventKind::UserMessage => ItemType::UserMessage,
            EventKind::AssistantMessage => ItemType::AssistantMessage,
            EventKind::Thinking => ItemType::Thinking,
            EventKind::ToolCall => ItemType::ToolCall,
            EventKind::ToolResult => ItemType::ToolResult,
            EventKind::ToolError => ItemType::ToolError,
            EventKind::Note => ItemType::Note,
            EventKind::System => ItemType::System,
            EventKind::Extension(_) => ItemType::Other,
        }
    }

    /// The quota group of the type: tool outputs, tool calls, thinking, everything else.
    pub fn quota_group(self) -> QuotaGroup {
        match self {
            ItemType::ToolResult | ItemType::ToolError => QuotaGroup::ToolOutput,
            ItemType::ToolCall => QuotaGroup::ToolCall,
            ItemType::Thinking => QuotaGroup::Thinking,
            _ => QuotaGroup::Other,
        }
    }
}

/// Per-type quotas cap how much of the retrieval budget one kind of memory may take, so a
/// flood of similar tool logs cannot crowd out decisions and constraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaGroup {
    ToolOutput,
    ToolCall,
    Thinking,
    Other,
}

/// True when an event counts as a mistake, a success or a lesson for self-assessment.
pub fn is_assessment_item(e: &ContextEvent) -> bool {
    e.kind == EventKind::ToolError
        || e.flags.utility.iter().any(|u| matches!(u.as_str(), "mistake" | "success" | "lesson"))
}
