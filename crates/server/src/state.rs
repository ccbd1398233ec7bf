//! What every service shares.
use memex_event::{ArtifactPolicy, BatchLimits};
use memex_store::Store;

use crate::auth::Auth;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::views::Views;

pub struct AppState {
    pub store: Store,
    pub auth: Auth,
    pub limits: BatchLimits,
    pub policy: ArtifactPolicy,
    pub max_message_bytes: usize,
    pub max_import_bytes: usize,
    pub metrics: Metrics,
    pub views: Views,
    /// The search layer; None when `search.enabled = false`.
    pub search: Option<std::sync::Arc<memex_index::SearchIndex>>,
    pub search_defaults: crate::config::SearchConfig,
}

impl AppState {
    pub fn new(store: Store, config: &Config) -> AppState {
        AppState {
            views: Views::new(store.clone(), config.views.cache_bytes),
            auth: Auth::new(
                store.clone(),
                config.auth.enabled,
                std::time::Duration::from_secs(config.auth.key_cache_ttl_secs),
            ),
            store,
            limits: BatchLimits {
                max_events: config.limits.max_batch_events,
                max_id_bytes: config.limits.max_id_bytes,
            },
            policy: ArtifactPolicy {
                threshold_bytes: config.ingest.artifact_threshold_bytes,
                head_percent: config.ingest.excerpt_head_percent,
                excerpt_bytes: config.ingest.excerpt_bytes,
            },
            max_message_bytes: config.limits.max_message_bytes,
            max_import_bytes: config.limits.max_import_bytes,
            metrics: Metrics::new(),
            search: None,
            search_defaults: config.search.clone(),
        }
    }
}
