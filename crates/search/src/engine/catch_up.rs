//! Keeping a replica's text indexes current from Postgres: catch-ups (a query's sessions, or a
//! namespace in rounds), commits of fresh documents, rebuilds.
use std::sync::Arc;

use memex_event::Seq;
use memex_pointer::Stability;
use memex_store::{Event, SeqRange};
use uuid::Uuid;

use super::SearchIndex;
use crate::IndexError;
use crate::doc::event_docs;
use crate::namespace_index::{NamespaceIndex, Writing, namespace_dir};

/// Events read from Postgres per page during a catch-up.
const PAGE: u32 = 2000;
/// Documents handed to the writer at a time during a catch-up.
const ADD_BATCH: usize = 20_000;
/// Events per round of a namespace's catch-up: what a query may have to wait for (about a
/// tenth of a second on two cores), against a commit per round.
const ROUND_EVENTS: u64 = 2_000;
/// Sessions of other waiting queries a catch-up takes along (each waiter's own are always in
/// its own catch-up).
const MAX_JOINED: usize = 16;

impl SearchIndex {
    /// Drops this replica's documents of `sessions` (erased), to be indexed again from Postgres.
    /// The query-vector cache goes too: it is keyed by query texts, which may quote them.
    pub async fn forget_sessions(&self, ns: Uuid, sessions: &[Uuid]) -> Result<(), IndexError> {
        if let Some(q) = &self.query_vectors {
            q.clear();
        }
        let idx = self.namespace(ns).await?;
        idx.forget_sessions(sessions).await?;
        self.catch_up_index(&idx, Some(sessions), None, false).await?;
        Ok(())
    }

    /// Brings the namespace's text index up to the sessions' heads in Postgres (only `sessions`
    /// when given) and commits, fresh documents too. Returns the number of events indexed. After
    /// it returns, every event committed before it was called is searchable: that is
    /// read-your-writes, on any replica.
    #[tracing::instrument(name = "index.catch_up", level = "debug", skip_all)]
    pub async fn catch_up(&self, ns: Uuid, sessions: Option<&[Uuid]>) -> Result<u64, IndexError> {
        let idx = self.namespace(ns).await?;
        let n = match sessions {
            Some(_) => self.catch_up_index(&idx, sessions, None, false).await?,
            None => {
                let total = self.store.head_total(ns, None).await?;
                self.catch_up_rounds(&idx, total).await?
            }
        };
        self.commit_fresh(&idx).await?;
        Ok(n)
    }

    /// Catch-ups left documents fresh: this commits them, beside any catch-up under way.
    async fn commit_fresh(&self, idx: &NamespaceIndex) -> Result<(), IndexError> {
        if idx.has_fresh()? {
            let w = idx.writing().await;
            if idx.has_fresh()? {
                self.commit(idx, &w).await?;
            }
        }
        Ok(())
    }

    /// The whole namespace, in rounds of about [`ROUND_EVENTS`] events, each its own commit. A
    /// query waits for its own sessions behind the index's marks, which a round holds: one round
    /// over a freshly loaded namespace (300k events: a minute on two cores) made every query of
    /// that minute wait for all of it; now a query waits for one round at most.
    /// `total`: the namespace's head total, read by the caller.
    async fn catch_up_rounds(&self, idx: &NamespaceIndex, total: u64) -> Result<u64, IndexError> {
        let marked = idx.state.lock().await.sum(None);
        self.stats.set_behind(idx.ns, total.saturating_sub(marked));
        if marked >= total {
            return Ok(0);
        }
        let heads = self.store.session_heads(idx.ns, None).await?;
        let behind: Vec<(Uuid, u64)> = {
            let marks = idx.state.lock().await;
            heads
                .into_iter()
                .filter(|(s, head)| *head > marks.of(s))
                .map(|(s, head)| (s, head - marks.of(&s)))
                .collect()
        };
        let mut indexed = 0;
        let mut round = Vec::new();
        let mut size = 0;
        for (i, (session, missing)) in behind.iter().enumerate() {
            if self.is_stopping() {
                break;
            }
            round.push(*session);
            size += missing;
            if size >= ROUND_EVENTS || i + 1 == behind.len() {
                indexed += self.catch_up_index(idx, Some(&round), None, true).await?;
                round.clear();
                size = 0;
            }
        }
        Ok(indexed)
    }

