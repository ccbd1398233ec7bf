//! Reads the context engine needs: a session's newest events, its standing items, events behind
//! key pointers, supersession. Every query is scoped by namespace.
use sqlx::PgPool;
use uuid::Uuid;

use crate::standby::{expected_rows, settled_if};
use crate::task_state::TaskStateRow;

use crate::read::{EVENT_SELECT, EventRow, event_from_row};
use crate::{Event, Result, SeqRange, Store, StoreError};

impl Store {
    /// A session's events with seqs in `range`, newest first, at most `limit`: the recent tail, a
    /// page before a seq, or what was appended since a reader last looked.
    #[tracing::instrument(name = "store.events_newest_first", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "events_newest_first"))]
    pub async fn events_newest_first(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        range: SeqRange,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let sql = format!(
            "{EVENT_SELECT} WHERE e.session_id = $1 AND e.namespace_id = $2 AND e.seq >= $3 AND e.seq <= $4
             ORDER BY e.seq DESC LIMIT $5"
        );
        let sql = &sql;
        let read = |pool: PgPool| async move {
            let q = sqlx::query_as::<_, EventRow>(sqlx::AssertSqlSafe(sql.clone()))
                .bind(session_id)
                .bind(namespace_id)
                .bind(i64::try_from(range.from).unwrap_or(i64::MAX))
                .bind(range.to.map_or(i64::MAX, |t| i64::try_from(t).unwrap_or(i64::MAX)))
                .bind(i64::from(limit));
            Ok::<_, StoreError>(q.fetch_all(&pool).await?)
        };
        // Settled only below a seq the caller knows exists (`to`).
        let rows = match range.to {
            Some(to) => {
                let want = expected_rows(range.from, to, u64::from(limit));
                self.settled(read, |rows| settled_if(rows.len() as u64 == want, rows)).await?
            }
            None => read(self.pool.clone()).await?,
        };
        Ok(rows.into_iter().map(event_from_row).collect())
    }

