//! Retention policies (per namespace) and what they expire. The background job that applies them
//! is in memex-server; stale sessions go through the erasure path, expired packs through
//! [`Store::drop_packs`].
use uuid::Uuid;

use crate::erase::{LogEntry, PackScan, delete_packs, log_erasure, scan_packs};
use crate::{Result, Store, StoreError};

/// How long a namespace keeps things (None: forever).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub packs_days: Option<u32>,
    pub events_days: Option<u32>,
}

/// A change to a policy: `None` leaves a field as it is; `Some(None)` makes it forever.
#[derive(Debug, Clone, Copy, Default)]
pub struct RetentionChange {
    pub packs_days: Option<Option<u32>>,
    pub events_days: Option<Option<u32>>,
}

type Days = Option<i32>;

fn days(d: Days) -> Option<u32> {
    d.and_then(|d| u32::try_from(d).ok())
}

impl Store {
    /// Changes a namespace's retention; returns the policy now in force.
    pub async fn set_retention(&self, namespace: &str, change: RetentionChange) -> Result<Retention> {
        for (field, v) in [("packs_days", change.packs_days), ("events_days", change.events_days)] {
            if let Some(Some(d)) = v
                && !(1..=i32::MAX as u32).contains(&d)
            {
                return Err(memex_event::FieldError::new(field, "must be at least 1 day").into());
            }
        }
        let keep = |v: Option<Option<u32>>| v.is_none();
        let value = |v: Option<Option<u32>>| v.flatten().map(|d| d as i32);
        let row: Option<(Days, Days)> = sqlx::query_as(
            "UPDATE namespaces SET
                 retain_packs_days = CASE WHEN $2 THEN retain_packs_days ELSE $3 END,
                 retain_events_days = CASE WHEN $4 THEN retain_events_days ELSE $5 END
             WHERE name = $1 RETURNING retain_packs_days, retain_events_days",
        )
        .bind(namespace)
        .bind(keep(change.packs_days))
        .bind(value(change.packs_days))
        .bind(keep(change.events_days))
        .bind(value(change.events_days))
        .fetch_optional(&self.pool)
        .await?;
        let (p, e) = row.ok_or_else(|| StoreError::NamespaceNotFound(namespace.to_owned()))?;
        Ok(Retention { packs_days: days(p), events_days: days(e) })
    }

    /// Namespaces with a retention policy, and the policy.
    pub async fn retention_policies(&self) -> Result<Vec<(Uuid, Retention)>> {
        let rows: Vec<(Uuid, Days, Days)> = sqlx::query_as(
            "SELECT id, retain_packs_days, retain_events_days FROM namespaces
             WHERE retain_packs_days IS NOT NULL OR retain_events_days IS NOT NULL ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(id, p, e)| (id, Retention { packs_days: days(p), events_days: days(e) })).collect())
    }

    /// Stored packs of a namespace older than `days` (at most `limit`).
    pub async fn expired_packs(&self, namespace_id: Uuid, days: u32, limit: i64) -> Result<Vec<Uuid>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM context_packs WHERE namespace_id = $1
               AND created_at < now() - make_interval(days => $2) ORDER BY created_at LIMIT $3",
        )
        .bind(namespace_id)
        .bind(days as i32)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Sessions of a namespace, not yet erased, whose last event (or, with none, whose creation)
    /// is older than `days` (at most `limit`).
    pub async fn stale_sessions(&self, namespace_id: Uuid, days: u32, limit: i64) -> Result<Vec<Uuid>> {
        Ok(sqlx::query_scalar(
            "SELECT s.id FROM sessions s
             LEFT JOIN events e ON e.session_id = s.id AND e.seq = s.next_seq - 1 AND e.namespace_id = s.namespace_id
             WHERE s.namespace_id = $1 AND s.erased_by IS NULL
               AND coalesce(e.ingest_time, s.created_at) < now() - make_interval(days => $2)
             ORDER BY s.id LIMIT $3",
        )
        .bind(namespace_id)
        .bind(days as i32)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Deletes stored packs (and the chunks `scan` finds no remaining pack names), through the
    /// privileged path of the append-only tables, and logs it as an erasure with no sessions, so
    /// that every replica forgets the chunks it knew to be stored. Returns (packs, chunks).
    pub async fn drop_packs(
        &self,
        namespace_id: Uuid,
        packs: &[Uuid],
        scan: Box<dyn PackScan>,
        reason: &str,
    ) -> Result<(u64, u64)> {
        let id = Uuid::now_v7();
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('memex.erasure', $1, true)").bind(id.to_string()).execute(&mut *tx).await?;
        let (_, chunks) = scan_packs(&mut tx, namespace_id, scan).await?;
        let (dropped, gone) = delete_packs(&mut tx, namespace_id, &[], packs, &chunks).await?;
        let entry = LogEntry { id, requested_by: "retention policy", reason, sessions: &[] };
        let counts = serde_json::json!({"packs": dropped, "pack_chunks": gone});
        log_erasure(&mut tx, namespace_id, entry, counts).await?;
        tx.commit().await?;
        Ok((dropped, gone))
    }
}
