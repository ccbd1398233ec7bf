//! Quotas per namespace (events per second, stored bytes) and the usage they are checked
//! against. Enforcement is the server's (`memex-server::quotas`); this is their record.
use uuid::Uuid;

use crate::{Result, Store, StoreError};

/// A namespace's own limits (None: the server's default applies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    pub events_per_sec: Option<u32>,
    pub stored_bytes: Option<u64>,
}

/// A change to a quota: `None` leaves a field as it is; `Some(None)` returns it to the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotaChange {
    pub events_per_sec: Option<Option<u32>>,
    pub stored_bytes: Option<Option<u64>>,
}

/// Bytes stored: event contents plus artifact bodies.
pub const STORED_BYTES_SQL: &str =
    "SELECT (SELECT coalesce(sum(octet_length(content)), 0) FROM events WHERE namespace_id = $1)
          + (SELECT coalesce(sum(size), 0) FROM artifacts WHERE namespace_id = $1)";

type Row = (Option<i32>, Option<i64>);

fn quota((rate, bytes): Row) -> Quota {
    Quota {
        events_per_sec: rate.and_then(|r| u32::try_from(r).ok()),
        stored_bytes: bytes.and_then(|b| u64::try_from(b).ok()),
    }
}

impl Store {
    /// Changes a namespace's quota; returns the quota now in force.
    pub async fn set_quota(&self, namespace: &str, change: QuotaChange) -> Result<Quota> {
        if let Some(Some(r)) = change.events_per_sec
            && !(1..=i32::MAX as u32).contains(&r)
        {
            return Err(memex_event::FieldError::new("events_per_sec", "must be at least 1").into());
        }
        if let Some(Some(b)) = change.stored_bytes
            && !(1..=i64::MAX as u64).contains(&b)
        {
            return Err(memex_event::FieldError::new("stored_bytes", "must be at least 1 byte").into());
        }
        let row: Option<Row> = sqlx::query_as(
            "UPDATE namespaces SET
                 max_events_per_sec = CASE WHEN $2 THEN max_events_per_sec ELSE $3 END,
                 max_stored_bytes = CASE WHEN $4 THEN max_stored_bytes ELSE $5 END
             WHERE name = $1 RETURNING max_events_per_sec, max_stored_bytes",
        )
        .bind(namespace)
        .bind(change.events_per_sec.is_none())
        .bind(change.events_per_sec.flatten().map(|r| r as i32))
        .bind(change.stored_bytes.is_none())
        .bind(change.stored_bytes.flatten().map(|b| b as i64))
        .fetch_optional(&self.pool)
        .await?;
        row.map(quota).ok_or_else(|| StoreError::NamespaceNotFound(namespace.to_owned()))
    }

    /// A namespace's own quota and the bytes it stores as last recorded.
    pub async fn quota_and_usage(&self, namespace_id: Uuid) -> Result<(Quota, u64)> {
        let row: Option<(Option<i32>, Option<i64>, i64)> = sqlx::query_as(
            "SELECT n.max_events_per_sec, n.max_stored_bytes, coalesce(u.stored_bytes, 0)
             FROM namespaces n LEFT JOIN namespace_usage u ON u.namespace_id = n.id WHERE n.id = $1",
        )
        .bind(namespace_id)
        .fetch_optional(&self.pool)
        .await?;
        let (rate, bytes, used) = row.ok_or_else(|| StoreError::NamespaceNotFound(namespace_id.to_string()))?;
        Ok((quota((rate, bytes)), used.max(0) as u64))
    }

    /// Adds `bytes` to what a namespace stores; returns the new total.
    pub async fn add_usage(&self, namespace_id: Uuid, bytes: u64) -> Result<u64> {
        let (total,): (i64,) = sqlx::query_as(
            "INSERT INTO namespace_usage (namespace_id, stored_bytes) VALUES ($1, $2)
             ON CONFLICT (namespace_id) DO UPDATE
                 SET stored_bytes = namespace_usage.stored_bytes + EXCLUDED.stored_bytes, updated_at = now()
             RETURNING stored_bytes",
        )
        .bind(namespace_id)
        .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
        .fetch_one(&self.pool)
        .await?;
        Ok(total.max(0) as u64)
    }

    /// Counts what a namespace stores from its rows and records it (after an erasure, or when an
    /// operator asks: the running total is kept by replicas and can drift by what a crashed one
    /// had not yet recorded). Reads every event of the namespace.
    pub async fn recount_usage(&self, namespace_id: Uuid) -> Result<u64> {
        let (total,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "INSERT INTO namespace_usage (namespace_id, stored_bytes, recounted_at) SELECT $1, ({STORED_BYTES_SQL}), now()
             ON CONFLICT (namespace_id) DO UPDATE
                 SET stored_bytes = EXCLUDED.stored_bytes, recounted_at = now(), updated_at = now()
             RETURNING stored_bytes"
        )))
        .bind(namespace_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(total.max(0) as u64)
    }
}
