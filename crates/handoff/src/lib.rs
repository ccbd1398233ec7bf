//! The handoff snapshot: what an agent needs after its window was compacted, built without a
//! model from what memex holds, every line cited by pointer into the full view.
//!
//! Sections (Gemini CLI's `<state_snapshot>` elements, plus errors and the raw tail): the
//! overall goal (the task's goals, else the user's requests verbatim, the latest last), active
//! constraints (constraints, preferences, corrections: memory's dialogue facts, verbatim), key
//! knowledge (decisions, packages, told facts), file-system state (each file's latest state and
//! its last change), errors (unresolved ones verbatim, resolved ones a line each), recent actions
//! (tool rounds and their outcome), the task state (the task's open loops and next actions;
//! each command's and test's latest outcome: `failed attempt` or `done`; the agent's last stated
//! step) and the recent rounds raw.
//!
//! Two steps, so the shell can look the pointers up in between: [`entries`] reads the input,
//! [`render`] lays the entries out under the budget, dropping the least important first (the
//! order is [`Priority`]'s: the raw tail first, user corrections and unresolved errors last).
//!
//! **Architecture invariant:** pure: no I/O, no clock; the same input gives the same bytes.
//! **Architecture invariant:** the returned text never counts more than the budget (exactly, by
//! the caller's tokenizer; property-tested), and every entry left out is listed in `omitted`.
//! **Architecture invariant:** built on memory's facts (`memex_memory::facts`), not a second
//! extractor: the facts come in, this crate only chooses, orders and cites.
mod model;
mod plan;
mod render;

pub use model::{Cite, Entry, Format, Input, Options, Priority, Section, Shown, Snapshot, Source, TaskCard};
pub use plan::{cut_middle, entries, one_line};
pub use render::{MIN_BUDGET, render};

/// The spans the entries cite, each once, in order: what the shell looks up in the full view.
pub fn spans(entries: &[Entry]) -> Vec<memex_memory::SeqSpan> {
    let mut v: Vec<_> = entries
        .iter()
        .filter_map(|e| match e.source {
            Source::Events(s) => Some(s),
            Source::Task => None,
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests;
