//! `BuildSnapshot`'s shell: reads what the pure core (`memex-handoff`) needs — the session, its
//! task's state card, its user requests, memory's stored facts, the facts of the events the
//! worker has not read yet (the extractor resumed from the worker's own state), the last events —
//! looks the pointers up in the full view, and hands back the core's snapshot with them.
//!
//! The facts are memory's: those stored up to the worker's `fact_seq`, then the same extractor
//! run on from the state it stored, so a snapshot taken right after a compaction sees the last
//! events too, and the answer is the same whether or not the worker had read them.
//!
//! The reads are one round of statements at once (the session's events and user messages in
//! one, memory's progress and facts in another), then the task's card and the pointers: at 1M
//! events each dependent round trip was a chance to queue behind background work.
use chrono::{DateTime, Utc};
use memex_handoff::{Format, Input, Options, Shown, TaskCard};
use memex_memory::{Fact, FactExtractor, FactType, MemEvent, SeqSpan, TemporalStatus};
use memex_pointer::Pointer;
use memex_store::SessionFilter;
use memex_tokens::Tokenizer;
use uuid::Uuid;

use crate::pointers::PointerBatch;
use crate::reader::Memory;
use crate::{RecallError, tables};

/// Events read at the end of a session for recent actions and the raw tail.
const RECENT_EVENTS: u64 = 96;
/// The largest budget a snapshot can be asked for.
pub const MAX_BUDGET: usize = 100_000;
pub const DEFAULT_BUDGET: usize = 4_000;

