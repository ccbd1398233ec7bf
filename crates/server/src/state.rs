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
    /// Turns for the expensive RPCs.
    pub admission: std::sync::Arc<crate::admission::Admission>,
    /// Deadline of RPCs whose client sets none.
    pub default_timeout: Option<std::time::Duration>,
    pub views: Views,
    /// The search layer; None when `search.enabled = false`.
    pub search: Option<std::sync::Arc<memex_search::SearchIndex>>,
    /// The TRACE context engine (task state, compaction, packs, delegation).
    pub context: memex_context::ContextEngine,
    /// Memory's reader tools; None when `memory.enabled = false`.
    pub memory: Option<memex_recall::Memory>,
    /// What BuildSnapshot reads with: memory's reader, or (memory off) the same shell without
    /// search, which reads every fact from the events. Set by `run`.
    pub snapshots: Option<memex_recall::Memory>,
    /// Per-namespace rate and storage quotas, checked on every append.
    pub quotas: std::sync::Arc<crate::quotas::Quotas>,
}

impl AppState {
    /// A turn for an expensive RPC, waiting no longer than the caller will.
    pub async fn admit<T>(&self, request: &tonic::Request<T>) -> Result<crate::admission::Admitted, tonic::Status> {
        let patience = crate::admission::patience(request.metadata()).or(self.default_timeout);
        self.admission.admit(patience).await
    }

    pub fn new(store: Store, config: &Config) -> AppState {
        let views = Views::new(store.clone(), &config.views);
        let admission = std::sync::Arc::new(crate::admission::Admission::new(
            config.limits.in_flight(),
            config.limits.max_waiting,
            std::time::Duration::from_millis(config.limits.max_queue_wait_ms),
        ));
        AppState {
            metrics: Metrics::new(views.stats(), admission.clone(), store.pool()),
            admission,
            default_timeout: (config.limits.default_timeout_secs > 0)
                .then(|| std::time::Duration::from_secs(config.limits.default_timeout_secs)),
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
            context: memex_context::ContextEngine::new(store.clone(), config.context.clone()),
            memory: None,
            snapshots: None,
            quotas: std::sync::Arc::new(crate::quotas::Quotas::new(store.clone(), config)),
        }
    }
}
