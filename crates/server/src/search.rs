//! Starting and stopping the search layer with the server: the embedder named by `[embedding]`,
//! this replica's text indexes under `search.index_dir`, the background catch-up loop and the
//! embedding worker.
use std::sync::Arc;
use std::time::Duration;

use memex_embed::{EmbedError, Embedder, MiniLm, MiniLmOptions, OpenAiEmbedder, OpenAiOptions, StaticTable};
use memex_search::{EmbeddingWorker, Foreground, SearchIndex, WorkerOptions};
use memex_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::ServerError;
use crate::background::Background;
use crate::config::{Config, EmbeddingConfig, EmbeddingProvider};

/// The embedder `[embedding]` asks for (None for `provider = "none"`).
pub fn embedder(e: &EmbeddingConfig) -> Result<Option<Arc<dyn Embedder>>, EmbedError> {
    let name = |default: &str| if e.model.is_empty() { default.to_owned() } else { e.model.clone() };
    Ok(match e.provider {
        EmbeddingProvider::None => None,
        EmbeddingProvider::Minilm => {
            let opts = MiniLmOptions {
                name: name("all-MiniLM-L6-v2"),
                batch_size: e.batch_size.min(64),
                ..Default::default()
            };
            Some(Arc::new(MiniLm::load(std::path::Path::new(&e.model_dir), opts)?))
        }
        EmbeddingProvider::Openai => Some(Arc::new(OpenAiEmbedder::new(OpenAiOptions {
            base_url: e.base_url.clone(),
            model: e.model.clone(),
            dim: e.dim,
            api_key: (!e.api_key.is_empty()).then(|| e.api_key.clone()),
            timeout: Duration::from_secs(e.timeout_secs),
        })?)),
    })
}

pub struct SearchRuntime {
    pub index: Arc<SearchIndex>,
    workers: Vec<EmbeddingWorker>,
    /// The workers' runtime (dropped last: what still runs there is abandoned).
    _background: Option<Background>,
    sync: JoinHandle<()>,
    stop: watch::Sender<bool>,
    /// True once the first catch-up round over every namespace has ended (readiness).
    caught_up: watch::Receiver<bool>,
    _query_vectors: Option<opentelemetry::metrics::ObservableCounter<u64>>,
}

/// `memex.query_vectors{outcome}`: how searches got their query's vector (cached, embedded) or
/// went without (shed: the queue was full; late: not ready in time; abandoned; failed; knn_late: its k-NN
/// ran past `search.knn_timeout_ms`).
fn query_vector_metric(stats: Arc<memex_search::QueryVectorStats>) -> opentelemetry::metrics::ObservableCounter<u64> {
    use std::sync::atomic::Ordering::Relaxed;
    opentelemetry::global::meter("memex")
        .u64_observable_counter("memex.query_vectors")
        .with_description("Query vectors by outcome; all but cached and embedded mean a search without vectors")
        .with_callback(move |o| {
            let s = &stats;
            for (outcome, n) in [
                ("cached", &s.cached),
                ("embedded", &s.embedded),
                ("shed", &s.shed),
                ("late", &s.late),
                ("abandoned", &s.abandoned),
                ("failed", &s.failed),
                ("knn_late", &s.knn_late),
            ] {
                o.observe(n.load(Relaxed), &[opentelemetry::KeyValue::new("outcome", outcome)]);
            }
        })
        .build()
}

/// The embedding worker of a `worker`-role process, without the text index or the RPCs.
pub async fn start_worker(config: &Config, background: &Background) -> Result<Vec<EmbeddingWorker>, ServerError> {
    let model = embedder(&config.embedding)?;
    let fast = fast_tier(&config.embedding)?;
    start_workers(config, background, model.as_ref(), fast.as_ref(), None).await
}

