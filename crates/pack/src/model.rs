//! The pack's vocabulary: budgets, parameters, and what a pack records.
use memex_pointer::{ContextEvent, LineRange, ViewBlock};
use uuid::Uuid;

use crate::candidate::{Candidate, QuotaGroup, Sources, TaskContext};
use crate::score::{BaseWeights, ScoreParts};

/// Per-block budgets in tokens (TRACE §9.1). Invariant checked by [`Budgets::check`]:
/// `system + task_state + memory + tail + retrieval + user + headroom ≤ context`.
/// `memory` (default 0: no memory block) holds the `<context-topics>` hint and the reader's
/// working set (Virtual Context §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budgets {
    pub context: usize,
    pub system: usize,
    pub task_state: usize,
    pub tail: usize,
    pub retrieval: usize,
    pub user: usize,
    pub headroom: usize,
    pub memory: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            context: 32_000,
            system: 2_000,
            task_state: 800,
            tail: 8_000,
            retrieval: 4_096,
            user: 4_000,
            headroom: 4_000,
            memory: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackError {
    #[error(
        "budgets: system {system} + task_state {task_state} + memory {memory} + tail {tail} + retrieval {retrieval} + user {user} + headroom {headroom} = {sum} exceeds context {context}"
    )]
    Budgets {
        system: usize,
        task_state: usize,
        memory: usize,
        tail: usize,
        retrieval: usize,
        user: usize,
        headroom: usize,
        sum: usize,
        context: usize,
    },
    #[error("user_message: {tokens} tokens, over budgets.user = {budget}")]
    UserMessage { tokens: usize, budget: usize },
    /// A block the caller marked required does not fit its budget whole.
    #[error(
        "required_blocks: the {block} block needs {tokens} tokens whole, over budgets.{block} = {budget}; raise that budget or stop requiring the block"
    )]
    Required { block: BlockKind, tokens: usize, budget: usize },
}

/// A block that did not make it into the pack whole: left out (`dropped`) or cut to its budget
/// (`cut`, with a marker saying where the rest is).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Omission {
    pub block: BlockKind,
    pub dropped: bool,
    /// What the block would take whole, in tokens.
    pub tokens: usize,
    pub budget: usize,
}

impl Budgets {
    pub fn check(&self) -> Result<(), PackError> {
        let sum = self
            .system
            .saturating_add(self.task_state)
            .saturating_add(self.memory)
            .saturating_add(self.tail)
            .saturating_add(self.retrieval)
            .saturating_add(self.user)
            .saturating_add(self.headroom);
        if sum > self.context {
            return Err(PackError::Budgets {
                system: self.system,
                task_state: self.task_state,
                memory: self.memory,
                tail: self.tail,
                retrieval: self.retrieval,
                user: self.user,
                headroom: self.headroom,
                sum,
                context: self.context,
            });
        }
        Ok(())
    }
}

/// Share of the retrieval budget each type group may take.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Quotas {
    pub tool_output: f64,
    pub tool_call: f64,
    pub thinking: f64,
    pub other: f64,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas { tool_output: 0.6, tool_call: 0.3, thinking: 0.2, other: 1.0 }
    }
}

impl Quotas {
    /// The share of the retrieval budget group `g` may take.
    pub fn share(&self, g: QuotaGroup) -> f64 {
        match g {
            QuotaGroup::ToolOutput => self.tool_output,
            QuotaGroup::ToolCall => self.tool_call,
            QuotaGroup::Thinking => self.thinking,
            QuotaGroup::Other => self.other,
        }
    }
}

/// Tuning of selection and packing.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PackParams {
    /// MMR trade-off (A.2: 0.7).
    pub lambda: f64,
    /// K_max: most items MMR selects.
    pub max_items: usize,
    /// Most candidates (by score) that enter MMR.
    pub max_candidates: usize,
    /// One item may take at most this share of the retrieval budget (an excerpt otherwise).
    pub item_share: f64,
    pub quotas: Quotas,
    /// Recency half-life, in milliseconds of event time.
    pub half_life_ms: f64,
    pub weights: BaseWeights,
    /// Share of the retrieval budget the stable evidence (kept in place from turn to turn, before
    /// the tail) may take; the rest is this turn's evidence, after the tail. 0: all per turn.
    pub stable_share: f64,
    /// When the anchored tail outgrows its budget, the new tail holds the newest entries that fit
    /// this share of it, so the next turns append to it rather than slide it. 1: slide every turn.
    pub tail_refill: f64,
}

