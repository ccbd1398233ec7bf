//! Where events sit in their session's full view: `GetEvents` with lines, and the
//! [`FullView`] seam the search index and the context engine ask.
use std::collections::HashMap;

use futures::future::BoxFuture;
use memex_event::{NamespaceId, Seq, SessionId};
use memex_pointer::{FullView, FullViewError, Stability, ViewBlock, ViewLines};

use crate::{CompiledSession, ViewError, Views};

impl Views {
    /// The full-view lines of the given events of a session (by seq); events that render nothing
    /// are absent. An imported trace maps at record granularity: every event of one trace record
    /// gets the lines of all that record's blocks.
    pub async fn event_lines(
        &self,
        ns: NamespaceId,
        session: SessionId,
        seqs: &[Seq],
    ) -> Result<HashMap<Seq, ViewLines>, ViewError> {
        let compiled = self.compiled(ns, session).await?;
        self.lines_in(ns, &compiled, seqs).await
    }

    /// [`Views::event_lines`] in a session already compiled.
    pub(crate) async fn lines_in(
        &self,
        ns: NamespaceId,
        compiled: &CompiledSession,
        seqs: &[Seq],
    ) -> Result<HashMap<Seq, ViewLines>, ViewError> {
        let records = self.source_lines(ns, compiled, seqs).await?;
        Ok(records.into_iter().filter_map(|(seq, line)| Some((seq, compiled.lines_of_record(line)?))).collect())
    }

    /// The input record line each event (by seq) was compiled from.
    pub(crate) async fn source_lines(
        &self,
        ns: NamespaceId,
        compiled: &CompiledSession,
        seqs: &[Seq],
    ) -> Result<Vec<(Seq, u32)>, ViewError> {
        if compiled.is_imported() {
            let seqs: Vec<i64> = seqs.iter().map(|s| s.0 as i64).collect();
            let lines = self.store.event_source_lines(ns.0, compiled.session.id, &seqs).await?;
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
