//! `find_quote` and `remember_when`: search, then the segments the hits fall in, with their facts.
//! A segment gives at most two quotes: its best hit in what was said, and its best hit in tool
//! output.
use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Duration, Utc};
use memex_memory::Summary;
use uuid::Uuid;

use super::{FactView, LineView, Memory, Quote, Quotes, SearchHit, SearchQuery, SegmentView, check_reader};
use crate::RecallError;
use crate::pointers::PointerBatch;

/// Most quotes per answer.
pub const MAX_QUOTES: usize = 100;
/// Facts attached to a quote, at most.
const FACTS_PER_QUOTE: usize = 5;
/// Segments remembered as shown to a reader, at most (the oldest are forgotten).
const MAX_PRESENTED: usize = 5_000;
/// Without a search index, the newest segments ranked by their summaries.
const SCAN_SEGMENTS: i64 = 5_000;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct QuoteRequest {
    pub query: String,
    pub limit: usize,
    pub sessions: Vec<Uuid>,
    pub reader: String,
    pub reset_presented: bool,
    pub range: Option<TimeRange>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// A `remember_when` range: a preset relative to `now`, or the absolute bounds given.
pub fn resolve_range(
    preset: &str,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<TimeRange, RecallError> {
    let days = |n: i64| now - Duration::days(n);
    let today = now.date_naive().and_hms_opt(0, 0, 0).map(|d| d.and_utc()).unwrap_or(now);
    let r = match preset {
        "" => {
            let (Some(from), to) = (from, to) else {
                return Err(RecallError::invalid(
                    "preset",
                    "give a preset (today, yesterday, last_7_days, last_30_days, last_90_days, last_365_days) or from (and to)",
                ));
            };
            TimeRange { from, to: to.unwrap_or(now) }
        }
        "today" => TimeRange { from: today, to: now },
        "yesterday" => TimeRange { from: today - Duration::days(1), to: today },
        "last_7_days" => TimeRange { from: days(7), to: now },
        "last_30_days" => TimeRange { from: days(30), to: now },
        "last_90_days" => TimeRange { from: days(90), to: now },
        "last_365_days" => TimeRange { from: days(365), to: now },
        other => {
            return Err(RecallError::invalid(
                "preset",
                format!(
                    "unknown preset {other:?}; expected today, yesterday, last_7_days, last_30_days, last_90_days or last_365_days"
                ),
            ));
        }
    };
    if r.from > r.to {
        return Err(RecallError::invalid("from", "must not be after to"));
    }
    Ok(r)
}

#[derive(sqlx::FromRow)]
pub(crate) struct SegRow {
    #[sqlx(flatten)]
    pub span: SegSpan,
    pub turns: i32,
    pub tags: Vec<String>,
    pub primary_tag: Option<String>,
    /// Decoded straight from the column's JSON, without a `serde_json::Value` between: a reader
    /// answer reads tens of these. (`summary_text`, its lines joined, is not read: it would
    /// double what each row brings.)
    pub summary: sqlx::types::Json<Summary>,
    pub summary_tokens: i32,
    pub group_seq: i64,
    pub closed: bool,
}

/// Where a segment lies: all FindQuote needs to place its hits and choose its quotes.
#[derive(sqlx::FromRow, Clone, Copy)]
pub(crate) struct SegSpan {
    pub id: Uuid,
    pub session_id: Uuid,
    pub first_seq: i64,
    pub last_seq: i64,
    pub start_time: DateTime<Utc>,
    pub end_time: DateTime<Utc>,
}

const SEG_COLUMNS: &str = "s.id, s.session_id, s.first_seq, s.last_seq, s.start_time, s.end_time, s.turns, s.tags, \
     s.primary_tag, s.summary, s.summary_tokens, s.group_seq, s.closed";

impl SegRow {
    /// Asks `p` for the pointers of the segment and its summary's lines.
    pub(crate) fn want(&self, p: &mut PointerBatch) {
        let s = &self.span;
        p.want_span(s.session_id, s.first_seq as u64, s.last_seq as u64);
        for l in &self.summary.lines {
            p.want(s.session_id, l.seq);
        }
    }

    pub(crate) fn view(&self, p: &PointerBatch) -> SegmentView {
        let (s, summary) = (&self.span, &self.summary.0);
        SegmentView {
            id: s.id,
            session: s.session_id,
            first_seq: s.first_seq as u64,
            last_seq: s.last_seq as u64,
            pointer: p.span(s.session_id, s.first_seq as u64, s.last_seq as u64),
            start: s.start_time,
            end: s.end_time,
            turns: self.turns.max(0) as u32,
            tags: self.tags.clone(),
            primary_tag: self.primary_tag.clone().unwrap_or_default(),
            summary: summary
                .lines
                .iter()
                .map(|l| LineView {
                    text: l.text.clone(),
                    session: s.session_id,
                    seq: l.seq,
                    pointer: p.one(s.session_id, l.seq),
                })
                .collect(),
            summary_tokens: self.summary_tokens.max(0) as u32,
            group_seq: self.group_seq as u64,
            closed: self.closed,
        }
    }
}

impl Memory {
    pub async fn find_quote(&self, ns: Uuid, req: &QuoteRequest) -> Result<Quotes, RecallError> {
        self.check_enabled()?;
        if req.query.trim().is_empty() {
            return Err(RecallError::invalid("query", "must not be empty"));
        }
        let limit = match req.limit {
            0 => 10,
            n if n <= MAX_QUOTES => n,
            n => return Err(RecallError::invalid("limit", format!("must be 1..={MAX_QUOTES}, got {n}"))),
        };
        check_reader(&req.reader)?;
        let presented: BTreeSet<Uuid> = if req.reader.is_empty() || req.reset_presented {
            BTreeSet::new()
        } else {
            self.presented(ns, &req.reader).await?
        };
        let pool = self.store.pool();
        // Hits, overfetched: several may fall in one segment, some were shown already, and a
        // time range filters segments after the search.
        let over = (limit * 4 + presented.len().min(200)).min(1_000);
        let (hits, vectors_used, scanned) = match &self.search {
            Some(search) => {
                let q = SearchQuery {
                    query: req.query.clone(),
                    sessions: req.sessions.clone(),
                    from: req.range.map(|r| r.from),
                    to: req.range.map(|r| r.to),
                    limit: over,
                };
                let h = search.search(ns, &q).await?;
                (h.hits, h.vectors_used, None)
            }
            None => (Vec::new(), false, Some(self.scan_segments(ns, req, over).await?)),
        };
        // Where the hits fall: the segments' spans only. Several hits fall in one segment, and
        // most segments found are not quoted (one quote per segment, `limit` at most): their
        // summaries are read for the chosen ones alone.
        let mut full: HashMap<Uuid, SegRow> = HashMap::new();
        let spans: Vec<SegSpan> = match scanned {
            Some(rows) => {
                let spans = rows.iter().map(|r| r.span).collect();
                full.extend(rows.into_iter().map(|r| (r.span.id, r)));
                spans
            }
            None => {
                let sessions: Vec<Uuid> = hits.iter().map(|h| h.session).collect();
                let seqs: Vec<i64> = hits.iter().map(|h| h.seq as i64).collect();
                let mut spans: Vec<SegSpan> = sqlx::query_as(
                    "SELECT DISTINCT s.id, s.session_id, s.first_seq, s.last_seq, s.start_time, s.end_time
                     FROM memory_segments s
                     JOIN unnest($2::uuid[], $3::int8[]) AS h(sid, seq) ON s.session_id = h.sid AND h.seq BETWEEN s.first_seq AND s.last_seq
                     WHERE s.namespace_id = $1",
                )
                .bind(ns)
                .bind(&sessions)
                .bind(&seqs)
                .fetch_all(pool)
                .await?;
                spans.sort_by_key(|r| r.id);
                spans
            }
        };
        let by_span = |session: Uuid, seq: u64| {
            spans.iter().find(|r| r.session_id == session && (r.first_seq as u64) <= seq && seq <= r.last_seq as u64)
        };
        // One quote per segment, at its best hit; a hit outside any segment (not read yet) is a
        // quote of its own. Without an index, each scanned segment is its own hit.
        let mut picked: Vec<(Option<&SegSpan>, SearchHit)> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut already = 0u32;
        let candidates: Vec<SearchHit> = if hits.is_empty() {
            spans
                .iter()
                .map(|r| SearchHit {
                    session: r.session_id,
                    seq: r.first_seq as u64,
                    kind: "segment".into(),
                    score: 0.0,
                    text: full.get(&r.id).map(|f| f.summary.render()).unwrap_or_default(),
                    lines: None,
                })
                .collect()
        } else {
            hits
        };
        for h in candidates {
            let seg = by_span(h.session, h.seq);
            if let Some(range) = req.range
                && let Some(s) = seg
                && (s.end_time < range.from || s.start_time > range.to)
            {
                continue;
            }
            // One quote per segment and kind of match: what was said, and a tool's output (§3.7:
            // tool output is searched apart and marked so).
            let output = h.kind == "tool_result" || h.kind == "tool_error";
            let key = (seg.map_or(h.session.as_u128() ^ u128::from(h.seq), |s| s.id.as_u128()), output);
            if !seen.insert(key) {
                continue;
            }
            if let Some(s) = seg
                && presented.contains(&s.id)
            {
                already += 1;
                continue;
            }
            picked.push((seg, h));
            if picked.len() >= limit {
                break;
            }
        }
        // A segment quoted twice (said, and tool output) is read once.
        let mut segs: Vec<SegSpan> = Vec::new();
        for s in picked.iter().filter_map(|(s, _)| *s) {
            if !segs.iter().any(|x| x.id == s.id) {
                segs.push(*s);
            }
        }
        // The chosen segments' rows, their facts and the lines of the seqs in them, at once: a
        // segment's summary lines and facts lie in its span, which is known now.
        let missing: Vec<Uuid> = segs.iter().map(|s| s.id).filter(|id| !full.contains_key(id)).collect();
        let mut p = PointerBatch::default();
        for s in &segs {
            p.want_range(s.session_id, s.first_seq as u64, s.last_seq as u64);
        }
        for (_, h) in &picked {
            p.want(h.session, h.seq);
        }
        let (rows, facts, ()) = tokio::try_join!(
            self.segment_rows(ns, &missing),
            self.facts_of_segments(ns, &segs),
            p.resolve(ns, self.view.as_ref())
        )?;
        full.extend(rows.into_iter().map(|r| (r.span.id, r)));
        // What falls outside them (a fact running past its segment, a long segment's middle).
        for s in &segs {
            if let Some(r) = full.get(&s.id) {
                r.want(&mut p);
            }
        }
        for f in facts.values().flatten() {
            p.want_span(f.session, f.first_seq, f.last_seq);
        }
        p.resolve(ns, self.view.as_ref()).await?;
        let mut quotes = Vec::with_capacity(picked.len());
        for (seg, h) in &picked {
            let mut fs: Vec<FactView> = seg.and_then(|s| facts.get(&s.id)).cloned().unwrap_or_default();
            for f in &mut fs {
                f.pointer = p.span(f.session, f.first_seq, f.last_seq);
            }
            // Older evidence: a fact here that a later session's fact replaced.
            let superseded = seg.is_some_and(|s| {
                fs.iter().any(|f| f.superseded_at.is_some_and(|t| t > s.end_time) && f.superseded_by.is_some())
            });
            let hit_pointer = match h.lines {
                Some(l) => memex_pointer::Pointer { session: memex_event::SessionId(h.session), chain: 1, range: l }
                    .to_string(),
                None => p.one(h.session, h.seq),
            };
            quotes.push(Quote {
                // A segment deleted between the two reads (a forgotten session) quotes no segment.
                segment: seg.and_then(|s| full.get(&s.id)).map(|s| s.view(&p)),
                match_type: if h.kind == "tool_result" || h.kind == "tool_error" { "tool_output" } else { "segment" },
                excerpt: excerpt(&h.text),
                hit_pointer,
                hit_session: h.session,
                hit_seq: h.seq,
                score: h.score,
                facts: fs,
                superseded,
            });
        }
        if !req.reader.is_empty() {
            let shown: Vec<Uuid> = quotes.iter().filter_map(|q| q.segment.as_ref().map(|s| s.id)).collect();
            self.remember_presented(ns, &req.reader, &shown, req.reset_presented).await?;
        }
        Ok(Quotes { quotes, already_presented: already, vectors_used })
    }

    /// Without a search index: the newest segments (of the sessions asked for), ranked by BM25
    /// over their summaries.
    async fn scan_segments(&self, ns: Uuid, req: &QuoteRequest, limit: usize) -> Result<Vec<SegRow>, RecallError> {
        let rows: Vec<SegRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SEG_COLUMNS} FROM memory_segments s WHERE s.namespace_id = $1
               AND (cardinality($2::uuid[]) = 0 OR s.session_id = ANY($2))
               AND ($3::timestamptz IS NULL OR s.end_time >= $3) AND ($4::timestamptz IS NULL OR s.start_time <= $4)
             ORDER BY s.end_time DESC, s.id LIMIT $5"
        )))
        .bind(ns)
        .bind(&req.sessions)
        .bind(req.range.map(|r| r.from))
        .bind(req.range.map(|r| r.to))
        .bind(SCAN_SEGMENTS)
        .fetch_all(self.store.pool())
        .await?;
        let texts: Vec<String> = rows.iter().map(|r| r.summary.render()).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let scores = memex_rank::bm25_scores(&req.query, &texts, memex_rank::Bm25Params::default());
        let mut order: Vec<usize> = (0..rows.len()).filter(|&i| scores[i] > 0.0).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(rows[a].span.id.cmp(&rows[b].span.id)));
        order.truncate(limit);
        let mut rows: Vec<Option<SegRow>> = rows.into_iter().map(Some).collect();
        Ok(order.into_iter().filter_map(|i| rows[i].take()).collect())
    }

    /// The full rows of segments `ids` (those still there).
    pub(super) async fn segment_rows(&self, ns: Uuid, ids: &[Uuid]) -> Result<Vec<SegRow>, RecallError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SEG_COLUMNS} FROM memory_segments s WHERE s.namespace_id = $1 AND s.id = ANY($2)"
        )))
        .bind(ns)
        .bind(ids)
        .fetch_all(self.store.pool())
        .await?)
    }

    /// Facts read from each segment, the current ones first.
    pub(crate) async fn facts_of_segments(
        &self,
        ns: Uuid,
        segs: &[SegSpan],
    ) -> Result<HashMap<Uuid, Vec<FactView>>, RecallError> {
        if segs.is_empty() {
            return Ok(HashMap::new());
        }
        let ids: Vec<Uuid> = segs.iter().map(|s| s.id).collect();
        let sessions: Vec<Uuid> = segs.iter().map(|s| s.session_id).collect();
        let firsts: Vec<i64> = segs.iter().map(|s| s.first_seq).collect();
        let lasts: Vec<i64> = segs.iter().map(|s| s.last_seq).collect();
        let rows: Vec<(Uuid, super::facts::FactRow)> = sqlx::query_as::<_, super::facts::SegFactRow>(sqlx::AssertSqlSafe(format!(
            "SELECT g.id AS segment_id, {} FROM unnest($2::uuid[], $3::uuid[], $4::int8[], $5::int8[]) AS g(id, sid, lo, hi)
             CROSS JOIN LATERAL (
                 SELECT * FROM memory_facts f WHERE f.namespace_id = $1 AND f.session_id = g.sid
                   AND f.first_seq BETWEEN g.lo AND g.hi AND f.verb <> 'read'
                 ORDER BY (f.superseded_by IS NULL) DESC, f.when_time DESC, f.id LIMIT $6
             ) f",
            super::facts::FACT_COLUMNS
        )))
        .bind(ns)
        .bind(&ids)
        .bind(&sessions)
        .bind(&firsts)
        .bind(&lasts)
        .bind(FACTS_PER_QUOTE as i64)
        .fetch_all(self.store.pool())
        .await?
        .into_iter()
        .map(|r| (r.segment_id, r.fact))
        .collect();
        let mut out: HashMap<Uuid, Vec<FactView>> = HashMap::new();
        for (seg, f) in rows {
            out.entry(seg).or_default().push(f.view());
        }
        Ok(out)
    }

    async fn presented(&self, ns: Uuid, reader: &str) -> Result<BTreeSet<Uuid>, RecallError> {
        let row: Option<(Vec<Uuid>,)> =
            sqlx::query_as("SELECT presented FROM memory_readers WHERE namespace_id = $1 AND reader = $2")
                .bind(ns)
                .bind(reader)
                .fetch_optional(self.store.pool())
                .await?;
        Ok(row.map(|(p,)| p.into_iter().collect()).unwrap_or_default())
    }

    async fn remember_presented(&self, ns: Uuid, reader: &str, shown: &[Uuid], reset: bool) -> Result<(), RecallError> {
        let ws = serde_json::to_value(memex_memory::WorkingSet::new(self.config.working_set_tokens))?;
        sqlx::query(
            "INSERT INTO memory_readers (namespace_id, reader, working_set, presented) VALUES ($1, $2, $3, $4)
             ON CONFLICT (namespace_id, reader) DO UPDATE SET
                 presented = (CASE WHEN $5 THEN $4 ELSE
                     (SELECT array_agg(x) FROM (SELECT x FROM unnest(memory_readers.presented || $4) WITH ORDINALITY AS t(x, i)
                      ORDER BY i DESC LIMIT $6) r) END),
                 updated_at = now()",
        )
        .bind(ns)
        .bind(reader)
        .bind(ws)
        .bind(shown)
        .bind(reset)
        .bind(MAX_PRESENTED as i64)
        .execute(self.store.pool())
        .await?;
        Ok(())
    }

    pub async fn remember_when(
        &self,
        ns: Uuid,
        req: &QuoteRequest,
        range: TimeRange,
    ) -> Result<(Quotes, Vec<FactView>), RecallError> {
        let req = QuoteRequest { range: Some(range), ..req.clone() };
        // The quotes, and the facts completed in the window with their pointers, at once.
        let window = sqlx::query_as::<_, super::facts::FactRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM memory_facts f WHERE f.namespace_id = $1 AND f.status = 'completed'
               AND f.when_time BETWEEN $2 AND $3 AND f.verb <> 'read'
               AND (cardinality($4::uuid[]) = 0 OR f.session_id = ANY($4))
             ORDER BY f.when_time, f.id LIMIT 50",
            super::facts::FACT_COLUMNS
        )))
        .bind(ns)
        .bind(range.from)
        .bind(range.to)
        .bind(&req.sessions)
        .fetch_all(self.store.pool());
        let facts = async {
            let mut facts: Vec<FactView> = window.await?.into_iter().map(|r| r.view()).collect();
            let mut p = PointerBatch::default();
            for f in &facts {
                p.want_span(f.session, f.first_seq, f.last_seq);
            }
            p.resolve(ns, self.view.as_ref()).await?;
            for f in &mut facts {
                f.pointer = p.span(f.session, f.first_seq, f.last_seq);
            }
            Ok::<_, RecallError>(facts)
        };
        let (quotes, facts) = tokio::try_join!(self.find_quote(ns, &req), facts)?;
        Ok((quotes, facts))
    }
}

/// A hit's text as a quote shows it: at most ~600 characters, on a line boundary.
fn excerpt(text: &str) -> String {
    const MAX: usize = 600;
    if text.chars().count() <= MAX {
        return text.trim().to_owned();
    }
    let cut: String = text.chars().take(MAX).collect();
    let cut = match cut.rfind('\n') {
        Some(i) if i > MAX / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}…", cut.trim_end())
}
