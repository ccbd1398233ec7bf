//! The task-state card as the agent reads it. Deterministic: the same state renders the same bytes.
use std::fmt::Write as _;

use crate::{KeyPointer, TaskState, TaskStateVersion};

/// Renders the TASK_STATE block of a context pack.
pub fn render(task_id: &str, version: TaskStateVersion, s: &TaskState) -> String {
    let mut out = format!("## task state {task_id} {version} · phase {}", s.phase.as_str());
    if s.self_assessment {
        out.push_str(" · self-assessment at the end");
    }
    out.push('\n');
    let lists: [(&str, &[String]); 5] = [
        ("goals", &s.goals),
        ("constraints", &s.constraints),
        ("premises", &s.premises),
        ("open loops", &s.open_loops),
        ("next actions", &s.next_actions),
    ];
    for (title, list) in lists {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title}:");
        for entry in list {
            let _ = writeln!(out, "- {}", entry.trim());
        }
    }
    if !s.key_pointers.is_empty() {
        out.push_str("key pointers:");
        for (i, p) in s.key_pointers.iter().enumerate() {
            out.push_str(if i == 0 { " " } else { ", " });
            match p {
                KeyPointer::Event(id) => {
                    let _ = write!(out, "event {id}");
                }
                KeyPointer::Artifact(a) => {
                    let _ = write!(out, "artifact {a}");
                }
                KeyPointer::Span { session_id, seqs } => {
                    let _ = write!(out, "({session_id}@{seqs})");
                }
            }
        }
        out.push('\n');
    }
    out
}
