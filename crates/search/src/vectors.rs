//! Event embeddings in pgvector: one row per (event, model), a partial HNSW index per model, and
//! filtered k-NN. The model's name and dimension are written into the SQL as literals (they come
//! from configuration, never from a request) so the planner can match the partial index.
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use memex_embed::ModelInfo;
use pgvector::Vector;
use sqlx::PgPool;
use uuid::Uuid;

use crate::{IndexError, SearchFilter};

/// `'text'` as an SQL literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The partial HNSW index of one model: `embeddings_hnsw_<hash>`.
fn index_name(model: &ModelInfo) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in model.name.as_bytes().iter().chain(&(model.dim as u64).to_le_bytes()) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("embeddings_hnsw_{h:016x}")
}

fn model_predicate(model: &ModelInfo) -> String {
    format!("model = {} AND dim = {}", literal(&model.name), model.dim)
}

/// Creates the model's HNSW index (cosine distance) if it does not exist. Idempotent; several
/// replicas may race on it (a lost race is not an error).
pub async fn ensure_model_index(pool: &PgPool, model: &ModelInfo) -> Result<(), IndexError> {
    let sql = format!(
        "CREATE INDEX IF NOT EXISTS {} ON embeddings USING hnsw ((embedding::vector({})) vector_cosine_ops) WHERE {}",
        index_name(model),
        model.dim,
        model_predicate(model)
    );
    match sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Vectors of `model` in a namespace.
pub async fn vector_count(pool: &PgPool, namespace_id: Uuid, model: &ModelInfo) -> Result<u64, IndexError> {
    let sql = format!("SELECT count(*) FROM embeddings WHERE namespace_id = $1 AND {}", model_predicate(model));
    let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(namespace_id).fetch_one(pool).await?;
    Ok(n as u64)
}

/// A vector to store, with the event fields filters need.
#[derive(Debug, Clone)]
pub(crate) struct VectorRow {
    pub event_id: Uuid,
    pub session_id: Uuid,
    pub seq: u64,
    pub kind: String,
    pub role: &'static str,
    pub agent_id: String,
    pub task_id: Option<String>,
    pub event_time: DateTime<Utc>,
    pub vector: Vec<f32>,
}

/// Writes vectors (an existing (event, model) row is kept: re-embedding the same event with the
/// same model gives the same vector) in one statement.
pub(crate) async fn insert(
    conn: &mut sqlx::PgConnection,
    namespace_id: Uuid,
    model: &ModelInfo,
    rows: Vec<VectorRow>,
) -> Result<(), IndexError> {
    if rows.is_empty() {
        return Ok(());
    }
    let n = rows.len();
    let mut ids = Vec::with_capacity(n);
    let mut sessions = Vec::with_capacity(n);
    let mut seqs = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut roles = Vec::with_capacity(n);
    let mut agents = Vec::with_capacity(n);
    let mut tasks = Vec::with_capacity(n);
    let mut times = Vec::with_capacity(n);
    let mut vecs = Vec::with_capacity(n);
    for r in rows {
        ids.push(r.event_id);
        sessions.push(r.session_id);
        seqs.push(r.seq as i64);
        kinds.push(r.kind);
        roles.push(r.role.to_owned());
        agents.push(r.agent_id);
        tasks.push(r.task_id);
        times.push(r.event_time);
        vecs.push(Vector::from(r.vector));
    }
    sqlx::query(
        "INSERT INTO embeddings (event_id, model, dim, namespace_id, session_id, seq, kind, role, agent_id, task_id,
                                 event_time, embedding)
         SELECT t.event_id, $1, $2, $3, t.session_id, t.seq, t.kind, t.role, t.agent_id, t.task_id, t.event_time, t.embedding
         FROM UNNEST($4::uuid[], $5::uuid[], $6::int8[], $7::text[], $8::text[], $9::text[], $10::text[],
                     $11::timestamptz[], $12::vector[])
              AS t (event_id, session_id, seq, kind, role, agent_id, task_id, event_time, embedding)
         ON CONFLICT (event_id, model, namespace_id) DO NOTHING",
    )
    .bind(&model.name)
    .bind(model.dim as i32)
    .bind(namespace_id)
    .bind(&ids)
    .bind(&sessions)
    .bind(&seqs)
    .bind(&kinds)
    .bind(&roles)
    .bind(&agents)
    .bind(&tasks)
    .bind(&times)
    .bind(&vecs)
    .execute(conn)
    .await?;
    Ok(())
}

