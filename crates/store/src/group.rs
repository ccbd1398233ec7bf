//! Group commit: concurrent small appends share one statement and one WAL flush.
//!
//! Postgres pays a fixed cost per transaction (statement, commit record, fsync) that dwarfs the
//! cost of a one-event insert: on 2 cores it tops out near 7k commits/s, far below what 64 agents
//! appending single events need. Each shard task takes whatever appends are waiting, writes them
//! in one multi-session statement (seqs allocated per session, in arrival order) and answers each
//! caller with its own range. Every caller still gets all-or-nothing for its own batch: a session
//! that is missing drops only its own events, and if the shared statement fails, each append is
//! retried on its own so the error reaches the caller it belongs to.
//!
//! Tenancy: the shared statement holds appends of several namespaces, so the shards write as
//! `Tenant::All`; `submit` refuses an append whose namespace is not its caller's tenant, and an
//! append written on its own (a miss, a retry) is written as its caller's tenant.
//!
//! Deadlock freedom: a session always maps to the same shard, shards run one statement at a time,
//! and appends that bypass the committer lock a single session row, so no two transactions can
//! wait on each other's session locks in a cycle.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::tenant::{self, Tenant};
use crate::{AppendOutcome, AppendRequest, Result, Store, StoreError};

/// Tuning of the group committer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// Independent committer tasks; sessions are spread over them by hash.
    pub shards: usize,
    /// Most events written by one shared statement.
    pub max_group_events: usize,
    /// Appends with more events than this are written on their own.
    pub max_request_events: usize,
    /// Appends waiting per shard; past it an append is refused at once (`Overloaded`).
    pub queue: usize,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        GroupCommitOptions { shards: 4, max_group_events: 2048, max_request_events: 64, queue: 4096 }
    }
}

struct Pending {
    req: AppendRequest,
    /// The appending caller's tenant: an append written on its own is written as that.
    tenant: Tenant,
    reply: oneshot::Sender<Result<AppendOutcome>>,
}

pub(crate) struct GroupCommitter {
    shards: Vec<mpsc::Sender<Pending>>,
    /// The tenant of a caller outside any scope (`StoreOptions::unscoped`).
    unscoped: Tenant,
    max_request_events: usize,
}

impl std::fmt::Debug for GroupCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommitter").field("shards", &self.shards.len()).finish()
    }
}

impl GroupCommitter {
    pub(crate) fn start(pool: &PgPool, opts: &GroupCommitOptions, unscoped: Tenant) -> GroupCommitter {
        let shards = (0..opts.shards.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::channel(opts.queue.max(1));
                // Appends of every namespace share a statement: the shard writes as `All`, and
                // `submit` admits each append only for its caller's tenant.
                let shard = shard_loop(Store::from_pool(pool.clone()), rx, opts.max_group_events.max(1));
                tokio::spawn(tenant::scope(Tenant::All, shard));
                tx
            })
            .collect();
        GroupCommitter { shards, unscoped, max_request_events: opts.max_request_events }
    }

    /// Small, unkeyed, artifact-free batches qualify.
    pub(crate) fn accepts(&self, req: &AppendRequest) -> bool {
        req.idempotency_key.is_none()
            && req.batch.events.len() <= self.max_request_events
            && req.batch.events.iter().all(|e| e.artifact.is_none())
    }

    pub(crate) async fn submit(&self, req: AppendRequest) -> Result<AppendOutcome> {
        // The wall row-level security would put around this caller's statement, put here
        // before its events join a statement written as `All`.
        let tenant = tenant::current().unwrap_or(self.unscoped);
        if !tenant.permits(req.namespace_id) {
            return Err(StoreError::TenantMismatch(req.namespace_id));
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        req.session_id.hash(&mut h);
        let shard = &self.shards[(h.finish() % self.shards.len() as u64) as usize];
        let (reply, answer) = oneshot::channel();
        // A full queue refuses at once: waiting for room would queue callers without bound.
        match shard.try_send(Pending { req, tenant, reply }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Err(StoreError::Overloaded("the group committer's queue (ingest.group_commit_queue)"));
            }
            // The shard task is gone (runtime shutting down): nothing was written.
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(StoreError::Unavailable(sqlx::Error::PoolClosed));
            }
        }
        answer.await.map_err(|_| StoreError::Unavailable(sqlx::Error::PoolClosed))?
    }
}