    /// A session's newest events as (id, seq, kind) only — no content — newest first, at most
    /// `limit` (what the pack's store scan needs to find the events it has not seen yet).
    #[tracing::instrument(name = "store.event_keys_newest_first", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "event_keys_newest_first"))]
    pub async fn event_keys_newest_first(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        limit: u32,
    ) -> Result<Vec<(Uuid, u64, String)>> {
        let rows: Vec<(Uuid, i64, String)> = sqlx::query_as(
            "SELECT id, seq, kind FROM events WHERE session_id = $1 AND namespace_id = $2 ORDER BY seq DESC LIMIT $3",
        )
        .bind(session_id)
        .bind(namespace_id)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id, seq, kind)| (id, seq as u64, kind)).collect())
    }

    /// Standing items of `sessions` — decisions, constraints, reports, pinned events and events
    /// that supersede another; at most `limit` — and the system events of `own` (at most
    /// `system_limit`), each newest first, in one round trip: a pack needs both.
    #[tracing::instrument(name = "store.standing_and_system_events", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "standing_and_system_events"))]
    pub async fn standing_and_system_events(
        &self,
        namespace_id: Uuid,
        sessions: &[Uuid],
        limit: u32,
        own: Uuid,
        system_limit: u32,
    ) -> Result<(Vec<Event>, Vec<Event>)> {
        // Each branch repeats the partial index's predicate verbatim, so the index is used.
        let sql = format!(
            "({EVENT_SELECT} WHERE e.session_id = ANY($1) AND e.namespace_id = $2
               AND (e.kind IN ('decision', 'constraint', 'report', 'system')
                    OR (e.metadata ->> 'pin') = 'true' OR e.metadata ? 'supersedes')
               AND e.kind <> 'system'
             ORDER BY e.session_id, e.seq DESC LIMIT $3)
             UNION ALL
             ({EVENT_SELECT} WHERE e.session_id = $4 AND e.namespace_id = $2
               AND (e.kind IN ('decision', 'constraint', 'report', 'system')
                    OR (e.metadata ->> 'pin') = 'true' OR e.metadata ? 'supersedes')
               AND e.kind = 'system'
             ORDER BY e.seq DESC LIMIT $5)
             ORDER BY session_id, seq DESC"
        );
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(sessions)
            .bind(namespace_id)
            .bind(i64::from(limit))
            .bind(own)
            .bind(i64::from(system_limit))
            .fetch_all(&self.pool)
            .await?;
        let (system, standing): (Vec<Event>, Vec<Event>) =
            rows.into_iter().map(event_from_row).partition(|e| e.kind == "system");
        Ok((standing, system))
    }

    /// Events of these sessions whose output is the artifact `artifact_id` (raw 32-byte hash),
    /// in session and seq order.
    #[tracing::instrument(name = "store.events_with_artifact", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "events_with_artifact"))]
    pub async fn events_with_artifact(
        &self,
        namespace_id: Uuid,
        sessions: &[Uuid],
        artifact_id: &[u8],
        limit: u32,
    ) -> Result<Vec<Event>> {
        let sql = format!(
            "{EVENT_SELECT} WHERE e.session_id = ANY($1) AND e.namespace_id = $2 AND e.artifact_id = $3
             ORDER BY e.session_id, e.seq LIMIT $4"
        );
        let rows: Vec<EventRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(sessions)
            .bind(namespace_id)
            .bind(artifact_id)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(event_from_row).collect())
    }

    /// The sessions of these tasks: (session id, task id).
    #[tracing::instrument(name = "store.task_sessions", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "task_sessions"))]
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
    #[tracing::instrument(name = "store.session_tasks", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "session_tasks"))]
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
    #[tracing::instrument(name = "store.existing_events", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "existing_events"))]
    pub async fn existing_events(&self, namespace_id: Uuid, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let rows: Vec<(Uuid,)> = sqlx::query_as("SELECT id FROM events WHERE id = ANY($1) AND namespace_id = $2")
            .bind(ids)
            .bind(namespace_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// True when the namespace holds the artifact (without reading its bytes).
    #[tracing::instrument(name = "store.artifact_exists", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "artifact_exists"))]
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
    #[tracing::instrument(name = "store.tool_names", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "tool_names"))]
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
             JOIN events e ON e.session_id = c.session_id AND e.namespace_id = $3 AND e.tool_call_id = c.tool_call_id
                           AND e.kind = 'tool_call'
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

    /// Everything a pack needs to know about its session and task, in one round trip: the
    /// session's task, the task's current state, the task it was delegated from, the tasks it
    /// delegated, and the sessions of all of them. `task` overrides the session's task. Those
    /// sessions are looked up per task name through `sessions_task`: as a filter `task_id =
    /// ANY(...)` the generic plan scanned every session of the namespace (0.7 ms of a pack's
    /// 1.2 ms in Postgres at 2,500 sessions, and growing with them).
    #[tracing::instrument(name = "store.pack_context", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "pack_context"))]
    pub async fn pack_context(&self, namespace_id: Uuid, session_id: Uuid, task: Option<&str>) -> Result<PackContext> {
        type Row = (
            Option<String>,
            Option<String>,
            Option<i64>,
            Option<serde_json::Value>,
            Option<String>,
            Option<i32>,
            Option<String>,
            Option<String>,
            Option<chrono::DateTime<chrono::Utc>>,
            Option<String>,
            Vec<String>,
            Vec<Uuid>,
            Vec<String>,
            i64,
            Vec<i64>,
            Option<Vec<u8>>,
        );
        let row: Option<Row> = sqlx::query_as(
            "WITH s AS (
                 SELECT task_id AS session_task, COALESCE($3, task_id) AS task, next_seq - 1 AS head FROM sessions
                 WHERE id = $1 AND namespace_id = $2
             ), st AS (
                 SELECT ts.* FROM task_states ts JOIN task_heads h USING (namespace_id, task_id, version), s
                 WHERE ts.namespace_id = $2 AND ts.task_id = s.task
             ), p AS (
                 SELECT d.parent_task_id FROM delegations d, s WHERE d.namespace_id = $2 AND d.task_id = s.task
             ), c AS (
                 SELECT COALESCE(array_agg(d.task_id ORDER BY d.created_at, d.task_id), '{}') AS children
                 FROM delegations d, s WHERE d.namespace_id = $2 AND d.parent_task_id = s.task
             ), sc AS (
                 SELECT COALESCE(array_agg(x.id ORDER BY x.created_at, x.id), '{}') AS ids,
                        COALESCE(array_agg(x.task_id ORDER BY x.created_at, x.id), '{}') AS tasks,
                        COALESCE(array_agg(x.next_seq - 1 ORDER BY x.created_at, x.id), '{}') AS heads
                 FROM (SELECT DISTINCT t.task FROM s, unnest(ARRAY[s.task] || (SELECT children FROM c)
                                                          || ARRAY(SELECT parent_task_id FROM p)) AS t (task)) tt
                 JOIN sessions x ON x.namespace_id = $2 AND x.task_id = tt.task
             )
             SELECT s.session_task, s.task, st.version, st.state, st.rendered, st.tokens, st.tokenizer, st.author,
                    st.created_at, (SELECT parent_task_id FROM p), (SELECT children FROM c), sc.ids, sc.tasks,
                    s.head, sc.heads,
                    (SELECT layout FROM context_packs
                     WHERE namespace_id = $2 AND session_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1)
             FROM s LEFT JOIN st ON true, sc",
        )
        .bind(session_id)
        .bind(namespace_id)
        .bind(task)
        .fetch_optional(&self.pool)
        .await?;
        let r = row.ok_or(StoreError::SessionNotFound(session_id))?;
        let state = match (r.1.clone(), r.2, r.3, r.4, r.5, r.6, r.8) {
            (
                Some(task_id),
                Some(version),
                Some(state),
                Some(rendered),
                Some(tokens),
                Some(tokenizer),
                Some(created_at),
            ) => Some(TaskStateRow {
                task_id,
                version: version as u64,
                state,
                rendered,
                tokens: tokens.max(0) as u32,
                tokenizer,
                author: r.7,
                created_at,
            }),
            _ => None,
        };
        Ok(PackContext {
            session_task: r.0,
            task_id: r.1,
            state,
            parent: r.9,
            children: r.10,
            head: r.13.max(0) as u64,
            heads: r.11.iter().copied().zip(r.14.iter().map(|h| (*h).max(0) as u64)).collect(),
            sessions: r.11.into_iter().zip(r.12).collect(),
            last_layout: r.15,
        })
    }
}

/// See [`Store::pack_context`].
#[derive(Debug, Clone, PartialEq)]
pub struct PackContext {
    pub session_task: Option<String>,
    /// The task the pack is for (the requested one, else the session's).
    pub task_id: Option<String>,
    pub state: Option<TaskStateRow>,
    pub parent: Option<String>,
    pub children: Vec<String>,
    /// Sessions of the task, its parent and its children: (session, task).
    pub sessions: Vec<(Uuid, String)>,
    /// The session's last seq (0 when it has no events), read with the rest.
    pub head: u64,
    /// The last seq of each of `sessions`, in the same order.
    pub heads: Vec<(Uuid, u64)>,
    /// The layout recorded with the session's newest pack (JSON), if any.
    pub last_layout: Option<Vec<u8>>,
}
