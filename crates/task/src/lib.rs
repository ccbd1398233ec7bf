//! Task state (TRACE §4.3): a compact, structured index card of the *current* task — goals,
//! constraints, open loops, next actions, key pointers, phase, self-assessment flag, premises.
//!
//! Every update makes a new immutable version (compare-and-swap on the version number); events
//! record the version they were written under, which is how retrieval judges whether the premises
//! an item was produced under still hold ([`premise_compatibility`]). The rendered card has a hard
//! token cap, so it always fits its block of the context pack.
//!
//! **Architecture invariant:** pure — no I/O, no clock, no async. The task state is an index over
//! the lossless store, never the only copy of anything: its key pointers point back to events.

mod render;

use std::fmt;
use std::str::FromStr;

use memex_event::{ArtifactId, FieldError};
use memex_pointer::SeqRange;
use memex_tokens::TokenCounter;
use uuid::Uuid;

pub use render::render;

/// A version of a task's state. Versions start at 1 and increase by one per update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct TaskStateVersion(pub u64);

impl fmt::Display for TaskStateVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// Where the task is; retrieval favours different memories in each phase (A.3 phase salience).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    #[default]
    Planning,
    Execution,
    Evaluation,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Planning => "planning",
            Phase::Execution => "execution",
            Phase::Evaluation => "evaluation",
        }
    }
}

impl FromStr for Phase {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "planning" => Ok(Phase::Planning),
            "execution" => Ok(Phase::Execution),
            "evaluation" => Ok(Phase::Evaluation),
            other => Err(format!("unknown phase {other:?}; expected planning, execution or evaluation")),
        }
    }
}

/// A pointer from the task state into the lossless store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyPointer {
    /// One event, by id.
    Event(Uuid),
    /// An artifact, by content address; expands to the events that carry it.
    Artifact(String),
    /// A run of a session's events, by seq.
    Span { session_id: Uuid, seqs: SeqRange },
}

/// The state of a task. Lists keep the order the agent gave; entries are single lines.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TaskState {
    pub goals: Vec<String>,
    pub constraints: Vec<String>,
    pub open_loops: Vec<String>,
    pub next_actions: Vec<String>,
    pub key_pointers: Vec<KeyPointer>,
    pub phase: Phase,
    /// The task ends with a self-assessment: mistakes and successes stay salient (A.3, ×2).
    pub self_assessment: bool,
    /// The assumptions the work currently rests on; items written under other premises are
    /// demoted (premise compatibility).
    pub premises: Vec<String>,
}

/// Limits on a task state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskStateLimits {
    /// The rendered card may not exceed this many tokens (TRACE §9.1: B_task, 500–800).
    pub max_tokens: usize,
    pub max_entries: usize,
    pub max_entry_bytes: usize,
}

impl Default for TaskStateLimits {
    fn default() -> Self {
        TaskStateLimits { max_tokens: 800, max_entries: 64, max_entry_bytes: 2000 }
    }
}

/// Checks a task state and renders it; the error names the field (`state.goals[2]`).
/// Returns the rendered card and its token count, which is within `limits.max_tokens`.
pub fn validate(
    task_id: &str,
    version: TaskStateVersion,
    state: &TaskState,
    limits: &TaskStateLimits,
    counter: &dyn TokenCounter,
) -> Result<(String, usize), FieldError> {
    let lists: [(&str, &[String]); 5] = [
        ("goals", &state.goals),
        ("constraints", &state.constraints),
        ("open_loops", &state.open_loops),
        ("next_actions", &state.next_actions),
        ("premises", &state.premises),
    ];
    for (name, list) in lists {
        if list.len() > limits.max_entries {
            return Err(FieldError::new(
                format!("state.{name}"),
                format!("has {} entries, over the limit of {}", list.len(), limits.max_entries),
            ));
        }
        for (i, entry) in list.iter().enumerate() {
            let field = || format!("state.{name}[{i}]");
            if entry.trim().is_empty() {
                return Err(FieldError::new(field(), "is empty"));
            }
            if entry.len() > limits.max_entry_bytes {
                return Err(FieldError::new(
                    field(),
                    format!("is {} bytes, over the limit of {}", entry.len(), limits.max_entry_bytes),
                ));
            }
            if entry.chars().any(char::is_control) {
                return Err(FieldError::new(field(), "contains control characters (entries are single lines)"));
            }
        }
    }
    if state.key_pointers.len() > limits.max_entries {
        return Err(FieldError::new(
            "state.key_pointers",
            format!("has {} entries, over the limit of {}", state.key_pointers.len(), limits.max_entries),
        ));
    }
    for (i, p) in state.key_pointers.iter().enumerate() {
        if let KeyPointer::Artifact(a) = p
            && a.parse::<ArtifactId>().is_err()
        {
            return Err(FieldError::new(
                format!("state.key_pointers[{i}].artifact_id"),
                format!("{a:?} is not an artifact id (blake3:<64 hex>)"),
            ));
        }
    }
    let text = render(task_id, version, state);
    let tokens = counter.count(&text);
    if tokens > limits.max_tokens {
        return Err(FieldError::new(
            "state",
            format!(
                "renders to {tokens} tokens, over the task-state cap of {} (context.task_state_max_tokens); \
                 move detail into events and point at them",
                limits.max_tokens
            ),
        ));
    }
    Ok((text, tokens))
}

