//! The append path: one SQL statement per batch, so a batch is atomic without an explicit
//! transaction and costs a single round trip.
//!
//! The statement bumps the session's `next_seq` (taking its row lock until commit, which orders
//! concurrent writers and keeps seqs gapless), records the idempotency key, inserts new artifacts
//! and inserts the events, each stamped with the current version of its task's state (the event's
//! task, else its session's; TRACE §5.2 premise reference). Any failure — including a unique violation on the idempotency key from
//! a concurrent retry — aborts all of it.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use memex_event::{ArtifactId, FieldError, NewArtifact, PreparedBatch};
use uuid::Uuid;

use crate::artifacts::compress;
use crate::error::is_unique_violation;
use crate::{AppendOutcome, ArtifactRef, Result, Store, StoreError};

/// A validated batch for one session.
#[derive(Debug, Clone)]
pub struct AppendRequest {
    pub namespace_id: Uuid,
    pub session_id: Uuid,
    pub batch: PreparedBatch,
    pub idempotency_key: Option<String>,
    /// `memex_event::batch_fingerprint` of the request, stored with the key.
    pub fingerprint: [u8; 32],
}

const APPEND_SQL: &str = r#"
WITH s AS (
    UPDATE sessions SET next_seq = next_seq + $3
    WHERE id = $1 AND namespace_id = $2 AND source_artifact_id IS NULL AND erased_by IS NULL
    RETURNING next_seq - $3 AS first_seq, agent_id,
              (SELECT h.version FROM task_heads h WHERE h.namespace_id = $2 AND h.task_id = sessions.task_id) AS head
), b AS (
    INSERT INTO append_batches (namespace_id, idempotency_key, session_id, first_seq, event_count, request_hash)
    SELECT $2, $4, $1, s.first_seq, $3, $5 FROM s WHERE $4::text IS NOT NULL
), a AS (
    INSERT INTO artifacts (namespace_id, id, size, media_type, compression, data)
    SELECT $2, t.id, t.size, t.media_type, 'zstd', t.data
    FROM s, UNNEST($16::bytea[], $17::int8[], $18::text[], $19::bytea[]) AS t (id, size, media_type, data)
    ON CONFLICT (namespace_id, id) DO NOTHING
), e AS (
    INSERT INTO events (session_id, seq, id, namespace_id, kind, agent_id, task_id, tool_name,
                        tool_call_id, event_time, content, artifact_id, metadata, task_state_version)
    SELECT $1, s.first_seq + t.ord - 1, t.id, $2, t.kind, COALESCE(t.agent_id, s.agent_id), t.task_id,
           t.tool_name, t.tool_call_id, COALESCE(t.event_time, now()), t.content, t.artifact_id, t.metadata,
           CASE WHEN t.task_id IS NULL THEN s.head
                ELSE (SELECT h.version FROM task_heads h WHERE h.namespace_id = $2 AND h.task_id = t.task_id) END
    FROM s, UNNEST($6::uuid[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                   $12::timestamptz[], $13::text[], $14::bytea[], $15::jsonb[])
            WITH ORDINALITY AS t (id, kind, agent_id, task_id, tool_name, tool_call_id, event_time,
                                  content, artifact_id, metadata, ord)
    RETURNING 1
)
SELECT s.first_seq, (SELECT count(*) FROM e) FROM s
"#;

/// Above this many artifact bytes, compression moves off the async workers.
const BLOCKING_COMPRESSION_BYTES: usize = 256 * 1024;

struct Columns {
    ids: Vec<Uuid>,
    kinds: Vec<String>,
    agent_ids: Vec<Option<String>>,
    task_ids: Vec<Option<String>>,
    tool_names: Vec<Option<String>>,
    tool_call_ids: Vec<Option<String>>,
    event_times: Vec<Option<DateTime<Utc>>>,
    contents: Vec<String>,
    artifact_ids: Vec<Option<Vec<u8>>>,
    metadata: Vec<Option<serde_json::Value>>,
}

/// A batch turned into the statement's column arrays, artifacts compressed, ids assigned.
pub(crate) struct Prepared {
    pub(crate) n: usize,
    cols: Columns,
    art: ArtifactColumns,
    artifact_order: Vec<ArtifactId>,
}

impl Prepared {
    pub(crate) async fn new(batch: PreparedBatch) -> Result<Prepared> {
        let n = batch.events.len();
        let mut cols = Columns {
            ids: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            agent_ids: Vec::with_capacity(n),
            task_ids: Vec::with_capacity(n),
            tool_names: Vec::with_capacity(n),
            tool_call_ids: Vec::with_capacity(n),
            event_times: Vec::with_capacity(n),
            contents: Vec::with_capacity(n),
            artifact_ids: Vec::with_capacity(n),
            metadata: Vec::with_capacity(n),
        };
        let mut bodies: Vec<NewArtifact> = Vec::new();
        let mut artifact_order: Vec<ArtifactId> = Vec::new();
        let mut seen = HashSet::new();
        for e in batch.events {
            cols.ids.push(Uuid::now_v7());
            cols.kinds.push(e.kind.as_str().to_owned());
            cols.agent_ids.push(e.agent_id);
            cols.task_ids.push(e.task_id);
            cols.tool_names.push(e.tool_name);
            cols.tool_call_ids.push(e.tool_call_id);
            cols.event_times.push(e.event_time);
            cols.contents.push(e.content);
            cols.metadata.push(e.metadata);
            match e.artifact {
                Some(a) => {
                    cols.artifact_ids.push(Some(a.id.as_bytes().to_vec()));
                    artifact_order.push(a.id);
                    if seen.insert(a.id) {
                        bodies.push(a);
                    }
                }
                None => cols.artifact_ids.push(None),
            }
        }
        let art = compress_all(bodies).await?;
        Ok(Prepared { n, cols, art, artifact_order })
    }

    /// Runs the append statement; `None` when no appendable session matched.
    pub(crate) async fn run<'c, E: sqlx::PgExecutor<'c>>(
        &self,
        exec: E,
        session_id: Uuid,
        namespace_id: Uuid,
        idempotency_key: Option<&str>,
        fingerprint: &[u8; 32],
    ) -> std::result::Result<Option<(i64, i64)>, sqlx::Error> {
        let (cols, art) = (&self.cols, &self.art);
        sqlx::query_as(APPEND_SQL)
            .bind(session_id)
            .bind(namespace_id)
            .bind(self.n as i64)
            .bind(idempotency_key)
            .bind(&fingerprint[..])
            .bind(&cols.ids)
            .bind(&cols.kinds)
            .bind(&cols.agent_ids)
            .bind(&cols.task_ids)
            .bind(&cols.tool_names)
            .bind(&cols.tool_call_ids)
            .bind(&cols.event_times)
            .bind(&cols.contents)
            .bind(&cols.artifact_ids)
            .bind(&cols.metadata)
            .bind(&art.ids)
            .bind(&art.sizes)
            .bind(&art.media_types)
            .bind(&art.data)
            .fetch_optional(exec)
            .await
    }

    pub(crate) fn artifact_order(&self) -> &[ArtifactId] {
        &self.artifact_order
    }

    pub(crate) fn outcome(self, session_id: Uuid, first_seq: i64, artifacts: Vec<ArtifactRef>) -> AppendOutcome {
        let first_seq = first_seq as u64;
        AppendOutcome {
            session_id,
            first_seq,
            last_seq: first_seq + self.n as u64 - 1,
            event_ids: self.cols.ids,
            replayed: false,
            artifacts,
        }
    }
}

struct ArtifactColumns {
    ids: Vec<Vec<u8>>,
    sizes: Vec<i64>,
    media_types: Vec<String>,
    data: Vec<Vec<u8>>,
}

impl Store {
    /// Appends a validated batch to a session; see the module docs for the guarantees.
    ///
    /// Small unkeyed batches without artifacts go through the group committer (one statement and
    /// one WAL flush for many concurrent appends); the others are written on their own.
    #[tracing::instrument(name = "store.append", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "append"))]
    pub async fn append(&self, req: AppendRequest) -> Result<AppendOutcome> {
        if !req.batch.external_tool_calls.is_empty() {
            self.check_tool_calls(&req).await?;
        }
        let out = match &self.group {
            Some(group) if group.accepts(&req) => group.submit(req).await,
            _ => self.append_direct(req).await,
        };
        if out.is_ok() {
            self.note_appended();
        }
        out
    }

    /// Appends a batch in a statement of its own.
    pub(crate) async fn append_direct(&self, req: AppendRequest) -> Result<AppendOutcome> {
        let AppendRequest { namespace_id, session_id, batch, idempotency_key, fingerprint } = req;
        let p = Prepared::new(batch).await?;
        let result = p.run(&self.pool, session_id, namespace_id, idempotency_key.as_deref(), &fingerprint).await;
        let (first_seq, count) = match result {
            Ok(Some(row)) => row,
            Ok(None) => return Err(self.why_not_appendable(namespace_id, session_id).await),
            Err(e) if is_unique_violation(&e, "append_batches_pkey") => {
                let key = idempotency_key.unwrap_or_default();
                return self.replay(namespace_id, session_id, &key, &fingerprint).await;
            }
            Err(e) => return Err(e.into()),
        };
        debug_assert_eq!(count as usize, p.n);
        let artifacts = self.artifact_refs(namespace_id, &p.artifact_order).await?;
        Ok(p.outcome(session_id, first_seq, artifacts))
    }

    /// The error for an append whose statement found no appendable session: the session is
    /// missing (in this namespace), or it is an imported trace, which takes no appends.
    pub(crate) async fn why_not_appendable(&self, namespace_id: Uuid, session_id: Uuid) -> StoreError {
        match self.session(namespace_id, session_id).await {
            Ok(s) if s.source.is_some() => StoreError::SessionReadOnly(session_id),
            Ok(s) if s.erased_by.is_some() => StoreError::SessionErased(session_id),
            Ok(_) => StoreError::SessionNotFound(session_id), // not reachable: the statement would have matched
            Err(e) => e,
        }
    }

    /// Every tool result naming a call outside its batch must name a call already in the session.
    async fn check_tool_calls(&self, req: &AppendRequest) -> Result<()> {
        let wanted: Vec<&str> = req.batch.external_tool_calls.iter().map(|(_, id)| id.as_str()).collect();
        let (exists, found): (bool, Vec<String>) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND namespace_id = $2),
                    ARRAY(SELECT DISTINCT tool_call_id FROM events
                          WHERE session_id = $1 AND namespace_id = $2 AND kind = 'tool_call' AND tool_call_id = ANY($3))",
        )
        .bind(req.session_id)
        .bind(req.namespace_id)
        .bind(&wanted)
        .fetch_one(&self.pool)
        .await?;
        if !exists {
            return Err(StoreError::SessionNotFound(req.session_id));
        }
        let found: HashSet<String> = found.into_iter().collect();
        if let Some((i, id)) = req.batch.external_tool_calls.iter().find(|(_, id)| !found.contains(id)) {
            return Err(FieldError::new(
                format!("events[{i}].tool_call_id"),
                format!(
                    "names tool call {id:?}, which is neither earlier in this batch nor in session {}",
                    req.session_id
                ),
            )
            .into());
        }
        Ok(())
    }

    /// The answer to a retried keyed batch: the original commit, if the key was used for the same
    /// batch; `AlreadyExists` if it was used for another one.
    async fn replay(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        key: &str,
        fingerprint: &[u8; 32],
    ) -> Result<AppendOutcome> {
        let (stored_session, first_seq, count, hash): (Uuid, i64, i32, Vec<u8>) = sqlx::query_as(
            "SELECT session_id, first_seq, event_count, request_hash FROM append_batches
             WHERE namespace_id = $1 AND idempotency_key = $2",
        )
        .bind(namespace_id)
        .bind(key)
        .fetch_one(&self.pool)
        .await?;
        if stored_session != session_id || hash != fingerprint[..] {
            return Err(StoreError::AlreadyExists(format!(
                "idempotency_key {key:?} was already used for a different batch"
            )));
        }
        let last_seq = first_seq + i64::from(count) - 1;
        let rows: Vec<(Uuid, Option<Vec<u8>>)> = sqlx::query_as(
            "SELECT id, artifact_id FROM events
             WHERE session_id = $1 AND namespace_id = $4 AND seq BETWEEN $2 AND $3 ORDER BY seq",
        )
        .bind(session_id)
        .bind(first_seq)
        .bind(last_seq)
        .bind(namespace_id)
        .fetch_all(&self.pool)
        .await?;
        let order: Vec<ArtifactId> =
            rows.iter().filter_map(|(_, a)| a.as_deref().and_then(ArtifactId::from_slice)).collect();
        let artifacts = self.artifact_refs(namespace_id, &order).await?;
        Ok(AppendOutcome {
            session_id,
            first_seq: first_seq as u64,
            last_seq: last_seq as u64,
            event_ids: rows.into_iter().map(|(id, _)| id).collect(),
            replayed: true,
            artifacts,
        })
    }

    /// Stored metadata of the given artifacts, in the given order (duplicates repeated).
    pub(crate) async fn artifact_refs(&self, namespace_id: Uuid, order: &[ArtifactId]) -> Result<Vec<ArtifactRef>> {
        if order.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&[u8]> = order.iter().map(|a| &a.as_bytes()[..]).collect();
        let rows: Vec<(Vec<u8>, i64, String)> =
            sqlx::query_as("SELECT id, size, media_type FROM artifacts WHERE namespace_id = $1 AND id = ANY($2)")
                .bind(namespace_id)
                .bind(&ids)
                .fetch_all(&self.pool)
                .await?;
        let by_id: std::collections::HashMap<Vec<u8>, (i64, String)> =
            rows.into_iter().map(|(id, size, mt)| (id, (size, mt))).collect();
        order
            .iter()
            .map(|id| {
                let (size, media_type) =
                    by_id.get(&id.as_bytes()[..]).cloned().ok_or(StoreError::ArtifactNotFound(*id))?;
                Ok(ArtifactRef { id: *id, size: size as u64, media_type })
            })
            .collect()
    }
}

async fn compress_all(bodies: Vec<NewArtifact>) -> Result<ArtifactColumns> {
    let total: usize = bodies.iter().map(|a| a.body.len()).sum();
    let work = move || -> Result<ArtifactColumns> {
        let mut cols = ArtifactColumns { ids: vec![], sizes: vec![], media_types: vec![], data: vec![] };
        for a in bodies {
            cols.data.push(compress(a.body.as_bytes())?);
            cols.ids.push(a.id.as_bytes().to_vec());
            cols.sizes.push(a.body.len() as i64);
            cols.media_types.push(a.media_type);
        }
        Ok(cols)
    };
    if total > BLOCKING_COMPRESSION_BYTES {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| StoreError::Compression(std::io::Error::other(e.to_string())))?
    } else {
        work()
    }
}