impl Default for PackParams {
    fn default() -> Self {
        PackParams {
            lambda: 0.7,
            max_items: 32,
            max_candidates: 200,
            item_share: 0.25,
            quotas: Quotas::default(),
            half_life_ms: 6.0 * 3600.0 * 1000.0,
            weights: BaseWeights::default(),
            stable_share: 0.6,
            tail_refill: 0.6,
        }
    }
}

/// An entry of the agent's recent window.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // a few dozen per pack, most of them events
pub enum TailEntry {
    Event {
        event: ContextEvent,
        view: Option<ViewBlock>,
    },
    /// A pointer manifest in the window, already rendered; `position` is the seq it stands
    /// before (it sorts before the event of that seq).
    Manifest {
        id: Uuid,
        position: u64,
        text: String,
    },
}

impl TailEntry {
    /// Where the entry sits in the window: (seq, whether an event); manifests sort before the
    /// event of their position.
    pub fn position(&self) -> (u64, bool) {
        match self {
            TailEntry::Event { event, .. } => (event.seq, true),
            TailEntry::Manifest { position, .. } => (*position, false),
        }
    }
}

/// An item of the stable evidence and what it was rendered from besides its event.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StableItem {
    pub event_id: Uuid,
    /// The token cap it was rendered under.
    pub cap: usize,
    /// The part of its artifact it showed (a later search may not match the same chunk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_match: Option<crate::candidate::ArtifactMatch>,
}

/// How a session's last pack was laid out: what the next pack keeps in place so that it starts
/// with the same bytes, which a provider's prompt cache then serves at a tenth of the price.
/// Recorded with each pack; the adapter hands the session's last one to the next pack (None when
/// it was built for other budgets, tokenizer or task).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    /// The tail block's oldest entry ([`TailEntry::position`]); None: the tail was empty.
    pub tail_from: Option<(u64, bool)>,
    /// The stable evidence in block order.
    pub stable: Vec<StableItem>,
    /// The query terms the stable evidence was excerpted for.
    pub terms: Vec<String>,
}

/// Everything a pack is built from. The same request gives the same pack, byte for byte.
#[derive(Debug, Clone)]
pub struct PackRequest {
    /// The requesting agent's session: `s1` in the pack.
    pub session_id: Uuid,
    /// The system block's text (policy prefix, the session's system events).
    pub system: String,
    /// The rendered task-state card, and how to fetch it whole if the block must cut it.
    pub task_state: Option<String>,
    pub task_ref: Option<String>,
    /// The memory block's text (the `<context-topics>` hint, then the working set's topics),
    /// cut to `budgets.memory` here; empty for none.
    pub memory: String,
    /// The agent's window, oldest first; the tail block takes the newest that fit.
    pub tail: Vec<TailEntry>,
    pub user_message: String,
    pub candidates: Vec<Candidate>,
    /// Query terms, for excerpts.
    pub terms: Vec<String>,
    pub task: TaskContext,
    pub budgets: Budgets,
    pub params: PackParams,
    /// Blocks that must be in the pack whole (system, task state, memory): building fails with
    /// [`PackError::Required`] rather than cut or drop one.
    pub required: Vec<BlockKind>,
    /// The session's last pack's layout, to keep in place (None: lay out afresh). Its stable
    /// evidence must be among `candidates`.
    pub layout: Option<Layout>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    System,
    TaskState,
    Memory,
    /// Stable evidence: kept in place while the tail is anchored.
    Retrieval,
    Tail,
    /// This turn's evidence, after the tail.
    TurnRetrieval,
    User,
}

