//! Planner and executors on one store (TRACE §7, A.5): delegations create child tasks; reports
//! come back up with provenance pointers.
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::is_unique_violation;
use crate::task_state::TaskStateRow;
use crate::{Result, Store, StoreError};

#[derive(Debug, Clone, PartialEq)]
pub struct DelegationRow {
    pub task_id: String,
    pub parent_task_id: String,
    pub objective: String,
    pub constraints: Vec<String>,
    pub acceptance: Vec<String>,
    /// The pointers handed to the executor, as JSON.
    pub pointers: serde_json::Value,
    pub plan_node_ref: Option<String>,
    pub delegated_by: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// The child task's first state, written with the delegation.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildState {
    pub state: serde_json::Value,
    pub rendered: String,
    pub tokens: u32,
    pub tokenizer: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReportRow {
    /// Position in the namespace's report stream (WatchReports resumes after it).
    pub seq: u64,
    pub id: Uuid,
    pub task_id: String,
    pub parent_task_id: Option<String>,
    pub session_id: Uuid,
    /// The `report` event that carries the report in the session.
    pub event_id: Uuid,
    pub status: String,
    pub summary: String,
    pub pointers: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

type DelegationDbRow =
    (String, String, String, Vec<String>, Vec<String>, serde_json::Value, Option<String>, Option<Uuid>, DateTime<Utc>);

fn delegation_from_row(r: DelegationDbRow) -> DelegationRow {
    DelegationRow {
        task_id: r.0,
        parent_task_id: r.1,
        objective: r.2,
        constraints: r.3,
        acceptance: r.4,
        pointers: r.5,
        plan_node_ref: r.6,
        delegated_by: r.7,
        created_at: r.8,
    }
}

type ReportDbRow = (i64, Uuid, String, Option<String>, Uuid, Uuid, String, String, serde_json::Value, DateTime<Utc>);

const REPORT_COLUMNS: &str =
    "seq, id, task_id, parent_task_id, session_id, event_id, status, summary, pointers, created_at";

fn report_from_row(r: ReportDbRow) -> ReportRow {
    ReportRow {
        seq: r.0 as u64,
        id: r.1,
        task_id: r.2,
        parent_task_id: r.3,
        session_id: r.4,
        event_id: r.5,
        status: r.6,
        summary: r.7,
        pointers: r.8,
        created_at: r.9,
    }
}

/// A delegation row plus the child state's creation time.
type DelegatedRow = (
    String,
    String,
    String,
    Vec<String>,
    Vec<String>,
    serde_json::Value,
    Option<String>,
    Option<Uuid>,
    DateTime<Utc>,
    DateTime<Utc>,
);

const DELEGATE_SQL: &str = r#"
WITH h AS (
    INSERT INTO task_heads (namespace_id, task_id, version) VALUES ($1, $2, 1)
    RETURNING version
), d AS (
    INSERT INTO delegations (namespace_id, task_id, parent_task_id, objective, constraints, acceptance, pointers,
                             plan_node_ref, delegated_by)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM h
    RETURNING task_id, parent_task_id, objective, constraints, acceptance, pointers, plan_node_ref, delegated_by,
              created_at
), s AS (
    INSERT INTO task_states (namespace_id, task_id, version, state, rendered, tokens, tokenizer, author)
    SELECT $1, $2, 1, $10, $11, $12, $13, $14 FROM h
    RETURNING created_at
)
SELECT d.*, (SELECT created_at FROM s) FROM d
"#;

impl Store {
    /// Creates a child task with its first state and the delegation record, in one statement.
    /// A task id already in use is `AlreadyExists`.
    #[tracing::instrument(name = "store.delegate", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "delegate"))]
    pub async fn delegate(
        &self,
        namespace_id: Uuid,
        d: &DelegationRow,
        first: &ChildState,
        author: Option<&str>,
    ) -> Result<(DelegationRow, TaskStateRow)> {
        let row: std::result::Result<DelegatedRow, sqlx::Error> = sqlx::query_as(DELEGATE_SQL)
            .bind(namespace_id)
            .bind(&d.task_id)
            .bind(&d.parent_task_id)
            .bind(&d.objective)
            .bind(&d.constraints)
            .bind(&d.acceptance)
            .bind(&d.pointers)
            .bind(&d.plan_node_ref)
            .bind(d.delegated_by)
            .bind(&first.state)
            .bind(&first.rendered)
            .bind(first.tokens as i32)
            .bind(&first.tokenizer)
            .bind(author)
            .fetch_one(&self.pool)
            .await;
        match row {
            Ok(r) => {
                let state = TaskStateRow {
                    task_id: r.0.clone(),
                    version: 1,
                    state: first.state.clone(),
                    rendered: first.rendered.clone(),
                    tokens: first.tokens,
                    tokenizer: first.tokenizer.clone(),
                    author: author.map(str::to_owned),
                    created_at: r.9,
                };
                Ok((delegation_from_row((r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8)), state))
            }
            Err(e) if is_unique_violation(&e, "task_heads_pkey") => Err(StoreError::AlreadyExists(format!(
                "task_id: task {:?} already exists; a delegation creates a new task",
                d.task_id
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// The delegation that created `task_id`, if a delegation did.
    #[tracing::instrument(name = "store.delegation", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "delegation"))]
    pub async fn delegation(&self, namespace_id: Uuid, task_id: &str) -> Result<Option<DelegationRow>> {
        let row: Option<DelegationDbRow> = sqlx::query_as(
            "SELECT task_id, parent_task_id, objective, constraints, acceptance, pointers, plan_node_ref, delegated_by,
                    created_at
             FROM delegations WHERE namespace_id = $1 AND task_id = $2",
        )
        .bind(namespace_id)
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(delegation_from_row))
    }

    /// The tasks `task_id` delegated.
    #[tracing::instrument(name = "store.child_tasks", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "child_tasks"))]
    pub async fn child_tasks(&self, namespace_id: Uuid, task_id: &str) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT task_id FROM delegations WHERE namespace_id = $1 AND parent_task_id = $2 ORDER BY created_at, task_id",
        )
        .bind(namespace_id)
        .bind(task_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(t,)| t).collect())
    }

    /// Records a report (its `report` event must already be appended).
    #[tracing::instrument(name = "store.insert_report", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "insert_report"))]
    pub async fn insert_report(&self, namespace_id: Uuid, r: &ReportRow) -> Result<ReportRow> {
        let sql = format!(
            "INSERT INTO task_reports (id, namespace_id, task_id, parent_task_id, session_id, event_id, status, summary,
                                       pointers)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {REPORT_COLUMNS}"
        );
        let row: std::result::Result<ReportDbRow, sqlx::Error> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(r.id)
            .bind(namespace_id)
            .bind(&r.task_id)
            .bind(&r.parent_task_id)
            .bind(r.session_id)
            .bind(r.event_id)
            .bind(&r.status)
            .bind(&r.summary)
            .bind(&r.pointers)
            .fetch_one(&self.pool)
            .await;
        match row {
            Ok(row) => Ok(report_from_row(row)),
            Err(e) if is_unique_violation(&e, "task_reports_namespace_id_key") => self.report(namespace_id, r.id).await,
            Err(e) => Err(e.into()),
        }
    }

    #[tracing::instrument(name = "store.report", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "report"))]
    pub async fn report(&self, namespace_id: Uuid, id: Uuid) -> Result<ReportRow> {
        let sql = format!("SELECT {REPORT_COLUMNS} FROM task_reports WHERE namespace_id = $1 AND id = $2");
        let row: Option<ReportDbRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(namespace_id).bind(id).fetch_optional(&self.pool).await?;
        row.map(report_from_row).ok_or(StoreError::ReportNotFound(id))
    }

    /// Reports of the children of `parent_task_id` after stream position `after`, oldest first.
    #[tracing::instrument(name = "store.reports_after", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "reports_after"))]
    pub async fn reports_after(
        &self,
        namespace_id: Uuid,
        parent_task_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<ReportRow>> {
        let sql = format!(
            "SELECT {REPORT_COLUMNS} FROM task_reports
             WHERE namespace_id = $1 AND parent_task_id = $2 AND seq > $3 ORDER BY seq LIMIT $4"
        );
        let rows: Vec<ReportDbRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(namespace_id)
            .bind(parent_task_id)
            .bind(after as i64)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(report_from_row).collect())
    }
}
