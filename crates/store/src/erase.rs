//! Erasure: the one privileged path through the append-only tables (a data subject's request,
//! GDPR art. 17). Erased events keep their place — session, seq, id, kind, tool, times — so every
//! pointer anyone holds still resolves, to a tombstone; their text, artifacts and metadata go,
//! with everything derived from them in Postgres, in one transaction that also writes the audit
//! record. Replicas learn of it by the `memex_erasure` notification (and the `erasures` table, if
//! they missed it) and drop their own derived state: index documents, caches. Retention's
//! dropping of expired packs writes to the same log (with no sessions), so that replicas forget
//! the pack chunks they knew to be stored.
use uuid::Uuid;

use crate::{Result, Store};

/// What an erasure removes besides the sessions' events.
#[derive(Debug, Clone, Default)]
pub struct ErasurePlan {
    pub id: Uuid,
    pub sessions: Vec<Uuid>,
    /// Who asked (an API key, or the operator's CLI), for the audit.
    pub requested_by: String,
    pub reason: String,
    /// Count what would go, change nothing.
    pub dry_run: bool,
}

/// Decides which stored packs and chunks an erasure takes, reading them as the store streams
/// them inside the erasure's transaction (pack writes wait meanwhile, so no new pack can come to
/// name a chunk that goes). memex-context implements it: it knows the stored pack format.
pub trait PackScan: Send {
    /// Each of the namespace's pack chunks (id, zstd body), first.
    fn chunk(&mut self, id: &[u8], body: &[u8]) -> std::result::Result<(), String>;
    /// Then each of its packs (id, session, stored form).
    fn pack(&mut self, id: Uuid, session: Uuid, stored: &[u8]) -> std::result::Result<(), String>;
    /// The packs to delete (besides the erased sessions' own) and the chunks to delete.
    fn finish(self: Box<Self>) -> (Vec<Uuid>, Vec<[u8; 16]>);
}

/// Rows per page of the pack scan.
const SCAN_PAGE: i64 = 500;

/// What went (or, in a dry run, would go).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErasureCounts {
    pub sessions: u64,
    pub events: u64,
    pub artifacts: u64,
    pub embeddings: u64,
    pub packs: u64,
    pub pack_chunks: u64,
    pub manifests: u64,
    pub reports: u64,
    pub memory_facts: u64,
    pub memory_segments: u64,
    pub memory_turns: u64,
    pub memory_topics: u64,
}

impl ErasureCounts {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "sessions": self.sessions, "events": self.events, "artifacts": self.artifacts,
            "embeddings": self.embeddings, "packs": self.packs, "pack_chunks": self.pack_chunks,
            "manifests": self.manifests, "reports": self.reports, "memory_facts": self.memory_facts,
            "memory_segments": self.memory_segments, "memory_turns": self.memory_turns,
            "memory_topics": self.memory_topics,
        })
    }
}

/// A committed (or dry-run) erasure.
#[derive(Debug, Clone)]
pub struct Erasure {
    pub id: Uuid,
    /// Position in the erasure log (0 in a dry run).
    pub seq: u64,
    pub sessions: Vec<Uuid>,
    pub counts: ErasureCounts,
    pub dry_run: bool,
}

/// One entry of the erasure log, as a replica applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErasureEntry {
    pub seq: u64,
    pub namespace_id: Uuid,
    pub sessions: Vec<Uuid>,
}

/// What an erased event's content becomes.
pub fn tombstone(erasure: Uuid) -> String {
    format!("[erased: erasure {erasure}]")
}

impl Store {
    /// The sessions of a subject in a namespace: those named, plus every session of `agent_id`
    /// and of `task_id` when given. Named sessions must exist here.
    #[tracing::instrument(name = "store.subject_sessions", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "subject_sessions"))]
    pub async fn subject_sessions(
        &self,
        namespace_id: Uuid,
        named: &[Uuid],
        agent_id: Option<&str>,
        task_id: Option<&str>,
    ) -> Result<Vec<Uuid>> {
        for id in named {
            self.session(namespace_id, *id).await?;
        }
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM sessions WHERE namespace_id = $1
               AND (id = ANY($2) OR agent_id = $3 OR task_id = $4)
             ORDER BY id",
        )
        .bind(namespace_id)
        .bind(named)
        .bind(agent_id)
        .bind(task_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(ids)
    }

