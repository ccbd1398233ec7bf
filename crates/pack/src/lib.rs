//! Retrieval packs (TRACE §4.5, A.2, A.3): what an agent sees at one turn.
//!
//! Candidates (from lexical and vector search, key pointers of the task state, pinned and standing
//! items, manifest anchors) are scored `base × task-conditioned modifier`: task binding,
//! superseded ×0.1, premise compatibility, phase and role salience, self-assessment ×2,
//! constraints floored at 3×. MMR (λ = 0.7, `memex-rank`) picks a diverse top set, and the packer fills the
//! retrieval block under its budget and per-type quotas, whole items or query-centred excerpts,
//! each in the adaptive-view form with its provenance. The pack's other blocks — system, task
//! state, recent tail, user message — each have their own budget.
//!
//! **Architecture invariant:** the pack never exceeds its budget: every block is within its
//! budget and the whole text within `context − headroom`, by exact count of the returned text
//! (property-tested over random inputs).
//! **Architecture invariant:** deterministic — the same request gives the same pack, byte for
//! byte, and every candidate has a recorded decision (score parts, outcome, reason).
//! **Architecture invariant:** pure — no I/O, no clock, no async; the adapter (`memex-context`)
//! gathers candidates and stores packs.

mod candidate;
mod evidence;
mod model;
mod pack;
mod render;
mod score;

pub use candidate::{
    AgentRole, ArtifactMatch, Candidate, ItemType, QuotaGroup, Relation, Sources, TaskContext, is_assessment_item,
};
pub use model::{
    BlockKind, Budgets, Decision, Exclusion, Layout, Omission, Outcome, PackBlock, PackError, PackItem, PackParams,
    PackRequest, Quotas, RetrievalPack, StableItem, TailEntry,
};
pub use pack::build_pack;
pub use render::render_item;
pub use score::{
    BaseWeights, CONSTRAINT_FLOOR, M_MAX, SELF_ASSESSMENT, SUPERSEDED, ScoreParts, phase_salience, score_all,
};

#[cfg(test)]
mod tests;
