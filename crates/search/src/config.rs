//! The search layer's options: the `[search]` section of `memex.toml`, owned here so the server
//! embeds it instead of copying it.
use std::path::PathBuf;

use memex_rank::ChunkOptions;
use serde::{Deserialize, Serialize};

use crate::{Fusion, SearchRequest};

/// This replica's text indexes and the fusion defaults of searches that leave a setting unset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// Serve `SearchService`, keep the text indexes current, and draw pack candidates from them.
    pub enabled: bool,
    /// This replica's tantivy indexes (one subdirectory per namespace). Derived state: deleting it
    /// is safe; it is rebuilt from Postgres.
    pub index_dir: String,
    /// Default fusion: `score` (weighted sum of the BM25 score scaled to the best hit's and the
    /// cosine similarity) or `rrf`; the two lists' weights; the RRF constant.
    pub fusion: Fusion,
    pub bm25_weight: f32,
    pub vector_weight: f32,
    pub rrf_k: f32,
    /// Default weight of a match in the preceding events' text (see `context_events`).
    pub context_weight: f32,
    /// Default neighbour smoothing of the BM25 list (share of the seq ± 1 neighbours' scores).
    pub neighbor_weight: f32,
    /// Default session smoothing of the BM25 list (share of the best other hit of the session).
    pub session_weight: f32,
    /// Each event's first chunk also indexes the text of this many preceding events of its
    /// session, up to `context_bytes` of each (changing them needs `memex reindex`).
    pub context_events: usize,
    pub context_bytes: usize,
    /// Default candidates per list before fusion.
    pub candidates: usize,
    /// Default MMR lambda (when a search asks for MMR).
    pub mmr_lambda: f32,
    /// Largest index chunk of event or artifact text, in bytes.
    pub chunk_bytes: usize,
    /// Index at most this many bytes of each artifact's text (0: no artifact text).
    pub max_artifact_bytes: usize,
    /// Namespaces with at most this many chunks use exact k-NN rather than the HNSW index.
    pub exact_knn_max: u64,
    /// How often the background loop catches every namespace's index up, in milliseconds.
    pub sync_interval_ms: u64,
    /// Query embeddings: inferences at once, queries that may wait, how long a search waits for
    /// its query's vector before it goes on with BM25 alone, and query vectors cached.
    pub query_embed_threads: usize,
    pub query_embed_queue: usize,
    pub query_embed_wait_ms: u64,
    pub query_embed_cache: u64,
    /// Longest a search's k-NN over the HNSW index may run in Postgres (it slows while the
    /// embedding worker inserts beside it) before the search goes on with BM25 alone and says
    /// so; 0: no limit.
    pub knn_timeout_ms: u64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            enabled: true,
            index_dir: "data/index".to_owned(),
            // Chosen on LoCoMo conversations 0-4 (`memex-bench locomo --conversations 5
            // --all-strategies`), checked on 5-9 (`--skip 5`): R@10 77.5 / 73.6 against 64.4 /
            // 58.2 for the earlier default (RRF, both weights 1, no smoothing) and 75.2 / 73.5 for
            // the best BM25 alone.
            fusion: Fusion::Score,
            bm25_weight: 1.0,
            vector_weight: 0.4,
            rrf_k: 60.0,
            context_weight: 0.5,
            neighbor_weight: 0.1,
            session_weight: 0.2,
            context_events: 2,
            context_bytes: 512,
            candidates: 100,
            mmr_lambda: 0.7,
            chunk_bytes: 2048,
            max_artifact_bytes: 1 << 20,
            exact_knn_max: 50_000,
            sync_interval_ms: 1000,
            query_embed_threads: 1,
            query_embed_queue: 64,
            query_embed_wait_ms: 100,
            query_embed_cache: 10_000,
            knn_timeout_ms: 50,
        }
    }
}

impl SearchConfig {
    /// Options with the indexes under `dir` and every other default.
    pub fn in_dir(dir: impl Into<String>) -> SearchConfig {
        SearchConfig { index_dir: dir.into(), ..SearchConfig::default() }
    }

    /// A hybrid search for `query` with these defaults, no MMR.
    pub fn request(&self, query: impl Into<String>, limit: usize) -> SearchRequest {
        SearchRequest {
            query: query.into(),
            filter: Default::default(),
            limit,
            bm25_weight: self.bm25_weight,
            vector_weight: self.vector_weight,
            fusion: self.fusion,
            rrf_k: self.rrf_k,
            context_weight: self.context_weight,
            neighbor_weight: self.neighbor_weight,
            session_weight: self.session_weight,
            candidates: self.candidates,
            mmr_lambda: None,
            tier: crate::VectorTier::Best,
            with_text: false,
            with_lines: true,
            heads: None,
        }
    }

    pub(crate) fn query_vector_options(&self) -> crate::QueryVectorOptions {
        crate::QueryVectorOptions {
            threads: self.query_embed_threads,
            queue: self.query_embed_queue,
            max_wait: std::time::Duration::from_millis(self.query_embed_wait_ms),
            cache_entries: self.query_embed_cache,
            ..crate::QueryVectorOptions::default()
        }
    }

    pub fn dir(&self) -> PathBuf {
        PathBuf::from(&self.index_dir)
    }

    pub(crate) fn chunk(&self) -> ChunkOptions {
        ChunkOptions { max_bytes: self.chunk_bytes }
    }

    /// What makes no sense to search with, naming the key.
    pub fn check(&self) -> Result<(), String> {
        let weights = [
            self.bm25_weight,
            self.vector_weight,
            self.rrf_k,
            self.context_weight,
            self.neighbor_weight,
            self.session_weight,
        ];
        if !weights.iter().all(|w| w.is_finite() && *w >= 0.0) || (self.bm25_weight == 0.0 && self.vector_weight == 0.0)
        {
            return Err("search.bm25_weight, vector_weight, rrf_k, context_weight, neighbor_weight and session_weight must be finite and >= 0, the weights not both 0".into());
        }
        if self.query_embed_threads == 0 || self.query_embed_queue == 0 {
            return Err("search.query_embed_threads and search.query_embed_queue must be > 0".into());
        }
        if !(0.0..=1.0).contains(&self.mmr_lambda) || self.candidates == 0 || self.chunk_bytes < 64 {
            return Err("search.mmr_lambda must be 0..=1, search.candidates > 0, search.chunk_bytes >= 64".into());
        }
        Ok(())
    }
}
