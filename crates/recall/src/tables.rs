//! The memory's tables (migration `*_memory.sql`): reading what a worker job needs, writing what
//! it derived, in one transaction. Every statement is scoped by namespace.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use memex_memory::segment::Features;
use memex_memory::session::{Advance, Prior, Progress, SegmentOut, StoredTurn};
use memex_memory::{Fact, FactExtractor, SeqSpan, Summary};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::RecallError;

/// Asks whether a newer dialogue fact really supersedes an older one (the interpreter's
/// verification; the heuristic's is always yes).
pub type Verify = dyn Fn(Fact, Fact) -> futures::future::BoxFuture<'static, bool> + Send + Sync;

/// A stable id for something derived from a session: the same inputs give the same id on
/// every replica and every rebuild.
pub fn derived_id(kind: &str, session: Uuid, parts: &[&str]) -> Uuid {
    let mut h = blake3::Hasher::new();
    h.update(kind.as_bytes());
    h.update(session.as_bytes());
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    let b = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&b.as_bytes()[..16]);
    // Version 8 (custom), RFC 4122 variant.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Uuid::from_bytes(bytes)
}

pub fn segment_id(session: Uuid, first_seq: u64) -> Uuid {
    derived_id("segment", session, &[&first_seq.to_string()])
}

pub fn fact_id(session: Uuid, f: &Fact) -> Uuid {
    derived_id(
        "fact",
        session,
        &[
            f.fact_type.name(),
            &f.verb,
            &f.subject_key(),
            &f.span.first.to_string(),
            &f.span.last.to_string(),
            &f.object,
        ],
    )
}

/// A session the worker has leased.
#[derive(Debug, Clone)]
pub struct Claim {
    pub namespace_id: Uuid,
    pub session_id: Uuid,
    pub progress: Progress,
    pub head: u64,
    /// The database's clock when the session was leased: what "quiet for `idle_close_secs`" is
    /// measured against, since event times are the database's too (a worker's own clock may be
    /// off; see `tests/crash/clock_skew.rs`).
    pub claimed_at: chrono::DateTime<chrono::Utc>,
}

/// Registers the sessions the worker has not seen (an anti-join over every session: the worker
/// runs it at most once per `settle_ms`, not on every claim).
pub async fn register(pool: &PgPool, scope: Option<&[Uuid]>) -> Result<(), RecallError> {
    // The namespace's session count moves with the rows this statement inserts.
    sqlx::query(
        "WITH added AS (
             INSERT INTO memory_progress (namespace_id, session_id)
             SELECT s.namespace_id, s.id FROM sessions s
             WHERE s.next_seq > 1 AND ($1::uuid[] IS NULL OR s.namespace_id = ANY($1))
               AND NOT EXISTS (SELECT 1 FROM memory_progress p WHERE p.namespace_id = s.namespace_id AND p.session_id = s.id)
             ON CONFLICT DO NOTHING
             RETURNING namespace_id
         )
         INSERT INTO memory_namespaces (namespace_id, built_version, sessions)
         SELECT namespace_id, 0, count(*) FROM added GROUP BY namespace_id
         ON CONFLICT (namespace_id) DO UPDATE SET sessions = memory_namespaces.sessions + EXCLUDED.sessions",
    )
    .bind(scope)
    .execute(pool)
    .await?;
    Ok(())
}