/// The fast tier: a static table distilled from MiniLM (with `provider = "minilm"` and
/// `static_tier`), distilled at the first start and read from disk afterwards.
pub fn fast_tier(e: &EmbeddingConfig) -> Result<Option<Arc<dyn Embedder>>, EmbedError> {
    Ok(static_table(e)?.map(|t| t as Arc<dyn Embedder>))
}

/// The static table itself (search's fast tier, memory's vectors), loaded once per process and
/// directory: it holds ~46 MB.
pub fn static_table(e: &EmbeddingConfig) -> Result<Option<Arc<StaticTable>>, EmbedError> {
    static LOADED: std::sync::Mutex<Vec<(String, Arc<StaticTable>)>> = std::sync::Mutex::new(Vec::new());
    if e.provider != EmbeddingProvider::Minilm || !e.static_tier {
        return Ok(None);
    }
    let model = if e.model.is_empty() { "all-MiniLM-L6-v2".to_owned() } else { e.model.clone() };
    let dir = if e.static_dir.is_empty() {
        format!("{}-static", e.model_dir.trim_end_matches('/'))
    } else {
        e.static_dir.clone()
    };
    let key = format!("{dir}\u{0}{model}");
    if let Some(t) = LOADED.lock().ok().and_then(|l| l.iter().find(|(k, _)| *k == key).map(|(_, t)| t.clone())) {
        return Ok(Some(t));
    }
    let table = Arc::new(StaticTable::load_or_distill(
        std::path::Path::new(&dir),
        std::path::Path::new(&e.model_dir),
        StaticTable::name_for(&model),
    )?);
    if let Ok(mut l) = LOADED.lock() {
        l.push((key, table.clone()));
    }
    Ok(Some(table))
}

/// The background embedding workers of a process that embeds: the model's and, when configured,
/// the fast tier's (many events per batch: a static table embeds thousands per second). They run
/// on `background`'s idle-priority threads, with its own small pool of connections.
async fn start_workers(
    config: &Config,
    background: &Background,
    model: Option<&Arc<dyn Embedder>>,
    fast: Option<&Arc<dyn Embedder>>,
    foreground: Option<Arc<dyn Foreground>>,
) -> Result<Vec<EmbeddingWorker>, ServerError> {
    let (config, model, fast) = (config.clone(), model.cloned(), fast.cloned());
    background
        .run(&config.clone(), move |store| async move { spawn_workers(&config, &store, model, fast, foreground).await })
        .await
}

async fn spawn_workers(
    config: &Config,
    store: &Store,
    model: Option<Arc<dyn Embedder>>,
    fast: Option<Arc<dyn Embedder>>,
    foreground: Option<Arc<dyn Foreground>>,
) -> Result<Vec<EmbeddingWorker>, ServerError> {
    let mut workers = Vec::new();
    if let Some(m) = &model {
        let opts = WorkerOptions {
            batch_size: config.embedding.batch_size,
            queue_capacity: config.embedding.queue_capacity,
            max_share: config.embedding.worker_share,
            // Beside requests the model runs only in their lulls (see `step_aside`); a `worker`
            // replica has no requests to wait for.
            max_yield: None,
            settle: Duration::from_millis(config.embedding.settle_ms),
            idle_rescan: Duration::from_millis(config.embedding.idle_rescan_ms),
            ..WorkerOptions::default()
        };
        workers.push(EmbeddingWorker::start_yielding(store.clone(), m.clone(), opts, foreground.clone()).await?);
    }
    if let Some(f) = &fast {
        // Session by session only (packs): no HNSW upkeep, so inserts keep up with any backlog.
        let opts = WorkerOptions {
            batch_size: 128,
            events_per_job: 512,
            vector_index: false,
            settle: Duration::from_millis(config.embedding.settle_ms),
            idle_rescan: Duration::from_millis(config.embedding.idle_rescan_ms),
            ..WorkerOptions::default()
        };
        workers.push(EmbeddingWorker::start_yielding(store.clone(), f.clone(), opts, foreground).await?);
    }
    Ok(workers)
}

