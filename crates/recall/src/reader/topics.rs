//! Topics for readers: `expand_topic` (demand paging into a reader's working set), `recall_all`,
//! `list_topics`, and the `<context-topics>` hint a pack can carry.
use std::collections::HashMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use memex_memory::paging::{Depth, HintTopic, PageOut, WorkingSet, context_topics_hint};
use memex_memory::tags::normalize_tag;
use memex_pointer::FullView;
use uuid::Uuid;

use super::quotes::SegRow;
use super::{LineView, Memory, Recalled, SegmentView, TopicPage, TopicView, check_reader};
use crate::RecallError;
use crate::pointers::PointerBatch;
use crate::topics::topic_lines;

pub const MAX_TEXT_TOKENS: usize = 100_000;
const DEFAULT_SEGMENTS_TOKENS: usize = 2_000;
const DEFAULT_FULL_TOKENS: usize = 8_000;
const DEFAULT_RECALL_TOKENS: usize = 30_000;

#[derive(sqlx::FromRow, Clone)]
struct TopicRow {
    tag: String,
    aliases: Vec<String>,
    parent: Option<String>,
    with_tags: Vec<String>,
    segments: i32,
    turns: i32,
    sessions: i32,
    first_time: Option<DateTime<Utc>>,
    last_time: Option<DateTime<Utc>>,
    broad: bool,
    in_cover: bool,
    summary: serde_json::Value,
    summary_tokens: i32,
    description: String,
    facts: i32,
}

const TOPIC_COLUMNS: &str = "tag, aliases, parent, with_tags, segments, turns, sessions, first_time, last_time, broad, \
     in_cover, summary, summary_tokens, description, facts";

impl TopicRow {
    fn want(&self, p: &mut PointerBatch) -> Result<Vec<crate::topics::TopicLine>, RecallError> {
        let lines = topic_lines(self.summary.clone())?;
        for l in &lines {
            p.want(l.session, l.seq);
        }
        Ok(lines)
    }

    fn view(&self, lines: &[crate::topics::TopicLine], p: &PointerBatch) -> TopicView {
        TopicView {
            tag: self.tag.clone(),
            aliases: self.aliases.clone(),
            parent: self.parent.clone(),
            segments: self.segments.max(0) as u32,
            turns: self.turns.max(0) as u32,
            sessions: self.sessions.max(0) as u32,
            first_time: self.first_time,
            last_time: self.last_time,
            broad: self.broad,
            in_cover: self.in_cover,
            description: self.description.clone(),
            summary: lines
                .iter()
                .map(|l| LineView {
                    text: l.text.clone(),
                    session: l.session,
                    seq: l.seq,
                    pointer: p.one(l.session, l.seq),
                })
                .collect(),
            summary_tokens: self.summary_tokens.max(0) as u32,
            facts: self.facts.max(0) as u32,
        }
    }
}

/// A topic at a depth.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    pub topic: TopicView,
    pub depth: Depth,
    pub text: String,
    pub tokens: u32,
    pub segments: Vec<SegmentView>,
    pub omitted_segments: u32,
    pub paged_out: Vec<PageOut>,
    pub working_set_tokens: u32,
    pub working_set_budget: u32,
}

/// Renders summary lines, each followed by its pointer.
fn render_lines(out: &mut String, lines: &[LineView]) {
    for l in lines {
        if l.pointer.is_empty() {
            let _ = writeln!(out, "{}", l.text);
        } else {
            let _ = writeln!(out, "{} ({})", l.text, l.pointer);
        }
    }
}

fn topic_text(t: &TopicView) -> String {
    let mut out = format!("## {} — {}\n", t.tag, t.description);
    render_lines(&mut out, &t.summary);
    out
}

