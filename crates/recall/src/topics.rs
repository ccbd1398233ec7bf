//! Rebuilding a namespace's topics after its segments changed: canonical tags and aliases,
//! subtopics of over-broad tags, the set cover (all `memex_memory::topics`), and the summary of
//! every topic whose segments changed (`memex_memory::summary`), written in one transaction.
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use memex_memory::SummaryConfig;
use memex_memory::summary::{TopicSource, TopicTerms, describe_topic, summarize_topic};
use memex_memory::topics::{SegmentTags, build_topics, distinct_tags};
use memex_memory::{Summary, SummaryLine};
use memex_tokens::TokenCounter;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use crate::RecallError;
use crate::worker::WorkerParts;

/// A line of a topic summary: the segment line it was chosen from, with its session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicLine {
    pub session: Uuid,
    pub seq: u64,
    pub text: String,
}

/// Segments of a topic whose summaries a topic summary is chosen from (the newest).
const SUMMARY_SOURCES: usize = 50;

/// Whether some namespace's topics are behind its segments.
pub async fn any_due(pool: &PgPool, scope: Option<&[Uuid]>) -> Result<bool, RecallError> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM memory_namespaces WHERE version > built_version
           AND ($1::uuid[] IS NULL OR namespace_id = ANY($1))",
    )
    .bind(scope)
    .fetch_one(pool)
    .await?;
    Ok(n > 0)
}

/// Rebuilds the topics of each namespace that is due (behind, and not rebuilt within
/// `topic_interval_ms`), one replica at a time (a lease). Returns how many were rebuilt.
pub async fn rebuild_due(parts: &WorkerParts, owner: &str, scope: Option<&[Uuid]>) -> Result<u64, RecallError> {
    let pool = parts.store.pool();
    let due: Vec<(Uuid, i64)> = sqlx::query_as(
        "UPDATE memory_namespaces SET leased_until = now() + interval '60 seconds', leased_by = $1
         WHERE namespace_id IN (
             SELECT namespace_id FROM memory_namespaces
             WHERE version > built_version AND ($2::uuid[] IS NULL OR namespace_id = ANY($2))
               AND (leased_until IS NULL OR leased_until < now())
               AND (rebuilt_at IS NULL OR rebuilt_at <= now() - make_interval(secs => GREATEST($3, rebuild_ms * 4 / 1000.0)))
             ORDER BY namespace_id LIMIT 4 FOR UPDATE SKIP LOCKED)
         RETURNING namespace_id, version",
    )
    .bind(owner)
    .bind(scope)
    .bind(parts.config.topic_interval_ms as f64 / 1000.0)
    .fetch_all(pool)
    .await?;
    let mut n = 0;
    for (ns, version) in due {
        let t0 = std::time::Instant::now();
        let built = rebuild(parts, ns).await;
        // A build overtaken by a change (an erasure) was not written: the namespace stays due.
        let next = if matches!(built, Ok(true)) { version } else { -1 };
        let took = i32::try_from(t0.elapsed().as_millis()).unwrap_or(i32::MAX);
        sqlx::query(
            "UPDATE memory_namespaces SET built_version = GREATEST(built_version, $2), rebuilt_at = now(),
                    rebuild_ms = $3, leased_until = NULL, leased_by = NULL WHERE namespace_id = $1",
        )
        .bind(ns)
        .bind(next)
        .bind(took)
        .execute(pool)
        .await?;
        if built? {
            n += 1;
        }
    }
    Ok(n)
}

#[derive(sqlx::FromRow)]
struct SegRow {
    id: Uuid,
    session_id: Uuid,
    first_seq: i64,
    last_seq: i64,
    start_time: DateTime<Utc>,
    end_time: DateTime<Utc>,
    turns: i32,
    tags: Vec<String>,
    primary_tag: Option<String>,
    closed: bool,
    facts: i32,
}