/// Leases up to `limit` registered sessions ([`register`]) that have new events
/// (or whose last turn waits to be closed and who have been quiet for `idle_secs`), once their
/// last job is `settle_secs` old or a full job (`full` events) waits. Namespaces
/// take turns: each one's longest-waiting session first, then each one's second, so a bulk
/// import into one namespace does not hold back the memory of the others.
pub async fn claim(
    pool: &PgPool,
    owner: &str,
    lease_secs: f64,
    limit: u32,
    idle_secs: f64,
    settle: (f64, u32),
    scope: Option<&[Uuid]>,
) -> Result<Vec<Claim>, RecallError> {
    type Row = (Uuid, Uuid, i64, i64, i64, Option<serde_json::Value>, i64, chrono::DateTime<chrono::Utc>);
    let rows: Vec<Row> = sqlx::query_as(
        "WITH due AS (
             SELECT p.namespace_id, p.session_id, s.next_seq - 1 AS head, p.updated_at,
                    row_number() OVER (PARTITION BY p.namespace_id ORDER BY p.updated_at, p.session_id) AS turn
             FROM memory_progress p JOIN sessions s ON s.id = p.session_id AND s.namespace_id = p.namespace_id
             WHERE (s.next_seq - 1 > p.fact_seq
                    OR (s.next_seq - 1 > p.turn_seq AND (
                        SELECT e.ingest_time FROM events e
                        WHERE e.session_id = s.id AND e.seq = s.next_seq - 1 AND e.namespace_id = s.namespace_id
                    ) <= now() - make_interval(secs => $4)))
               AND (p.leased_until IS NULL OR p.leased_until < now())
               AND (p.updated_at <= now() - make_interval(secs => $6) OR s.next_seq - 1 - p.fact_seq >= $7)
               AND ($3::uuid[] IS NULL OR p.namespace_id = ANY($3))
         ), c AS (
             SELECT p.namespace_id, p.session_id, due.head
             FROM memory_progress p JOIN due ON due.namespace_id = p.namespace_id AND due.session_id = p.session_id
             ORDER BY due.turn, due.updated_at, due.session_id LIMIT $2 FOR UPDATE OF p SKIP LOCKED
         )
         UPDATE memory_progress p SET leased_until = now() + make_interval(secs => $5), leased_by = $1
         FROM c WHERE p.namespace_id = c.namespace_id AND p.session_id = c.session_id
         RETURNING p.namespace_id, p.session_id, p.fact_seq, p.turn_seq, p.open_seq, p.state, c.head, now()",
    )
    .bind(owner)
    .bind(i64::from(limit))
    .bind(scope)
    .bind(idle_secs)
    .bind(lease_secs)
    .bind(settle.0)
    .bind(i64::from(settle.1))
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(ns, sid, fact_seq, turn_seq, open_seq, state, head, claimed_at)| {
            let extractor: FactExtractor = match state {
                Some(v) => serde_json::from_value(v)?,
                None => FactExtractor::default(),
            };
            Ok(Claim {
                namespace_id: ns,
                session_id: sid,
                progress: Progress {
                    fact_seq: fact_seq as u64,
                    turn_seq: turn_seq as u64,
                    open_seq: open_seq as u64,
                    extractor,
                },
                head: head.max(0) as u64,
                claimed_at,
            })
        })
        .collect()
}

pub async fn renew(pool: &PgPool, ns: Uuid, session: Uuid, owner: &str, lease_secs: f64) -> Result<(), RecallError> {
    sqlx::query(
        "UPDATE memory_progress SET leased_until = now() + make_interval(secs => $4)
         WHERE namespace_id = $1 AND session_id = $2 AND leased_by = $3",
    )
    .bind(ns)
    .bind(session)
    .bind(owner)
    .bind(lease_secs)
    .execute(pool)
    .await?;
    Ok(())
}

/// Gives a session back: at once, or after `retry_secs` (after an error).
pub async fn release(pool: &PgPool, ns: Uuid, session: Uuid, retry_secs: f64) -> Result<(), RecallError> {
    sqlx::query(
        "UPDATE memory_progress SET leased_until = CASE WHEN $3 > 0 THEN now() + make_interval(secs => $3) END,
                leased_by = NULL
         WHERE namespace_id = $1 AND session_id = $2",
    )
    .bind(ns)
    .bind(session)
    .bind(retry_secs)
    .execute(pool)
    .await?;
    Ok(())
}

