//! [`SearchIndex`]: the text indexes of one replica, kept current from Postgres, and hybrid search
//! over them and the shared vectors.
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use memex_embed::{Embedder, ModelInfo};
use memex_event::{FieldError, NamespaceId, Seq, SessionId, role_of_kind};
use memex_pointer::{FullView, LineRange, Stability};
use memex_rank::{RankedList, RrfOptions, max_scaled, mmr, query_terms, rrf, score_sum};
use memex_store::Store;
use tracing::Instrument;
use uuid::Uuid;

use crate::namespace_index::{ChunkHit, NamespaceIndex, namespace_dir};
use crate::query_vectors::QueryVectors;
use crate::{
    ArtifactChunk, Fusion, Hit, IndexError, RankedEvent, RankedEvents, ScoreParts, SearchConfig, SearchRequest,
    SearchResults, VectorTier, vectors,
};

mod catch_up;

/// Most hits one search may return, and most candidates per retriever.
pub const MAX_LIMIT: usize = 1000;
pub const MAX_CANDIDATES: usize = 10_000;

/// A query's ranking and what hydrating its hits needs: the point-in-time searcher that found
/// them (chunk addresses mean nothing in another) and each BM25 hit's best chunk.
struct Ranking {
    idx: Arc<NamespaceIndex>,
    searcher: tantivy::Searcher,
    /// The fresh parts of the index as the query found them.
    fresh: Vec<crate::fresh::Part>,
    best_chunk: HashMap<Uuid, ChunkHit>,
    ranked: Vec<RankedEvent>,
    vectors_used: bool,
}

/// A query's vector, and the model it is of.
type QueryVector = (ModelInfo, Arc<Vec<f32>>);
/// A k-NN's answer: the query vector it used (none: no vectors), and its events by similarity.
type Nearest = (Option<QueryVector>, Vec<(Uuid, f32)>);

/// This replica's search state. Cheap to share (`Arc`); namespaces' indexes open on first use.
pub struct SearchIndex {
    store: Store,
    opts: SearchConfig,
    embedder: Option<Arc<dyn Embedder>>,
    /// Where events sit in their sessions' full views (hits carry their lines).
    full_view: Arc<dyn FullView>,
    open: tokio::sync::Mutex<HashMap<Uuid, Arc<NamespaceIndex>>>,
    /// Query vectors, bounded and cached (with an embedder).
    query_vectors: Option<QueryVectors>,
    /// The fast tier: a static table whose vectors every event and query can afford.
    fast: Option<Arc<dyn Embedder>>,
    /// Set by [`SearchIndex::stop_catching_up`]: background catch-ups end after the round in hand.
    stopping: std::sync::atomic::AtomicBool,
    stats: Arc<crate::IndexStats>,
    /// The lock on `index_dir` this process holds while the index is open.
    _dir_lock: std::fs::File,
}

impl SearchIndex {
    /// Opens this replica's indexes under `opts.index_dir`, which it takes for itself: a second
    /// process given the same directory gets [`IndexError::DirInUse`] here, at start-up, instead of
    /// failing searches later on tantivy's writer lock.
    pub fn open(
        store: Store,
        opts: SearchConfig,
        embedder: Option<Arc<dyn Embedder>>,
        full_view: Arc<dyn FullView>,
    ) -> Result<SearchIndex, IndexError> {
        let _dir_lock = lock_dir(&opts.dir())?;
        let query_vectors = embedder.as_ref().map(|e| QueryVectors::start(e.clone(), opts.query_vector_options()));
        Ok(SearchIndex {
            store,
            opts,
            embedder,
            full_view,
            open: tokio::sync::Mutex::new(HashMap::new()),
            query_vectors,
            fast: None,
            stopping: std::sync::atomic::AtomicBool::new(false),
            stats: Arc::default(),
            _dir_lock,
        })
    }

    /// Adds the fast tier (a static table distilled from the model): searches that cannot have
    /// the model's vector in time, and packs ([`VectorTier::Fast`]), rank by its vectors.
    pub fn with_fast_tier(mut self, fast: Arc<dyn Embedder>) -> SearchIndex {
        self.fast = Some(fast);
        self
    }

    pub fn fast_tier(&self) -> Option<&Arc<dyn Embedder>> {
        self.fast.as_ref()
    }

    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// How searches got their query vectors (with an embedder).
    pub fn query_vector_stats(&self) -> Option<Arc<crate::QueryVectorStats>> {
        self.query_vectors.as_ref().map(QueryVectors::stats)
    }

