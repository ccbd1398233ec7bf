//! Scoring: base relevance × the task-conditioned modifier (TRACE A.3). Every factor is kept, so
//! a pack can say why each candidate ranked where it did.
use memex_pointer::ContextEvent;
use memex_task::{Phase, premise_compatibility};

use crate::candidate::{AgentRole, Candidate, ItemType, Relation, TaskContext, is_assessment_item};

/// Upper bound of the modifier (A.3 `M_MAX`).
pub const M_MAX: f64 = 10.0;
/// Superseded items keep a tenth of their weight unless history was asked for.
pub const SUPERSEDED: f64 = 0.1;
/// Hard constraints are never crowded out: their modifier is at least this.
pub const CONSTRAINT_FLOOR: f64 = 3.0;
/// Self-assessment keeps mistakes, successes and lessons salient.
pub const SELF_ASSESSMENT: f64 = 2.0;

/// The factors of one candidate's score.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScoreParts {
    /// BM25 normalized by the best lexical score of the request, in [0, 1].
    pub lexical: f64,
    /// Cosine similarity, clamped to [0, 1].
    pub vector: f64,
    /// 0.5^(age / half-life), age relative to the newest candidate.
    pub recency: f64,
    /// Source prior: pinned 1, key pointer 0.8, manifest anchor 0.6, else 0.
    pub prior: f64,
    pub base: f64,
    pub task_binding: f64,
    pub superseded: f64,
    pub premise: f64,
    pub phase: f64,
    pub role: f64,
    pub self_assessment: f64,
    /// True when the constraint floor raised the modifier.
    pub constraint_floor: bool,
    pub modifier: f64,
    pub score: f64,
}

/// Weights of the base score's signals, renormalized over the signals the request has.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BaseWeights {
    pub lexical: f64,
    pub vector: f64,
    pub recency: f64,
    pub prior: f64,
}

impl Default for BaseWeights {
    fn default() -> Self {
        BaseWeights { lexical: 0.4, vector: 0.3, recency: 0.1, prior: 0.2 }
    }
}

/// Scores every candidate (same order as given).
pub fn score_all(cands: &[Candidate], task: &TaskContext, weights: &BaseWeights, half_life_ms: f64) -> Vec<ScoreParts> {
    let max_lex = cands.iter().filter_map(|c| c.sources.lexical).fold(0.0f64, |m, x| m.max(f64::from(x)));
    let has_vec = cands.iter().any(|c| c.sources.vector.is_some());
    let newest = cands.iter().map(|c| c.event.time_ms).max().unwrap_or(0);
    let mut w = *weights;
    if max_lex <= 0.0 {
        w.lexical = 0.0;
    }
    if !has_vec {
        w.vector = 0.0;
    }
    let total = w.lexical + w.vector + w.recency + w.prior;
    cands
        .iter()
        .map(|c| {
            let s = &c.sources;
            let lexical =
                if max_lex > 0.0 { s.lexical.map_or(0.0, |x| f64::from(x) / max_lex).clamp(0.0, 1.0) } else { 0.0 };
            let vector = s.vector.map_or(0.0, |x| f64::from(x).clamp(0.0, 1.0));
            let age = (newest - c.event.time_ms).max(0) as f64;
            let recency = if half_life_ms > 0.0 { 0.5f64.powf(age / half_life_ms) } else { 1.0 };
            let prior = if s.pinned {
                1.0
            } else if s.pointer {
                0.8
            } else if s.anchor {
                0.6
            } else {
                0.0
            };
            let base = if total > 0.0 {
                (w.lexical * lexical + w.vector * vector + w.recency * recency + w.prior * prior) / total
            } else {
                0.0
            };
            let mut parts = ScoreParts { lexical, vector, recency, prior, base, ..ScoreParts::default() };
            modifier(c, task, &mut parts);
            parts.score = parts.base * parts.modifier;
            parts
        })
        .collect()
}