impl BlockKind {
    /// The block's name on the wire and in budgets: `system`, `task_state`, …
    pub fn as_str(self) -> &'static str {
        match self {
            BlockKind::System => "system",
            BlockKind::TaskState => "task_state",
            BlockKind::Memory => "memory",
            BlockKind::Retrieval => "retrieval",
            BlockKind::Tail => "tail",
            BlockKind::TurnRetrieval => "turn_retrieval",
            BlockKind::User => "user",
        }
    }

    pub fn parse(name: &str) -> Option<BlockKind> {
        [
            BlockKind::System,
            BlockKind::TaskState,
            BlockKind::Memory,
            BlockKind::Retrieval,
            BlockKind::Tail,
            BlockKind::TurnRetrieval,
            BlockKind::User,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for BlockKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackBlock {
    pub kind: BlockKind,
    pub text: String,
    pub tokens: usize,
    pub budget: usize,
}

/// A piece of evidence in the pack, with its provenance.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PackItem {
    pub block: BlockKind,
    pub event_id: Uuid,
    pub session_id: Uuid,
    pub seq: u64,
    pub kind: String,
    pub tool_name: Option<String>,
    pub lines: Option<LineRange>,
    pub tokens: usize,
    pub excerpt: bool,
    /// The final score (retrieval items).
    pub score: Option<f64>,
    /// The lines of the event's artifact shown (1-based, inclusive) when the item is the part of a
    /// large output that matched the query rather than the event's own head…tail excerpt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_lines: Option<[u32; 2]>,
}

/// Why a candidate was left out.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Exclusion {
    /// The task-conditioned modifier is 0 (another task's item).
    ZeroScore,
    /// Already in the recent-tail block.
    InTail,
    /// Below the `max_candidates` cut by score.
    BelowCut,
    /// MMR stopped at `max_items` before reaching it.
    NotSelected,
    /// Its type group's quota of the retrieval budget was used up.
    Quota { group: QuotaGroup, quota: usize },
    /// Not even an excerpt fit what was left of the retrieval budget.
    OverBudget { remaining: usize },
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    Included { tokens: usize, excerpt: bool },
    Excluded(Exclusion),
}

/// The record of one candidate: where it came from, how it scored, what happened to it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    pub event_id: Uuid,
    pub session_id: Uuid,
    pub seq: u64,
    pub kind: String,
    pub sources: Sources,
    pub parts: ScoreParts,
    /// Position in MMR order (0 = first picked).
    pub mmr_rank: Option<usize>,
    pub outcome: Outcome,
}

/// The pack an agent sees at one turn.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RetrievalPack {
    /// The blocks joined ([`RetrievalPack::joined`]): what goes into the model's context.
    /// Stored packs may leave it out (it is a copy of the blocks) and rebuild it when read.
    #[serde(default)]
    pub text: String,
    /// Exact token count of `text`.
    pub tokens: usize,
    pub blocks: Vec<PackBlock>,
    pub items: Vec<PackItem>,
    pub decisions: Vec<Decision>,
    pub budgets: Budgets,
    /// Blocks cut to their budget or left out, and what they would take whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<Omission>,
    /// This pack's layout, for the session's next pack (recorded beside the pack, not in it).
    #[serde(skip)]
    pub layout: Option<Layout>,
}

/// What goes between two blocks of a pack's text.
const BLOCK_SEPARATOR: &str = "\n";

impl RetrievalPack {
    /// The pack's text: the non-empty blocks' texts, one newline between each.
    pub fn joined(blocks: &[PackBlock]) -> String {
        blocks.iter().filter(|b| !b.text.is_empty()).map(|b| b.text.as_str()).collect::<Vec<_>>().join(BLOCK_SEPARATOR)
    }

    /// The exact token count of [`RetrievalPack::joined`], from the blocks' own (exact) counts:
    /// only each block's last lines are counted again (`memex_tokens::count_joined`).
    pub fn joined_tokens(blocks: &[PackBlock], counter: &dyn memex_tokens::TokenCounter) -> usize {
        let parts: Vec<(&str, usize)> =
            blocks.iter().filter(|b| !b.text.is_empty()).map(|b| (b.text.as_str(), b.tokens)).collect();
        memex_tokens::count_joined(counter, &parts, BLOCK_SEPARATOR)
    }
}
