//! Reads the context engine needs: a session's newest events, its standing items, events behind
//! key pointers, supersession. Every query is scoped by namespace.
use uuid::Uuid;

use crate::read::{EVENT_SELECT, EventRow, event_from_row};
use crate::{Event, Result, Store};

impl Store {
    /// A session's events with seq < `before` (all when None), newest first, at most `limit`.
    pub async fn events_newest_first(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let sql = format!(
            "{EVENT_SELECT} WHERE e.session_id = $1 AND e.namespace_id = $2 AND e.seq < $3 ORDER BY e.seq DESC LIMIT $4"
        );
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(session_id)
            .bind(namespace_id)
            .bind(before.map_or(i64::MAX, |b| b as i64))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(event_from_row).collect())
    }

    /// Standing items of these sessions — decisions, constraints, reports, pinned events; with
    /// `system`, also system events — newest first, at most `limit`.
    pub async fn standing_events(
        &self,
        namespace_id: Uuid,
        sessions: &[Uuid],
        system: bool,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let kinds: &[&str] = if system { &["system"] } else { &["decision", "constraint", "report"] };
        let pinned = !system;
        let sql = format!(
            "{EVENT_SELECT} WHERE e.session_id = ANY($1) AND e.namespace_id = $2
               AND (e.kind IN ('decision', 'constraint', 'report', 'system') OR (e.metadata ->> 'pin') = 'true')
               AND (e.kind = ANY($3) OR ($4 AND (e.metadata ->> 'pin') = 'true'))
             ORDER BY e.session_id, e.seq DESC LIMIT $5"
        );
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(sessions)
            .bind(namespace_id)
            .bind(kinds)
            .bind(pinned)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(event_from_row).collect())
    }

    /// Events whose output is the artifact `artifact_id` (raw 32-byte hash), oldest first.
    pub async fn events_with_artifact(&self, namespace_id: Uuid, artifact_id: &[u8], limit: u32) -> Result<Vec<Event>> {
        let sql = format!("{EVENT_SELECT} WHERE e.namespace_id = $1 AND e.artifact_id = $2 ORDER BY e.id LIMIT $3");
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(namespace_id)
            .bind(artifact_id)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(event_from_row).collect())
    }

    /// Which of `ids` a later event of the namespace supersedes (`metadata.supersedes`).
    pub async fn superseded(&self, namespace_id: Uuid, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT DISTINCT metadata ->> 'supersedes' FROM events
             WHERE metadata ? 'supersedes' AND (metadata ->> 'supersedes') = ANY($1) AND namespace_id = $2",
        )
        .bind(&texts)
        .bind(namespace_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().filter_map(|(s,)| Uuid::try_parse(&s).ok()).collect())
    }

    /// The sessions of these tasks: (session id, task id).
    pub async fn task_sessions(&self, namespace_id: Uuid, tasks: &[String]) -> Result<Vec<(Uuid, String)>> {
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT id, task_id FROM sessions WHERE namespace_id = $1 AND task_id = ANY($2) ORDER BY created_at, id",
        )
        .bind(namespace_id)
        .bind(tasks)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// The task of each of these sessions (sessions without one are left out).
    pub async fn session_tasks(&self, namespace_id: Uuid, sessions: &[Uuid]) -> Result<Vec<(Uuid, String)>> {
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT id, task_id FROM sessions WHERE namespace_id = $1 AND id = ANY($2) AND task_id IS NOT NULL",
        )
        .bind(namespace_id)
        .bind(sessions)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Which of `ids` are events of the namespace.
    pub async fn existing_events(&self, namespace_id: Uuid, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let rows: Vec<(Uuid,)> = sqlx::query_as("SELECT id FROM events WHERE id = ANY($1) AND namespace_id = $2")
            .bind(ids)
            .bind(namespace_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// True when the namespace holds the artifact (without reading its bytes).
    pub async fn artifact_exists(&self, namespace_id: Uuid, id: &memex_event::ArtifactId) -> Result<bool> {
        let (exists,): (bool,) =
            sqlx::query_as("SELECT EXISTS (SELECT 1 FROM artifacts WHERE namespace_id = $1 AND id = $2)")
                .bind(namespace_id)
                .bind(&id.as_bytes()[..])
                .fetch_one(&self.pool)
                .await?;
        Ok(exists)
    }

    /// The tool names of these calls, by (session, tool-call id): a tool result names only its
    /// call, and is shown with the call's tool.
    pub async fn tool_names(
        &self,
        namespace_id: Uuid,
        calls: &[(Uuid, String)],
    ) -> Result<Vec<(Uuid, String, String)>> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let sessions: Vec<Uuid> = calls.iter().map(|(s, _)| *s).collect();
        let ids: Vec<&str> = calls.iter().map(|(_, c)| c.as_str()).collect();
        let rows: Vec<(Uuid, String, String)> = sqlx::query_as(
            "SELECT DISTINCT ON (e.session_id, e.tool_call_id) e.session_id, e.tool_call_id, e.tool_name
             FROM UNNEST($1::uuid[], $2::text[]) AS c (session_id, tool_call_id)
             JOIN events e ON e.session_id = c.session_id AND e.tool_call_id = c.tool_call_id AND e.kind = 'tool_call'
             WHERE e.namespace_id = $3 AND e.tool_name IS NOT NULL
             ORDER BY e.session_id, e.tool_call_id, e.seq",
        )
        .bind(&sessions)
        .bind(&ids)
        .bind(namespace_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }
}
