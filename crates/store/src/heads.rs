//! Session heads: how far each session's log reaches. Derived indexes (`memex-search`) compare
//! these with what they have indexed to catch up — the per-session seq is gapless and
//! commit-ordered, so "indexed up to seq n" is an exact watermark.
use uuid::Uuid;

use crate::{Result, Store};

impl Store {
    /// `(session id, last seq)` of the namespace's sessions that have events — all of them, or
    /// only those in `sessions` when given.
    #[tracing::instrument(name = "store.session_heads", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "session_heads"))]
    pub async fn session_heads(&self, namespace_id: Uuid, sessions: Option<&[Uuid]>) -> Result<Vec<(Uuid, u64)>> {
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT id, next_seq - 1 FROM sessions
             WHERE namespace_id = $1 AND next_seq > 1 AND ($2::uuid[] IS NULL OR id = ANY($2))",
        )
        .bind(namespace_id)
        .bind(sessions)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id, seq)| (id, seq as u64)).collect())
    }

    /// The sum of the last seqs of the namespace's sessions (or of `sessions`): one aggregate row
    /// that tells an index whether anything was appended since it last looked, since seqs only grow.
    #[tracing::instrument(name = "store.head_total", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "head_total"))]
    pub async fn head_total(&self, namespace_id: Uuid, sessions: Option<&[Uuid]>) -> Result<u64> {
        let (total,): (i64,) = sqlx::query_as(
            "SELECT COALESCE(sum(next_seq - 1), 0)::int8 FROM sessions
             WHERE namespace_id = $1 AND ($2::uuid[] IS NULL OR id = ANY($2))",
        )
        .bind(namespace_id)
        .bind(sessions)
        .fetch_one(&self.pool)
        .await?;
        Ok(total as u64)
    }

    /// Every namespace's head total ([`Store::head_total`] with no sessions), for the namespaces
    /// with sessions the tenant sees, in one statement: what a background catch-up compares its
    /// indexes with each round, instead of a statement (and its acquire) per namespace.
    #[tracing::instrument(name = "store.head_totals", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "head_totals"))]
    pub async fn head_totals(&self) -> Result<Vec<(Uuid, u64)>> {
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT namespace_id, COALESCE(sum(next_seq - 1), 0)::int8 FROM sessions
             GROUP BY namespace_id ORDER BY namespace_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(ns, total)| (ns, total as u64)).collect())
    }
}
