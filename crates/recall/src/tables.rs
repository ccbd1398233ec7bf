//! The memory's tables (migration `*_memory.sql`): reading what a worker job needs, writing what
//! it derived, in one transaction. Every statement is scoped by namespace.
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use memex_memory::segment::Features;
use memex_memory::session::{Advance, Prior, Progress, SegmentOut, StoredTurn};
use memex_memory::supersede::{Placed, RESTATES_JACCARD, changes_state, restates, supersession};
use memex_memory::{Fact, FactExtractor, FactType, SeqSpan, Summary, TemporalStatus};
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
}

/// Registers sessions the worker has not seen, then leases up to `limit` that have new events
/// (or whose last turn waits to be closed and who have been quiet for `idle_secs`).
#[allow(clippy::too_many_arguments)]
pub async fn claim(
    pool: &PgPool,
    owner: &str,
    lease_secs: f64,
    limit: u32,
    idle_secs: f64,
    scope: Option<&[Uuid]>,
    busy: &[Uuid],
) -> Result<Vec<Claim>, RecallError> {
    sqlx::query(
        "INSERT INTO memory_progress (namespace_id, session_id)
         SELECT s.namespace_id, s.id FROM sessions s
         WHERE s.next_seq > 1 AND ($1::uuid[] IS NULL OR s.namespace_id = ANY($1))
           AND NOT EXISTS (SELECT 1 FROM memory_progress p WHERE p.namespace_id = s.namespace_id AND p.session_id = s.id)
         ON CONFLICT DO NOTHING",
    )
    .bind(scope)
    .execute(pool)
    .await?;
    type Row = (Uuid, Uuid, i64, i64, i64, Option<serde_json::Value>, i64);
    let rows: Vec<Row> = sqlx::query_as(
        "WITH c AS (
             SELECT p.namespace_id, p.session_id, s.next_seq - 1 AS head
             FROM memory_progress p JOIN sessions s ON s.id = p.session_id
             WHERE (s.next_seq - 1 > p.fact_seq
                    OR (s.next_seq - 1 > p.turn_seq AND (
                        SELECT e.ingest_time FROM events e WHERE e.session_id = s.id AND e.seq = s.next_seq - 1
                    ) <= now() - make_interval(secs => $5)))
               AND (p.leased_until IS NULL OR p.leased_until < now())
               AND ($3::uuid[] IS NULL OR p.namespace_id = ANY($3))
               AND NOT (p.session_id = ANY($4))
             ORDER BY p.updated_at, p.session_id LIMIT $2 FOR UPDATE OF p SKIP LOCKED
         )
         UPDATE memory_progress p SET leased_until = now() + make_interval(secs => $6), leased_by = $1
         FROM c WHERE p.namespace_id = c.namespace_id AND p.session_id = c.session_id
         RETURNING p.namespace_id, p.session_id, p.fact_seq, p.turn_seq, p.open_seq, p.state, c.head",
    )
    .bind(owner)
    .bind(i64::from(limit))
    .bind(scope)
    .bind(busy)
    .bind(idle_secs)
    .bind(lease_secs)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(ns, sid, fact_seq, turn_seq, open_seq, state, head)| {
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
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COALESCE(sum(s.next_seq - 1 - COALESCE(p.fact_seq, 0)), 0)::int8
         FROM sessions s LEFT JOIN memory_progress p ON p.namespace_id = s.namespace_id AND p.session_id = s.id
         WHERE s.next_seq > 1 AND ($1::uuid[] IS NULL OR s.namespace_id = ANY($1))",
    )
    .bind(scope)
    .fetch_one(pool)
    .await?;
    Ok(n.max(0) as u64)
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
    for t in &adv.new_turns {
        let signals = if t.signals.is_empty() { None } else { Some(serde_json::to_value(&t.signals)?) };
        let (start, end) = turn_times(adv, t.span);
        sqlx::query(
            "INSERT INTO memory_turns (namespace_id, session_id, first_seq, last_seq, start_time, end_time, tags, signals)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (namespace_id, session_id, first_seq) DO UPDATE
             SET last_seq = EXCLUDED.last_seq, tags = EXCLUDED.tags, signals = EXCLUDED.signals",
        )
        .bind(ns)
        .bind(session)
        .bind(t.span.first as i64)
        .bind(t.span.last as i64)
        .bind(start)
        .bind(end)
        .bind(&t.tags)
        .bind(signals)
        .execute(&mut *tx)
        .await?;
    }
    for s in &adv.segments {
        upsert_segment(&mut tx, ns, session, s).await?;
    }
    let mut placed_new: Vec<(Uuid, &Fact)> = Vec::new();
    for f in &adv.facts {
        let id = fact_id(session, f);
        let inserted = sqlx::query(
            "INSERT INTO memory_facts (namespace_id, id, session_id, first_seq, last_seq, fact_type, subject, subject_key,
                 verb, object, what, who, when_time, place, why, status, keywords, source)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
             ON CONFLICT (namespace_id, id) DO NOTHING",
        )
        .bind(ns)
        .bind(id)
        .bind(session)
        .bind(f.span.first as i64)
        .bind(f.span.last as i64)
        .bind(f.fact_type.name())
        .bind(&f.subject)
        .bind(f.subject_key())
        .bind(&f.verb)
        .bind(&f.object)
        .bind(&f.what)
        .bind(&f.who)
        .bind(f.when)
        .bind(&f.place)
        .bind(&f.why)
        .bind(f.status.name())
        .bind(fact_keywords(f))
        .bind(source)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted > 0 {
            placed_new.push((id, f));
        }
    }
    link_supersession(&mut tx, ns, session, &placed_new, verify).await?;
    // The facts each written segment holds (a topic's count is the sum over its segments).
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
    let state = serde_json::to_value(&adv.progress.extractor)?;
    sqlx::query(
        "UPDATE memory_progress SET fact_seq = $3, turn_seq = $4, open_seq = $5, state = $6, updated_at = now(),
                leased_until = NULL, leased_by = NULL
         WHERE namespace_id = $1 AND session_id = $2",
    )
    .bind(ns)
    .bind(session)
    .bind(adv.progress.fact_seq as i64)
    .bind(adv.progress.turn_seq as i64)
    .bind(adv.progress.open_seq as i64)
    .bind(state)
    .execute(&mut *tx)
    .await?;
    let changed = !adv.segments.is_empty();
    if changed {
        sqlx::query(
            "INSERT INTO memory_namespaces (namespace_id, version) VALUES ($1, 1)
             ON CONFLICT (namespace_id) DO UPDATE SET version = memory_namespaces.version + 1",
        )
        .bind(ns)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(changed)
}