    /// Erases `plan.sessions` of `namespace_id` (see the module docs), all or nothing.
    #[tracing::instrument(name = "store.erase_sessions", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "erase_sessions"))]
    pub async fn erase_sessions(
        &self,
        namespace_id: Uuid,
        plan: &ErasurePlan,
        scan: Option<Box<dyn PackScan>>,
    ) -> Result<Erasure> {
        let s = &plan.sessions;
        let id = plan.id;
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('memex.erasure', $1, true)").bind(id.to_string()).execute(&mut *tx).await?;
        // Appends to these sessions wait for us, and then find them erased.
        let locked: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT id, next_seq - 1 FROM sessions WHERE namespace_id = $1 AND id = ANY($2) ORDER BY id FOR UPDATE",
        )
        .bind(namespace_id)
        .bind(s)
        .fetch_all(&mut *tx)
        .await?;
        let mut c = ErasureCounts { sessions: locked.len() as u64, ..Default::default() };
        let artifacts: Vec<Vec<u8>> = sqlx::query_scalar(
            "SELECT artifact_id FROM events WHERE namespace_id = $2 AND session_id = ANY($1) AND artifact_id IS NOT NULL
             UNION SELECT source_artifact_id FROM sessions
             WHERE namespace_id = $2 AND id = ANY($1) AND source_artifact_id IS NOT NULL",
        )
        .bind(s)
        .bind(namespace_id)
        .fetch_all(&mut *tx)
        .await?;
        let run = |sql: &'static str| sqlx::query(sql).bind(namespace_id).bind(s);
        c.events = sqlx::query(
            "UPDATE events SET content = $3, artifact_id = NULL, metadata = jsonb_build_object('erased', $4::text)
             WHERE session_id = ANY($2) AND namespace_id = $1",
        )
        .bind(namespace_id)
        .bind(s)
        .bind(tombstone(id))
        .bind(id.to_string())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "UPDATE sessions SET source_artifact_id = NULL, source_file_name = NULL, metadata = NULL, erased_by = $3
             WHERE namespace_id = $1 AND id = ANY($2)",
        )
        .bind(namespace_id)
        .bind(s)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        // An artifact goes when no event or session of the namespace names it any more.
        c.artifacts = sqlx::query(
            "DELETE FROM artifacts a WHERE a.namespace_id = $1 AND a.id = ANY($2)
               AND a.id NOT IN (SELECT artifact_id FROM events
                                 WHERE namespace_id = $1 AND artifact_id = ANY($2))
               AND a.id NOT IN (SELECT source_artifact_id FROM sessions
                                 WHERE namespace_id = $1 AND source_artifact_id = ANY($2))",
        )
        .bind(namespace_id)
        .bind(&artifacts)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        c.embeddings = run("DELETE FROM embeddings WHERE namespace_id = $1 AND session_id = ANY($2)")
            .execute(&mut *tx)
            .await?
            .rows_affected();
        run("DELETE FROM append_batches WHERE namespace_id = $1 AND session_id = ANY($2)").execute(&mut *tx).await?;
        // The sessions' line maps were made from the events before the tombstones.
        run("DELETE FROM view_line_maps WHERE namespace_id = $1 AND session_id = ANY($2)").execute(&mut *tx).await?;
        let (packs, chunks) = match scan {
            Some(scan) => scan_packs(&mut tx, namespace_id, scan).await?,
            None => (Vec::new(), Vec::new()),
        };
        (c.packs, c.pack_chunks) = delete_packs(&mut tx, namespace_id, s, &packs, &chunks).await?;
        run("DELETE FROM window_evictions WHERE namespace_id = $1 AND session_id = ANY($2)").execute(&mut *tx).await?;
        c.manifests = run("DELETE FROM pointer_manifests WHERE namespace_id = $1 AND session_id = ANY($2)")
            .execute(&mut *tx)
            .await?
            .rows_affected();
        run("DELETE FROM context_windows WHERE namespace_id = $1 AND session_id = ANY($2)").execute(&mut *tx).await?;
        c.reports =
            sqlx::query("UPDATE task_reports SET summary = $3 WHERE namespace_id = $1 AND session_id = ANY($2)")
                .bind(namespace_id)
                .bind(s)
                .bind(tombstone(id))
                .execute(&mut *tx)
                .await?
                .rows_affected();
        // Memory: what was read from these sessions goes; the worker will find them fully read.
        let facts: Vec<Uuid> =
            run("DELETE FROM memory_facts WHERE namespace_id = $1 AND session_id = ANY($2) RETURNING id")
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| sqlx::Row::get(r, 0))
                .collect();
        c.memory_facts = facts.len() as u64;
        // An older fact an erased one superseded is current again: what replaced it is gone.
        sqlx::query(
            "UPDATE memory_facts SET superseded_by = NULL, superseded_at = NULL
             WHERE namespace_id = $1 AND superseded_by = ANY($2)",
        )
        .bind(namespace_id)
        .bind(&facts)
        .execute(&mut *tx)
        .await?;
        c.memory_segments = run("DELETE FROM memory_segments WHERE namespace_id = $1 AND session_id = ANY($2)")
            .execute(&mut *tx)
            .await?
            .rows_affected();
        c.memory_turns = run("DELETE FROM memory_turns WHERE namespace_id = $1 AND session_id = ANY($2)")
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let heads: Vec<i64> = locked.iter().map(|(_, h)| *h).collect();
        let ids: Vec<Uuid> = locked.iter().map(|(id, _)| *id).collect();
        sqlx::query(
            "INSERT INTO memory_progress (namespace_id, session_id, fact_seq, turn_seq, open_seq, state)
             SELECT $1, u.id, u.head, u.head, 0, NULL FROM unnest($2::uuid[], $3::bigint[]) AS u(id, head)
             ON CONFLICT (namespace_id, session_id) DO UPDATE
               SET fact_seq = EXCLUDED.fact_seq, turn_seq = EXCLUDED.turn_seq, open_seq = 0, state = NULL,
                   leased_until = NULL, leased_by = NULL, updated_at = now()",
        )
        .bind(namespace_id)
        .bind(&ids)
        .bind(&heads)
        .execute(&mut *tx)
        .await?;
        // Topic summaries and readers' working sets quote and name segments: rebuilt from what is
        // left (a bumped version makes the rebuild due). The version first: its row lock makes a
        // topic rebuild that read the segments before this either commit before the delete below
        // or find the version moved on and write nothing (`memex_recall::topics`).
        sqlx::query("UPDATE memory_namespaces SET version = version + 1 WHERE namespace_id = $1")
            .bind(namespace_id)
            .execute(&mut *tx)
            .await?;
        c.memory_topics = sqlx::query("DELETE FROM memory_topics WHERE namespace_id = $1")
            .bind(namespace_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM memory_readers WHERE namespace_id = $1").bind(namespace_id).execute(&mut *tx).await?;
        if plan.dry_run {
            tx.rollback().await?;
            return Ok(Erasure { id, seq: 0, sessions: ids, counts: c, dry_run: true });
        }
        let entry = LogEntry { id, requested_by: &plan.requested_by, reason: &plan.reason, sessions: &ids };
        let seq = log_erasure(&mut tx, namespace_id, entry, c.to_json()).await?;
        tx.commit().await?;
        Ok(Erasure { id, seq, sessions: ids, counts: c, dry_run: false })
    }

    /// The erasure log after `seq`, oldest first.
    #[tracing::instrument(name = "store.erasures_after", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "erasures_after"))]
    pub async fn erasures_after(&self, seq: u64) -> Result<Vec<ErasureEntry>> {
        let rows: Vec<(i64, Uuid, Vec<Uuid>)> =
            sqlx::query_as("SELECT seq, namespace_id, sessions FROM erasures WHERE seq > $1 ORDER BY seq")
                .bind(seq as i64)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, namespace_id, sessions)| ErasureEntry { seq: seq as u64, namespace_id, sessions })
            .collect())
    }
}