/// Events appended but not yet read by the memory worker.
pub async fn backlog(pool: &PgPool, scope: Option<&[Uuid]>) -> Result<u64, RecallError> {
    // Events appended, less the events read (kept per namespace by `write_job`): joining every
    // session to its progress took 12 ms at 8,500 sessions.
    let (n,): (i64,) = sqlx::query_as(
        "SELECT (SELECT COALESCE(sum(next_seq - 1), 0) FROM sessions
                 WHERE next_seq > 1 AND ($1::uuid[] IS NULL OR namespace_id = ANY($1)))::int8
              - (SELECT COALESCE(sum(events), 0) FROM memory_namespaces
                 WHERE $1::uuid[] IS NULL OR namespace_id = ANY($1))::int8",
    )
    .bind(scope)
    .fetch_one(pool)
    .await?;
    Ok(n.max(0) as u64)
}

/// Sessions read to their last event that have no stored line map (read before the worker stored
/// maps, or whose map was not written): the worker's backfill when it has nothing else to do.
pub async fn unmapped(pool: &PgPool, scope: Option<&[Uuid]>, limit: i64) -> Result<Vec<(Uuid, Uuid)>, RecallError> {
    Ok(sqlx::query_as(
        "SELECT p.namespace_id, p.session_id FROM memory_progress p
         JOIN sessions s ON s.id = p.session_id AND s.namespace_id = p.namespace_id
         WHERE p.fact_seq >= s.next_seq - 1 AND s.next_seq > 1 AND s.erased_by IS NULL
           AND ($1::uuid[] IS NULL OR p.namespace_id = ANY($1))
           AND NOT EXISTS (SELECT 1 FROM view_line_maps m
                           WHERE m.namespace_id = p.namespace_id AND m.session_id = p.session_id)
         ORDER BY p.namespace_id, p.session_id LIMIT $2",
    )
    .bind(scope)
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

fn turn_of(
    first: i64,
    last: i64,
    tags: Vec<String>,
    signals: Option<serde_json::Value>,
) -> Result<StoredTurn, RecallError> {
    let signals: Vec<Fact> = match signals {
        Some(v) => serde_json::from_value(v)?,
        None => Vec::new(),
    };
    Ok(StoredTurn { span: SeqSpan::new(first as u64, last as u64), tags, signals })
}

/// Merge-back compares a closing segment with at most this many earlier ones (the core does too).
pub use memex_memory::session::MERGE_BACK_WINDOW;

/// What a job on `session` needs from the store: the open segment's turns, the last few turns,
/// and the earlier closed segments' features.
pub async fn prior(pool: &PgPool, ns: Uuid, session: Uuid, open_seq: u64) -> Result<Prior, RecallError> {
    type TurnRow = (i64, i64, Vec<String>, Option<serde_json::Value>);
    let open: Vec<TurnRow> = if open_seq == 0 {
        Vec::new()
    } else {
        sqlx::query_as(
            "SELECT first_seq, last_seq, tags, signals FROM memory_turns
             WHERE namespace_id = $1 AND session_id = $2 AND first_seq >= $3 ORDER BY first_seq",
        )
        .bind(ns)
        .bind(session)
        .bind(open_seq as i64)
        .fetch_all(pool)
        .await?
    };
    let mut recent: Vec<TurnRow> = sqlx::query_as(
        "SELECT first_seq, last_seq, tags, signals FROM memory_turns
         WHERE namespace_id = $1 AND session_id = $2 ORDER BY first_seq DESC LIMIT $3",
    )
    .bind(ns)
    .bind(session)
    .bind(memex_memory::tags::LOOKBACK as i64)
    .fetch_all(pool)
    .await?;
    recent.reverse();
    type SegmentRow = (i64, Vec<String>, Vec<String>, Option<Vec<f32>>);
    let earlier: Vec<SegmentRow> = sqlx::query_as(
        "SELECT group_seq, tags, keywords, vector FROM (
             SELECT first_seq, group_seq, tags, keywords, vector FROM memory_segments
             WHERE namespace_id = $1 AND session_id = $2 AND closed AND ($3 = 0 OR first_seq < $3)
             ORDER BY first_seq DESC LIMIT $4
         ) s ORDER BY first_seq",
    )
    .bind(ns)
    .bind(session)
    .bind(open_seq as i64)
    .bind(MERGE_BACK_WINDOW as i64)
    .fetch_all(pool)
    .await?;
    Ok(Prior {
        open_turns: open.into_iter().map(|(f, l, t, s)| turn_of(f, l, t, s)).collect::<Result<_, _>>()?,
        recent: recent.into_iter().map(|(f, l, t, s)| turn_of(f, l, t, s)).collect::<Result<_, _>>()?,
        earlier: earlier
            .into_iter()
            .map(|(g, tags, keywords, vector)| (g as u64, Features { tags, keywords, vector }))
            .collect(),
    })
}

/// The keywords a fact is matched by for supersession (its object, or its subject).
pub fn fact_keywords(f: &Fact) -> Vec<String> {
    let text = if f.object.is_empty() { &f.subject } else { &f.object };
    memex_memory::tags::keywords(text)
}

/// Writes what a job derived, and its progress, in one transaction; links supersession for the
/// new facts. True when segments changed (the namespace's topics are then due a rebuild).
pub async fn write_job(
    pool: &PgPool,
    ns: Uuid,
    session: Uuid,
    adv: &Advance,
    source: &str,
    verify: &Verify,
) -> Result<bool, RecallError> {
    let mut tx = pool.begin().await?;
    insert_turns(&mut tx, ns, session, adv).await?;
    let mut new_segments = 0i64;
    for s in &adv.segments {
        new_segments += i64::from(upsert_segment(&mut tx, ns, session, s).await?);
    }
    let placed_new = insert_facts(&mut tx, ns, session, &adv.facts, source).await?;
    // The facts each written segment holds (a topic's count is the sum over its segments):
    // before the links, which hold locks other jobs wait for until this transaction ends.
    for s in &adv.segments {
        sqlx::query(
            "UPDATE memory_segments SET facts = (SELECT count(*) FROM memory_facts f
                 WHERE f.namespace_id = $1 AND f.session_id = $2 AND f.first_seq BETWEEN $3 AND $4 AND f.verb <> 'read')
             WHERE namespace_id = $1 AND session_id = $2 AND first_seq = $3",
        )
        .bind(ns)
        .bind(session)
        .bind(s.segment.span.first as i64)
        .bind(s.segment.span.last as i64)
        .execute(&mut *tx)
        .await?;
    }
    crate::supersession::link_supersession(&mut tx, ns, session, &placed_new, verify).await?;
    let state = serde_json::to_value(&adv.progress.extractor)?;
    // The progress row is locked first so the events-read count moves by exactly what this
    // commit moves `fact_seq` (a job whose lease ran out may commit after another).
    let moved: Option<(i64,)> = sqlx::query_as(
        "UPDATE memory_progress p SET fact_seq = $3, turn_seq = $4, open_seq = $5, state = $6, updated_at = now(),
                leased_until = NULL, leased_by = NULL
         FROM (SELECT fact_seq FROM memory_progress WHERE namespace_id = $1 AND session_id = $2 FOR UPDATE) o
         WHERE p.namespace_id = $1 AND p.session_id = $2
         RETURNING o.fact_seq",
    )
    .bind(ns)
    .bind(session)
    .bind(adv.progress.fact_seq as i64)
    .bind(adv.progress.turn_seq as i64)
    .bind(adv.progress.open_seq as i64)
    .bind(state)
    .fetch_optional(&mut *tx)
    .await?;
    // Its progress is gone: the namespace's memory was deleted for a rebuild meanwhile.
    let Some((read_before,)) = moved else {
        tx.rollback().await?;
        return Ok(false);
    };
    // The version (segments changed: topics are due) and the counts GetMemoryStatus reads.
    let changed = !adv.segments.is_empty();
    let read = adv.progress.fact_seq as i64 - read_before;
    if changed || !placed_new.is_empty() || read != 0 {
        sqlx::query(
            "INSERT INTO memory_namespaces (namespace_id, version, built_version, segments, facts, events)
             VALUES ($1, $2, 0, $3, $4, $5)
             ON CONFLICT (namespace_id) DO UPDATE SET version = memory_namespaces.version + EXCLUDED.version,
                 segments = memory_namespaces.segments + EXCLUDED.segments,
                 facts = memory_namespaces.facts + EXCLUDED.facts, events = memory_namespaces.events + EXCLUDED.events",
        )
        .bind(ns)
        .bind(i64::from(changed))
        .bind(new_segments)
        .bind(placed_new.len() as i64)
        .bind(read)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(changed)
}

/// A timestamp as JSON hands it to Postgres: microseconds, truncated, as a bound parameter is.
fn pg_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The job's closed turns, in one statement (a turn read again is rewritten).
async fn insert_turns(
    tx: &mut Transaction<'_, Postgres>,
    ns: Uuid,
    session: Uuid,
    adv: &Advance,
) -> Result<(), RecallError> {
    // By first seq, the last one written winning, as one upsert per turn did.
    let mut rows: BTreeMap<u64, serde_json::Value> = BTreeMap::new();
    for t in &adv.new_turns {
        let signals = if t.signals.is_empty() { None } else { Some(serde_json::to_value(&t.signals)?) };
        let (start, end) = turn_times(adv, t.span);
        rows.insert(
            t.span.first,
            serde_json::json!({"first_seq": t.span.first, "last_seq": t.span.last, "start_time": pg_time(start),
                               "end_time": pg_time(end), "tags": t.tags, "signals": signals}),
        );
    }
    if rows.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO memory_turns (namespace_id, session_id, first_seq, last_seq, start_time, end_time, tags, signals)
         SELECT $1, $2, x.first_seq, x.last_seq, x.start_time, x.end_time, x.tags, x.signals
         FROM jsonb_to_recordset($3::jsonb) AS x(first_seq int8, last_seq int8, start_time timestamptz,
             end_time timestamptz, tags text[], signals jsonb)
         ON CONFLICT (namespace_id, session_id, first_seq) DO UPDATE
         SET last_seq = EXCLUDED.last_seq, tags = EXCLUDED.tags, signals = EXCLUDED.signals",
    )
    .bind(ns)
    .bind(session)
    .bind(serde_json::Value::Array(rows.into_values().collect()))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The job's facts, in one statement; returns those that were new (a fact read again keeps its
/// row and its links), in the job's order, with their ids.
async fn insert_facts<'a>(
    tx: &mut Transaction<'_, Postgres>,
    ns: Uuid,
    session: Uuid,
    facts: &'a [Fact],
    source: &str,
) -> Result<Vec<(Uuid, &'a Fact)>, RecallError> {
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<(Uuid, &Fact)> =
        facts.iter().map(|f| (fact_id(session, f), f)).filter(|(id, _)| seen.insert(*id)).collect();
    if firsts.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<serde_json::Value> = firsts
        .iter()
        .map(|(id, f)| {
            serde_json::json!({"id": id, "first_seq": f.span.first, "last_seq": f.span.last,
                "fact_type": f.fact_type.name(), "subject": f.subject, "subject_key": f.subject_key(), "verb": f.verb,
                "object": f.object, "what": f.what, "who": f.who, "when_time": pg_time(f.when), "place": f.place,
                "why": f.why, "status": f.status.name(), "keywords": fact_keywords(f)})
        })
        .collect();
    let inserted: Vec<(Uuid,)> = sqlx::query_as(
        "INSERT INTO memory_facts (namespace_id, id, session_id, first_seq, last_seq, fact_type, subject, subject_key,
             verb, object, what, who, when_time, place, why, status, keywords, source)
         SELECT $1, x.id, $2, x.first_seq, x.last_seq, x.fact_type, x.subject, x.subject_key, x.verb, x.object,
                x.what, x.who, x.when_time, x.place, x.why, x.status, x.keywords, $4
         FROM jsonb_to_recordset($3::jsonb) AS x(id uuid, first_seq int8, last_seq int8, fact_type text,
             subject text, subject_key text, verb text, object text, what text, who text, when_time timestamptz,
             place text, why text, status text, keywords text[])
         ON CONFLICT (namespace_id, id) DO NOTHING
         RETURNING id",
    )
    .bind(ns)
    .bind(session)
    .bind(serde_json::Value::Array(rows))
    .bind(source)
    .fetch_all(&mut **tx)
    .await?;
    let new: std::collections::HashSet<Uuid> = inserted.into_iter().map(|(id,)| id).collect();
    Ok(firsts.into_iter().filter(|(id, _)| new.contains(id)).collect())
}

