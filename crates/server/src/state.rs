//! What every service shares.
use memex_event::{ArtifactPolicy, BatchLimits};
use memex_store::Store;
use memex_views::Views;

use crate::auth::Auth;
use crate::config::Config;
use crate::metrics::Metrics;

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
    pub search: Option<std::sync::Arc<memex_search::SearchIndex>>,
    pub search_defaults: crate::config::SearchConfig,
    /// The TRACE context engine (task state, compaction, packs, delegation).
    pub context: memex_context::ContextEngine,
}

impl AppState {
    pub fn new(store: Store, config: &Config) -> AppState {
        let views = Views::new(store.clone(), config.views.cache_bytes);
        AppState {
            metrics: Metrics::new(views.stats()),
            views,
            auth: Auth::new(
                store.clone(),
                config.auth.enabled,
                std::time::Duration::from_secs(config.auth.key_cache_ttl_secs),
            ),
            store: store.clone(),
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
            search: None,
            search_defaults: config.search.clone(),
            context: memex_context::ContextEngine::new(store.clone(), context_config(config)),
        }
    }
}

/// The engine's settings from the `[context]` section (validated at load).
fn context_config(config: &Config) -> memex_context::ContextConfig {
    let c = &config.context;
    let defaults = memex_context::ContextConfig::default();
    memex_context::ContextConfig {
        tokenizer: c.tokenizer.parse().unwrap_or(defaults.tokenizer),
        task_state: memex_task::TaskStateLimits { max_tokens: c.task_state_max_tokens, ..defaults.task_state },
        manifest_max_tokens: c.manifest_max_tokens,
        pack: memex_pack::PackParams { lambda: c.mmr_lambda, max_items: c.max_pack_items, ..defaults.pack },
        budgets: c.budgets.into(),
        tail_events: c.tail_events,
        search_limit: c.search_limit,
        scan_events: c.scan_events,
        token_cache_entries: c.token_cache_entries,
        ..defaults
    }
}
