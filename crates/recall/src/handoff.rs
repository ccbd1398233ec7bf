//! `BuildSnapshot`'s shell: reads what the pure core (`memex-handoff`) needs — the session, its
//! task's state card, its user requests, memory's stored facts, the facts of the events the
//! worker has not read yet (the extractor resumed from the worker's own state), the last events —
//! looks the pointers up in the full view, and hands back the core's snapshot with them.
//!
//! The facts are memory's: those stored up to the worker's `fact_seq`, then the same extractor
//! run on from the state it stored, so a snapshot taken right after a compaction sees the last
//! events too, and the answer is the same whether or not the worker had read them.
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
        let session = match &req.scope {
            SnapshotScope::Session(id) => store.session(ns, *id).await?,
            SnapshotScope::Agent(a) => {
                latest(self, ns, SessionFilter { agent_id: Some(a.clone()), ..Default::default() }, "agent_id", a)
                    .await?
            }
            SnapshotScope::Task(t) => {
                latest(self, ns, SessionFilter { task_id: Some(t.clone()), ..Default::default() }, "task_id", t).await?
            }
        };
        let sid = session.id;
        let head = session.event_count;
        let task_id = req.task_id.clone().or(session.task_id.clone()).filter(|t| !t.is_empty());
        let (task, progress, requests) = futures::try_join!(
            task_card(self, ns, task_id.as_deref()),
            progress(self, ns, sid),
            requests(self, ns, sid, head),
        )?;
        let (memory_seq, extractor) = progress;
        let memory_seq = memory_seq.min(head);
        let stored = stored_facts(self, ns, sid, memory_seq);
        let from = (memory_seq + 1).min(head.saturating_sub(RECENT_EVENTS - 1)).max(1);
        let events = async {
            if head == 0 {
                return Ok(Vec::new());
            }
            let events = crate::worker::read_events(store, ns, sid, from, head).await?;
            Ok::<_, RecallError>(crate::worker::mem_events(events, chrono::Duration::zero()))
        };
        let (mut facts, events) = futures::try_join!(stored, events)?;
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

/// How far the memory worker has read the session, and the extractor's state there.
async fn progress(m: &Memory, ns: Uuid, session: Uuid) -> Result<(u64, FactExtractor), RecallError> {
    let row: Option<(i64, Option<serde_json::Value>)> =
        sqlx::query_as("SELECT fact_seq, state FROM memory_progress WHERE namespace_id = $1 AND session_id = $2")
            .bind(ns)
            .bind(session)
            .fetch_optional(m.store.pool())
            .await?;
    match row {
        Some((seq, Some(state))) if seq > 0 => Ok((seq as u64, serde_json::from_value(state)?)),
        _ => Ok((0, FactExtractor::default())),
    }
}

/// The session's user messages up to `head` (an index holds just them).
async fn requests(m: &Memory, ns: Uuid, session: Uuid, head: u64) -> Result<Vec<MemEvent>, RecallError> {
    type Row = (i64, String, String, DateTime<Utc>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT seq, content, agent_id, event_time FROM events
         WHERE session_id = $1 AND namespace_id = $2 AND kind = 'user_message' AND seq <= $3 ORDER BY seq",
    )
    .bind(session)
    .bind(ns)
    .bind(head as i64)
    .fetch_all(m.store.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|(seq, content, agent_id, time)| MemEvent {
            seq: seq as u64,
            kind: "user_message".into(),
            content,
            tool_name: None,
            tool_call_id: None,
            agent_id,
            time,
            after_quiet: false,
        })
        .collect())
}

/// Memory's facts of the session completed by `upto` (later ones are read again from the events).
async fn stored_facts(m: &Memory, ns: Uuid, session: Uuid, upto: u64) -> Result<Vec<Fact>, RecallError> {
    if upto == 0 {
        return Ok(Vec::new());
    }
    type Row = (String, String, String, String, String, String, DateTime<Utc>, String, String, String, i64, i64);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT fact_type, subject, verb, object, what, who, when_time, place, why, status, first_seq, last_seq
         FROM memory_facts WHERE namespace_id = $1 AND session_id = $2 AND last_seq <= $3",
    )
    .bind(ns)
    .bind(session)
    .bind(upto as i64)
    .fetch_all(m.store.pool())
    .await?;
    rows.into_iter()
        .map(|(t, subject, verb, object, what, who, when, place, why, status, first, last)| {
            Ok(Fact {
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
                span: SeqSpan::new(first as u64, last as u64),
            })
        })
        .collect()
}