    /// `known`: the last seqs of `sessions`, when the caller has just read them.
    /// `fresh`: keep what it indexes fresh (see [`crate::fresh`]) unless it is too much for a
    /// part or the commits fall behind; without it, everything caught up is committed.
    pub(super) async fn catch_up_index(
        &self,
        idx: &NamespaceIndex,
        sessions: Option<&[Uuid]>,
        known: Option<&[(Uuid, u64)]>,
        fresh: bool,
    ) -> Result<u64, IndexError> {
        let ns = idx.ns;
        let total = match known {
            Some(k) => k.iter().map(|(_, h)| h).sum(),
            None => self.store.head_total(ns, sessions).await?,
        };
        let poisoned = || IndexError::Task("pending sessions lock poisoned".into());
        if let Some(s) = sessions {
            idx.pending.lock().map_err(|_| poisoned())?.extend(s.iter().copied());
        }
        let mut marks = idx.state.lock().await;
        if marks.sum(sessions) >= total {
            // Nothing to wait for: take this query's sessions off the queue again, so a namespace
            // that only answers queries does not queue every session it is asked about (a waiter
            // that queued the same session catches it up itself: its own sessions are in its batch).
            if let Some(s) = sessions {
                let mut pending = idx.pending.lock().map_err(|_| poisoned())?;
                for id in s {
                    pending.remove(id);
                }
            }
            // A catch-up that commits leaves nothing fresh, whatever it had to index.
            if !fresh && idx.has_fresh()? {
                self.commit(idx, &idx.writing().await).await?;
            }
            return Ok(0);
        }
        // Catch up every session a query is waiting for, in one commit: the sessions queued
        // before this point were queued after their queries read their heads, so the heads
        // read below cover them; the waiting queries then find their sessions caught up.
        let batch: Option<Vec<Uuid>> = match sessions {
            Some(own) => {
                // A bounded number of the waiters' sessions join: taking them all let a round
                // grow with the queue behind it (each longer round queued more waiters).
                let mut all: std::collections::HashSet<Uuid> = own.iter().copied().collect();
                let mut pending = idx.pending.lock().map_err(|_| poisoned())?;
                let joining: Vec<Uuid> = pending.iter().copied().take(MAX_JOINED).collect();
                for id in joining {
                    pending.remove(&id);
                    all.insert(id);
                }
                drop(pending);
                let mut all: Vec<Uuid> = all.into_iter().collect();
                all.sort_unstable();
                Some(all)
            }
            None => None,
        };
        // The heads of the round's sessions: the ones the caller read are not read again (under
        // the lock every query of the namespace waits on), only those of sessions that joined.
        let heads = match (known, batch.as_deref()) {
            (Some(k), Some(batch)) => {
                let unknown: Vec<Uuid> = batch.iter().filter(|s| !k.iter().any(|(id, _)| id == *s)).copied().collect();
                let mut heads: Vec<(Uuid, u64)> = k.iter().filter(|(_, h)| *h > 0).copied().collect();
                if !unknown.is_empty() {
                    heads.extend(self.store.session_heads(ns, Some(&unknown)).await?);
                }
                heads
            }
            _ => self.store.session_heads(ns, batch.as_deref()).await?,
        };
        let mut docs = Vec::new();
        let mut updates = Vec::new();
        let mut indexed = 0u64;
        // Kept fresh unless one batch went to the writer already: then all go, and are committed.
        let mut flushed = !fresh;
        let mut writing: Option<Writing<'_>> = None;
        let result: Result<(), IndexError> = async {
            for (session, head) in heads {
                let mut next = marks.of(&session) + 1;
                // The events before `next` are read again only as context for the first ones.
                let mut context: std::collections::VecDeque<String> = std::collections::VecDeque::new();
                let mut from = next.saturating_sub(self.opts.context_events as u64).max(1);
                while next <= head {
                    let page =
                        self.store.events_in_range(ns, session, SeqRange { from, to: Some(head) }, PAGE, None).await?;
                    let Some(last_seq) = page.events.last().map(|e| e.seq) else { break };
                    from = last_seq + 1;
                    let (before, new): (Vec<Event>, Vec<Event>) = page.events.into_iter().partition(|e| e.seq < next);
                    for e in &before {
                        self.push_context(&mut context, e);
                    }
                    next = last_seq + 1;
                    indexed += new.len() as u64;
                    self.documents(ns, session, &new, &mut context, &mut docs).await?;
                    if docs.len() >= ADD_BATCH {
                        let w = match &writing {
                            Some(w) => w,
                            None => writing.insert(idx.writing().await),
                        };
                        idx.add(w, std::mem::take(&mut docs)).await?;
                        flushed = true;
                    }
                }
                updates.push((session, next - 1));
            }
            if flushed || idx.fresh_overdue(docs.len())? {
                let w = match &writing {
                    Some(w) => w,
                    None => writing.insert(idx.writing().await),
                };
                idx.add(w, std::mem::take(&mut docs)).await?;
                self.commit(idx, w).await
            } else {
                idx.add_fresh(std::mem::take(&mut docs)).await
            }
        }
        .await;
        if let Err(e) = result {
            // What went to the writer is dropped; the watermarks were not moved.
            if let Some(w) = &writing {
                idx.rollback(w).await;
            }
            return Err(e);
        }
        drop(writing);
        for (session, seq) in updates {
            marks.set(session, seq);
        }
        self.stats.add_indexed(indexed);
        Ok(indexed)
    }

