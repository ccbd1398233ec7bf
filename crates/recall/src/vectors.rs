//! Vectors the memory compares by: turn texts (segmentation), tag names (aliases), verbs
//! (verb expansion), fact sentences (supersession, question ranking). Synchronous and cheap: the
//! fast tier's static table, microseconds a text, deterministic.
use std::sync::Arc;

use memex_embed::StaticTable;

pub trait TextVectors: Send + Sync {
    /// One vector per text (None where there is none: an empty text).
    fn vectors(&self, texts: &[&str]) -> Vec<Option<Vec<f32>>>;
}

impl TextVectors for StaticTable {
    fn vectors(&self, texts: &[&str]) -> Vec<Option<Vec<f32>>> {
        match self.embed_sync(texts) {
            Ok(v) => v.into_iter().map(|x| (x.iter().any(|f| *f != 0.0)).then_some(x)).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "static table: no vectors");
                vec![None; texts.len()]
            }
        }
    }
}

pub type SharedVectors = Option<Arc<dyn TextVectors>>;
