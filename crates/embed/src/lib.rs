//! Text embeddings for semantic search: the [`Embedder`] trait and its two providers —
//! all-MiniLM-L6-v2 run locally with candle ([`MiniLm`], the default: no network, weights fetched
//! once by `scripts/fetch-model.sh`) and any server speaking the OpenAI-compatible
//! `/v1/embeddings` API ([`OpenAiEmbedder`]).
//!
//! **Architecture invariant:** an adapter. It turns texts into unit vectors and knows nothing of
//! events, namespaces, Postgres or gRPC; what to embed, when, and where vectors are kept is
//! `memex-search`'s business. Every vector is tagged by its [`ModelInfo`] so vectors of different
//! models are never compared.

mod error;
pub mod minilm;
pub mod openai;
mod static_table;

use std::sync::Arc;

use futures::future::BoxFuture;

pub use error::EmbedError;
pub use minilm::{MiniLm, MiniLmOptions};
pub use openai::{OpenAiEmbedder, OpenAiOptions};
pub use static_table::StaticTable;

/// Which model made a vector. Stored beside every vector: a vector is only ever compared with
/// vectors of the same model and dimension, and a change of model re-embeds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelInfo {
    pub name: String,
    pub dim: usize,
}

/// Turns texts into L2-normalised vectors of `info().dim` floats, one per text, in order.
///
/// Object-safe (the server holds an `Arc<dyn Embedder>` chosen by configuration); the future is
/// boxed so both a CPU-bound local model (run on the blocking pool) and an HTTP client fit.
pub trait Embedder: Send + Sync + 'static {
    fn info(&self) -> &ModelInfo;

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>>;
}

impl<E: Embedder + ?Sized> Embedder for Arc<E> {
    fn info(&self) -> &ModelInfo {
        (**self).info()
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        (**self).embed(texts)
    }
}

/// Scales `v` to unit length (left alone if it is all zeros).
pub fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// The model directory for tests that need the real weights: `MEMEX_MODEL_DIR`, else
/// `models/all-MiniLM-L6-v2` at the workspace root. `None` (skip) when it is missing — but a
/// panic when `REQUIRE_DB` or `CI` is set, so CI can never pass without exercising the real model.
pub fn test_model_dir() -> Option<std::path::PathBuf> {
    // The workspace is found from the test's working directory (its package's), not only from
    // the path compiled in: a target directory shared between checkouts keeps the first one's.
    let from_cwd = std::env::current_dir().ok().and_then(|cwd| {
        cwd.ancestors().map(|a| a.join("models/all-MiniLM-L6-v2")).find(|d| d.join("model.safetensors").is_file())
    });
    let dir = std::env::var_os("MEMEX_MODEL_DIR")
        .map(std::path::PathBuf::from)
        .or(from_cwd)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2"));
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    let required = std::env::var_os("REQUIRE_DB").is_some() || std::env::var_os("CI").is_some();
    assert!(!required, "the embedding model is missing at {}; run scripts/fetch-model.sh (make setup)", dir.display());
    eprintln!("SKIP: no embedding model at {} (run scripts/fetch-model.sh)", dir.display());
    None
}
