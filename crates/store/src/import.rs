//! Imported traces: the raw file is kept byte for byte as an artifact, and its events are written
//! to a new session, all in one transaction — an import is complete or absent.
use memex_event::{ArtifactId, PreparedBatch};
use uuid::Uuid;

use crate::append::Prepared;
use crate::artifacts::compress;
use crate::error::is_unique_violation;
use crate::sessions::{SESSION_COLUMNS, SessionRow, session_from_row};
use crate::{AppendOutcome, NewSession, Result, Session, Store, StoreError};

/// A trace to import.
#[derive(Debug, Clone)]
pub struct ImportRequest {
    pub namespace_id: Uuid,
    /// The session to create; `source_format` names the trace format.
    pub session: NewSession,
    /// The file, byte for byte.
    pub raw: Vec<u8>,
    pub file_name: String,
    pub media_type: String,
    /// The trace's events, validated. Tool results are not required to pair with a call here: a
    /// trace is a record of what happened, orphans included.
    pub batch: PreparedBatch,
}

impl Store {
    #[tracing::instrument(name = "store.import_session", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "import_session"))]
    pub async fn import_session(&self, req: ImportRequest) -> Result<(Session, AppendOutcome)> {
        let ImportRequest { namespace_id, session, raw, file_name, media_type, batch } = req;
        let raw_id = ArtifactId::of(&raw);
        let raw_len = raw.len() as i64;
        let compressed = tokio::task::spawn_blocking(move || compress(&raw))
            .await
            .map_err(|e| StoreError::Compression(std::io::Error::other(e.to_string())))??;
        let prepared = Prepared::new(batch).await?;
        self.check_parent(namespace_id, session.parent_session_id).await?;
        let id = session.id.unwrap_or_else(Uuid::now_v7);

        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO artifacts (namespace_id, id, size, media_type, compression, data)
             VALUES ($1, $2, $3, $4, 'zstd', $5) ON CONFLICT (namespace_id, id) DO NOTHING",
        )
        .bind(namespace_id)
        .bind(&raw_id.as_bytes()[..])
        .bind(raw_len)
        .bind(&media_type)
        .bind(&compressed)
        .execute(&mut *tx)
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO sessions (id, namespace_id, agent_id, parent_session_id, task_id, source_format, metadata)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(id)
        .bind(namespace_id)
        .bind(&session.agent_id)
        .bind(session.parent_session_id)
        .bind(&session.task_id)
        .bind(&session.source_format)
        .bind(&session.metadata)
        .execute(&mut *tx)
        .await;
        match inserted {
            Err(e) if is_unique_violation(&e, "sessions_pkey") => {
                return Err(StoreError::AlreadyExists(format!("session {id} already exists")));
            }
            other => {
                other?;
            }
        }
        let first_seq = if prepared.n > 0 {
            let row = prepared.run(&mut *tx, id, namespace_id, None, &[0; 32]).await?;
            row.map(|(first, _)| first).ok_or(StoreError::SessionNotFound(id))?
        } else {
            1
        };
        // Only now does the session become read-only: the append above needed it writable.
        let sql = format!(
            "UPDATE sessions SET source_artifact_id = $2, source_file_name = $3
             WHERE id = $1 AND namespace_id = $4 RETURNING {SESSION_COLUMNS}"
        );
        let row: SessionRow = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(&raw_id.as_bytes()[..])
            .bind(&file_name)
            .bind(namespace_id)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        self.note_appended();
        let artifacts = self.artifact_refs(namespace_id, prepared.artifact_order()).await?;
        let outcome = if prepared.n > 0 {
            prepared.outcome(id, first_seq, artifacts)
        } else {
            AppendOutcome { session_id: id, first_seq: 1, last_seq: 0, event_ids: vec![], replayed: false, artifacts }
        };
        Ok((session_from_row(row), outcome))
    }
}