/// Premises below this share still held keep this much weight: demoted tenfold like a superseded
/// item, never dropped (the evidence may still matter).
pub const PREMISE_FLOOR: f64 = 0.1;

/// How compatible an item written under `then` premises is with the `now` premises, in
/// [`PREMISE_FLOOR`, 1]: the share of its premises that still hold. No recorded premises: 1.
pub fn premise_compatibility(then: &[String], now: &[String]) -> f64 {
    if then.is_empty() {
        return 1.0;
    }
    let held = then.iter().filter(|p| now.iter().any(|q| q.trim() == p.trim())).count();
    (held as f64 / then.len() as f64).max(PREMISE_FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memex_tokens::Tokenizer;

    fn state() -> TaskState {
        TaskState {
            goals: vec!["fix separability_matrix for nested CompoundModels".into()],
            constraints: vec!["do not change the public API".into()],
            open_loops: vec!["why does _cstack copy the right matrix?".into()],
            next_actions: vec!["run pytest astropy/modeling/tests/test_separable.py".into()],
            key_pointers: vec![KeyPointer::Event(Uuid::from_u128(7))],
            phase: Phase::Execution,
            self_assessment: true,
            premises: vec!["python 3.9".into()],
        }
    }

    #[test]
    fn a_valid_state_renders_within_the_cap() {
        let (text, tokens) =
            validate("t1", TaskStateVersion(3), &state(), &TaskStateLimits::default(), &Tokenizer::O200kBase)
                .expect("valid");
        assert!(tokens > 20 && tokens <= 800, "{tokens}");
        assert_eq!(tokens, Tokenizer::O200kBase.count(&text));
        assert!(text.starts_with("## task state t1 v3 · phase execution · self-assessment at the end\n"), "{text}");
    }

    #[test]
    fn bad_fields_are_named() {
        let lim = TaskStateLimits::default();
        let t = Tokenizer::O200kBase;
        let mut s = state();
        s.goals.push(" ".into());
        assert_eq!(validate("t", TaskStateVersion(1), &s, &lim, &t).map_err(|e| e.field), Err("state.goals[1]".into()));
        let mut s = state();
        s.premises[0] = "a\nb".into();
        assert_eq!(
            validate("t", TaskStateVersion(1), &s, &lim, &t).map_err(|e| e.field),
            Err("state.premises[0]".into())
        );
        let mut s = state();
        s.key_pointers.push(KeyPointer::Artifact("sha256:00".into()));
        assert_eq!(
            validate("t", TaskStateVersion(1), &s, &lim, &t).map_err(|e| e.field),
            Err("state.key_pointers[1].artifact_id".into())
        );
        let mut s = state();
        s.open_loops =
            (0..60).map(|i| format!("loop number {i} with a fairly long description of what is open")).collect();
        let err = validate("t", TaskStateVersion(1), &s, &lim, &t).expect_err("over the cap");
        assert_eq!(err.field, "state");
        assert!(err.message.contains("over the task-state cap of 800"), "{}", err.message);
    }

    #[test]
    fn premises_that_no_longer_hold_demote() {
        let then = vec!["python 3.9".to_owned(), "numpy 1.x".to_owned()];
        assert_eq!(premise_compatibility(&then, &then), 1.0);
        assert_eq!(premise_compatibility(&then, &["python 3.9".to_owned()]), 0.5);
        assert_eq!(premise_compatibility(&then, &[]), PREMISE_FLOOR);
        assert_eq!(premise_compatibility(&[], &then), 1.0);
    }

    #[test]
    fn state_round_trips_through_json() {
        let s = state();
        let json = serde_json::to_string(&s).expect("serialize");
        let back: TaskState = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, s);
        let partial: TaskState = serde_json::from_str(r#"{"goals":["g"]}"#).expect("defaults");
        assert_eq!(partial.phase, Phase::Planning);
    }
}
