//! Stored events as the pure cores see them.
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::Arc;

use memex_event::EventKind;
use memex_pointer::{ArtifactPointer, ContextEvent, EventFlags};
use memex_store::{Event, StoreError};
use uuid::Uuid;

use crate::{ContextEngine, Result};

pub(crate) fn context_event(e: &Event, session_task: Option<&str>) -> ContextEvent {
    ContextEvent {
        id: e.id,
        session_id: e.session_id,
        seq: e.seq,
        kind: EventKind::parse(&e.kind).unwrap_or_else(|_| EventKind::Extension(e.kind.clone())),
        tool_name: e.tool_name.clone(),
        content: e.content.clone(),
        artifact: e.artifact.as_ref().map(|a| ArtifactPointer { id: a.id.to_string(), size: a.size }),
        task_id: e.task_id.clone().or_else(|| session_task.map(str::to_owned)),
        task_state_version: e.task_state_version,
        time_ms: e.event_time.timestamp_millis(),
        flags: EventFlags::from_metadata(e.metadata.as_ref()),
    }
}

impl ContextEngine {
    /// The task of each session (cached: a session's task never changes).
    pub(crate) async fn tasks_of(
        &self,
        namespace_id: Uuid,
        sessions: &[Uuid],
    ) -> Result<HashMap<Uuid, Option<String>>> {
        let mut out = HashMap::new();
        let mut missing = Vec::new();
        for s in sessions {
            match self.session_tasks.get(&(namespace_id, *s)) {
                Some(t) => {
                    out.insert(*s, t);
                }
                None if !missing.contains(s) => missing.push(*s),
                None => {}
            }
        }
        if !missing.is_empty() {
            let found = self.store.session_tasks(namespace_id, &missing).await?;
            for s in missing {
                let t = found.iter().find(|(id, _)| *id == s).map(|(_, t)| t.clone());
                self.session_tasks.insert((namespace_id, s), t.clone());
                out.insert(s, t);
            }
        }
        Ok(out)
    }

    /// Converts stored events, filling each one's task from its session when it names none, and
    /// each tool output's tool from its call.
    pub(crate) async fn context_events<E: Borrow<Event>>(
        &self,
        namespace_id: Uuid,
        events: &[E],
    ) -> Result<Vec<ContextEvent>> {
        let events: Vec<&Event> = events.iter().map(Borrow::borrow).collect();
        // Once per session, not per event: a pack converts a couple of hundred events of a few.
        let mut sessions: Vec<Uuid> = events.iter().filter(|e| e.task_id.is_none()).map(|e| e.session_id).collect();
        sessions.sort_unstable();
        sessions.dedup();
        let tasks = self.tasks_of(namespace_id, &sessions).await?;
        let mut out: Vec<ContextEvent> =
            events.iter().map(|e| context_event(e, tasks.get(&e.session_id).and_then(|t| t.as_deref()))).collect();
        let mut wanted: Vec<(Uuid, String)> = Vec::new();
        for e in &events {
            if e.tool_name.is_none()
                && let Some(call) = &e.tool_call_id
            {
                // One allocation per call: the cache key is moved into `wanted` on a miss.
                let key = (namespace_id, e.session_id, call.clone());
                if self.tool_names.get(&key).is_none() && !wanted.iter().any(|(s, c)| *s == key.1 && *c == key.2) {
                    wanted.push((key.1, key.2));
                }
            }
        }
        if !wanted.is_empty() {
            for (session, call, tool) in self.store.tool_names(namespace_id, &wanted).await? {
                self.tool_names.insert((namespace_id, session, call), tool);
            }
        }
        for (c, e) in out.iter_mut().zip(events) {
            if c.tool_name.is_none()
                && let Some(call) = &e.tool_call_id
            {
                c.tool_name = self.tool_names.get(&(namespace_id, e.session_id, call.clone()));
            }
        }
        Ok(out)
    }
}

impl ContextEngine {
    /// The events with these ids, in the order asked, as [`memex_store::Store::events_by_ids`]
    /// gives them, but from the engine's cache where it has them: events never change, so a
    /// cached event is never stale. A pack's search hits are mostly events it has seen before.
    /// Shared with the cache, not copied: a pack's candidates hold a few hundred KB of content.
    pub(crate) async fn events_by_ids(&self, namespace_id: Uuid, ids: &[Uuid]) -> Result<Vec<Arc<Event>>> {
        let mut found: Vec<Option<Arc<Event>>> = ids.iter().map(|id| self.events.get(&(namespace_id, *id))).collect();
        let missing: Vec<Uuid> = ids.iter().zip(&found).filter(|(_, f)| f.is_none()).map(|(id, _)| *id).collect();
        if missing.is_empty() {
            return Ok(found.into_iter().flatten().collect());
        }
        let read = match self.store.events_by_ids(namespace_id, &missing).await {
            Ok(read) => read,
            // Name the id's place in the caller's list, not in the list of cache misses.
            Err(StoreError::EventNotFound { id, field }) => {
                let field = ids.iter().position(|x| *x == id).map_or(field, |i| format!("event_ids[{i}]"));
                return Err(StoreError::EventNotFound { field, id }.into());
            }
            Err(e) => return Err(e.into()),
        };
        let mut read = read.into_iter();
        for slot in found.iter_mut().filter(|f| f.is_none()) {
            if let Some(e) = read.next() {
                let e = Arc::new(e);
                self.events.insert((namespace_id, e.id), e.clone());
                *slot = Some(e);
            }
        }
        Ok(found.into_iter().flatten().collect())
    }
}

/// What one entry of a moka cache costs beside its key and value (its node, its access-order and
/// write-order nodes, its slot in the hash table): measured by `tests/cache_weights.rs`.
pub const CACHE_ENTRY_BYTES: usize = 320;

/// The heap an event holds, and its struct: what it costs held inline (in a tail's `Vec`, say).
/// Capacities, not lengths, and the metadata's JSON tree too: the caches that weigh events by it
/// must hold the process's memory to their byte caps (`tests/cache_weights.rs` checks it against
/// a counting allocator).
pub fn event_bytes(e: &Event) -> usize {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
    size_of::<Event>()
        + e.content.capacity()
        + e.kind.capacity()
        + e.agent_id.capacity()
        + opt(&e.task_id)
        + opt(&e.tool_name)
        + opt(&e.tool_call_id)
        + e.artifact.as_ref().map_or(0, |a| a.media_type.capacity())
        + e.metadata.as_ref().map_or(0, json_bytes)
}

/// The heap of a JSON tree (serde_json's default maps are B-trees: about a node's share per entry).
fn json_bytes(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::String(s) => s.capacity(),
        Value::Array(a) => a.capacity() * size_of::<Value>() + a.iter().map(json_bytes).sum::<usize>(),
        Value::Object(m) => {
            m.iter().map(|(k, v)| k.capacity() + size_of::<String>() + size_of::<Value>() + 16 + json_bytes(v)).sum()
        }
        _ => 0,
    }
}

/// What an event costs in the events cache: its `Arc`, the event, the cache entry.
pub fn event_weight(e: &Event) -> u32 {
    u32::try_from(2 * size_of::<usize>() + event_bytes(e) + CACHE_ENTRY_BYTES).unwrap_or(u32::MAX)
}
