//! OpenTelemetry instruments. They are no-ops until `telemetry::init` installs an OTLP meter
//! provider (when `OTEL_EXPORTER_OTLP_*` is set), so tests and plain runs pay nothing: a no-op
//! meter drops the observable instruments' callbacks without ever calling them.
//!
//! Counts kept elsewhere (caches, admission, pools, the index and the embedding workers) are read
//! by observable instruments when the exporter collects, never on a request's path. The names and
//! what each means are listed in README.md ("Telemetry"); `deploy/grafana` and
//! `deploy/prometheus` query them by their Prometheus names.
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use memex_proto::v1 as pb;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableCounter, ObservableGauge, ObservableUpDownCounter};

/// Bounds of `memex.pack.budget.use`: the share of a budget a pack filled.
const SHARE_BOUNDS: [f64; 10] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

fn meter() -> Meter {
    opentelemetry::global::meter("memex")
}

/// An instrument kept alive for its callback.
pub enum Observer {
    Counter(ObservableCounter<u64>),
    Gauge(ObservableGauge<u64>),
    UpDown(ObservableUpDownCounter<i64>),
}

pub struct Metrics {
    pub events_appended: Counter<u64>,
    pub append_batches: Counter<u64>,
    pub artifact_bytes: Counter<u64>,
    /// Tokens a pack used of its budget, as a share, in total and per block.
    pub pack_budget_use: Histogram<f64>,
    _observers: Vec<Observer>,
}

impl Metrics {
    pub fn new(
        views: Arc<memex_views::CacheStats>,
        admission: Arc<crate::admission::Admission>,
        pool: &sqlx::PgPool,
    ) -> Metrics {
        let meter = meter();
        let (hits, misses, shed, expired, running) =
            (views.clone(), views, admission.clone(), admission.clone(), admission);
        let mut observers = vec![
            Observer::Counter(
                meter
                    .u64_observable_counter("memex.rpc.shed")
                    .with_description("Expensive RPCs refused with RESOURCE_EXHAUSTED at capacity")
                    .with_callback(move |o| o.observe(shed.shed.load(Relaxed), &[]))
                    .build(),
            ),
            Observer::Counter(
                meter
                    .u64_observable_counter("memex.rpc.expired_waiting")
                    .with_description("Expensive RPCs whose deadline passed while they waited for a turn")
                    .with_callback(move |o| o.observe(expired.expired.load(Relaxed), &[]))
                    .build(),
            ),
            Observer::Gauge(
                meter
                    .u64_observable_gauge("memex.admission.requests")
                    .with_description("Expensive RPCs running and waiting for a turn now")
                    .with_callback(move |o| {
                        let (run, wait) = running.load();
                        o.observe(run as u64, &[KeyValue::new("state", "running")]);
                        o.observe(wait as u64, &[KeyValue::new("state", "waiting")]);
                    })
                    .build(),
            ),
            Observer::Counter(
                meter
                    .u64_observable_counter("memex.view_cache.hits")
                    .with_description("Compiled sessions served from cache")
                    .with_callback(move |o| o.observe(hits.hits(), &[]))
                    .build(),
            ),
            Observer::Counter(
                meter
                    .u64_observable_counter("memex.view_cache.misses")
                    .with_description("Sessions compiled on demand")
                    .with_callback(move |o| o.observe(misses.misses(), &[]))
                    .build(),
            ),
        ];
        observers.extend(pool_metrics("requests", pool));
        Metrics {
            events_appended: meter
                .u64_counter("memex.events.appended")
                .with_description("Events committed to the store")
                .build(),
            append_batches: meter
                .u64_counter("memex.append.batches")
                .with_description("Append batches committed (replays excluded)")
                .build(),
            artifact_bytes: meter
                .u64_counter("memex.artifacts.bytes")
                .with_description("Uncompressed bytes of artifactized tool outputs received")
                .with_unit("By")
                .build(),
            pack_budget_use: meter
                .f64_histogram("memex.pack.budget.use")
                .with_description("Share of its token budget a built pack filled (block total, or one block)")
                .with_unit("1")
                .with_boundaries(SHARE_BOUNDS.to_vec())
                .build(),
            _observers: observers,
        }
    }

    /// Records how much of its budgets a built pack used: the whole (context less headroom) and
    /// each block. Cheap: one histogram point per block of a pack.
    pub fn record_pack(&self, pack: &pb::Pack) {
        if let Some(b) = &pack.budgets {
            let usable = b.context.unwrap_or(0).saturating_sub(b.headroom.unwrap_or(0));
            if usable > 0 {
                let share = f64::from(pack.tokens) / f64::from(usable);
                self.pack_budget_use.record(share, &[KeyValue::new("memex.pack.block", "total")]);
            }
        }
        for block in pack.blocks.iter().filter(|b| b.budget > 0) {
            let share = f64::from(block.tokens) / f64::from(block.budget);
            self.pack_budget_use.record(share, &[KeyValue::new("memex.pack.block", block.kind.clone())]);
        }
    }
}