impl Memory {
    /// The topic named by `tag` or one of its aliases (the topic of that name first, then a
    /// top-level one). Found by equality, in `memory_topic_aliases`: behind the tenant wall no
    /// index serves `= ANY(aliases)`.
    async fn topic_row(&self, ns: Uuid, tag: &str) -> Result<TopicRow, RecallError> {
        let pool = self.store.pool();
        let find = |t: String| async move {
            sqlx::query_as::<_, TopicRow>(sqlx::AssertSqlSafe(format!(
                "SELECT {TOPIC_COLUMNS} FROM memory_topics WHERE namespace_id = $1
                   AND tag IN (SELECT $2::text UNION SELECT a.tag FROM memory_topic_aliases a
                               WHERE a.namespace_id = $1 AND a.alias = $2)
                 ORDER BY (tag = $2) DESC, parent NULLS FIRST, tag LIMIT 1"
            )))
            .bind(ns)
            .bind(t)
            .fetch_optional(pool)
            .await
        };
        if let Some(r) = find(tag.to_owned()).await? {
            return Ok(r);
        }
        if let Some(n) = normalize_tag(tag).filter(|n| n != tag)
            && let Some(r) = find(n).await?
        {
            return Ok(r);
        }
        Err(RecallError::NotFound(format!("topic {tag:?}")))
    }