/// The task-conditioned modifier (A.3), written into `p`.
fn modifier(c: &Candidate, task: &TaskContext, p: &mut ScoreParts) {
    let e = &c.event;
    let ty = ItemType::of(&e.kind);
    p.task_binding = task_binding(e, ty, task);
    p.superseded = if c.superseded && !task.historical { SUPERSEDED } else { 1.0 };
    p.premise = c.premises.as_deref().map_or(1.0, |then| premise_compatibility(then, &task.premises));
    p.phase = phase_salience(task.phase, ty);
    p.role = role_salience(task.role, ty, e.artifact.is_some(), same_task(e, task));
    p.self_assessment = if task.self_assessment && is_assessment_item(e) { SELF_ASSESSMENT } else { 1.0 };
    let mut m = p.task_binding * p.superseded * p.premise * p.phase * p.role * p.self_assessment;
    // Guardrail: a hard constraint of a task this pack may see is never crowded out.
    if ty == ItemType::Constraint && p.task_binding > 0.0 && m < CONSTRAINT_FLOOR {
        m = CONSTRAINT_FLOOR;
        p.constraint_floor = true;
    }
    p.modifier = m.clamp(0.0, M_MAX);
}

fn same_task(e: &ContextEvent, task: &TaskContext) -> bool {
    task.task_id.is_none() || e.task_id == task.task_id
}

/// 1 for the task's own items; for related tasks, full weight for what crosses levels (a child's
/// reports and decisions up, a parent's constraints and decisions down) and little for their
/// logs; untasked items half; anything else 0 (A.3 line 1).
fn task_binding(e: &ContextEvent, ty: ItemType, task: &TaskContext) -> f64 {
    if same_task(e, task) {
        return 1.0;
    }
    let Some(item_task) = &e.task_id else { return 0.5 };
    match task.related.iter().find(|(t, _)| t == item_task).map(|(_, r)| *r) {
        Some(Relation::Child) => match ty {
            ItemType::Report | ItemType::Decision | ItemType::Constraint => 1.0,
            ItemType::ToolError => 0.5,
            _ => 0.2,
        },
        Some(Relation::Parent) => match ty {
            ItemType::Constraint | ItemType::Decision => 1.0,
            ItemType::UserMessage | ItemType::Report => 0.5,
            _ => 0.2,
        },
        None => 0.0,
    }
}

/// Which memory types each phase favours (planning: decisions, constraints, summaries;
/// execution: tool evidence; evaluation: reports, decisions, mistakes).
pub fn phase_salience(phase: Phase, ty: ItemType) -> f64 {
    use ItemType::*;
    match phase {
        Phase::Planning => match ty {
            Decision | Constraint => 1.5,
            Report | UserMessage => 1.3,
            Note => 1.2,
            AssistantMessage | System | Other => 1.0,
            ToolError | Thinking => 0.8,
            ToolCall => 0.7,
            ToolResult => 0.6,
        },
        Phase::Execution => match ty {
            ToolError => 1.4,
            ToolResult | Constraint => 1.3,
            ToolCall | Decision => 1.2,
            UserMessage => 1.1,
            AssistantMessage | Note | System | Other => 1.0,
            Thinking | Report => 0.9,
        },
        Phase::Evaluation => match ty {
            Report => 1.5,
            Decision | ToolError => 1.3,
            Constraint | UserMessage => 1.2,
            AssistantMessage | Note => 1.1,
            System | Other => 1.0,
            ToolResult => 0.9,
            ToolCall | Thinking => 0.8,
        },
    }
}

/// The planner/executor tilt (TRACE §7.2).
pub fn role_salience(role: AgentRole, ty: ItemType, has_artifact: bool, own_task: bool) -> f64 {
    use ItemType::*;
    match role {
        AgentRole::Solo => 1.0,
        AgentRole::Planner => match ty {
            Decision | Report => 1.5,
            Constraint => 1.4,
            UserMessage => 1.2,
            AssistantMessage | Note | System | Other => 1.0,
            ToolError => 0.7,
            ToolCall | Thinking => 0.6,
            ToolResult => 0.5,
        },
        AgentRole::Executor => {
            let logs = matches!(ty, ToolResult | ToolError | ToolCall);
            match (logs, own_task) {
                (true, true) if has_artifact => 1.5,
                (true, true) => 1.3,
                (true, false) => 0.8,
                _ if ty == Report => 0.8,
                _ => 1.0,
            }
        }
    }
}