async fn shard_loop(store: Store, mut rx: mpsc::Receiver<Pending>, max_events: usize) {
    while let Some(first) = rx.recv().await {
        let mut events = first.req.batch.events.len();
        let mut group = vec![first];
        while events < max_events {
            match rx.try_recv() {
                Ok(p) => {
                    events += p.req.batch.events.len();
                    group.push(p);
                }
                Err(_) => break,
            }
        }
        commit(&store, group).await;
    }
}

const GROUP_SQL: &str = r#"
WITH d AS (
    SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::int8[]) AS d (session_id, namespace_id, n)
), s AS (
    UPDATE sessions SET next_seq = sessions.next_seq + d.n
    FROM d
    WHERE sessions.id = d.session_id AND sessions.namespace_id = d.namespace_id
      AND sessions.source_artifact_id IS NULL AND sessions.erased_by IS NULL
    RETURNING sessions.id, sessions.namespace_id, sessions.next_seq - d.n AS first_seq, sessions.agent_id,
              (SELECT h.version FROM task_heads h
               WHERE h.namespace_id = sessions.namespace_id AND h.task_id = sessions.task_id) AS head
), e AS (
    INSERT INTO events (session_id, seq, id, namespace_id, kind, agent_id, task_id, tool_name,
                        tool_call_id, event_time, content, metadata, task_state_version)
    SELECT t.session_id, s.first_seq + t.off, t.id, t.namespace_id, t.kind, COALESCE(t.agent_id, s.agent_id),
           t.task_id, t.tool_name, t.tool_call_id, COALESCE(t.event_time, now()), t.content, t.metadata,
           CASE WHEN t.task_id IS NULL THEN s.head
                ELSE (SELECT h.version FROM task_heads h
                      WHERE h.namespace_id = t.namespace_id AND h.task_id = t.task_id) END
    FROM UNNEST($4::uuid[], $5::int8[], $6::uuid[], $7::uuid[], $8::text[], $9::text[], $10::text[],
                $11::text[], $12::text[], $13::timestamptz[], $14::text[], $15::jsonb[])
            AS t (session_id, off, id, namespace_id, kind, agent_id, task_id, tool_name, tool_call_id,
                  event_time, content, metadata)
    JOIN s ON s.id = t.session_id AND s.namespace_id = t.namespace_id
    RETURNING 1
)
SELECT s.id, s.namespace_id, s.first_seq, (SELECT count(*) FROM e) FROM s
"#;

/// Where one caller's events sit in the shared statement.
struct Slot {
    /// (session, namespace): session ids are unique per namespace only.
    session: (Uuid, Uuid),
    offset: i64,
    ids: Vec<Uuid>,
}

