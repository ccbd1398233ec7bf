//! What a pack reads of its sessions that only an append can change: the session's newest events
//! (the recent tail) and the scope's standing items and system events. Both are kept per session
//! with the heads (last seqs) they were read at. A pack whose heads match reuses them; a tail whose
//! session has grown reads only the events appended since (events never change, seqs are gapless).
use std::sync::Arc;

use memex_store::{Event, SeqRange};
use uuid::Uuid;

use crate::{ContextEngine, Result};

/// A session's newest events, newest first, as of `head` (its newest event's seq; 0: none).
pub(crate) struct Tail {
    head: u64,
    events: Vec<Event>,
}

/// Standing items and system events of a pack's scope, as of the scope's heads.
pub(crate) struct Standing {
    heads: Vec<(Uuid, u64)>,
    standing: Vec<Event>,
    system: Vec<Event>,
}

fn weight(events: &[Event]) -> u32 {
    events.iter().map(crate::events::event_weight).fold(64u32, u32::saturating_add)
}

pub(crate) fn tail_weight(t: &Tail) -> u32 {
    weight(&t.events)
}

pub(crate) fn standing_weight(s: &Standing) -> u32 {
    weight(&s.standing).saturating_add(weight(&s.system))
}

impl ContextEngine {
    /// The session's last cached tail, whatever its head.
    pub(crate) fn cached_tail(&self, namespace_id: Uuid, session_id: Uuid) -> Option<Arc<Tail>> {
        self.tails.get(&(namespace_id, session_id))
    }

    /// Keeps a first page of newest events just read.
    fn remember_tail(&self, namespace_id: Uuid, session_id: Uuid, events: &[Event]) {
        let head = events.first().map_or(0, |e| e.seq);
        self.tails.insert((namespace_id, session_id), Arc::new(Tail { head, events: events.to_vec() }));
    }

    /// Reads the session's `limit` newest events afresh, newest first, and keeps them.
    pub(crate) async fn read_tail(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        limit: u32,
    ) -> memex_store::Result<Vec<Event>> {
        let all = SeqRange { from: 0, to: None };
        let events = self.store.events_newest_first(namespace_id, session_id, all, limit).await?;
        self.remember_tail(namespace_id, session_id, &events);
        Ok(events)
    }

    /// The session's `limit` newest events, newest first, as of `head`: `cached` when it is that
    /// version, else `cached` with what was appended after it, else read afresh.
    pub(crate) async fn tail_at(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        head: u64,
        cached: Option<Arc<Tail>>,
        limit: u32,
    ) -> Result<Vec<Event>> {
        let events = match cached {
            Some(c) if c.head == head && c.events.len() <= limit as usize => return Ok(c.events.clone()),
            Some(c) if c.head < head => {
                let since = SeqRange { from: c.head + 1, to: None };
                let mut newer = self.store.events_newest_first(namespace_id, session_id, since, limit).await?;
                let room = (limit as usize).saturating_sub(newer.len());
                newer.extend(c.events.iter().take(room).cloned());
                newer
            }
            _ => return Ok(self.read_tail(namespace_id, session_id, limit).await?),
        };
        self.remember_tail(namespace_id, session_id, &events);
        Ok(events)
    }

    /// Standing items of `scope` (at most `limit`) and the system events of `own` (at most
    /// `system_limit`), newest first: cached while every session of the scope is at `heads`.
    pub(crate) async fn standing_at(
        &self,
        namespace_id: Uuid,
        scope: &[Uuid],
        heads: Vec<(Uuid, u64)>,
        limit: u32,
        own: Uuid,
        system_limit: u32,
    ) -> Result<(Vec<Event>, Vec<Event>)> {
        if let Some(c) = self.standing.get(&(namespace_id, own))
            && c.heads == heads
        {
            return Ok((c.standing.clone(), c.system.clone()));
        }
        let (standing, system) =
            self.store.standing_and_system_events(namespace_id, scope, limit, own, system_limit).await?;
        let kept = Standing { heads, standing: standing.clone(), system: system.clone() };
        self.standing.insert((namespace_id, own), Arc::new(kept));
        Ok((standing, system))
    }
}