/// The `n` events nearest to `query` (cosine similarity, best first; ties by event id).
///
/// `exact`: scan the namespace's vectors (right for small namespaces, where an HNSW scan over
/// everyone's vectors would have to skip most of them); otherwise use the model's HNSW index with
/// pgvector's iterative scan, so filters cannot starve the result. An HNSW scan past `timeout`
/// is cancelled by Postgres (see [`is_timeout`]); 0 waits as long as it takes.
#[allow(clippy::too_many_arguments)]
#[tracing::instrument(name = "store.knn", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "knn"))]
pub(crate) async fn knn(
    pool: &PgPool,
    namespace_id: Uuid,
    model: &ModelInfo,
    query: &[f32],
    filter: &SearchFilter,
    n: usize,
    exact: bool,
    timeout: std::time::Duration,
) -> Result<Vec<(Uuid, f32)>, IndexError> {
    let dim = model.dim;
    let conditions = format!(
        "namespace_id = $1 AND {}
         AND ($3::uuid[] IS NULL OR session_id = ANY($3))
         AND ($4::text[] IS NULL OR task_id = ANY($4))
         AND ($5::text[] IS NULL OR agent_id = ANY($5))
         AND ($6::text[] IS NULL OR kind = ANY($6))
         AND ($7::text[] IS NULL OR role = ANY($7))
         AND ($8::timestamptz IS NULL OR event_time >= $8)
         AND ($9::timestamptz IS NULL OR event_time <= $9)",
        model_predicate(model)
    );
    let sql = if exact {
        format!(
            "SELECT event_id, (embedding::vector({dim}) <=> $2)::float4 AS d
             FROM (SELECT event_id, embedding FROM embeddings WHERE {conditions} OFFSET 0) e
             ORDER BY d, event_id LIMIT $10"
        )
    } else {
        format!(
            "SELECT event_id, (embedding::vector({dim}) <=> $2)::float4 AS d FROM embeddings
             WHERE {conditions} ORDER BY embedding::vector({dim}) <=> $2 LIMIT $10"
        )
    };
    let none_if_empty = |v: &[String]| if v.is_empty() { None } else { Some(v.to_vec()) };
    let roles: Vec<String> = filter.roles.iter().map(|r| r.as_str().to_owned()).collect();
    let q = sqlx::query_as::<_, (Uuid, f32)>(sqlx::AssertSqlSafe(sql))
        .bind(namespace_id)
        .bind(Vector::from(query.to_vec()))
        .bind(if filter.session_ids.is_empty() { None } else { Some(filter.session_ids.clone()) })
        .bind(none_if_empty(&filter.task_ids))
        .bind(none_if_empty(&filter.agent_ids))
        .bind(none_if_empty(&filter.kinds))
        .bind(none_if_empty(&roles))
        .bind(filter.time.from)
        .bind(filter.time.to)
        .bind(n as i64);
    let mut rows = if exact {
        q.fetch_all(pool).await?
    } else {
        // The settings are the transaction's own, set with its BEGIN in one round trip (they
        // are numbers of ours, not input). Nothing is written, so the transaction is not
        // committed but dropped: its ROLLBACK goes out with the ping sqlx makes on every
        // connection it takes back, after the answer. Three round trips on the query's path
        // (the pool's tenant setting, BEGIN, the k-NN) where there were five.
        let settings = format!(
            "BEGIN; SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {};
             SET LOCAL statement_timeout = {}",
            n.clamp(40, 1000),
            timeout.as_millis()
        );
        let mut tx = pool.begin_with(sqlx::AssertSqlSafe(settings)).await?;
        q.fetch_all(&mut *tx).await?
    };
    // relaxed_order may return slightly out of order; the answer must not depend on it.
    rows.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    Ok(rows.into_iter().map(|(id, d)| (id, 1.0 - d)).collect())
}

/// Whether a k-NN failed for its `timeout` (Postgres cancelled the statement: `57014`).
pub(crate) fn is_timeout(e: &IndexError) -> bool {
    matches!(e, IndexError::Database(sqlx::Error::Database(d)) if d.code().as_deref() == Some("57014"))
}

/// The vectors of some events (for MMR), by event id.
#[tracing::instrument(name = "store.vectors_of", level = "debug", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "vectors_of"))]
pub(crate) async fn vectors_of(
    pool: &PgPool,
    namespace_id: Uuid,
    model: &ModelInfo,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<f32>>, IndexError> {
    let sql = format!(
        "SELECT event_id, embedding FROM embeddings WHERE namespace_id = $1 AND event_id = ANY($2) AND {}",
        model_predicate(model)
    );
    let rows: Vec<(Uuid, Vector)> =
        sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(namespace_id).bind(ids).fetch_all(pool).await?;
    Ok(rows.into_iter().map(|(id, v)| (id, v.to_vec())).collect())
}