/// A new turn's times: from the segment that holds it.
fn turn_times(adv: &Advance, span: SeqSpan) -> (DateTime<Utc>, DateTime<Utc>) {
    adv.segments
        .iter()
        .find(|s| s.segment.span.first <= span.first && span.last <= s.segment.span.last)
        .map(|s| (s.segment.start, s.segment.end))
        .unwrap_or((DateTime::<Utc>::UNIX_EPOCH, DateTime::<Utc>::UNIX_EPOCH))
}

/// Writes a segment; true when it is new (not a rewrite of the open one).
async fn upsert_segment(
    tx: &mut Transaction<'_, Postgres>,
    ns: Uuid,
    session: Uuid,
    s: &SegmentOut,
) -> Result<bool, RecallError> {
    let seg = &s.segment;
    let (inserted,): (bool,) = sqlx::query_as(
        "INSERT INTO memory_segments (namespace_id, id, session_id, first_seq, last_seq, start_time, end_time, turns,
             tokens, tags, primary_tag, group_seq, keywords, vector, summary, summary_text, summary_tokens, closed)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
         ON CONFLICT (namespace_id, session_id, first_seq) DO UPDATE SET
             last_seq = EXCLUDED.last_seq, start_time = EXCLUDED.start_time, end_time = EXCLUDED.end_time,
             turns = EXCLUDED.turns, tokens = EXCLUDED.tokens, tags = EXCLUDED.tags, primary_tag = EXCLUDED.primary_tag,
             group_seq = EXCLUDED.group_seq, keywords = EXCLUDED.keywords, vector = EXCLUDED.vector,
             summary = EXCLUDED.summary, summary_text = EXCLUDED.summary_text,
             summary_tokens = EXCLUDED.summary_tokens, closed = EXCLUDED.closed
         RETURNING xmax = 0",
    )
    .bind(ns)
    .bind(segment_id(session, seg.span.first))
    .bind(session)
    .bind(seg.span.first as i64)
    .bind(seg.span.last as i64)
    .bind(seg.start)
    .bind(seg.end)
    .bind(seg.turns.len() as i32)
    .bind(seg.tokens as i32)
    .bind(&seg.tags)
    .bind(&seg.primary_tag)
    .bind(seg.group as i64)
    .bind(&s.features.keywords)
    .bind(&s.features.vector)
    .bind(serde_json::to_value(&seg.summary)?)
    .bind(seg.summary.render())
    .bind(seg.summary.tokens as i32)
    .bind(s.closed)
    .fetch_one(&mut **tx)
    .await?;
    Ok(inserted)
}

/// A stored segment summary.
pub fn summary_of(v: serde_json::Value) -> Result<Summary, RecallError> {
    Ok(serde_json::from_value(v)?)
}
