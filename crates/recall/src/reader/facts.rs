//! `query_facts` and `get_fact`: structured lookups with verb expansion, supersession applied,
//! and `as_of` (what held then).
use std::sync::Arc;

use chrono::{DateTime, Utc};
use memex_memory::verbs::{close_verbs, expand_verb};
use memex_memory::{FactType, TemporalStatus};
use uuid::Uuid;

use super::{FactView, Memory};
use crate::RecallError;
use crate::pointers::PointerBatch;

pub(crate) const FACT_COLUMNS: &str = "f.id, f.session_id, f.first_seq, f.last_seq, f.fact_type, f.subject, f.verb, f.object, \
     f.what, f.who, f.when_time, f.place, f.why, f.status, f.source, f.superseded_by, f.superseded_at";

#[derive(sqlx::FromRow, Debug, Clone)]
pub(crate) struct FactRow {
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
    place: String,
    why: String,
    status: String,
    source: String,
    superseded_by: Option<Uuid>,
    superseded_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
pub(crate) struct SegFactRow {
    pub segment_id: Uuid,
    #[sqlx(flatten)]
    pub fact: FactRow,
}

impl FactRow {
    pub(crate) fn view(self) -> FactView {
        FactView {
            id: self.id,
            fact_type: self.fact_type,
            subject: self.subject,
            verb: self.verb,
            object: self.object,
            what: self.what,
            who: self.who,
            when: self.when_time,
            place: self.place,
            why: self.why,
            status: self.status,
            session: self.session_id,
            first_seq: self.first_seq as u64,
            last_seq: self.last_seq as u64,
            pointer: String::new(),
            superseded_by: self.superseded_by,
            superseded_at: self.superseded_at,
            source: self.source,
        }
    }
}

/// A structured fact lookup; every filter is optional.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FactQuery {
    pub subject: String,
    pub verb: String,
    pub status: String,
    pub object_contains: String,
    pub fact_type: String,
    pub as_of: Option<DateTime<Utc>>,
    pub include_superseded: bool,
    pub question: String,
    pub limit: usize,
    pub sessions: Vec<Uuid>,
}

pub const MAX_FACTS: usize = 500;
/// How long a namespace's verb list is reused for verb expansion by vector.
const VERBS_TTL: std::time::Duration = std::time::Duration::from_secs(60);