    /// The topic's segments, newest first (a subtopic's: those carrying its co-tag too), by id
    /// and stored summary count: their summaries are read for those that can fit
    /// ([`Memory::segment_rows`]). Each alias's newest entries are read from
    /// `memory_segment_tags` in index order, a subtopic's checked for a co-tag by key.
    async fn topic_segments(
        &self,
        ns: Uuid,
        t: &TopicRow,
        limit: usize,
    ) -> Result<(Vec<(Uuid, usize)>, u32), RecallError> {
        let rows: Vec<(Uuid, i32)> = sqlx::query_as(
            "SELECT s.id, s.summary_tokens FROM (
                 SELECT DISTINCT h.segment_id, h.end_time, h.session_id, h.first_seq FROM unnest($2::text[]) AS a(tag)
                 CROSS JOIN LATERAL (
                     SELECT t.segment_id, t.end_time, t.session_id, t.first_seq FROM memory_segment_tags t
                     WHERE t.namespace_id = $1 AND t.tag = a.tag
                       AND (cardinality($3::text[]) = 0 OR EXISTS (
                           SELECT 1 FROM memory_segment_tags w
                           WHERE w.namespace_id = $1 AND w.segment_id = t.segment_id AND w.tag = ANY($3)))
                     ORDER BY t.end_time DESC, t.session_id, t.first_seq DESC LIMIT $4) h
                 ORDER BY h.end_time DESC, h.session_id, h.first_seq DESC LIMIT $4) x
             JOIN memory_segments s ON s.namespace_id = $1 AND s.id = x.segment_id
             ORDER BY s.end_time DESC, s.session_id, s.first_seq DESC",
        )
        .bind(ns)
        .bind(&t.aliases)
        .bind(&t.with_tags)
        .bind(limit as i64)
        .fetch_all(self.store.pool())
        .await?;
        let omitted = (t.segments.max(0) as usize).saturating_sub(rows.len()) as u32;
        Ok((rows.into_iter().map(|(id, n)| (id, n.max(0) as usize)).collect(), omitted))
    }

    pub async fn expand_topic(
        &self,
        ns: Uuid,
        tag: &str,
        depth: Depth,
        reader: &str,
        max_tokens: usize,
    ) -> Result<Expanded, RecallError> {
        self.check_enabled()?;
        if tag.trim().is_empty() {
            return Err(RecallError::invalid("tag", "must not be empty"));
        }
        check_reader(reader)?;
        if max_tokens > MAX_TEXT_TOKENS {
            return Err(RecallError::invalid("max_tokens", format!("at most {MAX_TEXT_TOKENS}, got {max_tokens}")));
        }
        let row = self.topic_row(ns, tag.trim()).await?;
        let budget = match (depth, max_tokens) {
            (_, n) if n > 0 => n,
            (Depth::Full, _) => DEFAULT_FULL_TOKENS,
            _ => DEFAULT_SEGMENTS_TOKENS,
        };
        let mut p = PointerBatch::default();
        let lines = row.want(&mut p)?;
        // The topic's own text first (its pointers are most of it), beside the list of its
        // segments: what it leaves decides which segments are read.
        let heads = async {
            match depth {
                Depth::Summary => Ok((Vec::new(), 0)),
                _ => self.topic_segments(ns, &row, self.config.topic_segments).await,
            }
        };
        let ((heads, mut omitted), ()) = tokio::try_join!(heads, p.resolve(ns, self.view.as_ref()))?;
        let topic = row.view(&lines, &p);
        let mut text = topic_text(&topic);
        let mut used = self.count(&text);
        let summary_used = used;
        // A segment whose summary alone (as counted when it was written) is more than what is
        // left is not read: its block holds that summary and more. What is left only shrinks, so
        // the segments read here are all the loop can show; a large topic's summary leaves room
        // for a few of its 50 newest, and only those have their pointers looked up.
        let left = budget.saturating_sub(used);
        let wanted: Vec<Uuid> = heads.iter().filter(|(_, n)| *n <= left).map(|(id, _)| *id).collect();
        let mut rows: HashMap<Uuid, SegRow> = HashMap::new();
        for s in self.segment_rows(ns, &wanted).await? {
            s.want(&mut p);
            rows.insert(s.span.id, s);
        }
        p.resolve(ns, self.view.as_ref()).await?;
        let mut shown: Vec<SegmentView> = Vec::new();
        for &(id, tokens) in &heads {
            let left = budget.saturating_sub(used);
            // Left out: its summary alone is more than what is left, or it is gone since it was
            // listed (the worker merged it into another).
            let Some(s) = rows.get(&id).filter(|_| tokens <= left) else {
                omitted += 1;
                continue;
            };
            let view = s.view(&p);
            let body = match depth {
                Depth::Segments => {
                    let mut b = String::new();
                    render_lines(&mut b, &view.summary);
                    b
                }
                _ => self.full_text(ns, &view, self.view.as_ref()).await?,
            };
            let block = format!(
                "\n### {} ({}, {} turns; {})\n{}",
                view.pointer,
                view.start.format("%Y-%m-%d %H:%M"),
                view.turns,
                view.tags.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                body
            );
            // Most blocks of a large topic do not fit what is left: counting stops past it.
            let n = self.counter.count_up_to(&block, left);
            if n > left {
                omitted += 1;
                continue;
            }
            used += n;
            text.push_str(&block);
            shown.push(view);
        }
        // Never over budget: a summary alone past it is cut on a line.
        if used > budget.max(1) {
            text = memex_tokens::truncate_lines(self.counter.as_ref(), &text, budget).to_owned();
            used = self.count(&text);
        }
        let mut out = Expanded {
            topic,
            depth,
            tokens: used as u32,
            text,
            segments: shown,
            omitted_segments: omitted,
            paged_out: Vec::new(),
            working_set_tokens: 0,
            working_set_budget: self.config.working_set_tokens as u32,
        };
        if !reader.is_empty() {
            // Collapsed, the topic costs its summary as shown (its pointers are most of it), cut
            // to the budget as the summary depth would be; not the stored count of its lines.
            let summary_tokens = summary_used.min(used);
            let (ws, paged) =
                self.with_working_set(ns, reader, |ws| ws.touch(&out.topic.tag, depth, used, summary_tokens)).await?;
            out.paged_out = paged;
            out.working_set_tokens = ws.used() as u32;
            out.working_set_budget = ws.budget as u32;
        }
        Ok(out)
    }

    /// A segment's original text: its events' blocks of the full view, with their line numbers.
    async fn full_text(&self, ns: Uuid, s: &SegmentView, view: &dyn FullView) -> Result<String, RecallError> {
        let seqs: Vec<memex_event::Seq> = (s.first_seq..=s.last_seq).map(memex_event::Seq).collect();
        let blocks = view.blocks(memex_event::NamespaceId(ns), memex_event::SessionId(s.session), None, &seqs).await?;
        let mut out = String::new();
        for b in blocks.into_iter().flatten() {
            for (i, line) in b.lines.iter().enumerate() {
                let _ = writeln!(out, "{:>6}  {}", b.range.first as usize + i, line);
            }
        }
        Ok(out)
    }

    /// Loads a reader's working set (or a new one), applies `f`, stores it back, in one
    /// transaction (the row is locked: one reader's calls page one after another).
    async fn with_working_set<T>(
        &self,
        ns: Uuid,
        reader: &str,
        f: impl FnOnce(&mut WorkingSet) -> T,
    ) -> Result<(WorkingSet, T), RecallError> {
        let mut tx = self.store.pool().begin().await?;
        let fresh = serde_json::to_value(WorkingSet::new(self.config.working_set_tokens))?;
        sqlx::query(
            "INSERT INTO memory_readers (namespace_id, reader, working_set) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(ns)
        .bind(reader)
        .bind(&fresh)
        .execute(&mut *tx)
        .await?;
        let (v,): (serde_json::Value,) =
            sqlx::query_as("SELECT working_set FROM memory_readers WHERE namespace_id = $1 AND reader = $2 FOR UPDATE")
                .bind(ns)
                .bind(reader)
                .fetch_one(&mut *tx)
                .await?;
        let mut ws: WorkingSet = serde_json::from_value(v)?;
        ws.budget = self.config.working_set_tokens;
        let out = f(&mut ws);
        sqlx::query(
            "UPDATE memory_readers SET working_set = $3, updated_at = now() WHERE namespace_id = $1 AND reader = $2",
        )
        .bind(ns)
        .bind(reader)
        .bind(serde_json::to_value(&ws)?)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((ws, out))
    }

    /// A reader's working set as stored (empty if it has none).
    pub async fn working_set(&self, ns: Uuid, reader: &str) -> Result<WorkingSet, RecallError> {
        let row: Option<(serde_json::Value,)> =
            sqlx::query_as("SELECT working_set FROM memory_readers WHERE namespace_id = $1 AND reader = $2")
                .bind(ns)
                .bind(reader)
                .fetch_optional(self.store.pool())
                .await?;
        match row {
            Some((v,)) => Ok(serde_json::from_value(v)?),
            None => Ok(WorkingSet::new(self.config.working_set_tokens)),
        }
    }

    pub async fn recall_all(&self, ns: Uuid, max_tokens: usize) -> Result<Recalled, RecallError> {
        self.check_enabled()?;
        if max_tokens > MAX_TEXT_TOKENS {
            return Err(RecallError::invalid("max_tokens", format!("at most {MAX_TEXT_TOKENS}, got {max_tokens}")));
        }
        let budget = if max_tokens == 0 { DEFAULT_RECALL_TOKENS } else { max_tokens };
        // Choose by an estimate first (summary, description, a pointer per line) from the light
        // columns of the cover, largest first; then read only the chosen topics, look only their
        // pointers up, render exactly and keep what fits.
        let cover: Vec<(String, i32, i64, i32)> = sqlx::query_as(
            "SELECT tag, summary_tokens, octet_length(description)::int8,
                    CASE WHEN jsonb_typeof(summary) = 'array' THEN jsonb_array_length(summary) ELSE 0 END
             FROM memory_topics WHERE namespace_id = $1 AND in_cover ORDER BY turns DESC, tag",
        )
        .bind(ns)
        .fetch_all(self.store.pool())
        .await?;
        let mut wanted: Vec<String> = Vec::new();
        let mut estimate = 0usize;
        let mut out = Recalled::default();
        for (tag, summary_tokens, description_len, lines) in cover {
            let est =
                summary_tokens.max(0) as usize + description_len.max(0) as usize / 4 + 24 * lines.max(0) as usize + 16;
            if estimate + est > budget {
                out.omitted += 1;
                continue;
            }
            estimate += est;
            wanted.push(tag);
        }
        let mut rows: Vec<TopicRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {TOPIC_COLUMNS} FROM memory_topics WHERE namespace_id = $1 AND tag = ANY($2)"
        )))
        .bind(ns)
        .bind(&wanted)
        .fetch_all(self.store.pool())
        .await?;
        // Back in the cover's order (a topic rewritten in between may have left it: it is gone).
        let order: HashMap<&str, usize> = wanted.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
        rows.retain(|r| r.in_cover);
        rows.sort_by_key(|r| order.get(r.tag.as_str()).copied());
        let mut p = PointerBatch::default();
        let mut lines = Vec::with_capacity(rows.len());
        for r in &rows {
            lines.push(r.want(&mut p)?);
        }
        p.resolve(ns, self.view.as_ref()).await?;
        let mut used = 0usize;
        for (r, l) in rows.iter().zip(&lines) {
            let v = r.view(l, &p);
            let block = topic_text(&v) + "\n";
            let n = self.count(&block);
            if used + n > budget {
                out.omitted += 1;
                continue;
            }
            used += n;
            out.text.push_str(&block);
            out.topics.push(v);
        }
        out.tokens = self.count(&out.text) as u32;
        Ok(out)
    }

    pub async fn list_topics(
        &self,
        ns: Uuid,
        limit: usize,
        page_token: &str,
        contains: &str,
    ) -> Result<TopicPage, RecallError> {
        self.check_enabled()?;
        let limit = match limit {
            0 => 100,
            n if n <= 1_000 => n,
            n => return Err(RecallError::invalid("limit", format!("must be 1..=1000, got {n}"))),
        };
        let pattern = if contains.is_empty() { String::new() } else { format!("%{}%", contains.replace('%', "\\%")) };
        // The page and the count at once.
        let page = sqlx::query_as::<_, TopicRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {TOPIC_COLUMNS} FROM memory_topics WHERE namespace_id = $1 AND tag > $2
               AND ($3 = '' OR tag ILIKE $3 OR EXISTS (SELECT 1 FROM unnest(aliases) a WHERE a ILIKE $3))
             ORDER BY tag LIMIT $4"
        )))
        .bind(ns)
        .bind(page_token)
        .bind(&pattern)
        .bind(limit as i64 + 1)
        .fetch_all(self.store.pool());
        let count = sqlx::query_as::<_, (i64,)>(
            "SELECT count(*) FROM memory_topics WHERE namespace_id = $1
               AND ($2 = '' OR tag ILIKE $2 OR EXISTS (SELECT 1 FROM unnest(aliases) a WHERE a ILIKE $2))",
        )
        .bind(ns)
        .bind(&pattern)
        .fetch_one(self.store.pool());
        let (rows, (total,)) = tokio::try_join!(page, count)?;
        let more = rows.len() > limit;
        let rows = &rows[..rows.len().min(limit)];
        let mut p = PointerBatch::default();
        let mut lines = Vec::new();
        for r in rows {
            lines.push(r.want(&mut p)?);
        }
        p.resolve(ns, self.view.as_ref()).await?;
        Ok(TopicPage {
            topics: rows.iter().zip(&lines).map(|(r, l)| r.view(l, &p)).collect(),
            next_page_token: if more { rows.last().map(|r| r.tag.clone()).unwrap_or_default() } else { String::new() },
            total: total as u32,
        })
    }

    /// The `<context-topics>` hint for `reader` (every topic, its depth and cost), within
    /// `max_tokens`; and the working set's contents (its topics at their depths) within
    /// `content_tokens` (0: none). Used by packs.
    pub async fn context_blocks(
        &self,
        ns: Uuid,
        reader: &str,
        max_tokens: usize,
        content_tokens: usize,
    ) -> Result<(String, String), RecallError> {
        self.check_enabled()?;
        let topics: Vec<(String, i32, i32, i32)> = sqlx::query_as(
            "SELECT tag, segments, sessions, summary_tokens FROM memory_topics
             WHERE namespace_id = $1 AND NOT broad ORDER BY segments DESC, tag LIMIT 2000",
        )
        .bind(ns)
        .fetch_all(self.store.pool())
        .await?;
        let ws = if reader.is_empty() {
            WorkingSet::new(self.config.working_set_tokens)
        } else {
            self.working_set(ns, reader).await?
        };
        let hint_topics: Vec<HintTopic> = topics
            .iter()
            .map(|(t, s, n, k)| HintTopic {
                tag: t.clone(),
                segments: (*s).max(0) as usize,
                sessions: (*n).max(0) as usize,
                summary_tokens: (*k).max(0) as usize,
            })
            .collect();
        let counter = self.counter.clone();
        let hint = if max_tokens == 0 || hint_topics.is_empty() {
            String::new()
        } else {
            context_topics_hint(&hint_topics, &ws, max_tokens, &move |s: &str| counter.count(s))
        };
        let mut content = String::new();
        if content_tokens > 0 && !ws.entries.is_empty() {
            // Hottest first, each at its depth, within the budget.
            let mut entries: Vec<(&String, &memex_memory::paging::Entry)> = ws.entries.iter().collect();
            entries.sort_by(|a, b| b.1.last_turn.cmp(&a.1.last_turn).then(a.0.cmp(b.0)));
            let mut used = 0;
            for (tag, e) in entries {
                let left = content_tokens.saturating_sub(used);
                if left < 50 {
                    break;
                }
                let Ok(x) = self.expand_topic(ns, tag, e.depth, "", left.min(MAX_TEXT_TOKENS)).await else { continue };
                if used + x.tokens as usize > content_tokens {
                    continue;
                }
                used += x.tokens as usize;
                content.push_str(&x.text);
                content.push('\n');
            }
        }
        Ok((hint, content))
    }
}