async fn commit(store: &Store, group: Vec<Pending>) {
    // Per session: total events, in arrival order of the callers.
    let mut totals: HashMap<(Uuid, Uuid), i64> = HashMap::new();
    let mut order: Vec<(Uuid, Uuid)> = Vec::new();
    let mut slots = Vec::with_capacity(group.len());
    let n: usize = group.iter().map(|p| p.req.batch.events.len()).sum();
    let mut cols = Cols::with_capacity(n);
    for p in &group {
        let key = (p.req.session_id, p.req.namespace_id);
        let entry = totals.entry(key).or_insert_with(|| {
            order.push(key);
            0
        });
        let offset = *entry;
        *entry += p.req.batch.events.len() as i64;
        let mut ids = Vec::with_capacity(p.req.batch.events.len());
        for (i, e) in p.req.batch.events.iter().enumerate() {
            let id = Uuid::now_v7();
            ids.push(id);
            cols.session_ids.push(p.req.session_id);
            cols.offsets.push(offset + i as i64);
            cols.ids.push(id);
            cols.namespace_ids.push(p.req.namespace_id);
            cols.kinds.push(e.kind.as_str().to_owned());
            cols.agent_ids.push(e.agent_id.clone());
            cols.task_ids.push(e.task_id.clone());
            cols.tool_names.push(e.tool_name.clone());
            cols.tool_call_ids.push(e.tool_call_id.clone());
            cols.event_times.push(e.event_time);
            cols.contents.push(e.content.clone());
            cols.metadata.push(e.metadata.clone());
        }
        slots.push(Slot { session: key, offset, ids });
    }
    order.sort(); // a stable lock order
    let d_sessions: Vec<Uuid> = order.iter().map(|k| k.0).collect();
    let d_namespaces: Vec<Uuid> = order.iter().map(|k| k.1).collect();
    let d_counts: Vec<i64> = order.iter().map(|k| totals[k]).collect();
    let result: std::result::Result<Vec<(Uuid, Uuid, i64, i64)>, sqlx::Error> = sqlx::query_as(GROUP_SQL)
        .bind(&d_sessions)
        .bind(&d_namespaces)
        .bind(&d_counts)
        .bind(&cols.session_ids)
        .bind(&cols.offsets)
        .bind(&cols.ids)
        .bind(&cols.namespace_ids)
        .bind(&cols.kinds)
        .bind(&cols.agent_ids)
        .bind(&cols.task_ids)
        .bind(&cols.tool_names)
        .bind(&cols.tool_call_ids)
        .bind(&cols.event_times)
        .bind(&cols.contents)
        .bind(&cols.metadata)
        .fetch_all(store.pool())
        .await;
    match result {
        Ok(rows) => {
            let firsts: HashMap<(Uuid, Uuid), i64> =
                rows.iter().map(|(id, ns, first, _)| ((*id, *ns), *first)).collect();
            for (p, slot) in group.into_iter().zip(slots) {
                let answer = match firsts.get(&slot.session) {
                    Some(first) => {
                        let first_seq = (first + slot.offset) as u64;
                        Ok(AppendOutcome {
                            session_id: slot.session.0,
                            first_seq,
                            last_seq: first_seq + slot.ids.len() as u64 - 1,
                            event_ids: slot.ids,
                            replayed: false,
                            artifacts: Vec::new(),
                        })
                    }
                    None => {
                        let why = store.why_not_appendable(p.req.namespace_id, slot.session.0);
                        Err(tenant::scope(p.tenant, why).await)
                    }
                };
                let _ = p.reply.send(answer);
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, appends = group.len(), "group commit failed; writing each append on its own");
            for p in group {
                let answer = tenant::scope(p.tenant, store.append_direct(p.req)).await;
                let _ = p.reply.send(answer);
            }
        }
    }
}

struct Cols {
    session_ids: Vec<Uuid>,
    offsets: Vec<i64>,
    ids: Vec<Uuid>,
    namespace_ids: Vec<Uuid>,
    kinds: Vec<String>,
    agent_ids: Vec<Option<String>>,
    task_ids: Vec<Option<String>>,
    tool_names: Vec<Option<String>>,
    tool_call_ids: Vec<Option<String>>,
    event_times: Vec<Option<DateTime<Utc>>>,
    contents: Vec<String>,
    metadata: Vec<Option<serde_json::Value>>,
}

impl Cols {
    fn with_capacity(n: usize) -> Cols {
        Cols {
            session_ids: Vec::with_capacity(n),
            offsets: Vec::with_capacity(n),
            ids: Vec::with_capacity(n),
            namespace_ids: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            agent_ids: Vec::with_capacity(n),
            task_ids: Vec::with_capacity(n),
            tool_names: Vec::with_capacity(n),
            tool_call_ids: Vec::with_capacity(n),
            event_times: Vec::with_capacity(n),
            contents: Vec::with_capacity(n),
            metadata: Vec::with_capacity(n),
        }
    }
}
