//! Where events sit in their session's full view: `GetEvents` with lines, and the
//! [`FullView`] seam the search index and the context engine ask.
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use futures::future::BoxFuture;
use memex_event::{NamespaceId, Seq, SessionId};
use memex_pointer::{FullView, FullViewError, SESSIONS_AT_ONCE, Stability, ViewBlock, ViewLines};
use memex_store::tenant::{self, Tenant};
use memex_store::{LineMapRow, Session};
use uuid::Uuid;

use crate::line_map::LineMap;
use crate::{CompiledSession, ViewError, Views};

impl Views {
    /// The full-view lines of the given events of a session (by seq); events that render nothing
    /// are absent. An imported trace maps at record granularity: every event of one trace record
    /// gets the lines of all that record's blocks. A session not compiled here is answered from
    /// its stored line map when that can say; else it is compiled, and its map stored.
    pub async fn event_lines(
        &self,
        ns: NamespaceId,
        session: SessionId,
        seqs: &[Seq],
    ) -> Result<HashMap<Seq, ViewLines>, ViewError> {
        let row = match self.cached_or_row(ns, session).await? {
            Ok(compiled) => return self.lines_in(ns, &compiled, seqs).await,
            Err(row) => row,
        };
        let map = match self.maps.get(&(ns.0, session.0)) {
            Some(kept) => Some((kept, true)),
            None => self.stored_map(ns, session).await?.map(|m| (m, false)),
        };
        self.lines_uncompiled(ns, row, map, seqs).await
    }

    /// A session's stored line map, decoded and kept.
    async fn stored_map(&self, ns: NamespaceId, session: SessionId) -> Result<Option<Arc<LineMap>>, ViewError> {
        let stored = self.store.line_map(ns.0, session.0).await?;
        Ok(stored.and_then(|r| self.keep_map(ns, &r)))
    }

    /// Decodes a stored map and keeps it.
    fn keep_map(&self, ns: NamespaceId, row: &LineMapRow) -> Option<Arc<LineMap>> {
        let map = Arc::new(LineMap::from_row(row)?);
        self.maps.insert((ns.0, row.session_id), map.clone());
        Some(map)
    }

    /// [`Views::event_lines`] of several sessions, with one round trip for their rows and one
    /// for the stored maps of those not compiled here.
    async fn lines_of_many(
        &self,
        ns: NamespaceId,
        asks: &[(SessionId, Vec<Seq>)],
        stability: Stability,
    ) -> Vec<Result<Vec<Option<ViewLines>>, FullViewError>> {
        let ids: Vec<Uuid> = asks.iter().map(|(s, _)| s.0).collect();
        // The rows and the stored maps in one round trip; sessions compiled here (any version)
        // need no map, nor do those whose map this process keeps.
        let compiled_here: std::collections::HashSet<Uuid> =
            ids.iter().copied().filter(|id| self.has_compiled(ns.0, *id)).collect();
        let mut maps: HashMap<Uuid, (Arc<LineMap>, bool)> = ids
            .iter()
            .filter(|id| !compiled_here.contains(id))
            .filter_map(|id| Some((*id, (self.maps.get(&(ns.0, *id))?, true))))
            .collect();
        let skip: Vec<Uuid> = compiled_here.iter().chain(maps.keys()).copied().collect();
        let rows: HashMap<Uuid, Session> = match self.store.sessions_with_maps(ns.0, &ids, &skip).await {
            Ok(found) => found
                .into_iter()
                .map(|(row, map)| {
                    if let Some(m) = map.and_then(|m| self.keep_map(ns, &m)) {
                        maps.insert(row.id, (m, false));
                    }
                    (row.id, row)
                })
                .collect(),
            Err(e) => {
                let e = FullViewError::from(ViewError::from(e));
                return asks.iter().map(|_| Err(e.clone())).collect();
            }
        };
        let mut compiled: HashMap<Uuid, Arc<CompiledSession>> = HashMap::new();
        for row in rows.values() {
            if let Some(c) = self.cached(row).await {
                compiled.insert(row.id, c);
            }
        }
        let work: Vec<_> = asks
            .iter()
            .map(|(session, seqs)| {
                let row = rows.get(&session.0).cloned();
                let done = compiled.get(&session.0).cloned();
                let map = maps.remove(&session.0);
                async move {
                    let row = row.ok_or(FullViewError::SessionNotFound(*session))?;
                    // A live session's last section still moves; only an import's lines are final.
                    if stability == Stability::Final && row.source.is_none() {
                        return Ok(vec![None; seqs.len()]);
                    }
                    let lines = match done {
                        Some(c) => self.lines_in(ns, &c, seqs).await?,
                        None => self.lines_uncompiled(ns, row, map, seqs).await?,
                    };
                    Ok(seqs.iter().map(|s| lines.get(s).copied()).collect())
                }
            })
            .collect();
        futures::stream::iter(work).buffered(SESSIONS_AT_ONCE).collect().await
    }

