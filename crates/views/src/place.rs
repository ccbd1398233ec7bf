//! Where events sit in their session's full view: `GetEvents` with lines, and the
//! [`FullView`] seam the search index and the context engine ask.
use std::collections::HashMap;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use memex_event::{NamespaceId, Seq, SessionId};
use memex_pointer::{FullView, FullViewError, Stability, ViewBlock, ViewLines};

use memex_store::tenant;

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
        let imported = row.source.is_some();
        let version = if imported { 0 } else { row.event_count };
        let stored = self.store.line_map(ns.0, session.0).await?.and_then(|r| LineMap::from_row(&r));
        if let Some(map) = &stored {
            let records = self.source_lines(ns, session, imported, seqs).await?;
            let answers: Option<Vec<(Seq, Option<ViewLines>)>> =
                records.iter().map(|(seq, line)| Some((*seq, map.answer(*line, version)?))).collect();
            if let Some(answers) = answers {
                self.stats.maps_used.fetch_add(1, Ordering::Relaxed);
                return Ok(answers.into_iter().filter_map(|(seq, l)| Some((seq, l?))).collect());
            }
        }
        let compiled = self.compile_row(ns, row).await?;
        if stored.is_none_or(|m| m.version() < compiled.version()) {
            self.store_line_map(ns, &compiled);
        }
        self.lines_in(ns, &compiled, seqs).await
    }

    /// Stores a compiled session's line map in the background, when few are being stored.
    fn store_line_map(&self, ns: NamespaceId, compiled: &CompiledSession) {
        let Ok(permit) = self.map_writes.clone().try_acquire_owned() else {
            return;
        };
        let row = LineMap::of(compiled).row(compiled.session.id);
        let (store, stats) = (self.store.clone(), self.stats.clone());
        let write = async move {
            match store.put_line_maps(ns.0, &[row]).await {
                Ok(n) => {
                    stats.maps_written.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => tracing::debug!(error = %e, "line map not stored"),
            }
            drop(permit);
        };
        tokio::spawn(tenant::inherit(tenant::current(), write));
    }

    /// [`Views::event_lines`] in a session already compiled.
    pub(crate) async fn lines_in(
        &self,
        ns: NamespaceId,
        compiled: &CompiledSession,
        seqs: &[Seq],
    ) -> Result<HashMap<Seq, ViewLines>, ViewError> {
        let session = SessionId(compiled.session.id);
        let records = self.source_lines(ns, session, compiled.is_imported(), seqs).await?;
        Ok(records.into_iter().filter_map(|(seq, line)| Some((seq, compiled.lines_of_record(line)?))).collect())
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
        if self.read_only.contains_key(&session.0) {
            return Ok(true);
        }
        Ok(self.store.session(ns.0, session.0).await?.source.is_some())
    }
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

    fn blocks<'a>(
        &'a self,
        namespace: NamespaceId,
        session: SessionId,
        head: Option<Seq>,
        seqs: &'a [Seq],
    ) -> BoxFuture<'a, Result<Vec<Option<ViewBlock>>, FullViewError>> {
        Box::pin(async move { Ok(self.place_blocks(namespace, session, head, seqs).await?) })
    }
}