fn like(s: &str) -> String {
    let escaped = s.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

impl Memory {
    pub async fn query_facts(&self, ns: Uuid, q: &FactQuery) -> Result<(Vec<FactView>, Vec<String>), RecallError> {
        self.check_enabled()?;
        let limit = match q.limit {
            0 => 50,
            n if n <= MAX_FACTS => n,
            n => return Err(RecallError::invalid("limit", format!("must be 1..={MAX_FACTS}, got {n}"))),
        };
        if !q.fact_type.is_empty() && FactType::parse(&q.fact_type).is_none() {
            let all: Vec<&str> = FactType::ALL.iter().map(|t| t.name()).collect();
            return Err(RecallError::invalid(
                "fact_type",
                format!("unknown {:?}; expected one of {}", q.fact_type, all.join(", ")),
            ));
        }
        if !q.status.is_empty() && TemporalStatus::parse(&q.status).is_none() {
            let all: Vec<&str> = TemporalStatus::ALL.iter().map(|t| t.name()).collect();
            return Err(RecallError::invalid(
                "status",
                format!("unknown {:?}; expected one of {}", q.status, all.join(", ")),
            ));
        }
        for (field, v) in [
            ("subject", &q.subject),
            ("verb", &q.verb),
            ("object_contains", &q.object_contains),
            ("question", &q.question),
        ] {
            if v.len() > 2_000 {
                return Err(RecallError::invalid(field, "at most 2000 bytes"));
            }
        }
        let verbs: Vec<String> = if q.verb.trim().is_empty() {
            Vec::new()
        } else {
            let mut v = expand_verb(&q.verb);
            for close in self.close_verbs(ns, &q.verb).await? {
                if !v.contains(&close) {
                    v.push(close);
                }
            }
            v
        };
        // Rank by the question: fetch more, then rerank by similarity of `what`.
        let ranked = !q.question.trim().is_empty() && self.vectors.is_some();
        let fetch = if ranked { (limit * 4).min(2_000) } else { limit };
        // A subject is matched among the namespace's distinct subjects, then its facts found by
        // equality: behind the tenant wall no index serves `ILIKE` on memory_facts (migration
        // `*_memory_subjects.sql`). Two forms, not one `$4 = '' OR …`: an OR keeps the planner
        // from turning the subquery into a join on the subject index.
        let subject = if q.subject.is_empty() {
            "AND $4::text = ''"
        } else {
            "AND f.subject IN (SELECT s.subject FROM memory_subjects s WHERE s.namespace_id = $1 AND s.subject ILIKE $4)"
        };
        // What held at `as_of`, every fact, or the current ones: the last as a plain condition,
        // which the live facts' partial index is matched against. (Every form names each bound
        // parameter, $4 above too, so the statement uses all it is given.)
        let temporal = match (q.as_of, q.include_superseded) {
            (Some(_), _) => "AND f.when_time <= $8 AND ($9 OR f.superseded_at IS NULL OR f.superseded_at > $8)",
            (None, true) => "AND $8::timestamptz IS NULL AND $9",
            (None, false) => "AND $8::timestamptz IS NULL AND NOT $9 AND f.superseded_by IS NULL",
        };
        let rows: Vec<FactRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {FACT_COLUMNS} FROM memory_facts f WHERE f.namespace_id = $1
               AND ($2 = '' OR f.fact_type = $2)
               AND ($3 = '' OR f.status = $3)
               {subject}
               AND ($5 = '' OR f.object ILIKE $5 OR f.what ILIKE $5)
               AND (cardinality($6::text[]) = 0 OR f.verb = ANY($6))
               AND (cardinality($7::uuid[]) = 0 OR f.session_id = ANY($7))
               {temporal}
             ORDER BY f.when_time DESC, f.session_id, f.first_seq DESC, f.id LIMIT $10"
        )))
        .bind(ns)
        .bind(&q.fact_type)
        .bind(&q.status)
        .bind(if q.subject.is_empty() { String::new() } else { like(&q.subject) })
        .bind(if q.object_contains.is_empty() { String::new() } else { like(&q.object_contains) })
        .bind(&verbs)
        .bind(&q.sessions)
        .bind(q.as_of)
        .bind(q.include_superseded)
        .bind(fetch as i64)
        .fetch_all(self.store.pool())
        .await?;
        let mut facts: Vec<FactView> = rows.into_iter().map(FactRow::view).collect();
        if ranked && let Some(v) = &self.vectors {
            let mut texts: Vec<&str> = vec![q.question.as_str()];
            texts.extend(facts.iter().map(|f| f.what.as_str()));
            let vecs = v.vectors(&texts);
            if let Some(Some(qv)) = vecs.first() {
                let mut scored: Vec<(f32, usize)> = vecs[1..]
                    .iter()
                    .enumerate()
                    .map(|(i, fv)| (fv.as_ref().map_or(0.0, |fv| memex_rank::cosine(qv, fv)), i))
                    .collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                let mut slots: Vec<Option<FactView>> = facts.into_iter().map(Some).collect();
                facts = scored.into_iter().filter_map(|(_, i)| slots[i].take()).collect();
            }
        }
        facts.truncate(limit);
        self.point_facts(ns, &mut facts).await?;
        Ok((facts, verbs))
    }

    pub(crate) async fn point_facts(&self, ns: Uuid, facts: &mut [FactView]) -> Result<(), RecallError> {
        let mut p = PointerBatch::default();
        for f in facts.iter() {
            p.want_span(f.session, f.first_seq, f.last_seq);
        }
        p.resolve(ns, self.view.as_ref()).await?;
        for f in facts.iter_mut() {
            f.pointer = p.span(f.session, f.first_seq, f.last_seq);
        }
        Ok(())
    }

    /// The namespace's verbs whose vectors are close to `verb`'s (§3.5: cosine ≥ 0.53).
    async fn close_verbs(&self, ns: Uuid, verb: &str) -> Result<Vec<String>, RecallError> {
        let Some(v) = &self.vectors else { return Ok(Vec::new()) };
        let cached = self
            .verbs
            .lock()
            .ok()
            .and_then(|m| m.get(&ns).filter(|(at, _)| at.elapsed() < VERBS_TTL).map(|(_, list)| list.clone()));
        let known = match cached {
            Some(k) => k,
            None => {
                let verbs: Vec<(String,)> =
                    sqlx::query_as("SELECT DISTINCT verb FROM memory_facts WHERE namespace_id = $1 LIMIT 1000")
                        .bind(ns)
                        .fetch_all(self.store.pool())
                        .await?;
                let names: Vec<&str> = verbs.iter().map(|(v,)| v.as_str()).collect();
                let vecs = v.vectors(&names);
                let list: Arc<Vec<(String, Vec<f32>)>> =
                    Arc::new(names.iter().zip(vecs).filter_map(|(n, v)| v.map(|v| ((*n).to_owned(), v))).collect());
                if let Ok(mut m) = self.verbs.lock() {
                    m.insert(ns, (std::time::Instant::now(), list.clone()));
                }
                list
            }
        };
        let Some(Some(qv)) = v.vectors(&[verb]).pop() else { return Ok(Vec::new()) };
        Ok(close_verbs(&qv, &known).into_iter().map(str::to_owned).collect())
    }

    /// One fact and its supersession chain, oldest first.
    pub async fn get_fact(&self, ns: Uuid, id: Uuid) -> Result<(FactView, Vec<FactView>), RecallError> {
        self.check_enabled()?;
        let pool = self.store.pool();
        let one = |id: Uuid| async move {
            sqlx::query_as::<_, FactRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {FACT_COLUMNS} FROM memory_facts f WHERE f.namespace_id = $1 AND f.id = $2"
            )))
            .bind(ns)
            .bind(id)
            .fetch_optional(pool)
            .await
        };
        let Some(fact) = one(id).await? else { return Err(RecallError::NotFound(format!("fact {id}"))) };
        let mut chain: Vec<FactRow> = vec![fact.clone()];
        // Back: what it superseded (the one each step replaced; chains are linear).
        let mut cur = fact.id;
        for _ in 0..100 {
            let older: Option<FactRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {FACT_COLUMNS} FROM memory_facts f WHERE f.namespace_id = $1 AND f.superseded_by = $2
                 ORDER BY f.when_time DESC, f.id LIMIT 1"
            )))
            .bind(ns)
            .bind(cur)
            .fetch_optional(pool)
            .await?;
            let Some(o) = older else { break };
            cur = o.id;
            chain.insert(0, o);
        }
        // Forward: what superseded it.
        let mut next = fact.superseded_by;
        for _ in 0..100 {
            let Some(n) = next else { break };
            let Some(row) = one(n).await? else { break };
            next = row.superseded_by;
            chain.push(row);
        }
        let mut views: Vec<FactView> = chain.into_iter().map(FactRow::view).collect();
        self.point_facts(ns, &mut views).await?;
        let me = views.iter().find(|f| f.id == id).cloned().unwrap_or_else(|| fact.view());
        Ok((me, views))
    }
}
