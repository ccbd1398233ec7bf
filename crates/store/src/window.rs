//! Agents' windows: which events of a session are resident, and the pointer manifests that stand
//! where evicted events were. A compaction commits in one statement, compare-and-swap on the
//! window's version, so concurrent compactions of one window cannot both apply.
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::standby::settled_if;
use crate::{Result, Store, StoreError};

/// A window's state: its version (compactions so far) and its manifests, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowRow {
    pub version: u64,
    pub manifests: Vec<Uuid>,
}

/// A run of evicted seqs and the manifest that evicted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eviction {
    pub first_seq: u64,
    pub last_seq: u64,
    pub manifest_id: Uuid,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ManifestRow {
    pub id: Uuid,
    pub session_id: Uuid,
    pub window_version: u64,
    pub task_state_version: Option<u64>,
    pub first_seq: u64,
    pub last_seq: u64,
    pub evicted_events: u64,
    /// The `memex_compaction::PointerManifest`, as JSON.
    pub body: serde_json::Value,
    pub rendered: String,
    pub tokens: u32,
    pub tokenizer: String,
    pub created_at: DateTime<Utc>,
}

/// A compaction to commit.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCompaction {
    pub session_id: Uuid,
    /// The window version the plan was made from.
    pub expected_version: u64,
    pub manifest_id: Uuid,
    pub task_state_version: Option<u64>,
    pub first_seq: u64,
    pub last_seq: u64,
    pub evicted_events: u64,
    pub body: serde_json::Value,
    pub rendered: String,
    pub tokens: u32,
    pub tokenizer: String,
    /// Newly evicted runs of seqs (first, last).
    pub evicted: Vec<(u64, u64)>,
    /// The window's manifests after this compaction, oldest first.
    pub manifests: Vec<Uuid>,
}

type ManifestDbRow =
    (Uuid, Uuid, i64, Option<i64>, i64, i64, i64, serde_json::Value, String, i32, String, DateTime<Utc>);

const MANIFEST_COLUMNS: &str = "id, session_id, window_version, task_state_version, first_seq, last_seq, evicted_events, \
     body, rendered, tokens, tokenizer, created_at";

fn manifest_from_row(r: ManifestDbRow) -> ManifestRow {
    ManifestRow {
        id: r.0,
        session_id: r.1,
        window_version: r.2 as u64,
        task_state_version: r.3.map(|v| v as u64),
        first_seq: r.4 as u64,
        last_seq: r.5 as u64,
        evicted_events: r.6 as u64,
        body: r.7,
        rendered: r.8,
        tokens: r.9.max(0) as u32,
        tokenizer: r.10,
        created_at: r.11,
    }
}

const COMMIT_SQL: &str = r#"
WITH w AS (
    INSERT INTO context_windows AS cw (session_id, namespace_id, version, manifests)
    SELECT $1, $2, 1, $4 WHERE $3 = 0
    ON CONFLICT (session_id, namespace_id) DO NOTHING
    RETURNING version
), u AS (
    UPDATE context_windows SET version = version + 1, manifests = $4, updated_at = now()
    WHERE session_id = $1 AND namespace_id = $2 AND version = $3 AND $3 > 0
    RETURNING version
), v AS (
    SELECT version FROM w UNION ALL SELECT version FROM u
), m AS (
    INSERT INTO pointer_manifests (id, namespace_id, session_id, window_version, task_state_version, first_seq,
                                   last_seq, evicted_events, body, rendered, tokens, tokenizer)
    SELECT $5, $2, $1, v.version, $6, $7, $8, $9, $10, $11, $12, $13 FROM v
    RETURNING 1
), e AS (
    INSERT INTO window_evictions (session_id, namespace_id, first_seq, last_seq, manifest_id)
    SELECT $1, $2, t.f, t.l, $5 FROM v, UNNEST($14::int8[], $15::int8[]) AS t (f, l)
    RETURNING 1
)
SELECT v.version, (SELECT count(*) FROM m), (SELECT count(*) FROM e) FROM v
"#;

