//! Versioned task state: every version kept, updates compare-and-swap on the version number.
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::standby::settled_if;
use crate::{Result, Store, StoreError};

/// One stored version of a task's state.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStateRow {
    pub task_id: String,
    pub version: u64,
    /// The `memex_task::TaskState`, as JSON.
    pub state: serde_json::Value,
    /// The rendered card and its token count under `tokenizer`.
    pub rendered: String,
    pub tokens: u32,
    pub tokenizer: String,
    pub author: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A new version to write if the task is still at `expected_version` (0: the task is new).
#[derive(Debug, Clone, PartialEq)]
pub struct NewTaskState {
    pub task_id: String,
    pub expected_version: u64,
    pub state: serde_json::Value,
    pub rendered: String,
    pub tokens: u32,
    pub tokenizer: String,
    pub author: Option<String>,
}

type Row = (String, i64, serde_json::Value, String, i32, String, Option<String>, DateTime<Utc>);

const COLUMNS: &str = "task_id, version, state, rendered, tokens, tokenizer, author, created_at";

fn from_row(r: Row) -> TaskStateRow {
    TaskStateRow {
        task_id: r.0,
        version: r.1 as u64,
        state: r.2,
        rendered: r.3,
        tokens: r.4.max(0) as u32,
        tokenizer: r.5,
        author: r.6,
        created_at: r.7,
    }
}

/// Bumps the head from `$3` (or creates it at 1 when `$3` is 0) and writes the version, in one
/// statement: either both happen or neither.
const PUT_SQL: &str = r#"
WITH h AS (
    UPDATE task_heads SET version = version + 1, updated_at = now()
    WHERE namespace_id = $1 AND task_id = $2 AND version = $3 AND $3 > 0
    RETURNING version
), c AS (
    INSERT INTO task_heads (namespace_id, task_id, version)
    SELECT $1, $2, 1 WHERE $3 = 0
    ON CONFLICT DO NOTHING
    RETURNING version
), v AS (
    SELECT version FROM h UNION ALL SELECT version FROM c
)
INSERT INTO task_states (namespace_id, task_id, version, state, rendered, tokens, tokenizer, author)
SELECT $1, $2, v.version, $4, $5, $6, $7, $8 FROM v
RETURNING task_id, version, state, rendered, tokens, tokenizer, author, created_at
"#;

impl Store {
    /// Writes a new version of a task's state if the task is still at `expected_version`;
    /// otherwise `StaleTaskState` naming the current version.
    #[tracing::instrument(name = "store.put_task_state", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "put_task_state"))]
    pub async fn put_task_state(&self, namespace_id: Uuid, new: NewTaskState) -> Result<TaskStateRow> {
        let expected = i64::try_from(new.expected_version).unwrap_or(i64::MAX);
        let row: Option<Row> = sqlx::query_as(PUT_SQL)
            .bind(namespace_id)
            .bind(&new.task_id)
            .bind(expected)
            .bind(&new.state)
            .bind(&new.rendered)
            .bind(new.tokens as i32)
            .bind(&new.tokenizer)
            .bind(&new.author)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some(r) => Ok(from_row(r)),
            None => {
                let current = self.task_version(namespace_id, &new.task_id).await?;
                Err(StoreError::StaleTaskState { task_id: new.task_id, expected: new.expected_version, current })
            }
        }
    }

    /// The current version of a task's state, if it has one.
    #[tracing::instrument(name = "store.task_version", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "task_version"))]
    pub async fn task_version(&self, namespace_id: Uuid, task_id: &str) -> Result<Option<u64>> {
        let v: Option<(i64,)> =
            sqlx::query_as("SELECT version FROM task_heads WHERE namespace_id = $1 AND task_id = $2")
                .bind(namespace_id)
                .bind(task_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(v.map(|(v,)| v as u64))
    }

    /// A version of a task's state (the current one when `version` is None).
    #[tracing::instrument(name = "store.task_state", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "task_state"))]
    pub async fn task_state(&self, namespace_id: Uuid, task_id: &str, version: Option<u64>) -> Result<TaskStateRow> {
        let row: Option<Row> = match version {
            Some(v) => {
                let sql = format!(
                    "SELECT {COLUMNS} FROM task_states WHERE namespace_id = $1 AND task_id = $2 AND version = $3"
                );
                // A numbered version never changes: the standby answers when it has it. The
                // current version is the primary's to say (below).
                let sql = &sql;
                let read = |pool: PgPool| async move {
                    let q = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql.clone()))
                        .bind(namespace_id)
                        .bind(task_id)
                        .bind(i64::try_from(v).unwrap_or(i64::MAX));
                    Ok::<_, StoreError>(q.fetch_optional(&pool).await?)
                };
                self.settled(read, |row| settled_if(row.is_some(), row)).await?
            }
            None => {
                let sql = format!(
                    "SELECT {COLUMNS} FROM task_states s WHERE namespace_id = $1 AND task_id = $2
                     AND version = (SELECT version FROM task_heads h WHERE h.namespace_id = $1 AND h.task_id = $2)"
                );
                sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(namespace_id)
                    .bind(task_id)
                    .fetch_optional(&self.pool)
                    .await?
            }
        };
        match (row, version) {
            (Some(r), _) => Ok(from_row(r)),
            (None, Some(v)) if self.task_version(namespace_id, task_id).await?.is_some() => {
                Err(StoreError::TaskVersionNotFound { task_id: task_id.to_owned(), version: v })
            }
            (None, _) => Err(StoreError::TaskNotFound(task_id.to_owned())),
        }
    }

    /// Versions of a task's state, newest first, `page_size` at a time, below `before` if given.
    #[tracing::instrument(name = "store.task_state_history", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "task_state_history"))]
    pub async fn task_state_history(
        &self,
        namespace_id: Uuid,
        task_id: &str,
        before: Option<u64>,
        page_size: u32,
    ) -> Result<Vec<TaskStateRow>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM task_states WHERE namespace_id = $1 AND task_id = $2 AND version < $3
             ORDER BY version DESC LIMIT $4"
        );
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(namespace_id)
            .bind(task_id)
            .bind(before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX)))
            .bind(i64::from(page_size))
            .fetch_all(&self.pool)
            .await?;
        if rows.is_empty() && before.is_none() {
            return Err(StoreError::TaskNotFound(task_id.to_owned()));
        }
        Ok(rows.into_iter().map(from_row).collect())
    }

    /// The states of several versions of a task (for premise checks), in version order.
    #[tracing::instrument(name = "store.task_states_at", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "task_states_at"))]
    pub async fn task_states_at(
        &self,
        namespace_id: Uuid,
        task_id: &str,
        versions: &[u64],
    ) -> Result<Vec<TaskStateRow>> {
        let versions: Vec<i64> = versions.iter().map(|v| i64::try_from(*v).unwrap_or(i64::MAX)).collect();
        let sql = format!(
            "SELECT {COLUMNS} FROM task_states WHERE namespace_id = $1 AND task_id = $2 AND version = ANY($3)
             ORDER BY version"
        );
        let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(namespace_id)
            .bind(task_id)
            .bind(&versions)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(from_row).collect())
    }
}
