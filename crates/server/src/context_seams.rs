//! The context engine's seams, answered by the rest of the server: the VCC full view (from the
//! view cache), candidates from the search index, and compaction's "indexed" check.
use std::sync::Arc;

use futures::future::BoxFuture;
use memex_context::{CandidateSource, ContextError, FullView, IndexStatus, SearchHit, SearchQuery};
use memex_pointer::{LineRange, ViewBlock};
use memex_search::SearchIndex;
use uuid::Uuid;

use crate::views::Views;

/// Where events sit in their session's current full view, with the lines there.
pub struct ViewFullView {
    views: Views,
    /// (session, compiled version) → its events' blocks by seq: a version's lines never change,
    /// and packs place the same events turn after turn. One cache entry per session, not per
    /// event: a pack places a couple of hundred events of one or two sessions, and a cache lookup
    /// per event was about 6% of a pack's CPU.
    blocks: moka::sync::Cache<(Uuid, u64), Arc<SessionBlocks>>,
}

/// The blocks of one compiled session version placed so far, and the bytes they hold.
#[derive(Default)]
struct SessionBlocks {
    by_seq: std::sync::RwLock<std::collections::HashMap<u64, Option<ViewBlock>>>,
    bytes: std::sync::atomic::AtomicU64,
}

/// Memory kept for placed events' lines.
const BLOCK_CACHE_BYTES: u64 = 128 * 1024 * 1024;

fn block_bytes(b: &Option<ViewBlock>) -> u64 {
    let lines = b.as_ref().map_or(0, |b| b.lines.iter().map(|l| l.len() + 24).sum::<usize>());
    lines as u64 + 64
}

impl ViewFullView {
    pub fn new(views: Views) -> ViewFullView {
        // Weighed when (re)inserted: `locate` inserts an entry again after adding to it.
        let weigh = |_: &(Uuid, u64), b: &Arc<SessionBlocks>| {
            u32::try_from(b.bytes.load(std::sync::atomic::Ordering::Relaxed) + 64).unwrap_or(u32::MAX)
        };
        ViewFullView {
            views,
            blocks: moka::sync::Cache::builder().weigher(weigh).max_capacity(BLOCK_CACHE_BYTES).build(),
        }
    }
}

impl FullView for ViewFullView {
    fn locate<'a>(
        &'a self,
        namespace_id: Uuid,
        session_id: Uuid,
        head: Option<u64>,
        seqs: &'a [u64],
    ) -> BoxFuture<'a, Result<Vec<Option<ViewBlock>>, ContextError>> {
        Box::pin(async move {
            let seam = |message: String| ContextError::Seam { seam: "full view", message };
            let compiled = self
                .views
                .compiled_at(namespace_id, session_id, head)
                .await
                .map_err(|s| seam(s.message().to_owned()))?;
            // Imported traces never change (version 0); a live session's version is its head.
            let version = if compiled.session.source.is_some() { 0 } else { compiled.session.event_count };
            let key = (session_id, version);
            let placed = self.blocks.get_with(key, || Arc::new(SessionBlocks::default()));
            let poisoned = || seam("block cache lock poisoned".to_owned());
            let mut out: Vec<Option<Option<ViewBlock>>> = {
                let by_seq = placed.by_seq.read().map_err(|_| poisoned())?;
                seqs.iter().map(|s| by_seq.get(s).cloned()).collect()
            };
            let missing: Vec<u64> = seqs.iter().zip(&out).filter(|(_, b)| b.is_none()).map(|(s, _)| *s).collect();
            if missing.is_empty() {
                return Ok(out.into_iter().flatten().collect());
            }
            let by_seq = self
                .views
                .lines_in(namespace_id, &compiled, &missing)
                .await
                .map_err(|s| seam(s.message().to_owned()))?;
            let chains = compiled.trace.chains();
            let place = |seq: &u64| {
                let lines = *by_seq.get(seq)?;
                // Pointers cite one line space; events of later chains (after a compaction
                // inside an imported trace) are cited by seq.
                if lines.chain != 1 {
                    return None;
                }
                let chain = chains.first()?;
                let range = memex_vcc::LineRange::new(lines.first_line, lines.last_line);
                Some(ViewBlock {
                    range: LineRange { first: lines.first_line, last: lines.last_line },
                    lines: chain.read_line_texts(range).into(),
                })
            };
            // Placed outside the lock (reading a block's lines is the work), kept under it.
            let mut fresh: Vec<(u64, Option<ViewBlock>)> = Vec::with_capacity(missing.len());
            for (seq, slot) in seqs.iter().zip(out.iter_mut()) {
                if slot.is_none() {
                    let block = place(seq);
                    fresh.push((*seq, block.clone()));
                    *slot = Some(block);
                }
            }
            {
                let mut by_seq = placed.by_seq.write().map_err(|_| poisoned())?;
                for (seq, block) in fresh {
                    if let std::collections::hash_map::Entry::Vacant(v) = by_seq.entry(seq) {
                        placed.bytes.fetch_add(block_bytes(&block), std::sync::atomic::Ordering::Relaxed);
                        v.insert(block);
                    }
                }
            }
            // Weighed again with what it now holds.
            self.blocks.insert(key, placed);
            Ok(out.into_iter().flatten().collect())
        })
    }
}

/// Hybrid (BM25 + vector) candidates from the search index, one query per pack.
pub struct IndexSource(pub Arc<SearchIndex>);

impl CandidateSource for IndexSource {
    fn name(&self) -> &'static str {
        "index"
    }

    fn search<'a>(&'a self, q: &'a SearchQuery) -> BoxFuture<'a, Result<Vec<SearchHit>, ContextError>> {
        Box::pin(async move {
            if q.text.trim().is_empty() {
                return Ok(Vec::new());
            }
            let mut req = memex_search::SearchRequest::new(q.text.clone(), q.limit.max(1));
            req.filter.session_ids = q.sessions.clone();
            req.heads_total = q.heads_total;
            // A pack query (user message + task goals) is long; the vector list needs a model.
            if self.0.embedder().is_none() {
                req.vector_weight = 0.0;
            }
            // Only the ranking: the pack reads the events and places them in the full view itself.
            let ranked = self
                .0
                .rank(q.namespace_id, &req)
                .await
                .map_err(|e| ContextError::Seam { seam: "search index", message: e.to_string() })?;
            Ok(ranked
                .into_iter()
                .map(|h| SearchHit {
                    event_id: h.event_id,
                    lexical: (h.score.bm25_rank > 0).then_some(h.score.bm25),
                    vector: (h.score.vector_rank > 0).then_some(h.score.vector),
                    embedding: None,
                })
                .collect())
        })
    }
}

/// Compaction may evict only what the index has: catching the sessions' index up (the same
/// read-your-writes step every search takes) makes every committed event searchable.
pub struct IndexCatchUp(pub Arc<SearchIndex>);

impl IndexStatus for IndexCatchUp {
    fn unindexed<'a>(
        &'a self,
        namespace_id: Uuid,
        events: &'a [(Uuid, u64, Uuid)],
    ) -> BoxFuture<'a, Result<Vec<Uuid>, ContextError>> {
        Box::pin(async move {
            let mut sessions: Vec<Uuid> = events.iter().map(|(s, _, _)| *s).collect();
            sessions.sort_unstable();
            sessions.dedup();
            self.0
                .catch_up(namespace_id, Some(&sessions))
                .await
                .map_err(|e| ContextError::Seam { seam: "search index", message: e.to_string() })?;
            Ok(Vec::new())
        })
    }
}