    /// Lag and throughput of this replica's text indexes.
    pub fn index_stats(&self) -> Arc<crate::IndexStats> {
        self.stats.clone()
    }

    pub fn config(&self) -> &SearchConfig {
        &self.opts
    }

    async fn namespace(&self, ns: Uuid) -> Result<Arc<NamespaceIndex>, IndexError> {
        let mut open = self.open.lock().await;
        if let Some(idx) = open.get(&ns) {
            return Ok(idx.clone());
        }
        let dir = namespace_dir(&self.opts.dir(), ns);
        let (idx, _created) = tokio::task::spawn_blocking(move || NamespaceIndex::open(&dir, ns))
            .await
            .map_err(|e| IndexError::Task(e.to_string()))??;
        let idx = Arc::new(idx);
        open.insert(ns, idx.clone());
        Ok(idx)
    }

    /// Hybrid search in one namespace; see the crate docs for the path.
    #[tracing::instrument(name = "index.search", level = "debug", skip_all)]
    pub async fn search(&self, ns: Uuid, req: &SearchRequest) -> Result<SearchResults, IndexError> {
        let Ranking { idx, searcher, fresh, best_chunk, ranked, vectors_used } = self.ranking(ns, req).await?;
        let hits = self.hydrate(ns, req, &idx, (&searcher, &fresh), &best_chunk, ranked).await?;
        Ok(SearchResults { hits, vectors_used })
    }

    /// The events [`SearchIndex::search`] would return, in its order with its scores, without
    /// reading them: for callers that read the events themselves (the context engine's packs).
    #[tracing::instrument(name = "index.rank", level = "debug", skip_all)]
    pub async fn rank(&self, ns: Uuid, req: &SearchRequest) -> Result<RankedEvents, IndexError> {
        let r = self.ranking(ns, req).await?;
        let artifact_chunks = artifact_chunks(&r)?;
        Ok(RankedEvents { events: r.ranked, vectors_used: r.vectors_used, artifact_chunks })
    }

    /// The query's vector and the model it is of: the model's own when `tier` allows and it is
    /// had in time, else the fast tier's (computed on the spot: microseconds), else none.
    async fn query_vector(
        &self,
        query: &str,
        tier: VectorTier,
        fast_fits: bool,
    ) -> Result<Option<QueryVector>, IndexError> {
        let model_first = tier == VectorTier::Best || self.fast.is_none();
        if let (true, Some(q), Some(e)) = (model_first, &self.query_vectors, &self.embedder)
            && let Some(v) = q.vector(query).await
        {
            return Ok(Some((e.info().clone(), v)));
        }
        let Some(fast) = self.fast.as_ref().filter(|_| fast_fits) else { return Ok(None) };
        let v = fast.embed(vec![query.to_owned()]).await?;
        Ok(v.into_iter().next().map(|v| (fast.info().clone(), Arc::new(v))))
    }

    /// BM25: the best chunk per event, events in order of their best chunk.
    async fn bm25_list(
        &self,
        idx: &Arc<NamespaceIndex>,
        (searcher, fresh): (&tantivy::Searcher, &[crate::fresh::Part]),
        req: &SearchRequest,
        wants_vectors: bool,
    ) -> Result<(HashMap<Uuid, ChunkHit>, Vec<(Uuid, f32)>), IndexError> {
        let mut best_chunk: HashMap<Uuid, ChunkHit> = HashMap::new();
        let mut bm25_items: Vec<(Uuid, f32)> = Vec::new();
        if req.bm25_weight > 0.0 {
            let terms = query_terms(&req.query);
            let context_weight = req.context_weight;
            // With BM25 alone (no vectors, so no MMR either) the fused order is the BM25 order, and
            // the first `limit` events are all it needs: a top-k that small is what lets block-WAND
            // skip most of the postings of common terms.
            let smoothing = req.neighbor_weight > 0.0 || req.session_weight > 0.0;
            let want = if wants_vectors || smoothing { req.candidates } else { req.limit };
            let chunks = {
                let idx = idx.clone();
                let filter = req.filter.clone();
                let searcher = searcher.clone();
                let fresh = fresh.to_vec();
                tokio::task::spawn_blocking(move || {
                    // Most events are one chunk: one and a half chunks per event wanted is
                    // usually enough, and ask again for more when the chunks returned name too few
                    // events. Block-WAND's work grows with n (3 per event cost a third more time).
                    let mut n = want.saturating_add(want / 2);
                    loop {
                        let chunks = idx.search(&terms, &filter, n, context_weight, &searcher, &fresh)?;
                        let events: std::collections::HashSet<Uuid> = chunks.iter().map(|c| c.event_id).collect();
                        if events.len() >= want || chunks.len() < n || n >= MAX_CANDIDATES * 48 {
                            break Ok::<_, IndexError>(chunks);
                        }
                        n = n.saturating_mul(4);
                    }
                })
                .await
                .map_err(|e| IndexError::Task(e.to_string()))??
            };
            let take = if smoothing { usize::MAX } else { req.candidates };
            for c in chunks {
                if bm25_items.len() >= take {
                    break;
                }
                if let std::collections::hash_map::Entry::Vacant(v) = best_chunk.entry(c.event_id) {
                    bm25_items.push((c.event_id, c.score));
                    v.insert(c);
                }
            }
            if req.neighbor_weight > 0.0 || req.session_weight > 0.0 {
                smooth_neighbors(&mut bm25_items, &best_chunk, req.neighbor_weight, req.session_weight);
                bm25_items.truncate(req.candidates);
            }
        }
        Ok((best_chunk, bm25_items))
    }