/// Rebuilds one namespace's topics now. Returns false, having written nothing, when the
/// namespace's memory changed while it was built (its version moved on: an erasure deletes
/// segments and topics and bumps the version in one transaction), so a build from segments read
/// before an erasure never puts what it erased back.
async fn rebuild(parts: &WorkerParts, ns: Uuid) -> Result<bool, RecallError> {
    let pool = parts.store.pool();
    let read_at = namespace_version(pool, ns).await?;
    let rows: Vec<SegRow> = sqlx::query_as(
        "SELECT id, session_id, first_seq, last_seq, start_time, end_time, turns, tags, primary_tag, closed, facts
         FROM memory_segments WHERE namespace_id = $1 ORDER BY session_id, first_seq",
    )
    .bind(ns)
    .fetch_all(pool)
    .await?;
    let segs: Vec<SegmentTags> = rows
        .iter()
        .map(|r| SegmentTags {
            session: r.session_id.as_u128(),
            turns: r.turns.max(0) as usize,
            tags: r.tags.clone(),
            primary: r.primary_tag.clone(),
        })
        .collect();
    let cfg = parts.config.topics.clone();
    let vectors = parts.vectors.clone();
    let segs_for_build = segs.clone();
    let topics = tokio::task::spawn_blocking(move || {
        let names = distinct_tags(&segs_for_build);
        let vecs = vectors.map(|v| {
            let pool: Vec<&str> = names.iter().take(cfg.alias_vector_pool).map(|t| t.as_str()).collect();
            let texts: Vec<String> = pool.iter().map(|t| t.replace(['-', '.', '/'], " ")).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            v.vectors(&refs)
        });
        build_topics(&segs_for_build, vecs.as_deref(), &cfg)
    })
    .await
    .map_err(|e| RecallError::Corrupt(format!("topic building panicked: {e}")))?;
    let stored: HashMap<String, Vec<u8>> =
        sqlx::query_as::<_, (String, Vec<u8>)>("SELECT tag, members_hash FROM memory_topics WHERE namespace_id = $1")
            .bind(ns)
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
    // Which topics changed (members, their ends, facts, cover): only those get a new summary.
    let mut changed: Vec<(usize, Vec<u8>)> = Vec::new();
    for (ti, t) in topics.iter().enumerate() {
        let mut h = blake3::Hasher::new();
        for &i in &t.segments {
            let r = &rows[i];
            h.update(r.id.as_bytes());
            h.update(&r.last_seq.to_le_bytes());
            h.update(&r.facts.to_le_bytes());
            h.update(&[u8::from(r.closed), u8::from(t.in_cover), u8::from(t.broad)]);
        }
        for a in &t.aliases {
            h.update(a.as_bytes());
        }
        let hash = h.finalize().as_bytes().to_vec();
        if stored.get(&t.tag) != Some(&hash) {
            changed.push((ti, hash));
        }
    }
    // Their newest segments' summaries, read in one query and parsed once.
    let mut wanted: Vec<Uuid> =
        changed.iter().flat_map(|(ti, _)| newest(&topics[*ti], &rows)).map(|i| rows[i].id).collect();
    wanted.sort();
    wanted.dedup();
    let mut summaries: HashMap<Uuid, Summary> = HashMap::new();
    for chunk in wanted.chunks(5_000) {
        let got: Vec<(Uuid, serde_json::Value)> =
            sqlx::query_as("SELECT id, summary FROM memory_segments WHERE namespace_id = $1 AND id = ANY($2)")
                .bind(ns)
                .bind(chunk)
                .fetch_all(pool)
                .await?;
        for (id, v) in got {
            summaries.insert(id, serde_json::from_value(v)?);
        }
    }
    // Summaries are CPU work: off the async threads.
    let (scfg, counter) = (parts.config.summary.clone(), parts.counter.clone());
    let names: Vec<String> = topics.iter().map(|t| t.tag.clone()).collect();
    let records = tokio::task::spawn_blocking(move || {
        topic_records(&topics, &rows, &changed, &summaries, &scfg, counter.as_ref())
    })
    .await
    .map_err(|e| RecallError::Corrupt(format!("topic summaries panicked: {e}")))?;
    let mut tx = pool.begin().await?;
    // The version's row lock orders this write with an erasure's, which takes it first.
    if read_at.is_none() || namespace_version(&mut *tx, ns).await? != read_at {
        return Ok(false);
    }
    for chunk in records.chunks(500) {
        sqlx::query(
            "INSERT INTO memory_topics (namespace_id, tag, aliases, parent, with_tags, segments, turns, sessions,
                 first_time, last_time, broad, in_cover, summary, summary_tokens, description, facts, members_hash)
             SELECT $1, x.tag, x.aliases, x.parent, x.with_tags, x.segments, x.turns, x.sessions, x.first_time,
                    x.last_time, x.broad, x.in_cover, x.summary, x.summary_tokens, x.description, x.facts,
                    decode(x.members_hash, 'hex')
             FROM jsonb_to_recordset($2::jsonb) AS x(tag text, aliases text[], parent text, with_tags text[],
                 segments int, turns int, sessions int, first_time timestamptz, last_time timestamptz, broad bool,
                 in_cover bool, summary jsonb, summary_tokens int, description text, facts int, members_hash text)
             ON CONFLICT (namespace_id, tag) DO UPDATE SET aliases = EXCLUDED.aliases, parent = EXCLUDED.parent,
                 with_tags = EXCLUDED.with_tags, segments = EXCLUDED.segments, turns = EXCLUDED.turns,
                 sessions = EXCLUDED.sessions, first_time = EXCLUDED.first_time, last_time = EXCLUDED.last_time,
                 broad = EXCLUDED.broad, in_cover = EXCLUDED.in_cover, summary = EXCLUDED.summary,
                 summary_tokens = EXCLUDED.summary_tokens, description = EXCLUDED.description,
                 facts = EXCLUDED.facts, members_hash = EXCLUDED.members_hash",
        )
        .bind(ns)
        .bind(serde_json::Value::Array(chunk.to_vec()))
        .execute(&mut *tx)
        .await?;
    }
    // An anti-join: `tag <> ALL($2)` compared every topic with every name (1.3 s at 15k topics).
    sqlx::query(
        "DELETE FROM memory_topics t WHERE namespace_id = $1
           AND NOT EXISTS (SELECT 1 FROM unnest($2::text[]) AS n(tag) WHERE n.tag = t.tag)",
    )
    .bind(ns)
    .bind(&names)
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE memory_namespaces SET topics = $2 WHERE namespace_id = $1")
        .bind(ns)
        .bind(names.len() as i64)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// The namespace's memory version, locked for the rest of the transaction when `db` is one.
