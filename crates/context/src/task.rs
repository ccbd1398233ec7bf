//! Task state: validate and render with `memex-task`, compare-and-swap in the store.
use std::sync::Arc;

use memex_store::{NewTaskState, TaskStateRow};
use memex_task::{TaskState, TaskStateVersion, validate};
use memex_tokens::Tokenizer;
use uuid::Uuid;

use crate::{ContextEngine, ContextError, Result};

/// An update of a task's state.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStateUpdate {
    pub task_id: String,
    /// The version the caller read (0: the task is new). A stale version is refused.
    pub expected_version: u64,
    pub state: TaskState,
    pub author: Option<String>,
    pub tokenizer: Option<Tokenizer>,
}

pub(crate) fn parse_state(row: &TaskStateRow) -> Result<TaskState> {
    serde_json::from_value(row.state.clone())
        .map_err(|e| ContextError::Corrupt { what: "task state", message: e.to_string() })
}

impl ContextEngine {
    /// Writes the next version of a task's state if the task is still at `expected_version`.
    pub async fn update_task_state(&self, namespace_id: Uuid, u: TaskStateUpdate) -> Result<TaskStateRow> {
        let tokenizer = u.tokenizer.unwrap_or(self.cfg.tokenizer);
        let version = TaskStateVersion(u.expected_version + 1);
        let (rendered, tokens) =
            validate(&u.task_id, version, &u.state, &self.cfg.task_state(), &self.counter(tokenizer))?;
        self.resolve_pointers(namespace_id, "state.key_pointers", &u.state.key_pointers).await?;
        let state = serde_json::to_value(&u.state)
            .map_err(|e| ContextError::Corrupt { what: "task state", message: e.to_string() })?;
        let row = self
            .store
            .put_task_state(
                namespace_id,
                NewTaskState {
                    task_id: u.task_id,
                    expected_version: u.expected_version,
                    state,
                    rendered,
                    tokens: tokens as u32,
                    tokenizer: tokenizer.name().to_owned(),
                    author: u.author,
                },
            )
            .await?;
        Ok(row)
    }

    pub async fn task_state(
        &self,
        namespace_id: Uuid,
        task_id: &str,
        version: Option<u64>,
    ) -> Result<(TaskStateRow, TaskState)> {
        let row = self.store.task_state(namespace_id, task_id, version).await?;
        let state = parse_state(&row)?;
        Ok((row, state))
    }

    pub async fn task_state_history(
        &self,
        namespace_id: Uuid,
        task_id: &str,
        before: Option<u64>,
        page_size: u32,
    ) -> Result<Vec<TaskStateRow>> {
        Ok(self.store.task_state_history(namespace_id, task_id, before, page_size).await?)
    }

    /// The premises of these versions of a task (cached: versions never change).
    pub(crate) async fn premises_of(
        &self,
        namespace_id: Uuid,
        task_id: &str,
        versions: &[u64],
    ) -> Result<Vec<(u64, Arc<Vec<String>>)>> {
        let mut out = Vec::new();
        let mut missing = Vec::new();
        for v in versions {
            match self.premises.get(&(namespace_id, task_id.to_owned(), *v)) {
                Some(p) => out.push((*v, p)),
                None => missing.push(*v),
            }
        }
        if !missing.is_empty() {
            for row in self.store.task_states_at(namespace_id, task_id, &missing).await? {
                let p = Arc::new(parse_state(&row)?.premises);
                self.premises.insert((namespace_id, task_id.to_owned(), row.version), p.clone());
                out.push((row.version, p));
            }
        }
        Ok(out)
    }
}