    async fn commit(&self, idx: &NamespaceIndex, w: &Writing<'_>) -> Result<(), IndexError> {
        idx.commit(w).await?;
        self.stats.add_commit();
        Ok(())
    }

    /// Starts a commit of the namespace's fresh documents if enough wait, and goes on.
    pub(super) fn commit_if_due(&self, idx: &Arc<NamespaceIndex>) -> Result<(), IndexError> {
        if idx.fresh_due()? {
            let stats = self.stats.clone();
            let ns = idx.ns;
            idx.start_commit(move |r| match r {
                Ok(()) => stats.add_commit(),
                // The documents stay fresh; the next commit (at the latest the background
                // catch-up's) tries again, and a catch-up finding them overdue reports it.
                Err(e) => tracing::warn!(namespace = %ns, error = %e, "committing fresh documents failed"),
            });
        }
        Ok(())
    }

    /// Remembers an event's text as context for the ones after it.
    fn push_context(&self, context: &mut std::collections::VecDeque<String>, e: &Event) {
        if self.opts.context_events == 0 {
            return;
        }
        context.push_back(crate::doc::embed_text(e, self.opts.context_bytes));
        while context.len() > self.opts.context_events {
            context.pop_front();
        }
    }

    async fn documents(
        &self,
        ns: Uuid,
        session: Uuid,
        events: &[Event],
        context: &mut std::collections::VecDeque<String>,
        docs: &mut Vec<crate::doc::DocSpec>,
    ) -> Result<(), IndexError> {
        let seqs: Vec<Seq> = events.iter().map(|e| Seq(e.seq)).collect();
        // Stored in the document, so only lines that can never move.
        let lines = self.lines_of(ns, session, &seqs, Stability::Final).await;
        for (i, e) in events.iter().enumerate() {
            let artifact = match &e.artifact {
                Some(a) if self.opts.max_artifact_bytes > 0 => {
                    let bytes = self.store.artifact(ns, a.id).await?.bytes;
                    let cut = bytes.len().min(self.opts.max_artifact_bytes);
                    Some(String::from_utf8_lossy(&bytes[..cut]).into_owned())
                }
                _ => None,
            };
            let range = lines.get(i).copied().flatten();
            let ctx: Vec<&str> = context.iter().map(String::as_str).collect();
            docs.extend(event_docs(e, artifact.as_deref(), range, self.opts.chunk(), &ctx.join("\n")));
            self.push_context(context, e);
        }
        Ok(())
    }

    /// Deletes the namespace's text index and builds it again from Postgres. The new index is built
    /// beside the old one and swapped in, so searches keep working meanwhile.
    pub async fn rebuild(&self, ns: Uuid) -> Result<u64, IndexError> {
        let final_dir = namespace_dir(&self.opts.dir(), ns);
        let tmp = self.opts.dir().join(format!("{ns}.rebuild"));
        let indexed = {
            let tmp2 = tmp.clone();
            let fresh = tokio::task::spawn_blocking(move || NamespaceIndex::create_for_rebuild(&tmp2, ns))
                .await
                .map_err(|e| IndexError::Task(e.to_string()))??;
            let n = self.catch_up_index(&fresh, None, None, false).await?;
            drop(fresh);
            n
        };
        let mut open = self.open.lock().await;
        open.remove(&ns);
        let old = self.opts.dir().join(format!("{ns}.old"));
        let swap = || -> std::io::Result<()> {
            if old.exists() {
                std::fs::remove_dir_all(&old)?;
            }
            if final_dir.exists() {
                std::fs::rename(&final_dir, &old)?;
            }
            std::fs::rename(&tmp, &final_dir)?;
            if old.exists() {
                std::fs::remove_dir_all(&old)?;
            }
            Ok(())
        };
        swap().map_err(|e| IndexError::io(&final_dir, e))?;
        Ok(indexed)
    }

    /// Catches up every namespace of the store: at start-up and from the background loop.
    /// Every namespace's head total comes from one statement: a statement per namespace made
    /// each round (once a second) cost two round trips per tenant, however quiet. Namespaces
    /// with no sessions have nothing to index; the ones open here are visited too, for their
    /// fresh documents.
    pub async fn sync_all(&self) -> Result<u64, IndexError> {
        let mut totals: std::collections::BTreeMap<Uuid, u64> = self.store.head_totals().await?.into_iter().collect();
        for ns in self.open.lock().await.keys() {
            totals.entry(*ns).or_insert(0);
        }
        let mut n = 0;
        for (ns, total) in totals {
            if self.is_stopping() {
                break;
            }
            let idx = self.namespace(ns).await?;
            n += self.catch_up_rounds(&idx, total).await?;
            self.commit_fresh(&idx).await?;
        }
        Ok(n)
    }

    /// Ends background catch-ups ([`SearchIndex::sync_all`], a namespace's rounds) after the round
    /// in hand, so that a stopping server lets go of its index writers within a round's time.
    /// Queries still catch their own sessions up.
    pub fn stop_catching_up(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::Relaxed)
    }
}