/// Whose snapshot: a session, else an agent's or a task's latest session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotScope {
    Session(Uuid),
    Agent(String),
    Task(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotRequest {
    pub scope: SnapshotScope,
    /// The task whose state card leads (default: the session's task).
    pub task_id: Option<String>,
    pub budget: usize,
    pub tokenizer: Tokenizer,
    pub format: Format,
    pub options: Options,
}

/// An entry as the answer carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotItem {
    pub section: &'static str,
    pub label: &'static str,
    pub text: String,
    /// `session:first-last`; empty for a line of the task's state, or events that render no lines.
    pub pointer: String,
    pub first_seq: u64,
    pub last_seq: u64,
    pub priority: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffSnapshot {
    pub session: Uuid,
    pub task: Option<(String, u64)>,
    pub text: String,
    pub tokens: usize,
    pub items: Vec<SnapshotItem>,
    pub omitted: Vec<SnapshotItem>,
    /// The last seq the snapshot covers.
    pub head: u64,
    /// Facts up to here were memory's stored ones; the events after it were read just now.
    pub memory_seq: u64,
}

impl SnapshotRequest {
    /// Checks the numbers a caller sent.
    pub fn check(&self) -> Result<(), RecallError> {
        if self.budget < memex_handoff::MIN_BUDGET || self.budget > MAX_BUDGET {
            return Err(RecallError::invalid(
                "budget_tokens",
                format!("must be between {} and {MAX_BUDGET}, got {}", memex_handoff::MIN_BUDGET, self.budget),
            ));
        }
        if self.options.recent_actions > 100 {
            return Err(RecallError::invalid("recent_actions", "at most 100"));
        }
        if self.options.tail_events > 50 {
            return Err(RecallError::invalid("tail_events", "at most 50"));
        }
        Ok(())
    }
}

impl Memory {
    /// The handoff snapshot of a session (or of an agent's or a task's latest session).
    /// Works with the memory worker off too: the facts are then all read from the events.
    pub async fn snapshot(&self, ns: Uuid, req: &SnapshotRequest) -> Result<HandoffSnapshot, RecallError> {
        req.check()?;
        let store = &self.store;
        // One round of reads: the session's row, its events (one statement) and memory's facts
        // with the worker's progress (another) at once; the task's card waits for the row only
        // when the session names the task. An agent's or a task's latest session is found first.
        let (named, found) = match &req.scope {
            SnapshotScope::Session(id) => (*id, None),
            SnapshotScope::Agent(a) => {
                let filter = SessionFilter { agent_id: Some(a.clone()), ..Default::default() };
                let s = latest(self, ns, filter, "agent_id", a).await?;
                (s.id, Some(s))
            }
            SnapshotScope::Task(t) => {
                let filter = SessionFilter { task_id: Some(t.clone()), ..Default::default() };
                let s = latest(self, ns, filter, "task_id", t).await?;
                (s.id, Some(s))
            }
        };
        let session = async {
            match found {
                Some(s) => Ok(s),
                None => Ok::<_, RecallError>(store.session(ns, named).await?),
            }
        };
        let asked_task = req.task_id.clone().filter(|t| !t.is_empty());
        let (session, reads, memory, asked_card) = futures::try_join!(
            session,
            session_reads(self, ns, named),
            memory_reads(self, ns, named),
            task_card(self, ns, asked_task.as_deref())
        )?;
        let sid = session.id;
        // The events' own statement says how far the session went when they were read.
        let head = reads.head.unwrap_or(session.event_count);
        let task = match asked_task {
            Some(_) => asked_card,
            None => task_card(self, ns, session.task_id.as_deref().filter(|t| !t.is_empty())).await?,
        };
        let MemoryReads { fact_seq, extractor, mut facts } = memory;
        let memory_seq = fact_seq.min(head);
        facts.retain(|f| f.span.last <= memory_seq);
        let mut events = reads.events;
        // The two statements saw the store at two moments: had the worker moved on between
        // them, the events from where its stored facts end are read now.
        let read_from = events.first().map_or(head + 1, |e| e.seq);
        if memory_seq + 1 < read_from && memory_seq < head {
            let missed = crate::worker::read_events(store, ns, sid, memory_seq + 1, read_from - 1).await?;
            let mut all = crate::worker::mem_events(missed, chrono::Duration::zero());
            all.append(&mut events);
            events = all;
        }
        let requests = reads.requests;
        let mut x = extractor;
        for e in events.iter().filter(|e| e.seq > memory_seq) {
            facts.extend(x.push(e));
        }
        // One order whoever read the facts: when they were completed, then their derived id.
        facts.sort_by_cached_key(|f| (f.span.last, f.span.first, tables::fact_id(sid, f)));
        let recent_from = head.saturating_sub(RECENT_EVENTS - 1).max(1);
        let recent: Vec<MemEvent> = events.into_iter().filter(|e| e.seq >= recent_from).collect();
        let input = Input { task: task.as_ref(), requests: &requests, facts: &facts, recent: &recent, head };
        let entries = memex_handoff::entries(&input, &req.options);

        let mut batch = PointerBatch::default();
        for s in memex_handoff::spans(&entries) {
            batch.want_span(sid, s.first, s.last);
        }
        batch.resolve(ns, self.view.as_ref()).await?;
        let cites = |s: SeqSpan| batch.lines(sid, s.first, s.last);
        let task_ref = task.as_ref().map(|t| (t.task_id.as_str(), t.version));
        let snap = memex_handoff::render(sid, task_ref, entries, &cites, req.format, req.budget, &req.tokenizer);
        let item = |s: Shown| item(sid, s);
        Ok(HandoffSnapshot {
            session: sid,
            task: task.as_ref().map(|t| (t.task_id.clone(), t.version)),
            text: snap.text,
            tokens: snap.tokens,
            items: snap.shown.into_iter().map(item).collect(),
            omitted: snap.omitted.into_iter().map(item).collect(),
            head,
            memory_seq,
        })
    }
}

fn item(session: Uuid, s: Shown) -> SnapshotItem {
    let (first, last) = match s.entry.source {
        memex_handoff::Source::Events(span) => (span.first, span.last),
        memex_handoff::Source::Task => (0, 0),
    };
    let pointer = s
        .cite
        .map(|l| Pointer { session: memex_event::SessionId(session), chain: l.chain, range: l.range }.to_string())
        .unwrap_or_default();
    SnapshotItem {
        section: s.entry.section.name(),
        label: s.entry.label,
        text: s.entry.text,
        pointer,
        first_seq: first,
        last_seq: last,
        priority: s.entry.priority.name(),
    }
}

async fn latest(
    m: &Memory,
    ns: Uuid,
    filter: SessionFilter,
    field: &'static str,
    value: &str,
) -> Result<memex_store::Session, RecallError> {
    let page = m.store.list_sessions(ns, &filter, 1, None).await?;
    page.sessions.into_iter().next().ok_or_else(|| RecallError::NotFound(format!("a session with {field} {value:?}")))
}

/// The task's current state card, if the task has one.
async fn task_card(m: &Memory, ns: Uuid, task: Option<&str>) -> Result<Option<TaskCard>, RecallError> {
    let Some(task) = task else { return Ok(None) };
    let row = match m.store.task_state(ns, task, None).await {
        Ok(r) => r,
        Err(memex_store::StoreError::TaskNotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let state: memex_task::TaskState = serde_json::from_value(row.state)?;
    Ok(Some(TaskCard { task_id: row.task_id, version: row.version, state }))
}

/// What one statement reads of a session's events: its user messages, and its events from the
/// first the memory worker has not read (or from the recent ones, whichever come first).
struct SessionReads {
    /// The session's last seq as that statement saw it (None: it read no event).
    head: Option<u64>,
    events: Vec<MemEvent>,
    requests: Vec<MemEvent>,
}

async fn session_reads(m: &Memory, ns: Uuid, session: Uuid) -> Result<SessionReads, RecallError> {
    type Row = (bool, i64, String, String, Option<String>, Option<String>, String, DateTime<Utc>, i64);
    // The user messages have an index of their own; the tail is a range of the primary key.
    let rows: Vec<Row> = sqlx::query_as(
        "WITH h AS (SELECT next_seq - 1 AS head FROM sessions WHERE id = $1 AND namespace_id = $2),
              p AS (SELECT fact_seq FROM memory_progress WHERE namespace_id = $2 AND session_id = $1)
         SELECT false, e.seq, e.kind, e.content, e.tool_name, e.tool_call_id, e.agent_id, e.event_time, h.head
         FROM h JOIN events e ON e.session_id = $1 AND e.namespace_id = $2 AND e.seq <= h.head
          AND e.seq >= LEAST(COALESCE((SELECT fact_seq FROM p), 0) + 1, h.head - $3 + 1)
         UNION ALL
         SELECT true, e.seq, e.kind, e.content, NULL, NULL, e.agent_id, e.event_time, h.head
         FROM h JOIN events e ON e.session_id = $1 AND e.namespace_id = $2 AND e.kind = 'user_message'
          AND e.seq <= h.head
         ORDER BY 1, 2",
    )
    .bind(session)
    .bind(ns)
    .bind(RECENT_EVENTS as i64)
    .fetch_all(m.store.pool())
    .await?;
    let head = rows.first().map(|r| r.8.max(0) as u64);
    let (mut events, mut requests) = (Vec::new(), Vec::new());
    for (request, seq, kind, content, tool_name, tool_call_id, agent_id, time, _) in rows {
        let e = MemEvent {
            seq: seq.max(0) as u64,
            kind,
            content,
            tool_name,
            tool_call_id,
            agent_id,
            time,
            after_quiet: false,
        };
        if request { requests.push(e) } else { events.push(e) }
    }
    Ok(SessionReads { head, events, requests })
}

/// How far the memory worker has read the session, the extractor's state there, and the facts it
/// stored that were complete by then: one statement, so they agree.
struct MemoryReads {
    fact_seq: u64,
    extractor: FactExtractor,
    facts: Vec<Fact>,
}

async fn memory_reads(m: &Memory, ns: Uuid, session: Uuid) -> Result<MemoryReads, RecallError> {
    type Row = (
        Option<i64>,
        Option<serde_json::Value>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<DateTime<Utc>>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<i64>,
        Option<i64>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "WITH p AS (SELECT fact_seq, state FROM memory_progress
                    WHERE namespace_id = $1 AND session_id = $2 AND fact_seq > 0 AND state IS NOT NULL)
         SELECT p.fact_seq, p.state, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
                NULL::timestamptz, NULL::text, NULL::text, NULL::text, NULL::int8, NULL::int8
         FROM p
         UNION ALL
         SELECT NULL, NULL, f.fact_type, f.subject, f.verb, f.object, f.what, f.who, f.when_time, f.place, f.why,
                f.status, f.first_seq, f.last_seq
         FROM p JOIN memory_facts f ON f.namespace_id = $1 AND f.session_id = $2 AND f.last_seq <= p.fact_seq",
    )
    .bind(ns)
    .bind(session)
    .fetch_all(m.store.pool())
    .await?;
    let mut out = MemoryReads { fact_seq: 0, extractor: FactExtractor::default(), facts: Vec::new() };
    for row in rows {
        match row {
            (Some(seq), Some(state), ..) => {
                out.fact_seq = seq.max(0) as u64;
                out.extractor = serde_json::from_value(state)?;
            }
            (
                None,
                None,
                Some(t),
                Some(subject),
                Some(verb),
                Some(object),
                Some(what),
                Some(who),
                Some(when),
                Some(place),
                Some(why),
                Some(status),
                Some(first),
                Some(last),
            ) => out.facts.push(Fact {
                fact_type: FactType::parse(&t).ok_or_else(|| RecallError::Corrupt(format!("fact type {t:?}")))?,
                subject,
                verb,
                object,
                what,
                who,
                when,
                place,
                why,
                status: TemporalStatus::parse(&status)
                    .ok_or_else(|| RecallError::Corrupt(format!("fact status {status:?}")))?,
                span: SeqSpan::new(first.max(0) as u64, last.max(0) as u64),
            }),
            _ => return Err(RecallError::Corrupt("a memory fact with a missing column".into())),
        }
    }
    Ok(out)
}