/// `memex.cache.entries{memex.cache}` and, for the caches weighed in bytes,
/// `memex.cache.bytes{memex.cache, state = used|capacity}`.
pub fn cache_metrics(state: Arc<crate::state::AppState>) -> Vec<Observer> {
    let meter = meter();
    let by_bytes = state.clone();
    vec![
        Observer::Gauge(
            meter
                .u64_observable_gauge("memex.cache.entries")
                .with_description("Entries in each in-process cache (moka's estimate)")
                .with_callback(move |o| {
                    for c in crate::caches::sizes(&state) {
                        o.observe(c.entries, &[KeyValue::new("memex.cache", c.name)]);
                    }
                })
                .build(),
        ),
        Observer::Gauge(
            meter
                .u64_observable_gauge("memex.cache.bytes")
                .with_description("Estimated bytes held by each byte-weighed cache, and its capacity")
                .with_unit("By")
                .with_callback(move |o| {
                    for c in
                        crate::caches::sizes(&by_bytes).into_iter().filter(|c| c.unit == memex_store::CacheUnit::Bytes)
                    {
                        o.observe(c.weight, &[KeyValue::new("memex.cache", c.name), KeyValue::new("state", "used")]);
                        o.observe(
                            c.capacity,
                            &[KeyValue::new("memex.cache", c.name), KeyValue::new("state", "capacity")],
                        );
                    }
                })
                .build(),
        ),
    ]
}

/// `db.client.connection.count{state = idle|used}` and `db.client.connection.max` (the OTel
/// database semantic conventions) of one connection pool: saturation is used over max.
pub fn pool_metrics(name: &'static str, pool: &sqlx::PgPool) -> Vec<Observer> {
    let meter = meter();
    let (counted, maxed) = (pool.clone(), pool.clone());
    vec![
        Observer::UpDown(
            meter
                .i64_observable_up_down_counter("db.client.connection.count")
                .with_description("Connections of the pool, by state")
                .with_unit("{connection}")
                .with_callback(move |o| {
                    let (size, idle) = (i64::from(counted.size()), counted.num_idle() as i64);
                    let pool = KeyValue::new("db.client.connection.pool.name", name);
                    o.observe(idle, &[pool.clone(), KeyValue::new("db.client.connection.state", "idle")]);
                    o.observe((size - idle).max(0), &[pool, KeyValue::new("db.client.connection.state", "used")]);
                })
                .build(),
        ),
        Observer::UpDown(
            meter
                .i64_observable_up_down_counter("db.client.connection.max")
                .with_description("Most connections the pool may open")
                .with_unit("{connection}")
                .with_callback(move |o| {
                    let max = i64::from(maxed.options().get_max_connections());
                    o.observe(max, &[KeyValue::new("db.client.connection.pool.name", name)]);
                })
                .build(),
        ),
    ]
}

/// `memex.index.lag`, `memex.index.events` and `memex.index.commits` of this replica's text
/// indexes. (The query-vector cache's `memex.query_vectors{outcome}` is the search runtime's,
/// `search.rs`.)
pub fn index_metrics(index: &memex_search::SearchIndex) -> Vec<Observer> {
    let meter = meter();
    let (lag, indexed, commits) = (index.index_stats(), index.index_stats(), index.index_stats());
    vec![
        Observer::Gauge(
            meter
                .u64_observable_gauge("memex.index.lag")
                .with_description(
                    "Events committed in Postgres but not yet in this replica's text index, at its last catch-up",
                )
                .with_unit("{event}")
                .with_callback(move |o| o.observe(lag.lag_events(), &[]))
                .build(),
        ),
        Observer::Counter(
            meter
                .u64_observable_counter("memex.index.events")
                .with_description("Events taken into this replica's text indexes")
                .with_unit("{event}")
                .with_callback(move |o| o.observe(indexed.indexed_events(), &[]))
                .build(),
        ),
        Observer::Counter(
            meter
                .u64_observable_counter("memex.index.commits")
                .with_description("Commits of this replica's text indexes")
                .with_unit("{commit}")
                .with_callback(move |o| o.observe(commits.commits(), &[]))
                .build(),
        ),
    ]
}

/// `memex.embedding.lag` (events appended but not yet embedded, as each worker last measured)
/// and `memex.embedding.events` (events embedded), per model.
pub fn embedding_metrics(workers: &[memex_search::EmbeddingWorker]) -> Vec<Observer> {
    if workers.is_empty() {
        return Vec::new();
    }
    let meter = meter();
    let probes: Vec<memex_search::WorkerProbe> = workers.iter().map(|w| w.probe()).collect();
    let again = probes.clone();
    let model = |p: &memex_search::WorkerProbe| KeyValue::new("memex.embedding.model", p.model().to_owned());
    vec![
        Observer::Gauge(
            meter
                .u64_observable_gauge("memex.embedding.lag")
                .with_description("Events appended but not yet embedded by the model, as its worker last measured")
                .with_unit("{event}")
                .with_callback(move |o| {
                    for p in &probes {
                        o.observe(p.progress().backlog_events, &[model(p)]);
                    }
                })
                .build(),
        ),
        Observer::Counter(
            meter
                .u64_observable_counter("memex.embedding.events")
                .with_description("Events whose vector this process's workers stored")
                .with_unit("{event}")
                .with_callback(move |o| {
                    for p in &again {
                        o.observe(p.progress().embedded_events, &[model(p)]);
                    }
                })
                .build(),
        ),
    ]
}

/// `memex.memory.lag` (events appended but not yet read by the memory worker, as it last
/// measured) and `memex.memory.events` (events it read).
pub fn memory_metrics(worker: &memex_recall::MemoryWorker) -> Vec<Observer> {
    let meter = meter();
    let probe = worker.probe();
    let again = probe.clone();
    vec![
        Observer::Gauge(
            meter
                .u64_observable_gauge("memex.memory.lag")
                .with_description("Events appended but not yet read by the memory worker, as it last measured")
                .with_unit("{event}")
                .with_callback(move |o| o.observe(probe.progress().backlog_events, &[]))
                .build(),
        ),
        Observer::Counter(
            meter
                .u64_observable_counter("memex.memory.events")
                .with_description("Events this process's memory worker read into turns, segments and facts")
                .with_unit("{event}")
                .with_callback(move |o| o.observe(again.progress().events, &[]))
                .build(),
        ),
    ]
}
