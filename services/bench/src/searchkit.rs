//! What the search commands share: the configured store, embedder and index, namespaces for
//! benchmark runs, and appends straight to the store (the benchmarks measure search, not gRPC).
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use memex_event::{ArtifactPolicy, BatchLimits, EventInput, batch_fingerprint, prepare_batch};
use memex_search::{EmbeddingWorker, SearchIndex, WorkerOptions};
use memex_server::Config;
use memex_store::{AppendOutcome, AppendRequest, Namespace, NewSession, Store};
use uuid::Uuid;

use memex_server::flags::SearchArgs;

pub struct Kit {
    pub config: Config,
    pub store: Store,
    pub index: Arc<SearchIndex>,
    pub embedder: Option<Arc<dyn memex_embed::Embedder>>,
    /// Set when the benchmark ranks by the fast tier (the static table) instead of the model.
    pub fast: Option<Arc<dyn memex_embed::Embedder>>,
    temp_dir: Option<PathBuf>,
}

impl Kit {
    /// Connects and migrates; `temp_index`: use a fresh directory unless `--index-dir` is given.
    /// `fast_tier`: rank by the static table (its worker embeds instead of the model's).
    pub async fn open(args: &SearchArgs, temp_index: bool, fast_tier: bool) -> anyhow::Result<Kit> {
        let mut config = args.config.load()?;
        if let Some(p) = &args.embedding {
            config.embedding.provider = serde_json::from_value(serde_json::Value::String(p.clone()))?;
        }
        let temp_dir = match (&args.index_dir, temp_index) {
            (Some(d), _) => {
                config.search.index_dir = d.display().to_string();
                None
            }
            (None, true) => {
                let d = std::env::temp_dir().join(format!("memex-bench-index-{}", Uuid::now_v7().simple()));
                config.search.index_dir = d.display().to_string();
                Some(d)
            }
            (None, false) => None,
        };
        // Recall benchmarks measure the ranking with the query's vector, not whether the model
        // answers within a serving deadline (a cold model's first inference can take longer):
        // queries here wait for their vectors.
        config.search.query_embed_wait_ms = config.search.query_embed_wait_ms.max(60_000);
        config.search.knn_timeout_ms = 0;
        let store = memex_server::connect_store_as(&config, memex_store::Tenant::All)
            .await
            .context("connecting to the database (make run sets it up)")?;
        store.migrate().await?;
        let embedder = memex_server::search::embedder(&config.embedding).context("loading the embedding model")?;
        let mut index = SearchIndex::open(
            store.clone(),
            config.search.clone(),
            embedder.clone(),
            Arc::new(memex_pointer::NoFullView),
        )?;
        let fast = if fast_tier {
            let f = memex_server::search::fast_tier(&config.embedding)?
                .context("--tier fast needs embedding.provider = minilm and embedding.static_tier")?;
            index = index.with_fast_tier(f.clone());
            Some(f)
        } else {
            None
        };
        Ok(Kit { config, store, index: Arc::new(index), embedder, fast, temp_dir })
    }

    /// The vectors searches rank by.
    pub fn tier(&self) -> memex_search::VectorTier {
        if self.fast.is_some() { memex_search::VectorTier::Fast } else { memex_search::VectorTier::Best }
    }

    /// Starts an embedding worker for `namespaces` only (None without an embedder).
    pub async fn worker(&self, namespaces: &[Uuid]) -> anyhow::Result<Option<EmbeddingWorker>> {
        let Some(e) = self.fast.as_ref().or(self.embedder.as_ref()) else { return Ok(None) };
        let opts = WorkerOptions {
            batch_size: self.config.embedding.batch_size,
            queue_capacity: self.config.embedding.queue_capacity,
            poll_interval: std::time::Duration::from_millis(50),
            namespaces: namespaces.to_vec(),
            ..WorkerOptions::default()
        };
        Ok(Some(EmbeddingWorker::start(self.store.clone(), e.clone(), opts).await?))
    }

    /// A new namespace named `<prefix>-<ulid>`.
    pub async fn namespace(&self, prefix: &str) -> anyhow::Result<Namespace> {
        let name = format!("{prefix}-{}", ulid::Ulid::generate().to_string().to_lowercase());
        Ok(self.store.create_namespace(&name).await?)
    }

    pub async fn session(&self, ns: &Namespace, agent: &str) -> anyhow::Result<Uuid> {
        let s = self
            .store
            .create_session(
                ns.id,
                NewSession { agent_id: agent.into(), source_format: "memex".into(), ..Default::default() },
            )
            .await?;
        Ok(s.id)
    }

    /// Appends `events` to a session in batches of at most 10,000.
    pub async fn append(
        &self,
        ns: &Namespace,
        session: Uuid,
        events: Vec<EventInput>,
    ) -> anyhow::Result<Vec<AppendOutcome>> {
        let limits = BatchLimits::default();
        let mut out = Vec::new();
        let mut events = events;
        while !events.is_empty() {
            let rest = events.split_off(events.len().min(limits.max_events));
            let batch = std::mem::replace(&mut events, rest);
            let fingerprint = batch_fingerprint(&session.to_string(), &batch);
            let batch =
                prepare_batch(batch, &limits, &ArtifactPolicy::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
            out.push(
                self.store
                    .append(AppendRequest {
                        namespace_id: ns.id,
                        session_id: session,
                        batch,
                        idempotency_key: None,
                        fingerprint,
                    })
                    .await?,
            );
        }
        Ok(out)
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        if let Some(d) = &self.temp_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Peak resident set size of this process, in MiB (Linux).
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}
