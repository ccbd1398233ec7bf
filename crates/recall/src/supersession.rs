//! Supersession in the tables: links the facts a job wrote into their chains. A subject's
//! chain (files, commands, tests, packages, errors) is relinked around the new facts; a dialogue
//! fact (a rule, preference, decision) is matched by keyword against the facts it may restate or
//! be restated by. Both read a bounded stretch of the table however long the chain or however
//! many rules share a keyword, and both run in the job's transaction.
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use memex_memory::supersede::{Placed, RESTATES_JACCARD, changes_state, restates, supersession};
use memex_memory::{Fact, FactType, SeqSpan, TemporalStatus};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::RecallError;
use crate::tables::{Verify, fact_keywords};
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
pub(crate) async fn link_supersession(
    tx: &mut Transaction<'_, Postgres>,
    ns: Uuid,
    session: Uuid,
    new: &[(Uuid, &Fact)],
    verify: &Verify,
) -> Result<(), RecallError> {
    let mut keys: Vec<i64> = new
        .iter()
        .map(|(_, f)| {
            let key = if f.fact_type.chained_by_subject() { f.subject_key() } else { f.who.clone() };
            lock_key(ns, f.fact_type.name(), &key)
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        return Ok(());
    }
    // One round trip; `unnest` yields the keys in the order given, so they are taken in order.
    sqlx::query("SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::int8[]) AS k")
        .bind(&keys)
        .execute(&mut **tx)
        .await?;
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
            let drows: Vec<DialogueRow> = sqlx::query_as(sqlx::AssertSqlSafe(DIALOGUE_CANDIDATES.as_str()))
                .bind(ns)
                .bind(f.fact_type.name())
                .bind(&f.who)
                .bind(&keywords)
                .bind(f64::from(RESTATES_JACCARD))
                .bind(id)
                .bind(f.when)
                .bind(session)
                .bind(f.span.first as i64)
                .bind(f.span.last as i64)
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
            // Most new facts stay the latest: their row already says so, and an update that
            // writes what is there is a round trip under the speaker's lock for nothing.
            if rows[me].superseded_by != mine.map(|j| rows[j].id) {
                set_link(tx, ns, rows[me].id, mine.map(|j| (rows[j].id, rows[j].when_time))).await?;
            }
            // Earlier facts it restates, unless something earlier than it already did.
            let me_order = rows[me].order();
            for (j, older) in placed.iter().enumerate() {
                if j == me || !placed[me].is_after(older) || !restates(older, &placed[me]) {
                    continue;
                }
                if rows[j].superseded_by != Some(rows[me].id)
                    && sup[j].is_none_or(|c| me_order < c)
                    && verify(facts[j].clone(), facts[me].clone()).await
                {
                    set_link(tx, ns, rows[j].id, Some((rows[me].id, rows[me].when_time))).await?;
                }
            }
        }
    }
    Ok(())
}

/// The fact types matched by keyword rather than chained by subject, as SQL (the partial index
/// of migration `*_memory_dialogue_indexes.sql` and the triggers filling `memory_fact_keywords`
/// carry the same predicate; a test checks it against [`FactType::chained_by_subject`]).
const DIALOGUE: &str = "f.fact_type NOT IN ('file', 'command', 'test', 'package', 'error')";
/// Later facts read per new dialogue fact: its own superseder is the first of them restating it.
const LATER_CANDIDATES: i64 = 8;

/// The facts a new dialogue fact ($6, at $7 in chain order with $8-$10) may restate or be
/// restated by, each with where its superseder stands. Keyword Jaccard at least $5 (with a
/// margin: the exact test is `restates`). Three reads, each bounded by an index however many
/// rules share its keywords: earlier facts not superseded; earlier facts superseded by
/// something not before it (only those can be relinked to it); and the first later facts
/// restating it, in chain order (its own link is the earliest of them).
///
/// The first two read `memory_fact_keywords` (one row per keyword, btree indexes): the tenant
/// wall's policy keeps the planner from using an index through `&&` or `@>`, which are not
/// leakproof, and on memory_facts itself they read every dialogue fact (10-17 ms a rule). When
/// they read memory_facts with the namespace, type and speaker inside, the generic plan a
/// prepared statement gets after five runs walked every rule of the speaker through the
/// chain-order index (105 ms); the keyword table's indexes lead with those columns. Each
/// candidate is then looked up by its key (a lateral read the planner cannot turn around: as a
/// join, the generic plan walked the speaker's rules the other way, 15-40 ms).
static DIALOGUE_CANDIDATES: std::sync::LazyLock<String> = std::sync::LazyLock::new(dialogue_candidates);