impl SearchRuntime {
    /// Loads the model, opens the indexes lazily, and starts the catch-up loop (whose first round
    /// rebuilds any index that is missing) and, if configured, the embedding worker.
    /// `lines` answers hits' full-view line ranges (the server's view cache).
    /// `foreground`: what the background workers step aside for (the RPCs' admission).
    pub async fn start(
        config: &Config,
        store: Store,
        full_view: Arc<dyn memex_pointer::FullView>,
        foreground: Option<Arc<dyn Foreground>>,
    ) -> Result<Option<SearchRuntime>, ServerError> {
        if !config.search.enabled {
            return Ok(None);
        }
        let embedder = embedder(&config.embedding)?;
        let fast = fast_tier(&config.embedding)?;
        let mut index = SearchIndex::open(store.clone(), config.search.clone(), embedder.clone(), full_view)?;
        if let Some(f) = &fast {
            index = index.with_fast_tier(f.clone());
        }
        let index = Arc::new(index);
        let (workers, background) = if config.embedding.worker && config.role.embeds() {
            let background = Background::start()?;
            (start_workers(config, &background, embedder.as_ref(), fast.as_ref(), foreground).await?, Some(background))
        } else {
            (Vec::new(), None)
        };
        let (stop, mut stop_rx) = watch::channel(false);
        let (caught_up_tx, caught_up) = watch::channel(false);
        let interval = Duration::from_millis(config.search.sync_interval_ms.max(10));
        let idx = index.clone();
        // The catch-up loop reads every namespace's new events: `Tenant::All`.
        let sync = tokio::spawn(memex_store::tenant::scope(memex_store::Tenant::All, async move {
            loop {
                match idx.sync_all().await {
                    Ok(n) => {
                        if !*caught_up_tx.borrow() {
                            tracing::info!(events = n, "text indexes caught up: ready");
                            caught_up_tx.send_replace(true);
                        } else if n > 0 {
                            tracing::debug!(events = n, "text indexes caught up");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "catching up the text indexes failed; retrying"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = stop_rx.changed() => return,
                }
            }
        }));
        let _query_vectors = index.query_vector_stats().map(query_vector_metric);
        Ok(Some(SearchRuntime { index, workers, _background: background, sync, stop, caught_up, _query_vectors }))
    }

    /// Completes once the index holds every event committed before the server started (the
    /// first background round over every namespace): what readiness waits for, so that a fresh
    /// replica (an empty index directory) takes no traffic while it rebuilds.
    pub fn caught_up(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.caught_up.clone();
        async move {
            // The loop gone before its first round (a stop): never ready.
            if rx.wait_for(|done| *done).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The model's worker first, then the fast tier's.
    pub fn workers(&self) -> &[EmbeddingWorker] {
        &self.workers
    }

    /// Stops the loop and the workers (the job in hand is finished). The catch-up loop ends
    /// after its round in hand (a few thousand events); one that overruns is cut off: derived
    /// work, which the next start resumes.
    pub async fn stop(mut self) {
        self.index.stop_catching_up();
        let _ = self.stop.send(true);
        if tokio::time::timeout(SYNC_STOP, &mut self.sync).await.is_err() {
            tracing::warn!(secs = SYNC_STOP.as_secs(), "the index catch-up round in hand did not end in time: cut off");
            self.sync.abort();
        }
        for w in std::mem::take(&mut self.workers) {
            w.stop().await;
        }
    }
}

/// How long a stop waits for the catch-up loop's round in hand (within the server's 3 s of
/// clean-up).
const SYNC_STOP: Duration = Duration::from_secs(2);

impl Drop for SearchRuntime {
    /// Dropped without `stop` (a shutdown past its clean-up time): the loop is cut off, so that
    /// nothing keeps the index, and its directory's lock, alive after the server.
    fn drop(&mut self) {
        self.sync.abort();
    }
}