    /// One session's events ranked by embedding similarity to `query` alone (no BM25), as
    /// (seq, cosine) for the `top_k.max(100)` nearest: the adaptive view's semantic ranker. Events
    /// the embedding worker has not reached yet are not ranked.
    pub async fn vector_scores(
        &self,
        ns: NamespaceId,
        session: SessionId,
        query: &str,
        top_k: usize,
    ) -> Result<Vec<(Seq, f32)>, IndexError> {
        if self.embedder.is_none() {
            return Err(IndexError::NoEmbedder);
        }
        let mut req = self.opts.request(query, top_k);
        req.filter.session_ids = vec![session.0];
        req.bm25_weight = 0.0;
        req.vector_weight = 1.0;
        req.candidates = top_k.max(100);
        req.with_lines = false;
        let results = self.search(ns.0, &req).await?;
        if !results.vectors_used {
            return Err(IndexError::VectorsUnavailable);
        }
        Ok(results.hits.into_iter().map(|h| (Seq(h.seq), h.score.vector)).collect())
    }

    async fn ranking(&self, ns: Uuid, req: &SearchRequest) -> Result<Ranking, IndexError> {
        validate(req)?;
        let sessions = (!req.filter.session_ids.is_empty()).then_some(&req.filter.session_ids[..]);
        let idx = self.namespace(ns).await?;
        // A query keeps what its catch-up indexes fresh, and never waits for a commit; unless the
        // fresh parts cannot score it (another context weight): then it commits them first.
        let keep_fresh = crate::fresh::parts_answer(req.context_weight) || req.bm25_weight == 0.0;
        let wants_vectors = (self.embedder.is_some() || self.fast.is_some()) && req.vector_weight > 0.0;
        let catch_up = || async {
            let n = self
                .catch_up_index(&idx, sessions, sessions.and(req.heads.as_deref()), keep_fresh)
                .instrument(tracing::debug_span!("index.catch_up"))
                .await?;
            if sessions.is_none() {
                idx.quiet.store(n == 0, Ordering::Relaxed);
            }
            self.commit_if_due(&idx)
        };
        // Unless it is narrowed to a few sessions, the k-NN chooses exact search by the index's
        // size, which a small (or new) index knows only after its catch-up: it waits for it. A
        // large one only grows by it.
        let catch_up_first =
            wants_vectors && !req.filter.names_few_sessions() && idx.num_docs() <= self.opts.exact_knn_max;
        if catch_up_first {
            catch_up().await?;
        }
        let text = async {
            // A namespace-wide query (FindQuote's, RememberWhen's) of a namespace whose last such
            // check found nothing new: BM25 runs on the index as it is, beside the check. When
            // Postgres's heads sum to no more than was indexed before the snapshot, that snapshot
            // holds every event committed before the query (seqs only grow), and the answer
            // stands; else the index catches up and BM25 runs again. A namespace being written
            // to loses the flag, so it does not search twice a query.
            if !catch_up_first && sessions.is_none() && keep_fresh && idx.quiet.load(Ordering::Relaxed) {
                let indexed = idx.state.lock().await.sum(None);
                let (searcher, fresh) = idx.snapshot()?;
                let heads = async { Ok::<_, IndexError>(self.store.head_total(ns, None).await?) };
                let (total, bm25) =
                    tokio::try_join!(heads, self.bm25_list(&idx, (&searcher, &fresh), req, wants_vectors))?;
                if total <= indexed {
                    self.commit_if_due(&idx)?;
                    return Ok((searcher, fresh, bm25));
                }
                idx.quiet.store(false, Ordering::Relaxed);
            }
            if !catch_up_first {
                catch_up().await?;
            }
            // One point-in-time searcher for the whole query: a concurrent catch-up may reload
            // the reader, and chunk addresses do not survive a reload. With it, the fresh parts.
            let (searcher, fresh) = idx.snapshot()?;
            let bm25 = self.bm25_list(&idx, (&searcher, &fresh), req, wants_vectors).await?;
            Ok::<_, IndexError>((searcher, fresh, bm25))
        };
        // The query's vector is computed (or found cached), and its k-NN run in Postgres, while
        // the text index catches up (a large one) and BM25 runs: the vectors are Postgres's,
        // which the index's catch-up does not touch. A k-NN past `knn_timeout` is cancelled by
        // Postgres: the answer goes on with BM25 alone and says so (`vectors_used`), as when the
        // vector itself is late.
        let vectors = async {
            if !wants_vectors {
                return Ok((None, Vec::new()));
            }
            // A few sessions, or a small namespace: exact k-NN, which the fast tier (no HNSW
            // index) can rank too.
            let small = req.filter.names_few_sessions() || idx.num_docs() <= self.opts.exact_knn_max;
            let Some((model, q)) = self.query_vector(&req.query, req.tier, small).await? else {
                return Ok((None, Vec::new()));
            };
            let exact = small || self.fast.as_ref().is_some_and(|f| f.info() == &model);
            let timeout = std::time::Duration::from_millis(self.opts.knn_timeout_ms);
            match vectors::knn(self.store.pool(), ns, &model, &q, &req.filter, req.candidates, exact, timeout).await {
                Ok(items) => Ok((Some((model, q)), items)),
                Err(e) if vectors::is_timeout(&e) => {
                    if let Some(v) = &self.query_vectors {
                        v.stats().knn_late.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok((None, Vec::new()))
                }
                Err(e) => Err(e),
            }
        };
        let (text, (query_vector, vector_items)): (_, Nearest) = tokio::try_join!(text, vectors)?;
        let (searcher, fresh, (best_chunk, mut bm25_items)) = text;
        let vectors_used = query_vector.is_some();
        let embedder = query_vector.as_ref().map(|(model, _)| model);

        // Score fusion adds BM25 scaled to the best hit's; the raw score is reported (`bm25_scale`).
        let bm25_scale = match req.fusion {
            Fusion::Rrf => 1.0,
            Fusion::Score => max_scaled(&mut bm25_items),
        };
        let lists = [
            RankedList { weight: req.bm25_weight, items: bm25_items },
            RankedList { weight: req.vector_weight, items: vector_items },
        ];
        let fused = match req.fusion {
            Fusion::Rrf => rrf(&lists, RrfOptions { k: req.rrf_k }),
            Fusion::Score => score_sum(&lists),
        };
        let chosen: Vec<usize> = match (req.mmr_lambda, embedder) {
            (Some(lambda), Some(embedder)) => {
                let pool_size = fused.len().min(req.candidates);
                let ids: Vec<Uuid> = fused[..pool_size].iter().map(|h| h.key).collect();
                let vecs = vectors::vectors_of(self.store.pool(), ns, embedder, &ids).await?;
                let rel: Vec<f64> = fused[..pool_size].iter().map(|h| f64::from(h.score)).collect();
                mmr(&rel, req.limit, f64::from(lambda), |a, b| match (vecs.get(&ids[a]), vecs.get(&ids[b])) {
                    (Some(x), Some(y)) => f64::from(memex_rank::cosine(x, y)),
                    _ => 0.0,
                })
            }
            _ => (0..fused.len().min(req.limit)).collect(),
        };

        let ranked = chosen
            .iter()
            .map(|&i| {
                let f = &fused[i];
                let (bm25, vector) = (f.parts[0], f.parts[1]);
                RankedEvent {
                    event_id: f.key,
                    score: ScoreParts {
                        fused: f.score,
                        bm25: bm25.map_or(0.0, |p| p.score * bm25_scale),
                        bm25_rank: bm25.map_or(0, |p| p.rank),
                        vector: vector.map_or(0.0, |p| p.score),
                        vector_rank: vector.map_or(0, |p| p.rank),
                    },
                }
            })
            .collect();
        Ok(Ranking { idx, searcher, fresh, best_chunk, ranked, vectors_used })
    }

    /// Reads the ranked events and the stored chunks that matched, for full hits.
    async fn hydrate(
        &self,
        ns: Uuid,
        req: &SearchRequest,
        idx: &NamespaceIndex,
        searchers: (&tantivy::Searcher, &[crate::fresh::Part]),
        best_chunk: &HashMap<Uuid, ChunkHit>,
        ranked: Vec<RankedEvent>,
    ) -> Result<Vec<Hit>, IndexError> {
        let ids: Vec<Uuid> = ranked.iter().map(|r| r.event_id).collect();
        // A hit with a stored chunk shows that chunk: only the others' contents are read.
        let whole: Vec<Uuid> = ids.iter().filter(|id| !best_chunk.contains_key(id)).copied().collect();
        let events = self.store.events_by_ids_content_of(ns, &ids, &whole).await?;
        let mut hits = Vec::with_capacity(ids.len());
        for (r, e) in ranked.into_iter().zip(events) {
            let mut hit = Hit {
                event_id: e.id,
                session_id: e.session_id,
                seq: e.seq,
                role: role_of_kind(&e.kind),
                kind: e.kind,
                agent_id: e.agent_id,
                task_id: e.task_id,
                tool_name: e.tool_name,
                event_time: e.event_time,
                lines: None,
                source: "event".into(),
                chunk: 0,
                chunk_first_line: 0,
                chunk_last_line: 0,
                text: None,
                score: r.score,
            };
            match best_chunk.get(&e.id) {
                Some(c) => {
                    let stored = stored_chunk(idx, searchers, c)?;
                    hit.lines = stored.lines;
                    hit.source = stored.source;
                    hit.chunk = stored.chunk;
                    hit.chunk_first_line = stored.chunk_first_line;
                    hit.chunk_last_line = stored.chunk_last_line;
                    hit.text = req.with_text.then_some(stored.text);
                }
                None => {
                    let lines = e.content.matches('\n').count() as u32;
                    hit.chunk_last_line = lines.saturating_sub(u32::from(e.content.ends_with('\n')));
                    hit.text = req.with_text.then_some(e.content);
                }
            }
            hits.push(hit);
        }
        if req.with_lines {
            self.fill_unknown_lines(ns, &mut hits).await;
        }
        Ok(hits)
    }

    /// Asks the full view for the current lines of hits that have none stored (a live session's).
    async fn fill_unknown_lines(&self, ns: Uuid, hits: &mut [Hit]) {
        let mut by_session: HashMap<Uuid, Vec<usize>> = HashMap::new();
        for (i, h) in hits.iter().enumerate().filter(|(_, h)| h.lines.is_none()) {
            by_session.entry(h.session_id).or_default().push(i);
        }
        let mut sessions: Vec<Vec<usize>> = Vec::with_capacity(by_session.len());
        let mut asks: Vec<(SessionId, Vec<Seq>)> = Vec::with_capacity(by_session.len());
        for (session, idxs) in by_session {
            asks.push((SessionId(session), idxs.iter().map(|&i| Seq(hits[i].seq)).collect()));
            sessions.push(idxs);
        }
        let answers = self.full_view.lines_of_sessions(NamespaceId(ns), &asks, Stability::Current).await;
        for ((idxs, (session, _)), lines) in sessions.iter().zip(&asks).zip(answers) {
            match lines {
                Ok(lines) => {
                    for (&i, l) in idxs.iter().zip(lines) {
                        hits[i].lines = l.map(|l| l.range);
                    }
                }
                // A view that cannot be compiled costs hits their lines, never the search.
                Err(e) => tracing::warn!(session = %session.0, error = %e, "full-view lines unavailable"),
            }
        }
    }

    /// The events' full-view lines (chain 1's numbering or a later chain's, as stored before). A
    /// view that cannot be compiled costs hits their lines, never the search or the indexing.
    async fn lines_of(&self, ns: Uuid, session: Uuid, seqs: &[Seq], stability: Stability) -> Vec<Option<LineRange>> {
        match self.full_view.lines(NamespaceId(ns), SessionId(session), seqs, stability).await {
            Ok(lines) => lines.into_iter().map(|l| l.map(|l| l.range)).collect(),
            Err(e) => {
                tracing::warn!(session = %session, error = %e, "full-view lines unavailable");
                vec![None; seqs.len()]
            }
        }
    }
}

/// The stored fields of a chunk, from the committed index or from the query's fresh part it was
/// found in.
fn stored_chunk(
    idx: &NamespaceIndex,
    (main, fresh): (&tantivy::Searcher, &[crate::fresh::Part]),
    c: &ChunkHit,
) -> Result<crate::namespace_index::StoredChunk, IndexError> {
    match c.fresh {
        None => idx.stored(main, c.addr),
        Some(i) => {
            let part = fresh.get(i).ok_or_else(|| IndexError::Task("a fresh hit without its part".into()))?;
            idx.stored_fresh(part, c.addr)
        }
    }
}

/// An event's own text has at most this many chunks in practice (it keeps an excerpt of at most
/// a few KiB of a large output); a best chunk whose key is none of these is read to find out.
const EVENT_CHUNKS_KNOWN: u32 = 64;

/// The ranked events' best BM25 chunks that lie in their artifacts. Which chunk is whose is told
/// by the document key (a fast field) without reading the document: only artifact chunks (and
/// event chunks past [`EVENT_CHUNKS_KNOWN`]) are read from the doc store.
fn artifact_chunks(r: &Ranking) -> Result<HashMap<Uuid, ArtifactChunk>, IndexError> {
    let mut out = HashMap::new();
    for e in &r.ranked {
        let Some(c) = r.best_chunk.get(&e.event_id) else { continue };
        if crate::doc::is_event_chunk_key(&e.event_id, c.doc_key, EVENT_CHUNKS_KNOWN) {
            continue;
        }
        let stored = stored_chunk(&r.idx, (&r.searcher, &r.fresh), c)?;
        if stored.source == "artifact" {
            out.insert(
                e.event_id,
                ArtifactChunk {
                    first_line: stored.chunk_first_line,
                    last_line: stored.chunk_last_line,
                    text: stored.text,
                },
            );
        }
    }
    Ok(out)
}

/// Takes `dir/.lock` for this process (released when the file is closed, also by a crash).
fn lock_dir(dir: &std::path::Path) -> Result<std::fs::File, IndexError> {
    std::fs::create_dir_all(dir).map_err(|e| IndexError::io(dir, e))?;
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| IndexError::io(&path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(IndexError::DirInUse { dir: dir.display().to_string() }),
        Err(std::fs::TryLockError::Error(e)) => Err(IndexError::io(&path, e)),
    }
}

/// Adds to each event's score `neighbor` times the scores of its session neighbours (seq ± 1) that
/// are in the list, and `session` times the best score of another event of its session in the list;
/// then re-sorts (ties keep the list's order).
fn smooth_neighbors(items: &mut [(Uuid, f32)], chunks: &HashMap<Uuid, ChunkHit>, neighbor: f32, session: f32) {
    let by_pos: HashMap<(Uuid, u64), f32> =
        items.iter().filter_map(|(id, score)| chunks.get(id).map(|c| ((c.session, c.seq), *score))).collect();
    // The two best scores of each session, to find the best *other* event of a session.
    let mut best2: HashMap<Uuid, (f32, f32)> = HashMap::new();
    for ((sess, _), score) in &by_pos {
        let b = best2.entry(*sess).or_insert((0.0, 0.0));
        if *score > b.0 {
            *b = (*score, b.0);
        } else if *score > b.1 {
            b.1 = *score;
        }
    }
    let mut smoothed: Vec<(usize, Uuid, f32)> = items
        .iter()
        .enumerate()
        .map(|(i, (id, score))| {
            let extra = chunks.get(id).map_or(0.0, |c| {
                let at = |seq: Option<u64>| seq.and_then(|s| by_pos.get(&(c.session, s))).copied().unwrap_or(0.0);
                let near = at(c.seq.checked_sub(1)) + at(c.seq.checked_add(1));
                let other = best2.get(&c.session).map_or(0.0, |b| if *score >= b.0 { b.1 } else { b.0 });
                neighbor * near + session * other
            });
            (i, *id, score + extra)
        })
        .collect();
    smoothed.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    for (slot, (_, id, score)) in items.iter_mut().zip(smoothed) {
        *slot = (id, score);
    }
}

fn validate(req: &SearchRequest) -> Result<(), IndexError> {
    let bad = |field: &str, msg: String| Err(IndexError::Invalid(FieldError::new(field, msg)));
    if req.query.trim().is_empty() {
        return bad("query", "is required".into());
    }
    if req.limit == 0 || req.limit > MAX_LIMIT {
        return bad("limit", format!("must be 1..={MAX_LIMIT}, got {}", req.limit));
    }
    if req.candidates < req.limit || req.candidates > MAX_CANDIDATES {
        return bad("candidates", format!("must be limit..={MAX_CANDIDATES}, got {}", req.candidates));
    }
    for (field, w) in [("bm25_weight", req.bm25_weight), ("vector_weight", req.vector_weight)] {
        if !w.is_finite() || w < 0.0 {
            return bad(field, format!("must be a finite number >= 0, got {w}"));
        }
    }
    if req.bm25_weight == 0.0 && req.vector_weight == 0.0 {
        return bad("bm25_weight", "bm25_weight and vector_weight cannot both be 0".into());
    }
    if !req.session_weight.is_finite() || req.session_weight < 0.0 {
        return bad("session_weight", format!("must be a finite number >= 0, got {}", req.session_weight));
    }
    if !req.neighbor_weight.is_finite() || req.neighbor_weight < 0.0 {
        return bad("neighbor_weight", format!("must be a finite number >= 0, got {}", req.neighbor_weight));
    }
    if !req.context_weight.is_finite() || req.context_weight < 0.0 {
        return bad("context_weight", format!("must be a finite number >= 0, got {}", req.context_weight));
    }
    if !req.rrf_k.is_finite() || req.rrf_k < 0.0 {
        return bad("rrf_k", format!("must be a finite number >= 0, got {}", req.rrf_k));
    }
    if let Some(l) = req.mmr_lambda
        && !(0.0..=1.0).contains(&l)
    {
        return bad("mmr_lambda", format!("must be within 0..=1, got {l}"));
    }
    if let (Some(from), Some(to)) = (req.filter.time.from, req.filter.time.to)
        && from > to
    {
        return bad("filter.time_to", "is before filter.time_from".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(session: Uuid, seq: u64, n: u128) -> (Uuid, ChunkHit) {
        let id = Uuid::from_u128(n);
        let addr = tantivy::DocAddress::new(0, n as u32);
        (id, ChunkHit { addr, score: 0.0, doc_key: 0, event_id: id, session, seq, fresh: None })
    }

    #[test]
    fn smoothing_lifts_events_whose_neighbours_and_session_match() {
        let (s1, s2) = (Uuid::from_u128(100), Uuid::from_u128(200));
        let hits = [hit(s1, 5, 1), hit(s2, 1, 2), hit(s2, 2, 3), hit(s1, 9, 4)];
        let chunks: HashMap<Uuid, ChunkHit> = hits.iter().cloned().collect();
        let ids: Vec<Uuid> = hits.iter().map(|h| h.0).collect();
        let base = vec![(ids[0], 10.0), (ids[1], 9.0), (ids[2], 8.0), (ids[3], 1.0)];

        let mut off = base.clone();
        smooth_neighbors(&mut off, &chunks, 0.0, 0.0);
        assert_eq!(off, base, "weights 0 change nothing");

        // Neighbours: events 2 and 3 are seq 1 and 2 of one session; each gains half the other.
        let mut near = base.clone();
        smooth_neighbors(&mut near, &chunks, 0.5, 0.0);
        assert_eq!(near.iter().map(|x| x.0).collect::<Vec<_>>(), vec![ids[1], ids[2], ids[0], ids[3]]);
        assert_eq!(near[0].1, 13.0);
        assert_eq!(near[1].1, 12.5);

        // Session: event 4 (seq 9, not adjacent) gains from event 1, the best other hit of s1.
        let mut sess = base.clone();
        smooth_neighbors(&mut sess, &chunks, 0.0, 0.5);
        let of = |id: Uuid| sess.iter().find(|x| x.0 == id).map(|x| x.1).unwrap_or_default();
        assert_eq!(of(ids[3]), 6.0);
        assert_eq!(of(ids[0]), 10.5, "the best event of a session gains from the second best");
    }
}
