//! Stored retrieval packs: exactly what an agent was given, and why, fetchable again by id.
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{Result, Store, StoreError};

#[derive(Debug, Clone, PartialEq)]
pub struct PackRow {
    pub id: Uuid,
    pub session_id: Uuid,
    pub task_id: Option<String>,
    pub task_state_version: Option<u64>,
    pub tokenizer: String,
    pub tokens: u32,
    /// The inputs the pack answered (user message, budgets, role, …), as JSON.
    pub request: serde_json::Value,
    /// The `memex_pack::RetrievalPack` (text, blocks, items, decisions), as JSON.
    pub pack: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

type Row = (Uuid, Uuid, Option<String>, Option<i64>, String, i32, serde_json::Value, serde_json::Value, DateTime<Utc>);

impl Store {
    /// Stores a pack; returns its creation time.
    pub async fn insert_pack(&self, namespace_id: Uuid, p: &PackRow) -> Result<DateTime<Utc>> {
        let (at,): (DateTime<Utc>,) = sqlx::query_as(
            "INSERT INTO context_packs (id, namespace_id, session_id, task_id, task_state_version, tokenizer, tokens,
                                        request, pack)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING created_at",
        )
        .bind(p.id)
        .bind(namespace_id)
        .bind(p.session_id)
        .bind(&p.task_id)
        .bind(p.task_state_version.map(|v| v as i64))
        .bind(&p.tokenizer)
        .bind(p.tokens as i32)
        .bind(&p.request)
        .bind(&p.pack)
        .fetch_one(&self.pool)
        .await?;
        Ok(at)
    }

    pub async fn pack(&self, namespace_id: Uuid, id: Uuid) -> Result<PackRow> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT id, session_id, task_id, task_state_version, tokenizer, tokens, request, pack, created_at
             FROM context_packs WHERE id = $1 AND namespace_id = $2",
        )
        .bind(id)
        .bind(namespace_id)
        .fetch_optional(&self.pool)
        .await?;
        let r = row.ok_or(StoreError::PackNotFound(id))?;
        Ok(PackRow {
            id: r.0,
            session_id: r.1,
            task_id: r.2,
            task_state_version: r.3.map(|v| v as u64),
            tokenizer: r.4,
            tokens: r.5.max(0) as u32,
            request: r.6,
            pack: r.7,
            created_at: r.8,
        })
    }
}
