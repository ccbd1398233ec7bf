//! Reads the context engine needs: a session's newest events, its standing items, events behind
//! key pointers, supersession. Every query is scoped by namespace.
use sqlx::PgPool;
use uuid::Uuid;

use crate::standby::{expected_rows, settled_if};
use crate::task_state::TaskStateRow;

use crate::read::{EVENT_SELECT, EventRow, event_from_row};
use crate::{Event, Eviction, Result, SeqRange, Store, StoreError, WindowRow};

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
    /// delegated, the sessions of all of them, and the session's window (its version, manifests
    /// and evicted runs; a second round trip reads the manifests, when there are any: see
    /// [`Store::manifests`]). `task` overrides the session's task. Those sessions are looked up
    /// per task name through `sessions_task`: as a filter `task_id = ANY(...)` the generic plan
    /// scanned every session of the namespace (0.7 ms of a pack's 1.2 ms in Postgres at 2,500
    /// sessions, and growing with them).
    #[tracing::instrument(name = "store.pack_context", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "pack_context"))]
    pub async fn pack_context(&self, namespace_id: Uuid, session_id: Uuid, task: Option<&str>) -> Result<PackContext> {
        let row: Option<PackContextRow> = sqlx::query_as(
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
             ), w AS (
                 SELECT version, manifests FROM context_windows WHERE session_id = $1 AND namespace_id = $2
             ), ev AS (
                 SELECT COALESCE(array_agg(first_seq ORDER BY first_seq), '{}') AS firsts,
                        COALESCE(array_agg(last_seq ORDER BY first_seq), '{}') AS lasts,
                        COALESCE(array_agg(manifest_id ORDER BY first_seq), '{}') AS owners
                 FROM window_evictions WHERE session_id = $1 AND namespace_id = $2
             )
             SELECT s.session_task, s.task, st.version AS state_version, st.state, st.rendered, st.tokens,
                    st.tokenizer, st.author, st.created_at AS state_created_at,
                    (SELECT parent_task_id FROM p) AS parent, (SELECT children FROM c) AS children,
                    sc.ids AS session_ids, sc.tasks AS session_tasks, s.head, sc.heads,
                    (SELECT layout FROM context_packs
                     WHERE namespace_id = $2 AND session_id = $1 ORDER BY created_at DESC, id DESC LIMIT 1) AS last_layout,
                    (SELECT version FROM w) AS window_version, (SELECT manifests FROM w) AS window_manifests,
                    ev.firsts AS evicted_firsts, ev.lasts AS evicted_lasts, ev.owners AS evicted_by
             FROM s LEFT JOIN st ON true, sc, ev",
        )
        .bind(session_id)
        .bind(namespace_id)
        .bind(task)
        .fetch_optional(&self.pool)
        .await?;
        let r = row.ok_or(StoreError::SessionNotFound(session_id))?;
        let state =
            match (r.task.clone(), r.state_version, r.state, r.rendered, r.tokens, r.tokenizer, r.state_created_at) {
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
                    author: r.author,
                    created_at,
                }),
                _ => None,
            };
        // A session never compacted has no window row: version 0, no evictions.
        let (window, evictions) = match r.window_version {
            Some(version) => (
                WindowRow { version: version as u64, manifests: r.window_manifests.unwrap_or_default() },
                r.evicted_firsts
                    .into_iter()
                    .zip(r.evicted_lasts)
                    .zip(r.evicted_by)
                    .map(|((f, l), m)| Eviction { first_seq: f as u64, last_seq: l as u64, manifest_id: m })
                    .collect(),
            ),
            None => (WindowRow::default(), Vec::new()),
        };
        Ok(PackContext {
            session_task: r.session_task,
            task_id: r.task,
            state,
            parent: r.parent,
            children: r.children,
            head: r.head.max(0) as u64,
            heads: r.session_ids.iter().copied().zip(r.heads.iter().map(|h| (*h).max(0) as u64)).collect(),
            sessions: r.session_ids.into_iter().zip(r.session_tasks).collect(),
            last_layout: r.last_layout,
            window,
            evictions,
        })
    }
}

#[derive(sqlx::FromRow)]
struct PackContextRow {
    session_task: Option<String>,
    task: Option<String>,
    state_version: Option<i64>,
    state: Option<serde_json::Value>,
    rendered: Option<String>,
    tokens: Option<i32>,
    tokenizer: Option<String>,
    author: Option<String>,
    state_created_at: Option<chrono::DateTime<chrono::Utc>>,
    parent: Option<String>,
    children: Vec<String>,
    session_ids: Vec<Uuid>,
    session_tasks: Vec<String>,
    head: i64,
    heads: Vec<i64>,
    last_layout: Option<Vec<u8>>,
    window_version: Option<i64>,
    window_manifests: Option<Vec<Uuid>>,
    evicted_firsts: Vec<i64>,
    evicted_lasts: Vec<i64>,
    evicted_by: Vec<Uuid>,
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
    /// The session's window (version 0, no manifests, when it was never compacted).
    pub window: WindowRow,
    /// Its evicted runs, by first seq.
    pub evictions: Vec<Eviction>,
}
