//! Stored retrieval packs: exactly what an agent was given, and why, fetchable again by id.
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::standby::settled_if;
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
    /// The stored form of the `memex_pack::RetrievalPack`, zstd-compressed: its manifest (which
    /// names the chunks holding its texts, items and decisions), or older packs whole.
    pub pack: Vec<u8>,
    /// Chunks to store with the pack (those the writer does not know to be stored already). Empty
    /// when read.
    pub chunks: Vec<PackChunk>,
    pub created_at: DateTime<Utc>,
    /// How the pack was laid out (JSON), for the session's next pack to keep in place; not read
    /// back with the pack.
    pub layout: Option<Vec<u8>>,
}

/// A piece of stored packs, kept once per namespace under its id (a hash of its bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackChunk {
    pub id: [u8; 16],
    /// The chunk's bytes, zstd-compressed.
    pub body: Vec<u8>,
}

type Row = (Uuid, Uuid, Option<String>, Option<i64>, String, i32, serde_json::Value, Vec<u8>, DateTime<Utc>);

impl Store {
    /// Stores a pack and its chunks; returns its creation time.
    #[tracing::instrument(name = "store.insert_pack", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "insert_pack"))]
    pub async fn insert_pack(&self, namespace_id: Uuid, p: &PackRow) -> Result<DateTime<Utc>> {
        let at = self.insert_packs(&[(namespace_id, p)]).await?;
        at.first().copied().ok_or(StoreError::PackNotFound(p.id))
    }

    /// Stores several packs and their chunks in one statement (one commit and WAL flush for all:
    /// concurrent BuildPacks share it). A chunk already stored is left as it is (same id, same
    /// bytes). Returns the packs' creation times, in order.
    #[tracing::instrument(name = "store.insert_packs", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "insert_packs"))]
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
        let layouts: Vec<Option<&[u8]>> = rows.iter().map(|(_, p)| p.layout.as_deref()).collect();
        // Each chunk once per statement (ON CONFLICT cannot see a row the statement itself wrote),
        // in key order: concurrent statements sharing new chunks then wait on each other in the
        // same order and cannot deadlock.
        let mut chunks: std::collections::BTreeMap<(Uuid, [u8; 16]), &[u8]> = Default::default();
        for (ns, p) in rows {
            for c in &p.chunks {
                chunks.entry((*ns, c.id)).or_insert(&c.body);
            }
        }
        let chunk_ns: Vec<Uuid> = chunks.keys().map(|(ns, _)| *ns).collect();
        let chunk_ids: Vec<&[u8]> = chunks.keys().map(|(_, id)| id.as_slice()).collect();
        let chunk_bodies: Vec<&[u8]> = chunks.values().copied().collect();
        let out: Vec<(Uuid, DateTime<Utc>)> = sqlx::query_as(
            "WITH chunks AS (
                 INSERT INTO pack_chunks (namespace_id, id, body)
                 SELECT ns, id, body FROM UNNEST($10::uuid[], $11::bytea[], $12::bytea[]) WITH ORDINALITY AS c(ns, id, body, n)
                 ORDER BY n
                 ON CONFLICT DO NOTHING
             )
             INSERT INTO context_packs (id, namespace_id, session_id, task_id, task_state_version, tokenizer, tokens,
                                        request, pack, layout)
             SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::int8[], $6::text[], $7::int4[],
                                  $8::jsonb[], $9::bytea[], $13::bytea[])
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
        .bind(&chunk_ns)
        .bind(&chunk_ids)
        .bind(&chunk_bodies)
        .bind(&layouts)
        .fetch_all(&self.pool)
        .await?;
        let at: std::collections::HashMap<Uuid, DateTime<Utc>> = out.into_iter().collect();
        ids.iter().map(|id| at.get(id).copied().ok_or(StoreError::PackNotFound(*id))).collect()
    }

    /// The stored chunks among `ids` (a stored pack's manifest names them).
    #[tracing::instrument(name = "store.pack_chunks", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "pack_chunks"))]
    pub async fn pack_chunks(&self, namespace_id: Uuid, ids: &[[u8; 16]]) -> Result<Vec<PackChunk>> {
        let want: std::collections::HashSet<&[u8]> = ids.iter().map(|id| id.as_slice()).collect();
        let ids: Vec<&[u8]> = want.iter().copied().collect();
        let ids = &ids;
        // Chunks never change: the standby answers when it has them all.
        let read = |pool: PgPool| async move {
            let q = sqlx::query_as::<_, (Vec<u8>, Vec<u8>)>(
                "SELECT id, body FROM pack_chunks WHERE namespace_id = $1 AND id = ANY($2::bytea[])",
            )
            .bind(namespace_id)
            .bind(ids);
            Ok::<_, StoreError>(q.fetch_all(&pool).await?)
        };
        let rows = self.settled(read, |rows| settled_if(rows.len() >= want.len(), rows)).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, body)| <[u8; 16]>::try_from(id.as_slice()).ok().map(|id| PackChunk { id, body }))
            .collect())
    }

    #[tracing::instrument(name = "store.pack", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "pack"))]
    pub async fn pack(&self, namespace_id: Uuid, id: Uuid) -> Result<PackRow> {
        // Stored packs never change: the standby answers when it has this one.
        let read = |pool: PgPool| async move {
            let q = sqlx::query_as::<_, Row>(
                "SELECT id, session_id, task_id, task_state_version, tokenizer, tokens, request, pack, created_at
                 FROM context_packs WHERE id = $1 AND namespace_id = $2",
            )
            .bind(id)
            .bind(namespace_id);
            Ok::<_, StoreError>(q.fetch_optional(&pool).await?)
        };
        let row = self.settled(read, |row| settled_if(row.is_some(), row)).await?;
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
            chunks: Vec::new(),
            created_at: r.8,
            layout: None,
        })
    }
}