fn dialogue_candidates() -> String {
    let keyed = "k.namespace_id = $1 AND k.fact_type = $2 AND k.who = $3 AND k.keyword = ANY($4)";
    let same = format!("f.namespace_id = $1 AND f.fact_type = $2 AND f.who = $3 AND {DIALOGUE} AND f.keywords && $4");
    let close = "o.shared >= ($5::float8 - 1e-4) * (cardinality(f.keywords) + cardinality($4) - o.shared)";
    let shared = "CROSS JOIN LATERAL (SELECT count(*) AS shared FROM unnest(f.keywords) k WHERE k = ANY($4)) o";
    format!(
        "WITH c AS (
             (SELECT k.fact_id AS id FROM memory_fact_keywords k WHERE {keyed} AND k.superseded_at IS NULL)
             UNION
             (SELECT k.fact_id FROM memory_fact_keywords k WHERE {keyed}
                AND k.superseded_at >= $7 AND k.when_time <= $7)
             UNION
             (SELECT f.id FROM memory_facts f {shared}
              WHERE {same} AND {close} AND {CHAIN_ORDER_F} > ($7, $8, $9, $10)
              ORDER BY f.when_time, f.session_id, f.first_seq, f.last_seq LIMIT {LATER_CANDIDATES})
             UNION
             SELECT $6::uuid
         )
         SELECT f.id, f.session_id, f.first_seq, f.last_seq, f.fact_type, f.subject, f.verb, f.object,
                f.what, f.who, f.when_time, f.keywords, f.superseded_by,
                s.when_time AS sup_when, s.session_id AS sup_session, s.first_seq AS sup_first,
                s.last_seq AS sup_last
         FROM c CROSS JOIN LATERAL (
             SELECT * FROM memory_facts f WHERE f.namespace_id = $1 AND f.id = c.id
               AND f.fact_type = $2 AND f.who = $3 AND f.keywords && $4 LIMIT 1
         ) f
         LEFT JOIN memory_facts s ON s.namespace_id = f.namespace_id AND s.id = f.superseded_by
         {shared}
         WHERE f.id = $6 OR {close}"
    )
}

/// Chain order, as `supersede::Placed` orders facts (a uuid compares as its big-endian u128).
const CHAIN_ORDER: &str = "(when_time, session_id, first_seq, last_seq)";
const CHAIN_ORDER_F: &str = "(f.when_time, f.session_id, f.first_seq, f.last_seq)";
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
    let (mut ids, mut bys, mut ats) = (Vec::new(), Vec::new(), Vec::new());
    for (i, link) in links.into_iter().enumerate() {
        let r = &rows[i];
        // The state after the stretch keeps its own link: what supersedes it lies beyond.
        if r.order() == hi && hi != own(last) {
            continue;
        }
        let by = link.map(|j| rows[j].id);
        if by != r.superseded_by {
            ids.push(r.id);
            bys.push(by);
            ats.push(link.map(|j| rows[j].when_time));
        }
    }
    // The chain's changed links in one statement (each row is one fact: no order between them).
    if !ids.is_empty() {
        sqlx::query(
            "UPDATE memory_facts f SET superseded_by = x.by, superseded_at = x.at
             FROM unnest($2::uuid[], $3::uuid[], $4::timestamptz[]) AS x(id, by, at)
             WHERE f.namespace_id = $1 AND f.id = x.id",
        )
        .bind(ns)
        .bind(&ids)
        .bind(&bys)
        .bind(&ats)
        .execute(&mut **tx)
        .await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The dialogue predicate (and the partial indexes that carry it) names exactly the types
    /// not chained by subject: a new chained type left out of it would be matched by keyword.
    #[test]
    fn the_dialogue_predicate_names_the_chained_types() {
        let chained: Vec<String> =
            FactType::ALL.iter().filter(|t| t.chained_by_subject()).map(|t| format!("'{}'", t.name())).collect();
        assert_eq!(DIALOGUE, format!("f.fact_type NOT IN ({})", chained.join(", ")));
        let migration = include_str!("../../../migrations/20261126000005_memory_dialogue_indexes.sql");
        let in_index = format!("fact_type NOT IN ({})", chained.join(", "));
        assert_eq!(migration.matches(&in_index).count(), 3, "each partial index carries {in_index}");
        let keywords = include_str!("../../../migrations/20261127000010_memory_fact_keywords.sql");
        assert_eq!(keywords.matches(&in_index).count(), 3, "both triggers and the backfill carry {in_index}");
    }
}