    /// A session not compiled here: answered from its line map (`kept`: the one this process
    /// kept, else the stored one) when that can say; a kept map that cannot is replaced by the
    /// stored one (another process may have stored a newer version); else the session is
    /// compiled, and its map stored and kept.
    async fn lines_uncompiled(
        &self,
        ns: NamespaceId,
        row: Session,
        map: Option<(Arc<LineMap>, bool)>,
        seqs: &[Seq],
    ) -> Result<HashMap<Seq, ViewLines>, ViewError> {
        let session = SessionId(row.id);
        let imported = row.source.is_some();
        let version = if imported { 0 } else { row.event_count };
        // An erased session's map is deleted with it: one kept from before is not used.
        let (mut map, kept) = match map {
            Some((_, true)) if row.erased_by.is_some() => (None, true),
            Some((m, kept)) => (Some(m), kept),
            None => (None, false),
        };
        if map.is_some() || kept {
            let records = self.source_lines(ns, session, imported, seqs).await?;
            if let Some(answers) = map.as_ref().and_then(|m| m.answer_all(&records, version)) {
                self.stats.maps_used.fetch_add(1, Ordering::Relaxed);
                self.stats.maps_kept.fetch_add(u64::from(kept), Ordering::Relaxed);
                return Ok(answers);
            }
            if kept {
                self.maps.invalidate(&(ns.0, row.id));
                map = self.stored_map(ns, session).await?;
                if let Some(answers) = map.as_ref().and_then(|m| m.answer_all(&records, version)) {
                    self.stats.maps_used.fetch_add(1, Ordering::Relaxed);
                    return Ok(answers);
                }
            }
        }
        let compiled = self.compile_row(ns, row).await?;
        if map.is_none_or(|m| m.version() < compiled.version()) {
            let before = compiled.weight();
            let made = LineMap::of(&compiled);
            let stored = made.row(compiled.session.id);
            self.maps.insert((ns.0, compiled.session.id), Arc::new(made));
            self.reweigh(&compiled, before).await;
            self.map_writer.send(&self.store, &self.stats, ns.0, stored);
        }
        self.lines_in(ns, &compiled, seqs).await
    }

    /// Stores the session's line map unless the stored one is recent enough, compiling the
    /// session to make it (`FullView::prepare`). A live session's map is remade once it is behind
    /// by half the session or by [`MAP_SLACK`] events: while it grows, that is O(events) compile
    /// work in all, and a reader asking for the newest lines compiles them itself as before.
    /// Returns whether it compiled.
    pub async fn keep_line_map(&self, ns: NamespaceId, session: SessionId) -> Result<bool, ViewError> {
        let row = self.store.session(ns.0, session.0).await?;
        let version = if row.source.is_some() { 0 } else { row.event_count };
        let stored = self.store.line_map_version(ns.0, session.0).await?;
        if stored.is_some_and(|v| !map_is_stale(v, version)) {
            return Ok(false);
        }
        let compiled = self.compile_row(ns, row).await?;
        let map = LineMap::of(&compiled).row(session.0);
        let n = tenant::scope(Tenant::Namespace(ns.0), self.store.put_line_maps(ns.0, &[map])).await?;
        self.stats.maps_written.fetch_add(n, Ordering::Relaxed);
        Ok(true)
    }

