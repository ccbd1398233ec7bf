//! Starting memory with the server: the reader tools (`memex_recall::Memory`) over the full
//! view, the search index (FindQuote's search) and the static table (memory's vectors); and the
//! memory worker on the background runtime, in the `all` and `worker` roles.
use std::sync::Arc;

use futures::future::BoxFuture;
use memex_recall::{EventSearch, Memory, MemoryWorker, RecallError, SearchHit, SearchHits, SearchQuery, WorkerParts};
use memex_search::SearchIndex;
use memex_store::Store;
use memex_tokens::TokenCounter;
use uuid::Uuid;

use crate::ServerError;
use crate::background::Background;
use crate::config::Config;

/// FindQuote's search: the hybrid index, with the matched text and the hits' lines.
pub struct IndexQuotes(pub Arc<SearchIndex>);

impl EventSearch for IndexQuotes {
    fn search<'a>(&'a self, ns: Uuid, q: &'a SearchQuery) -> BoxFuture<'a, Result<SearchHits, RecallError>> {
        Box::pin(async move {
            let mut req = self.0.config().request(q.query.clone(), q.limit.clamp(1, 1_000));
            req.candidates = req.candidates.max(req.limit);
            req.filter.session_ids = q.sessions.clone();
            req.filter.time = memex_search::TimeRange { from: q.from, to: q.to };
            req.with_text = true;
            // FindQuote cites its chosen hits through its own pointer batch (with their chains),
            // so the search need not place all of its hits in the full view: a chunk's stored
            // lines (an imported trace's) still come with it.
            req.with_lines = false;
            if self.0.embedder().is_none() && self.0.fast_tier().is_none() {
                req.vector_weight = 0.0;
            }
            let r = self.0.search(ns, &req).await.map_err(|e| RecallError::Search(e.to_string()))?;
            Ok(SearchHits {
                hits: r
                    .hits
                    .into_iter()
                    .map(|h| SearchHit {
                        session: h.session_id,
                        seq: h.seq,
                        kind: h.kind,
                        score: h.score.fused,
                        text: h.text.unwrap_or_default(),
                        lines: h.lines,
                    })
                    .collect(),
                vectors_used: r.vectors_used,
            })
        })
    }
}

/// Packs' memory blocks, from the reader tools.
pub struct PackMemory(pub Memory);

impl memex_context::MemoryBlocks for PackMemory {
    fn render<'a>(
        &'a self,
        namespace: Uuid,
        reader: &'a str,
        hint_tokens: usize,
        content_tokens: usize,
    ) -> BoxFuture<'a, Result<String, memex_context::ContextError>> {
        Box::pin(async move {
            let (hint, content) = self
                .0
                .context_blocks(namespace, reader, hint_tokens, content_tokens)
                .await
                .map_err(|e| memex_context::ContextError::Seam { seam: "memory", message: e.to_string() })?;
            Ok(match (hint.is_empty(), content.is_empty()) {
                (_, true) => hint,
                (true, false) => content,
                (false, false) => format!("{hint}\n{content}"),
            })
        })
    }
}

fn counter(config: &Config) -> Arc<dyn TokenCounter> {
    Arc::new(config.context.tokenizer)
}

fn vectors(config: &Config) -> Result<memex_recall::SharedVectors, ServerError> {
    Ok(crate::search::static_table(&config.embedding)?.map(|t| t as Arc<dyn memex_recall::TextVectors>))
}

/// The reader tools, when memory is on.
pub fn reader(
    config: &Config,
    store: Store,
    full_view: Arc<dyn memex_pointer::FullView>,
    search: Option<Arc<SearchIndex>>,
) -> Result<Option<Memory>, ServerError> {
    if !config.memory.enabled {
        return Ok(None);
    }
    let search = search.map(|s| Arc::new(IndexQuotes(s)) as Arc<dyn EventSearch>);
    Ok(Some(Memory::new(store, config.memory.clone(), full_view, search, vectors(config)?, counter(config))))
}

/// What BuildSnapshot reads with: memory's reader when memory is on; else the same shell without
/// search or vectors (a snapshot needs neither, and reads the facts from the events).
pub fn snapshots(
    config: &Config,
    store: Store,
    full_view: Arc<dyn memex_pointer::FullView>,
    memory: Option<&Memory>,
) -> Memory {
    match memory {
        Some(m) => m.clone(),
        None => Memory::new(store, config.memory.clone(), full_view, None, None, counter(config)),
    }
}

/// Memory for the memory worker's compiled sessions (it compiles a session once it has read it,
/// for the line map, and seldom asks again).
const WORKER_VIEWS_BYTES: u64 = 16 * 1024 * 1024;

/// The memory worker, on `background`'s idle-priority threads with its own small pool; None
/// when memory is off.
pub async fn start_worker(
    config: &Config,
    background: &Background,
    foreground: Option<Arc<dyn memex_recall::Foreground>>,
) -> Result<Option<MemoryWorker>, ServerError> {
    if !config.memory.enabled {
        return Ok(None);
    }
    let counter = counter(config);
    let vectors = vectors(config)?;
    let interpreter = memex_recall::interpreter(&config.memory, counter.clone())
        .map_err(|e| ServerError::Background(format!("memory interpreter: {e}")))?;
    let memory = config.memory.clone();
    let worker = background
        .run(config, move |store| async move {
            // Its own views, small: it compiles each session it has read once, to store its map.
            let views =
                memex_views::Views::new(store.clone(), &memex_views::ViewsConfig { cache_bytes: WORKER_VIEWS_BYTES });
            Ok(MemoryWorker::start(WorkerParts {
                full_view: Arc::new(views),
                store,
                config: memory,
                interpreter,
                vectors,
                counter,
                foreground,
                namespaces: Vec::new(),
            }))
        })
        .await?;
    Ok(Some(worker))
}
