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
    /// The `memex_pack::RetrievalPack` (text, blocks, items, decisions): JSON, zstd-compressed.
    pub pack: Vec<u8>,
    pub created_at: DateTime<Utc>,
}

type Row = (Uuid, Uuid, Option<String>, Option<i64>, String, i32, serde_json::Value, Vec<u8>, DateTime<Utc>);

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

    /// Stores several packs in one statement (one commit and WAL flush for all: concurrent
    /// BuildPacks share it). Returns their creation times, in order.
    pub async fn insert_packs(&self, rows: &[(Uuid, &PackRow)]) -> Result<Vec<DateTime<Utc>>> {
        let ids: Vec<Uuid> = rows.iter().map(|(_, p)| p.id).collect();
        let namespaces: Vec<Uuid> = rows.iter().map(|(ns, _)| *ns).collect();
        let sessions: Vec<Uuid> = rows.iter().map(|(_, p)| p.session_id).collect();
        let tasks: Vec<Option<String>> = rows.iter().map(|(_, p)| p.task_id.clone()).collect();
        let versions: Vec<Option<i64>> = rows.iter().map(|(_, p)| p.task_state_version.map(|v| v as i64)).collect();
        let tokenizers: Vec<&str> = rows.iter().map(|(_, p)| p.tokenizer.as_str()).collect();
        let tokens: Vec<i32> = rows.iter().map(|(_, p)| p.tokens as i32).collect();
        let requests: Vec<&serde_json::Value> = rows.iter().map(|(_, p)| &p.request).collect();
        let packs: Vec<&[u8]> = rows.iter().map(|(_, p)| p.pack.as_slice()).collect();
        let out: Vec<(Uuid, DateTime<Utc>)> = sqlx::query_as(
            "INSERT INTO context_packs (id, namespace_id, session_id, task_id, task_state_version, tokenizer, tokens,
                                        request, pack)
             SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::int8[], $6::text[], $7::int4[],
                                  $8::jsonb[], $9::bytea[])
             RETURNING id, created_at",
        )
        .bind(&ids)
        .bind(&namespaces)
        .bind(&sessions)
        .bind(&tasks)
        .bind(&versions)
        .bind(&tokenizers)
        .bind(&tokens)
        .bind(&requests)
        .bind(&packs)
        .fetch_all(&self.pool)
        .await?;
        let at: std::collections::HashMap<Uuid, DateTime<Utc>> = out.into_iter().collect();
        ids.iter().map(|id| at.get(id).copied().ok_or(StoreError::PackNotFound(*id))).collect()
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