/// Deletes the stored packs of `sessions` and those named, and the chunks named; returns how
/// many of each.
pub(crate) async fn delete_packs(
    tx: &mut sqlx::PgConnection,
    namespace_id: Uuid,
    sessions: &[Uuid],
    packs: &[Uuid],
    chunks: &[[u8; 16]],
) -> Result<(u64, u64)> {
    let dropped =
        sqlx::query("DELETE FROM context_packs WHERE namespace_id = $1 AND (session_id = ANY($2) OR id = ANY($3))")
            .bind(namespace_id)
            .bind(sessions)
            .bind(packs)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    let chunks: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
    let gone = sqlx::query("DELETE FROM pack_chunks WHERE namespace_id = $1 AND id = ANY($2)")
        .bind(namespace_id)
        .bind(&chunks)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    Ok((dropped, gone))
}

/// Who removed what, for the erasure log.
pub(crate) struct LogEntry<'a> {
    pub id: Uuid,
    pub requested_by: &'a str,
    pub reason: &'a str,
    pub sessions: &'a [Uuid],
}

/// Writes the audit row and tells every replica (`memex_erasure`), in the caller's transaction;
/// returns its seq in the log.
pub(crate) async fn log_erasure(
    tx: &mut sqlx::PgConnection,
    namespace_id: Uuid,
    e: LogEntry<'_>,
    counts: serde_json::Value,
) -> Result<u64> {
    let seq: i64 = sqlx::query_scalar(
        "INSERT INTO erasures (id, namespace_id, requested_by, reason, sessions, counts)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq",
    )
    .bind(e.id)
    .bind(namespace_id)
    .bind(e.requested_by)
    .bind(e.reason)
    .bind(e.sessions)
    .bind(&counts)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query("SELECT pg_notify('memex_erasure', $1)").bind(seq.to_string()).execute(&mut *tx).await?;
    Ok(seq as u64)
}