/// A new turn's times: from the segment that holds it.
fn turn_times(adv: &Advance, span: SeqSpan) -> (DateTime<Utc>, DateTime<Utc>) {
    adv.segments
        .iter()
        .find(|s| s.segment.span.first <= span.first && span.last <= s.segment.span.last)
        .map(|s| (s.segment.start, s.segment.end))
        .unwrap_or((DateTime::<Utc>::UNIX_EPOCH, DateTime::<Utc>::UNIX_EPOCH))
}

async fn upsert_segment(
    tx: &mut Transaction<'_, Postgres>,
    ns: Uuid,
    session: Uuid,
    s: &SegmentOut,
) -> Result<(), RecallError> {
    let seg = &s.segment;
    sqlx::query(
        "INSERT INTO memory_segments (namespace_id, id, session_id, first_seq, last_seq, start_time, end_time, turns,
             tokens, tags, primary_tag, group_seq, keywords, vector, summary, summary_text, summary_tokens, closed)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
         ON CONFLICT (namespace_id, session_id, first_seq) DO UPDATE SET
             last_seq = EXCLUDED.last_seq, start_time = EXCLUDED.start_time, end_time = EXCLUDED.end_time,
             turns = EXCLUDED.turns, tokens = EXCLUDED.tokens, tags = EXCLUDED.tags, primary_tag = EXCLUDED.primary_tag,
             group_seq = EXCLUDED.group_seq, keywords = EXCLUDED.keywords, vector = EXCLUDED.vector,
             summary = EXCLUDED.summary, summary_text = EXCLUDED.summary_text,
             summary_tokens = EXCLUDED.summary_tokens, closed = EXCLUDED.closed",
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
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A fact in chain order: (when, session, first seq, last seq).
type Bound = (DateTime<Utc>, Uuid, i64, i64);

/// A dialogue fact with where its superseder stands in time.
#[derive(sqlx::FromRow)]
struct DialogueRow {
    #[sqlx(flatten)]
    slot: SlotRow,
    sup_when: Option<DateTime<Utc>>,
    sup_session: Option<Uuid>,
    sup_first: Option<i64>,
    sup_last: Option<i64>,
}

/// A fact row as supersession reads it.
#[derive(sqlx::FromRow)]
struct SlotRow {
    id: Uuid,
    session_id: Uuid,
    first_seq: i64,
    last_seq: i64,
    fact_type: String,
    subject: String,
    verb: String,
    object: String,
    what: String,
    who: String,
    when_time: DateTime<Utc>,
    keywords: Vec<String>,
    superseded_by: Option<Uuid>,
}

impl DialogueRow {
    /// Where its superseder stands in chain order, if it has one.
    fn superseder(&self) -> Option<Bound> {
        Some((self.sup_when?, self.sup_session?, self.sup_first?, self.sup_last?))
    }
}

impl SlotRow {
    fn order(&self) -> Bound {
        (self.when_time, self.session_id, self.first_seq, self.last_seq)
    }

    fn fact(&self) -> Fact {
        Fact {
            fact_type: FactType::parse(&self.fact_type).unwrap_or(FactType::World),
            subject: self.subject.clone(),
            verb: self.verb.clone(),
            object: self.object.clone(),
            what: self.what.clone(),
            who: self.who.clone(),
            when: self.when_time,
            place: String::new(),
            why: String::new(),
            status: TemporalStatus::Active,
            span: SeqSpan::new(self.first_seq as u64, self.last_seq as u64),
        }
    }
}

/// The rows as supersession places them (`facts` is `rows` read as facts).
fn placed<'a>(rows: &'a [SlotRow], facts: &'a [Fact]) -> Vec<Placed<'a>> {
    rows.iter()
        .zip(facts)
        .map(|(r, fact)| Placed { fact, session: r.session_id.as_u128(), keywords: &r.keywords, vector: None })
        .collect()
}

const SLOT_COLUMNS: &str = "id, session_id, first_seq, last_seq, fact_type, subject, verb, object, what, who, when_time, keywords, superseded_by";

fn lock_key(ns: Uuid, a: &str, b: &str) -> i64 {
    let h = blake3::hash(format!("{ns}\u{0}{a}\u{0}{b}").as_bytes());
    let mut k = [0u8; 8];
    k.copy_from_slice(&h.as_bytes()[..8]);
    i64::from_le_bytes(k)
}

/// Links the new facts into their chains. A subject's chain is recomputed around the new facts; a dialogue fact
/// is matched against the earlier and later facts sharing a keyword with it. Slots are locked
/// (advisory, in key order) so that two workers never link one slot at once.
async fn link_supersession(
    tx: &mut Transaction<'_, Postgres>,
    ns: Uuid,
    session: Uuid,
    new: &[(Uuid, &Fact)],
    verify: &Verify,
) -> Result<(), RecallError> {
    let mut slots: Vec<(i64, &Fact)> = new
        .iter()
        .map(|(_, f)| {
            let key = if f.fact_type.chained_by_subject() { f.subject_key() } else { f.who.clone() };
            (lock_key(ns, f.fact_type.name(), &key), *f)
        })
        .collect();
    slots.sort_by_key(|(k, _)| *k);
    let mut locked = std::collections::BTreeSet::new();
    for (k, _) in &slots {
        if locked.insert(*k) {
            sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(k).execute(&mut **tx).await?;
        }
    }
    // The new states of each subject's chain, relinked together.
    let mut chains: BTreeMap<(FactType, String), Vec<&Fact>> = BTreeMap::new();
    for (_, f) in new {
        if f.fact_type.chained_by_subject() && changes_state(f) {
            chains.entry((f.fact_type, f.subject_key())).or_default().push(*f);
        }
    }
    for states in chains.values() {
        link_chain(tx, ns, session, states).await?;
    }
    for (id, f) in new {
        if !f.fact_type.chained_by_subject() {
            let keywords = fact_keywords(f);
            if keywords.is_empty() {
                continue;
            }
            // Only facts that may restate it (keyword Jaccard at least RESTATES_JACCARD, with a
            // margin: the exact test is `restates`), and where each one's superseder stands: a
            // namespace's dialogue facts share some keyword by the thousand.
            let drows: Vec<DialogueRow> = sqlx::query_as(
                "SELECT f.id, f.session_id, f.first_seq, f.last_seq, f.fact_type, f.subject, f.verb, f.object,
                        f.what, f.who, f.when_time, f.keywords, f.superseded_by,
                        s.when_time AS sup_when, s.session_id AS sup_session, s.first_seq AS sup_first,
                        s.last_seq AS sup_last
                 FROM memory_facts f
                 LEFT JOIN memory_facts s ON s.namespace_id = f.namespace_id AND s.id = f.superseded_by
                 CROSS JOIN LATERAL (SELECT count(*) AS shared FROM unnest(f.keywords) k WHERE k = ANY($4)) o
                 WHERE f.namespace_id = $1 AND f.fact_type = $2 AND f.who = $3 AND f.keywords && $4
                   AND o.shared >= ($5::float8 - 1e-4) * (cardinality(f.keywords) + cardinality($4) - o.shared)
                   AND (f.id = $6 OR f.when_time >= $7 OR f.superseded_at IS NULL OR f.superseded_at >= $7)",
            )
            .bind(ns)
            .bind(f.fact_type.name())
            .bind(&f.who)
            .bind(&keywords)
            .bind(f64::from(RESTATES_JACCARD))
            // Earlier facts already superseded before this one cannot change: left out (a rule
            // restated in every session would otherwise be read whole each time).
            .bind(id)
            .bind(f.when)
            .fetch_all(&mut **tx)
            .await?;
            let sup: Vec<Option<Bound>> = drows.iter().map(DialogueRow::superseder).collect();
            let rows: Vec<SlotRow> = drows.into_iter().map(|d| d.slot).collect();
            let Some(me) = rows.iter().position(|r| r.id == *id) else { continue };
            let facts: Vec<Fact> = rows.iter().map(SlotRow::fact).collect();
            let placed = placed(&rows, &facts);
            // Its own link: the earliest later fact restating it.
            let mut mine: Option<usize> = None;
            for (j, later) in placed.iter().enumerate() {
                if j != me
                    && later.is_after(&placed[me])
                    && restates(&placed[me], later)
                    && mine.is_none_or(|m| later.order() < placed[m].order())
                    && verify(facts[me].clone(), facts[j].clone()).await
                {
                    mine = Some(j);
                }
            }
            set_link(tx, ns, rows[me].id, mine.map(|j| (rows[j].id, rows[j].when_time))).await?;
            // Earlier facts it restates, unless something earlier than it already did.
            let me_order = rows[me].order();
            for (j, older) in placed.iter().enumerate() {
                if j == me || !placed[me].is_after(older) || !restates(older, &placed[me]) {
                    continue;
                }
                if sup[j].is_none_or(|c| me_order < c) && verify(facts[j].clone(), facts[me].clone()).await {
                    set_link(tx, ns, rows[j].id, Some((rows[me].id, rows[me].when_time))).await?;
                }
            }
        }
    }
    Ok(())
}

/// Chain order, as `supersede::Placed` orders facts (a uuid compares as its big-endian u128).
const CHAIN_ORDER: &str = "(when_time, session_id, first_seq, last_seq)";
/// The facts a chain links: all but file reads, which leave the file as it was.
const CHAIN_MEMBER: &str = "NOT (fact_type = 'file' AND verb = 'read')";

/// Relinks a subject's chain where `new` (facts of one session, already stored) joined it. A chain
/// links each state to the next in time, so only the stretch from the state before the first new
/// fact to the state after the last one can change: that is read, however long the chain (a
/// subject such as `python reproduce.py` gathers a fact from every session of a namespace).
async fn link_chain(
    tx: &mut Transaction<'_, Postgres>,
    ns: Uuid,
    session: Uuid,
    new: &[&Fact],
) -> Result<(), RecallError> {
    let (Some(first), Some(last)) = (
        new.iter().min_by_key(|f| (f.when, f.span.first, f.span.last)),
        new.iter().max_by_key(|f| (f.when, f.span.first, f.span.last)),
    ) else {
        return Ok(());
    };
    let (kind, key) = (first.fact_type.name(), first.subject_key());
    let bound = |cmp: &str, dir: &str| {
        format!(
            "SELECT when_time, session_id, first_seq, last_seq FROM memory_facts
             WHERE namespace_id = $1 AND fact_type = $2 AND subject_key = $3 AND {CHAIN_MEMBER}
               AND {CHAIN_ORDER} {cmp} ($4, $5, $6, $7)
             ORDER BY when_time {dir}, session_id {dir}, first_seq {dir}, last_seq {dir} LIMIT 1"
        )
    };
    let edge = |sql: String, f: &Fact| {
        sqlx::query_as::<_, Bound>(sqlx::AssertSqlSafe(sql))
            .bind(ns)
            .bind(kind)
            .bind(key.clone())
            .bind(f.when)
            .bind(session)
            .bind(f.span.first as i64)
            .bind(f.span.last as i64)
    };
    let own = |f: &Fact| (f.when, session, f.span.first as i64, f.span.last as i64);
    let lo = edge(bound("<", "DESC"), first).fetch_optional(&mut **tx).await?.unwrap_or(own(first));
    let hi = edge(bound(">", "ASC"), last).fetch_optional(&mut **tx).await?.unwrap_or(own(last));
    let rows: Vec<SlotRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SLOT_COLUMNS} FROM memory_facts
         WHERE namespace_id = $1 AND fact_type = $2 AND subject_key = $3
           AND {CHAIN_ORDER} BETWEEN ($4, $5, $6, $7) AND ($8, $9, $10, $11)"
    )))
    .bind(ns)
    .bind(kind)
    .bind(&key)
    .bind(lo.0)
    .bind(lo.1)
    .bind(lo.2)
    .bind(lo.3)
    .bind(hi.0)
    .bind(hi.1)
    .bind(hi.2)
    .bind(hi.3)
    .fetch_all(&mut **tx)
    .await?;
    let facts: Vec<Fact> = rows.iter().map(SlotRow::fact).collect();
    let links = supersession(&placed(&rows, &facts));
    for (i, link) in links.into_iter().enumerate() {
        let r = &rows[i];
        // The state after the stretch keeps its own link: what supersedes it lies beyond.
        if r.order() == hi && hi != own(last) {
            continue;
        }
        let by = link.map(|j| rows[j].id);
        if by != r.superseded_by {
            set_link(tx, ns, r.id, link.map(|j| (rows[j].id, rows[j].when_time))).await?;
        }
    }
    Ok(())
}

async fn set_link(
    tx: &mut Transaction<'_, Postgres>,
    ns: Uuid,
    id: Uuid,
    by: Option<(Uuid, DateTime<Utc>)>,
) -> Result<(), RecallError> {
    sqlx::query("UPDATE memory_facts SET superseded_by = $3, superseded_at = $4 WHERE namespace_id = $1 AND id = $2")
        .bind(ns)
        .bind(id)
        .bind(by.map(|b| b.0))
        .bind(by.map(|b| b.1))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A stored segment summary.
pub fn summary_of(v: serde_json::Value) -> Result<Summary, RecallError> {
    Ok(serde_json::from_value(v)?)
}
