//! The context engine's search seams, answered by the search index: pack candidates, and
//! compaction's "indexed" check. (The full view plugs in directly: `memex_views::Views`
//! implements `memex_pointer::FullView`.)
use std::sync::Arc;

use futures::future::BoxFuture;
use memex_context::{CandidateSource, ContextError, IndexCatchUp, SearchHit, SearchQuery, SourceHits};
use memex_event::{NamespaceId, SessionId};
use memex_search::SearchIndex;

fn seam_error(e: memex_search::IndexError) -> ContextError {
    ContextError::Seam { seam: "search index", message: e.to_string() }
}

/// Hybrid (BM25 + vector) candidates from the search index, one query per pack.
pub struct IndexSource(pub Arc<SearchIndex>);

impl CandidateSource for IndexSource {
    fn name(&self) -> &'static str {
        "index"
    }

    fn search<'a>(&'a self, q: &'a SearchQuery) -> BoxFuture<'a, Result<SourceHits, ContextError>> {
        Box::pin(async move {
            if q.text.trim().is_empty() {
                return Ok(SourceHits::default());
            }
            let mut req = self.0.config().request(q.text.clone(), q.limit.max(1));
            req.filter.session_ids = q.sessions.clone();
            req.heads = q.heads.clone();
            // Packs come at a fleet's rate: their queries are ranked by the fast tier's vectors
            // (no inference) when there is one. The vector list needs a model of some kind.
            req.tier = memex_search::VectorTier::Fast;
            if self.0.embedder().is_none() && self.0.fast_tier().is_none() {
                req.vector_weight = 0.0;
            }
            // Only the ranking: the pack reads the events and places them in the full view itself.
            let mut ranked = self.0.rank(q.namespace_id, &req).await.map_err(seam_error)?;
            let hits = ranked
                .events
                .into_iter()
                .map(|h| SearchHit {
                    event_id: h.event_id,
                    lexical: (h.score.bm25_rank > 0).then_some(h.score.bm25),
                    vector: (h.score.vector_rank > 0).then_some(h.score.vector),
                    embedding: None,
                    artifact_match: ranked.artifact_chunks.remove(&h.event_id).map(|c| memex_pack::ArtifactMatch {
                        first_line: c.first_line,
                        last_line: c.last_line,
                        text: c.text,
                    }),
                })
                .collect();
            Ok(SourceHits { hits, vectors_used: ranked.vectors_used })
        })
    }
}

/// Compaction may evict only what the index has: catching the sessions' index up (the same
/// read-your-writes step every search takes) makes every committed event searchable.
pub struct IndexCatchUpSeam(pub Arc<SearchIndex>);

impl IndexCatchUp for IndexCatchUpSeam {
    fn ensure_indexed<'a>(
        &'a self,
        namespace: NamespaceId,
        sessions: &'a [SessionId],
    ) -> BoxFuture<'a, Result<(), ContextError>> {
        Box::pin(async move {
            let sessions: Vec<uuid::Uuid> = sessions.iter().map(|s| s.0).collect();
            self.0.catch_up(namespace.0, Some(&sessions)).await.map_err(seam_error)?;
            Ok(())
        })
    }
}
