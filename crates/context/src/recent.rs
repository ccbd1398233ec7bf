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
    events: Arc<Vec<Event>>,
}

/// Standing items and system events of a pack's scope, as of the scope's heads.
pub(crate) struct Standing {
    heads: Vec<(Uuid, u64)>,
    standing: Vec<Event>,
    system: Vec<Event>,
}

/// How a pack pages in its recent tail: a first read of `first` events, then `page` more at a
/// time while the tail is a whole number of pages, under `max_events`, and under `wanted_bytes`
/// of content (more could not fit the tail budget).
pub(crate) struct TailPages {
    pub first: u32,
    pub page: u32,
    pub max_events: usize,
    pub wanted_bytes: usize,
}

impl TailPages {
    fn wants_more(&self, tail: &[Event]) -> bool {
        !tail.is_empty()
            && tail.len().is_multiple_of(self.page as usize)
            && tail.len() < self.max_events
            && tail.iter().map(|e| e.content.len()).sum::<usize>() < self.wanted_bytes
    }
}

/// Whether newest-first `events` (contiguous seqs) reach the session's first event: nothing
/// older is left to read.
pub(crate) fn reaches_start(events: &[Event]) -> bool {
    events.last().is_none_or(|e| e.seq <= 1)
}

/// A `Vec` of events: its spare capacity too, each event's heap.
fn weight(events: &Vec<Event>) -> usize {
    (events.capacity() - events.len()) * size_of::<Event>()
        + events.iter().map(crate::events::event_bytes).sum::<usize>()
}

pub(crate) fn tail_weight(t: &Tail) -> u32 {
    // The `Arc`s' counts and the `Vec` behind the second.
    let bytes = size_of::<Tail>() + 4 * size_of::<usize>() + size_of::<Vec<Event>>() + weight(&t.events);
    let bytes = bytes + crate::events::CACHE_ENTRY_BYTES;
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

pub(crate) fn standing_weight(s: &Standing) -> u32 {
    let bytes = size_of::<Standing>()
        + 2 * size_of::<usize>()
        + s.heads.capacity() * size_of::<(Uuid, u64)>()
        + weight(&s.standing)
        + weight(&s.system)
        + crate::events::CACHE_ENTRY_BYTES;
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

impl ContextEngine {
    /// The session's last cached tail, whatever its head.
    pub(crate) fn cached_tail(&self, namespace_id: Uuid, session_id: Uuid) -> Option<Arc<Tail>> {
        self.tails.get(&(namespace_id, session_id))
    }

    /// Keeps the newest events a pack paged in.
    fn remember_tail(&self, namespace_id: Uuid, session_id: Uuid, events: Arc<Vec<Event>>) {
        let head = events.first().map_or(0, |e| e.seq);
        self.tails.insert((namespace_id, session_id), Arc::new(Tail { head, events }));
    }

    /// Reads the session's `limit` newest events, newest first.
    pub(crate) async fn read_newest(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        limit: u32,
    ) -> memex_store::Result<Vec<Event>> {
        self.store.events_newest_first(namespace_id, session_id, SeqRange { from: 0, to: None }, limit).await
    }

    /// The session's newest events as of `head`, newest first: `cached` when it is that version
    /// (shared, not copied), else `cached` after what was appended since, else read afresh; and
    /// whether they differ from `cached`. Contiguous seqs from `head` down; as many as were cached
    /// or read, not cut to any length.
    async fn newest_at(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        head: u64,
        cached: Option<Arc<Tail>>,
        first_read: u32,
    ) -> Result<(Arc<Vec<Event>>, bool)> {
        Ok(match cached {
            Some(c) if c.head == head => (c.events.clone(), false),
            Some(c) if c.head < head => {
                let since = SeqRange { from: c.head + 1, to: None };
                let mut newer = self.store.events_newest_first(namespace_id, session_id, since, first_read).await?;
                // A page that did not reach the cached head leaves a gap: the cached events go.
                if newer.last().is_some_and(|e| e.seq == c.head + 1) {
                    newer.extend(c.events.iter().cloned());
                }
                (Arc::new(newer), true)
            }
            _ => (Arc::new(self.read_newest(namespace_id, session_id, first_read).await?), true),
        })
    }

    /// The recent tail a pack reads: the session's newest events as of `head`, newest first, paged
    /// in by `pages` — exactly what paging from the store would give, whatever the cache held
    /// (same inputs, same pack). Keeps what it returns. `fresh` is a first page already read.
    pub(crate) async fn tail_for_pack(
        &self,
        namespace_id: Uuid,
        session_id: Uuid,
        head: u64,
        cached: Option<Arc<Tail>>,
        fresh: Option<Vec<Event>>,
        pages: &TailPages,
    ) -> Result<Arc<Vec<Event>>> {
        let (mut have, mut changed) = match fresh {
            Some(events) => (Arc::new(events), true),
            None => self.newest_at(namespace_id, session_id, head, cached, pages.first).await?,
        };
        // Simulate the paging, reading only what the cache lacks.
        let (mut n, mut target) = (0usize, pages.first as usize);
        loop {
            while have.len() < target && !reaches_start(&have) {
                let before = SeqRange { from: 0, to: have.last().map(|e| e.seq.saturating_sub(1)) };
                let want = u32::try_from(target - have.len()).unwrap_or(u32::MAX);
                let more = self.store.events_newest_first(namespace_id, session_id, before, want).await?;
                if more.is_empty() {
                    break;
                }
                Arc::make_mut(&mut have).extend(more);
                changed = true;
            }
            let next = target.min(have.len());
            if next == n {
                break;
            }
            n = next;
            if !pages.wants_more(&have[..n]) {
                break;
            }
            target = n + pages.page as usize;
        }
        if have.len() > n {
            Arc::make_mut(&mut have).truncate(n);
            changed = true;
        }
        if changed {
            self.remember_tail(namespace_id, session_id, have.clone());
        }
        Ok(have)
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