/// Streams the namespace's pack chunks, then its packs, through `scan`, in pages, inside the
/// erasure's transaction, after locking out pack writes.
pub(crate) async fn scan_packs(
    tx: &mut sqlx::PgConnection,
    namespace_id: Uuid,
    mut scan: Box<dyn PackScan>,
) -> Result<(Vec<Uuid>, Vec<[u8; 16]>)> {
    let failed = |m: String| crate::StoreError::Scan(m);
    sqlx::query("LOCK TABLE context_packs, pack_chunks IN EXCLUSIVE MODE").execute(&mut *tx).await?;
    let mut after: Vec<u8> = Vec::new();
    loop {
        let page: Vec<(Vec<u8>, Vec<u8>)> =
            sqlx::query_as("SELECT id, body FROM pack_chunks WHERE namespace_id = $1 AND id > $2 ORDER BY id LIMIT $3")
                .bind(namespace_id)
                .bind(&after)
                .bind(SCAN_PAGE)
                .fetch_all(&mut *tx)
                .await?;
        for (id, body) in &page {
            scan.chunk(id, body).map_err(failed)?;
        }
        match page.into_iter().last() {
            Some((id, _)) => after = id,
            None => break,
        }
    }
    let mut after = Uuid::nil();
    loop {
        let page: Vec<(Uuid, Uuid, Vec<u8>)> = sqlx::query_as(
            "SELECT id, session_id, pack FROM context_packs WHERE namespace_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(namespace_id)
        .bind(after)
        .bind(SCAN_PAGE)
        .fetch_all(&mut *tx)
        .await?;
        for (id, session, stored) in &page {
            scan.pack(*id, *session, stored).map_err(failed)?;
        }
        match page.last() {
            Some((id, _, _)) => after = *id,
            None => break,
        }
    }
    Ok(scan.finish())
}