    /// [`Views::event_lines`] in a session already compiled.
    pub(crate) async fn lines_in(
        &self,
        ns: NamespaceId,
        compiled: &Arc<CompiledSession>,
        seqs: &[Seq],
    ) -> Result<HashMap<Seq, ViewLines>, ViewError> {
        let session = SessionId(compiled.session.id);
        let records = self.source_lines(ns, session, compiled.is_imported(), seqs).await?;
        let before = compiled.weight();
        let lines =
            records.into_iter().filter_map(|(seq, line)| Some((seq, compiled.lines_of_record(line)?))).collect();
        self.reweigh(compiled, before).await;
        Ok(lines)
    }

    /// The input record line each event (by seq) was compiled from.
    pub(crate) async fn source_lines(
        &self,
        ns: NamespaceId,
        session: SessionId,
        imported: bool,
        seqs: &[Seq],
    ) -> Result<Vec<(Seq, u32)>, ViewError> {
        if imported {
            let seqs: Vec<i64> = seqs.iter().map(|s| s.0 as i64).collect();
            let lines = self.store.event_source_lines(ns.0, session.0, &seqs).await?;
            Ok(lines.into_iter().map(|(seq, line)| (Seq(seq), line)).collect())
        } else {
            // A session's own events are compiled from their export, one line per seq.
            Ok(seqs.iter().filter_map(|s| Some((*s, u32::try_from(s.0).ok()?))).collect())
        }
    }

    /// Whether a session is an imported trace (read-only: its lines never move).
    async fn is_imported(&self, ns: NamespaceId, session: SessionId) -> Result<bool, ViewError> {
        if self.read_only.contains_key(&(ns.0, session.0)) {
            return Ok(true);
        }
        // A live session compiled here (its source never changes): no row to read. The index's
        // catch-up asks this of every live session it indexes, on every agent turn.
        if self.latest.contains_key(&(ns.0, session.0)) {
            return Ok(false);
        }
        Ok(self.store.session(ns.0, session.0).await?.source.is_some())
    }
}

/// How far a live session's stored map may fall behind before [`Views::keep_line_map`] remakes it.
pub const MAP_SLACK: u64 = 256;

/// Whether a map of version `stored` is to be remade for version `current` (an import's, 0, never).
fn map_is_stale(stored: u64, current: u64) -> bool {
    current > stored && (current - stored >= MAP_SLACK || current - stored >= stored.max(1))
}

impl FullView for Views {
    fn lines<'a>(
        &'a self,
        namespace: NamespaceId,
        session: SessionId,
        seqs: &'a [Seq],
        stability: Stability,
    ) -> BoxFuture<'a, Result<Vec<Option<ViewLines>>, FullViewError>> {
        Box::pin(async move {
            // A live session's last section still moves; only an import's lines are final.
            if stability == Stability::Final && !self.is_imported(namespace, session).await? {
                return Ok(vec![None; seqs.len()]);
            }
            let lines = self.event_lines(namespace, session, seqs).await?;
            Ok(seqs.iter().map(|s| lines.get(s).copied()).collect())
        })
    }

    fn lines_of_sessions<'a>(
        &'a self,
        namespace: NamespaceId,
        asks: &'a [(SessionId, Vec<Seq>)],
        stability: Stability,
    ) -> BoxFuture<'a, Vec<Result<Vec<Option<ViewLines>>, FullViewError>>> {
        Box::pin(self.lines_of_many(namespace, asks, stability))
    }

    fn blocks<'a>(
        &'a self,
        namespace: NamespaceId,
        session: SessionId,
        head: Option<Seq>,
        seqs: &'a [Seq],
    ) -> BoxFuture<'a, Result<Vec<Option<ViewBlock>>, FullViewError>> {
        Box::pin(async move { Ok(self.place_blocks(namespace, session, head, seqs).await?) })
    }

    fn prepare<'a>(&'a self, namespace: NamespaceId, session: SessionId) -> BoxFuture<'a, Result<bool, FullViewError>> {
        Box::pin(async move { Ok(self.keep_line_map(namespace, session).await?) })
    }
}