async fn namespace_version<'c>(db: impl sqlx::PgExecutor<'c>, ns: Uuid) -> Result<Option<i64>, RecallError> {
    Ok(sqlx::query_scalar("SELECT version FROM memory_namespaces WHERE namespace_id = $1 FOR UPDATE")
        .bind(ns)
        .fetch_optional(db)
        .await?)
}

/// A topic summary's lines as a summary (for rendering).
pub fn topic_lines(v: serde_json::Value) -> Result<Vec<TopicLine>, RecallError> {
    Ok(serde_json::from_value(v)?)
}

/// Lines of a stored segment summary.
pub fn segment_lines(v: serde_json::Value) -> Result<Vec<SummaryLine>, RecallError> {
    let s: Summary = serde_json::from_value(v)?;
    Ok(s.lines)
}

/// A topic's newest segments (the summary's sources).
fn newest(t: &memex_memory::Topic, rows: &[SegRow]) -> Vec<usize> {
    let mut m: Vec<usize> = t.segments.clone();
    m.sort_by_key(|&i| std::cmp::Reverse((rows[i].end_time, rows[i].session_id, rows[i].first_seq)));
    m.truncate(SUMMARY_SOURCES);
    m
}

/// The rows to upsert for the changed topics: summary, description and counts.
fn topic_records(
    topics: &[memex_memory::Topic],
    rows: &[SegRow],
    changed: &[(usize, Vec<u8>)],
    summaries: &HashMap<Uuid, Summary>,
    cfg: &SummaryConfig,
    counter: &dyn TokenCounter,
) -> Vec<serde_json::Value> {
    let mut terms = TopicTerms::new();
    let sources: HashMap<Uuid, TopicSource> =
        summaries.iter().map(|(id, s)| (*id, TopicSource::new(s, counter, &mut terms))).collect();
    let mut records: Vec<serde_json::Value> = Vec::with_capacity(changed.len());
    for (ti, hash) in changed {
        let t = &topics[*ti];
        let first = t.segments.iter().map(|&i| rows[i].start_time).min();
        let last = t.segments.iter().map(|&i| rows[i].end_time).max();
        let members = newest(t, rows);
        let mut sums: Vec<&TopicSource> = Vec::new();
        let mut sessions: Vec<Uuid> = Vec::new();
        for &i in &members {
            if let Some(s) = sources.get(&rows[i].id) {
                sums.push(s);
                sessions.push(rows[i].session_id);
            }
        }
        let (summary, owners) = summarize_topic(&t.tag, &sums, &mut terms, cfg, counter);
        let lines: Vec<TopicLine> = summary
            .lines
            .iter()
            .zip(&owners)
            .map(|(l, &o)| TopicLine { session: sessions[o], seq: l.seq, text: l.text.clone() })
            .collect();
        let span = match (first, last) {
            (Some(a), Some(b)) => format!("{} to {}", a.format("%Y-%m-%d"), b.format("%Y-%m-%d")),
            _ => String::new(),
        };
        let description = describe_topic(&t.tag, t.segments.len(), t.sessions, &span, &summary, cfg);
        let facts: i64 = t.segments.iter().map(|&i| i64::from(rows[i].facts.max(0))).sum();
        records.push(serde_json::json!({
            "tag": t.tag, "aliases": t.aliases, "parent": t.parent, "with_tags": t.with,
            "segments": t.segments.len(), "turns": t.turns, "sessions": t.sessions,
            "first_time": first, "last_time": last, "broad": t.broad, "in_cover": t.in_cover,
            "summary": lines, "summary_tokens": summary.tokens, "description": description, "facts": facts,
            "members_hash": hash.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        }));
    }
    records
}
