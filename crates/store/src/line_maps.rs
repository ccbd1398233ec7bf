//! Sessions' line maps: where each event sits in the full view of one compiled version (derived
//! state that `memex-views` writes after compiling a session and reads before compiling one).
use uuid::Uuid;

use sqlx::{FromRow, Row};

use crate::sessions::{SESSION_COLUMNS, SessionRow, session_from_row};
use crate::{Result, Session, Store};

/// A stored line map (its bytes are `memex-views`'s to read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineMapRow {
    pub session_id: Uuid,
    /// The session version it was made from: its event count (0 for an imported trace).
    pub version: u64,
    /// The first line of chain 1 that a later version may change.
    pub stable_before: u32,
    pub map: Vec<u8>,
}

impl Store {
    /// The stored line map of a session, if any.
    #[tracing::instrument(name = "store.line_map", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "line_map"))]
    pub async fn line_map(&self, namespace_id: Uuid, session_id: Uuid) -> Result<Option<LineMapRow>> {
        let row: Option<(i64, i64, Vec<u8>)> = sqlx::query_as(
            "SELECT version, stable_before, map FROM view_line_maps WHERE namespace_id = $1 AND session_id = $2",
        )
        .bind(namespace_id)
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(version, stable_before, map)| self::row(session_id, version, stable_before, map)))
    }

    /// The version of a session's stored line map, if it has one (without its bytes: the memory
    /// worker asks after each job that reads a session to its end).
    #[tracing::instrument(name = "store.line_map_version", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "line_map_version"))]
    pub async fn line_map_version(&self, namespace_id: Uuid, session_id: Uuid) -> Result<Option<u64>> {
        let v: Option<i64> =
            sqlx::query_scalar("SELECT version FROM view_line_maps WHERE namespace_id = $1 AND session_id = $2")
                .bind(namespace_id)
                .bind(session_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(v.map(|v| v.max(0) as u64))
    }

    /// The sessions of `ids` that exist in the namespace, each with its stored line map when it
    /// has one and is not in `without_maps` (sessions the caller has compiled), in one round trip.
    #[tracing::instrument(name = "store.sessions_with_maps", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "sessions_with_maps"))]
    pub async fn sessions_with_maps(
        &self,
        namespace_id: Uuid,
        ids: &[Uuid],
        without_maps: &[Uuid],
    ) -> Result<Vec<(Session, Option<LineMapRow>)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {SESSION_COLUMNS}, m.version, m.stable_before, m.map FROM sessions
             LEFT JOIN LATERAL (SELECT v.version, v.stable_before, v.map FROM view_line_maps v
                                WHERE v.namespace_id = sessions.namespace_id AND v.session_id = sessions.id
                                  AND NOT (sessions.id = ANY($3))) m ON true
             WHERE sessions.id = ANY($1) AND sessions.namespace_id = $2"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(ids)
            .bind(namespace_id)
            .bind(without_maps)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let session = session_from_row(SessionRow::from_row(r)?);
                let version: Option<i64> = r.try_get(12)?;
                let stable_before: Option<i64> = r.try_get(13)?;
                let map: Option<Vec<u8>> = r.try_get(14)?;
                let map = match (version, stable_before, map) {
                    (Some(v), Some(b), Some(m)) => Some(self::row(session.id, v, b, m)),
                    _ => None,
                };
                Ok((session, map))
            })
            .collect()
    }

    /// Stores line maps, each replacing an older version's. A session erased meanwhile gets none:
    /// its map may have been made from the events before the erasure, and the erasure (which
    /// deletes its map) locks the session row, which this statement waits for and then reads.
    /// Returns how many were written.
    #[tracing::instrument(name = "store.put_line_maps", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "put_line_maps"))]
    pub async fn put_line_maps(&self, namespace_id: Uuid, maps: &[LineMapRow]) -> Result<u64> {
        if maps.is_empty() {
            return Ok(0);
        }
        let sessions: Vec<Uuid> = maps.iter().map(|m| m.session_id).collect();
        let versions: Vec<i64> = maps.iter().map(|m| i64::try_from(m.version).unwrap_or(i64::MAX)).collect();
        let stable: Vec<i64> = maps.iter().map(|m| i64::from(m.stable_before)).collect();
        let bodies: Vec<&[u8]> = maps.iter().map(|m| m.map.as_slice()).collect();
        // Derived and rebuilt on a miss: not worth a WAL flush of its own.
        let mut tx = self.pool.begin_with("BEGIN; SET LOCAL synchronous_commit = off").await?;
        let written = sqlx::query(
            "INSERT INTO view_line_maps (namespace_id, session_id, version, stable_before, map)
             SELECT $1, m.session_id, m.version, m.stable_before, m.map
             FROM UNNEST($2::uuid[], $3::int8[], $4::int8[], $5::bytea[]) AS m(session_id, version, stable_before, map)
             JOIN sessions s ON s.id = m.session_id AND s.namespace_id = $1 AND s.erased_by IS NULL
             ORDER BY m.session_id
             FOR KEY SHARE OF s
             ON CONFLICT (namespace_id, session_id) DO UPDATE
                 SET version = EXCLUDED.version, stable_before = EXCLUDED.stable_before, map = EXCLUDED.map
                 WHERE view_line_maps.version < EXCLUDED.version",
        )
        .bind(namespace_id)
        .bind(&sessions)
        .bind(&versions)
        .bind(&stable)
        .bind(&bodies)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(written)
    }
}

fn row(session_id: Uuid, version: i64, stable_before: i64, map: Vec<u8>) -> LineMapRow {
    LineMapRow {
        session_id,
        version: version.max(0) as u64,
        stable_before: u32::try_from(stable_before.max(0)).unwrap_or(u32::MAX),
        map,
    }
}
