//! Derived search indexes over the lossless event store, and hybrid search over them.
//!
//! * **Text** (`namespace_index.rs`, tantivy): one index per namespace in `index.dir/<namespace id>/`, one
//!   document per chunk of event text and of artifact text. Each replica keeps its own; it is
//!   caught up from Postgres by per-session seq watermarks before every query (read-your-writes on
//!   any replica) and by a background loop, and rebuilt from Postgres when missing, corrupt or of
//!   an older schema ([`SearchIndex::rebuild`], `memex reindex`).
//! * **Vectors** (`vectors.rs`, pgvector): one embedding per event and model, shared by all
//!   replicas, written by the background [`EmbeddingWorker`] — never on the ingest path.
//! * **Search** (`engine.rs`): BM25 candidates from tantivy and k-NN candidates from pgvector,
//!   fused by `memex-rank` (RRF, optional MMR), with provenance and score parts per hit.
//!
//! **Architecture invariant:** everything here is derived from `events` (and `artifacts`) and can
//! be deleted and rebuilt from them; nothing here is ever the only copy. A rebuilt text index
//! answers exactly like the live one (same hits, order and scores).
//! **Architecture invariant:** every query is scoped to one namespace: a namespace's text index is
//! its own directory, and every vector query filters on `namespace_id`.
//! **Architecture invariant:** nothing here is called on the append path; indexing runs at query
//! time (catch-up), in the background loop, or in the embedding worker.

mod collect;
mod config;
mod doc;
mod engine;
mod error;
mod fresh;
mod namespace_index;
mod query;
mod query_vectors;
mod schema;
mod stats;
mod vectors;
mod worker;

pub use config::SearchConfig;
pub use engine::SearchIndex;
pub use error::IndexError;
pub use query::{
    ArtifactChunk, Fusion, Hit, RankedEvent, RankedEvents, ScoreParts, SearchFilter, SearchRequest, SearchResults,
    TimeRange, VectorTier,
};
pub use query_vectors::{QueryVectorOptions, QueryVectorStats};
pub use schema::SCHEMA_VERSION;
pub use stats::IndexStats;
pub use vectors::{ensure_model_index, vector_count};
pub use worker::{EmbeddingWorker, Foreground, WorkerOptions, WorkerProbe, WorkerProgress};