impl Store {
    /// A session's window: its state, its evicted runs (by first seq) and its manifests (oldest
    /// first). A session never compacted has version 0 and no evictions.
    #[tracing::instrument(name = "store.window", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "window"))]
    pub async fn window(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
    ) -> Result<(WindowRow, Vec<Eviction>, Vec<ManifestRow>)> {
        let row: Option<(i64, Vec<Uuid>)> = sqlx::query_as(
            "SELECT version, manifests FROM context_windows WHERE session_id = $1 AND namespace_id = $2",
        )
        .bind(session_id)
        .bind(namespace_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some((version, manifests)) = row else {
            self.session(namespace_id, session_id).await?;
            return Ok((WindowRow::default(), Vec::new(), Vec::new()));
        };
        let evictions: Vec<(i64, i64, Uuid)> = sqlx::query_as(
            "SELECT first_seq, last_seq, manifest_id FROM window_evictions WHERE session_id = $1 AND namespace_id = $2
             ORDER BY first_seq",
        )
        .bind(session_id)
        .bind(namespace_id)
        .fetch_all(&self.pool)
        .await?;
        let found = self.manifests(namespace_id, &manifests).await?;
        Ok((
            WindowRow { version: version as u64, manifests },
            evictions
                .into_iter()
                .map(|(f, l, m)| Eviction { first_seq: f as u64, last_seq: l as u64, manifest_id: m })
                .collect(),
            found,
        ))
    }

    /// The manifests of `ids`, in that order (those that exist).
    pub async fn manifests(&self, namespace_id: Uuid, ids: &[Uuid]) -> Result<Vec<ManifestRow>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!("SELECT {MANIFEST_COLUMNS} FROM pointer_manifests WHERE id = ANY($1) AND namespace_id = $2");
        let rows: Vec<ManifestDbRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(ids).bind(namespace_id).fetch_all(&self.pool).await?;
        let mut found: Vec<ManifestRow> = rows.into_iter().map(manifest_from_row).collect();
        found.sort_by_key(|m| ids.iter().position(|id| *id == m.id));
        Ok(found)
    }

    /// Commits a compaction if the window is still at `expected_version`; `StaleWindow` otherwise
    /// (the caller re-plans from the new window). Returns the new window version.
    #[tracing::instrument(name = "store.commit_compaction", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "commit_compaction"))]
    pub async fn commit_compaction(&self, namespace_id: Uuid, c: NewCompaction) -> Result<u64> {
        let firsts: Vec<i64> = c.evicted.iter().map(|(f, _)| *f as i64).collect();
        let lasts: Vec<i64> = c.evicted.iter().map(|(_, l)| *l as i64).collect();
        let row: Option<(i64, i64, i64)> = sqlx::query_as(COMMIT_SQL)
            .bind(c.session_id)
            .bind(namespace_id)
            .bind(c.expected_version as i64)
            .bind(&c.manifests)
            .bind(c.manifest_id)
            .bind(c.task_state_version.map(|v| v as i64))
            .bind(c.first_seq as i64)
            .bind(c.last_seq as i64)
            .bind(c.evicted_events as i64)
            .bind(&c.body)
            .bind(&c.rendered)
            .bind(c.tokens as i32)
            .bind(&c.tokenizer)
            .bind(&firsts)
            .bind(&lasts)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            Some((version, _, _)) => Ok(version as u64),
            None => Err(StoreError::StaleWindow(c.session_id)),
        }
    }

    /// One manifest, by id.
    #[tracing::instrument(name = "store.manifest", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "manifest"))]
    pub async fn manifest(&self, namespace_id: Uuid, id: Uuid) -> Result<ManifestRow> {
        let sql = format!("SELECT {MANIFEST_COLUMNS} FROM pointer_manifests WHERE id = $1 AND namespace_id = $2");
        // Manifests never change: the standby answers when it has this one.
        let sql = &sql;
        let read = |pool: PgPool| async move {
            let q = sqlx::query_as::<_, ManifestDbRow>(sqlx::AssertSqlSafe(sql.clone())).bind(id).bind(namespace_id);
            Ok::<_, StoreError>(q.fetch_optional(&pool).await?)
        };
        let row = self.settled(read, |row| settled_if(row.is_some(), row)).await?;
        row.map(manifest_from_row).ok_or(StoreError::ManifestNotFound(id))
    }
}
