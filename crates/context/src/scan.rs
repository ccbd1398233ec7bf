//! The store scan: what packs search when no index is plugged in (BM25 over the scope's newest
//! events, by the index's analyzer).
use std::collections::HashMap;
use std::sync::Arc;

use memex_rank::{Bm25Doc, Bm25Params, TermCounts, bm25};
use memex_store::Event;
use uuid::Uuid;

use crate::seams::SearchQuery;
use crate::{ContextEngine, Result};

/// The name of the store's own lexical scan, the search of packs when no source is plugged in.
pub(crate) const STORE_SCAN: &str = "store-scan";

/// Preceding events of the same session whose text is a scanned event's context.
const SCAN_CONTEXT_EVENTS: usize = 2;
/// Bytes of an event's text the scan counts (events keep at most an 8 KiB excerpt of a tool output).
const MAX_SCAN_BYTES: usize = 16 * 1024;

impl ContextEngine {
    /// The store scan: the newest `scan_events` events of each session in scope, scored by BM25
    /// on their own words and the words of the two events before them (`memex_pack::bm25_scan`).
    /// Events never change, so their word counts are kept: a scan reads only (id, seq, kind) of
    /// the session, the content of events it has not counted yet, and the events it returns.
    pub(crate) async fn scan(
        &self,
        namespace_id: Uuid,
        q: &SearchQuery,
    ) -> Result<Vec<(crate::seams::SearchHit, Arc<Event>)>> {
        let n = self.cfg.scan_events;
        if n == 0 || q.terms.is_empty() || q.limit == 0 {
            return Ok(Vec::new());
        }
        let reads = q.sessions.iter().map(|s| self.store.event_keys_newest_first(namespace_id, *s, n));
        let sessions = futures::future::try_join_all(reads).await?;
        let mut keys: Vec<(Uuid, bool)> = Vec::new();
        let mut contexts: Vec<std::ops::Range<usize>> = Vec::new();
        for session in sessions {
            let start = keys.len();
            for (i, (id, _, kind)) in session.into_iter().rev().enumerate() {
                contexts.push(start + i.saturating_sub(SCAN_CONTEXT_EVENTS)..start + i);
                keys.push((id, kind != "system"));
            }
        }
        let mut counted: HashMap<Uuid, Arc<TermCounts>> = HashMap::with_capacity(keys.len());
        let mut missing: Vec<Uuid> = Vec::new();
        for (id, _) in &keys {
            match self.words.get(id) {
                Some(w) => {
                    counted.insert(*id, w);
                }
                None => missing.push(*id),
            }
        }
        for chunk in missing.chunks(500) {
            for e in self.store.events_by_ids(namespace_id, chunk).await? {
                let w = Arc::new(TermCounts::of_prefix(&e.content, MAX_SCAN_BYTES));
                self.words.insert(e.id, w.clone());
                counted.insert(e.id, w);
            }
        }
        let empty = TermCounts::default();
        let words: Vec<&TermCounts> =
            keys.iter().map(|(id, _)| counted.get(id).map_or(&empty, |w| w.as_ref())).collect();
        let docs: Vec<Bm25Doc<'_>> =
            words.iter().zip(&contexts).map(|(w, r)| Bm25Doc { own: w, context: &words[r.clone()] }).collect();
        // The query's terms are the index's: a pack scans as the index would search.
        let hits: Vec<(usize, f32)> = bm25(&docs, &q.terms, Bm25Params::default(), q.limit.saturating_mul(2))
            .into_iter()
            .filter(|(i, _)| keys[*i].1)
            .take(q.limit)
            .collect();
        let ids: Vec<Uuid> = hits.iter().map(|(i, _)| keys[*i].0).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let events = self.events_by_ids(namespace_id, &ids).await?;
        Ok(hits
            .into_iter()
            .zip(events)
            .map(|((_, score), e)| {
                let hit = crate::seams::SearchHit {
                    event_id: e.id,
                    lexical: Some(score),
                    vector: None,
                    embedding: None,
                    artifact_match: None,
                };
                (hit, e)
            })
            .collect())
    }
}
