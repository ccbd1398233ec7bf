//! The memex gRPC server. `run` is the whole server: tests bind `127.0.0.1:0` and call it
//! in-process; `memex serve` calls it with the configured address.
//!
//! **Architecture invariant:** this crate wires and translates; it makes no decision about input
//! validity (`memex-event`) or storage (`memex-store`). Domain errors become gRPC statuses in one
//! place, `status.rs`.

pub mod admission;
pub mod allocator;
pub mod auth;
mod background;
mod caches;
pub mod config;
mod context_seams;
mod convert;
mod erasure;
pub mod flags;
mod memory;
pub mod metrics;
mod quotas;
mod retention;
mod rpc;
pub mod search;
mod service;
mod state;
pub mod status;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use memex_proto::v1::admin_service_server::AdminServiceServer;
use memex_proto::v1::context_service_server::ContextServiceServer;
use memex_proto::v1::event_service_server::EventServiceServer;
use memex_proto::v1::memory_service_server::MemoryServiceServer;
use memex_proto::v1::search_service_server::SearchServiceServer;
use memex_proto::v1::session_service_server::SessionServiceServer;
use memex_proto::v1::task_service_server::TaskServiceServer;
use memex_proto::v1::view_service_server::ViewServiceServer;
use memex_store::tenant::{self, Tenant};
use memex_store::{Store, StoreOptions};
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

pub use config::Config;

use crate::state::AppState;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot use the database: {0}")]
    Store(#[from] memex_store::StoreError),
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("embedding model: {0}")]
    Embed(#[from] memex_embed::EmbedError),
    #[error("search index: {0}")]
    Index(#[from] memex_search::IndexError),
    #[error("background work: {0}")]
    Background(String),
    #[error("background runtime: {0}")]
    Io(#[from] std::io::Error),
    #[error("TLS: cannot read {path}: {source}")]
    TlsFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen for MCP on {addr}: {source}")]
    McpListen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The server's TLS settings from `config.tls` (None: plain TCP).
fn tls(config: &Config) -> Result<Option<tonic::transport::ServerTlsConfig>, ServerError> {
    let t = &config.tls;
    if t.cert_path.is_empty() {
        return Ok(None);
    }
    let read =
        |path: &str| std::fs::read(path).map_err(|source| ServerError::TlsFile { path: path.to_owned(), source });
    let identity = tonic::transport::Identity::from_pem(read(&t.cert_path)?, read(&t.key_path)?);
    let mut tls = tonic::transport::ServerTlsConfig::new().identity(identity);
    if !t.client_ca_path.is_empty() {
        tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(read(&t.client_ca_path)?));
    }
    Ok(Some(tls))
}

/// A server builder, speaking TLS when `config.tls` says so.
fn server_builder(config: &Config) -> Result<Server, ServerError> {
    let builder = Server::builder();
    Ok(match tls(config)? {
        Some(tls) => builder.tls_config(tls)?,
        None => builder,
    })
}

/// Connects the store described by `config.database`. Work outside any tenant scope finds no
/// rows through it (row-level security, ADR 008): each entry point enters its tenant.
pub async fn connect_store(config: &Config) -> Result<Store, memex_store::StoreError> {
    connect_store_as(config, Tenant::Deny).await
}

/// As `connect_store`, with `unscoped` the tenant of work outside any scope: `Tenant::All` only
/// for a tool that is the operator's own view of the database (the benchmarks' set-up and
/// direct appends).
pub async fn connect_store_as(config: &Config, unscoped: Tenant) -> Result<Store, memex_store::StoreError> {
    let opts = StoreOptions {
        max_connections: config.database.max_connections,
        min_connections: config.database.min_connections,
        acquire_timeout: Duration::from_secs(config.database.acquire_timeout_secs),
        group_commit: config.ingest.group_commit.then_some(memex_store::GroupCommitOptions {
            shards: config.ingest.group_commit_shards,
            max_group_events: config.ingest.group_commit_max_events,
            max_request_events: config.ingest.group_commit_max_request_events,
            queue: config.ingest.group_commit_queue,
        }),
        standby_url: standby_url(config),
        unscoped,
    };
    Store::connect(&config.database.url, &opts).await
}

/// The gRPC health entry a liveness probe asks for: SERVING from the moment the process serves
/// until it exits, ready or not. The overall entry (`""`) is readiness: SERVING only once the
/// schema is migrated and the text index has caught up, NOT_SERVING again once shutdown starts.
pub const LIVENESS: &str = "liveness";

/// How often a replica that does not migrate (`database.migrate_on_start = false`) looks again
/// for the migrations someone else (a migration Job) is to apply.
const SCHEMA_POLL: Duration = Duration::from_secs(1);

/// Waits until the database holds every migration this binary knows (without applying any).
async fn wait_for_schema(store: &Store) -> Result<(), ServerError> {
    let mut logged = false;
    loop {
        let pending = store.pending_migrations().await?;
        if pending.is_empty() {
            return Ok(());
        }
        if !logged {
            tracing::warn!(
                ?pending,
                "database.migrate_on_start is off and migrations are pending: waiting for them (run `memex migrate`)"
            );
            logged = true;
        }
        tokio::time::sleep(SCHEMA_POLL).await;
    }
}

/// The hot standby for settled reads, if one is configured (`[database] read_url`).
pub(crate) fn standby_url(config: &Config) -> Option<String> {
    Some(config.database.read_url.clone()).filter(|u| !u.is_empty())
}

/// Logs, loudly, when row-level security does not hold the server's connections: a superuser or
/// BYPASSRLS role skips every policy, leaving the queries' own namespace filters the only wall.
async fn warn_if_tenancy_wall_down(store: &Store) {
    match store.tenancy_wall_down().await {
        Ok(None) => tracing::info!("row-level security holds every connection to its caller's namespace"),
        Ok(Some(why)) => tracing::warn!(
            "ROW-LEVEL SECURITY IS BYPASSED: {why}, so Postgres does not keep tenants apart; only memex's own queries do. Connect as a role without SUPERUSER and BYPASSRLS (docs/adr/008-row-level-security.md)."
        ),
        Err(e) => tracing::warn!(error = %e, "cannot tell whether row-level security holds this role"),
    }
}

/// A `worker`-role process: the embedding worker, and gRPC health for the orchestrator's probes
/// (NOT_SERVING once shutdown starts). It serves no memex RPC.
async fn run_worker(
    listener: TcpListener,
    config: Config,
    store: Store,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let background = background::Background::start()?;
    let embeds = config.embedding.provider != config::EmbeddingProvider::None && config.embedding.worker;
    let workers = if embeds { search::start_worker(&config, &background).await? } else { Vec::new() };
    let memory_worker = memory::start_worker(&config, &background, None).await?;
    let _observers: Vec<metrics::Observer> = metrics::embedding_metrics(&workers)
        .into_iter()
        .chain(memory_worker.iter().flat_map(metrics::memory_metrics))
        .collect();
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
    health_reporter.set_service_status(LIVENESS, tonic_health::ServingStatus::Serving).await;
    let signal = async move {
        shutdown.await;
        tracing::info!("shutdown requested: stopping the embedding and memory workers");
        health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
    };
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tracing::info!(role = "worker", "memex worker running");
    server_builder(&config)?.add_service(health).serve_with_incoming_shutdown(incoming, signal).await?;
    let cleanup = async {
        for w in workers {
            w.stop().await;
        }
        if let Some(m) = memory_worker {
            m.stop().await;
        }
        store.close().await;
    };
    if tokio::time::timeout(CLEANUP, cleanup).await.is_err() {
        tracing::warn!(
            secs = CLEANUP.as_secs(),
            "the background workers did not stop in time: abandoned (their leases expire)"
        );
    }
    tracing::info!("memex worker stopped");
    Ok(())
}

/// How the MCP HTTP front reaches this server: over loopback to the gRPC port.
fn mcp_options(config: &Config, grpc: std::net::SocketAddr) -> memex_mcp::http::HttpOptions {
    let mut target = grpc;
    if target.ip().is_unspecified() {
        target.set_ip(match target {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    memex_mcp::http::HttpOptions {
        endpoint: format!("http://{target}"),
        namespace: config.mcp.namespace.clone(),
        auth: config.auth.enabled,
        key_ttl: Duration::from_secs(config.auth.key_cache_ttl_secs),
        allowed_hosts: config.mcp.allowed_hosts.clone(),
    }
}

/// After the RPCs, how long the background work (index loop, embedding worker, the pool) gets to
/// stop (a pod's termination grace must cover it: deploy/ is checked against it).
pub const CLEANUP: Duration = Duration::from_secs(3);

/// Serves memex on `listener` until `shutdown` completes, then drains in-flight RPCs for up to
/// `config.shutdown_grace_secs` before returning. With `mcp.http` on, MCP over streamable HTTP is
/// served on `mcp.http_addr` too, and stops with it.
pub async fn run(listener: TcpListener, config: Config, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
    let mcp = match config.mcp.http && config.role != config::Role::Worker {
        true => Some(
            TcpListener::bind(config.mcp.http_addr)
                .await
                .map_err(|source| ServerError::McpListen { addr: config.mcp.http_addr, source })?,
        ),
        false => None,
    };
    run_with_mcp(listener, mcp, config, shutdown).await
}

/// As `run`, with MCP over HTTP served on `mcp` whatever `mcp.http` says (tests bind
/// `127.0.0.1:0`), or not at all when it is `None`.
pub async fn run_with_mcp(
    listener: TcpListener,
    mcp: Option<TcpListener>,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let addr = listener.local_addr().ok();
    tracing::info!(config = %config.redacted(), "starting memex");
    if !config.auth.enabled {
        for _ in 0..3 {
            tracing::warn!(
                "AUTHENTICATION IS DISABLED (auth.enabled = false): every namespace is open to anyone who can reach this port. Use only for local development."
            );
        }
    }
    let store = connect_store(&config).await?;
    warn_if_tenancy_wall_down(&store).await;
    let mut shutdown = Box::pin(shutdown);
    if config.database.migrate_on_start {
        store.migrate().await?;
        tracing::info!("database migrations applied");
    } else {
        tokio::select! {
            waited = wait_for_schema(&store) => waited?,
            _ = &mut shutdown => {
                tracing::info!("shutdown requested while waiting for migrations");
                return Ok(());
            }
        }
    }
    if config.role == config::Role::Worker {
        return run_worker(listener, config, store, shutdown).await;
    }
    let mut state = AppState::new(store.clone(), &config);
    // The index and the context engine see full views through the compiled sessions.
    let full_view: Arc<dyn memex_pointer::FullView> = Arc::new(state.views.clone());
    let foreground: Arc<dyn memex_search::Foreground> = state.admission.clone();
    let search = search::SearchRuntime::start(&config, store.clone(), full_view.clone(), Some(foreground)).await?;
    state.search = search.as_ref().map(|s| s.index.clone());
    let _observers: Vec<metrics::Observer> = search
        .as_ref()
        .map(|s| metrics::index_metrics(&s.index).into_iter().chain(metrics::embedding_metrics(s.workers())).collect())
        .unwrap_or_default();
    // When search is on, packs draw candidates from the index, and compaction checks it first.
    let mut context = state.context.clone().with_full_view(full_view.clone());
    if let Some(index) = &state.search {
        context = context
            .with_source(Arc::new(context_seams::IndexSource(index.clone())))
            .with_index_catch_up(Arc::new(context_seams::IndexCatchUpSeam(index.clone())));
    }
    state.context = context;
    state.memory = memory::reader(&config, store.clone(), full_view.clone(), state.search.clone())?;
    if let Some(m) = &state.memory {
        state.context = state.context.clone().with_memory(Arc::new(memory::PackMemory(m.clone())));
    }
    state.snapshots = Some(memory::snapshots(&config, store.clone(), full_view.clone(), state.memory.as_ref()));
    // The memory worker runs beside the RPCs (role all) on idle-priority threads of its own.
    let memory_background = match config.role.embeds() && config.memory.enabled {
        true => Some(background::Background::start()?),
        false => None,
    };
    let memory_worker = match &memory_background {
        Some(b) => {
            let foreground: Arc<dyn memex_recall::Foreground> = state.admission.clone();
            memory::start_worker(&config, b, Some(foreground)).await?
        }
        None => None,
    };
    let _memory_observers: Vec<metrics::Observer> = memory_worker.iter().flat_map(metrics::memory_metrics).collect();
    let state = Arc::new(state);
    let eraser = erasure::Eraser::new(state.clone());
    // The background tasks below work for every namespace (the erasure log, the retention
    // policies, notifications): each enters `Tenant::All` where it starts. The quota flusher
    // narrows itself to each namespace it records.
    let erasure_listener = tokio::spawn(tenant::scope(Tenant::All, eraser.clone().run()));
    let _cache_observers = metrics::cache_metrics(state.clone());
    let cache_log = tokio::spawn(caches::log(state.clone(), Duration::from_secs(60)));
    let quota_flusher = {
        let quotas = state.quotas.clone();
        tokio::spawn(async move { quotas.run().await })
    };
    let retention_job = (config.role != config::Role::Api && config.retention.interval_secs > 0).then(|| {
        let every = std::time::Duration::from_secs(config.retention.interval_secs);
        tokio::spawn(tenant::scope(Tenant::All, retention::run(state.clone(), eraser.clone(), every)))
    });
    // tonic refuses messages beyond this outright (OUT_OF_RANGE); up to it, handlers refuse
    // messages over the configured limit with INVALID_ARGUMENT naming the limit.
    let hard_limit = config.limits.max_message_bytes.saturating_mul(2);

    let (health_reporter, health) = tonic_health::server::health_reporter();
    // Readiness: not before the index has caught up (a fresh replica rebuilds it from Postgres).
    health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
    health_reporter.set_service_status(LIVENESS, tonic_health::ServingStatus::Serving).await;
    let caught_up = search.as_ref().map(|s| s.caught_up());
    let ready_reporter = health_reporter.clone();
    let readiness = tokio::spawn(async move {
        if let Some(caught_up) = caught_up {
            caught_up.await;
        }
        ready_reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
    })
    .abort_handle();
    health_reporter.set_serving::<EventServiceServer<service::events::Events>>().await;
    health_reporter.set_serving::<SessionServiceServer<service::sessions::Sessions>>().await;
    health_reporter.set_serving::<AdminServiceServer<service::admin::Admin>>().await;
    health_reporter.set_serving::<ViewServiceServer<service::views::ViewHandler>>().await;
    health_reporter.set_serving::<SearchServiceServer<service::search::Search>>().await;
    health_reporter.set_serving::<ContextServiceServer<service::context::Context>>().await;
    health_reporter.set_serving::<TaskServiceServer<service::context::tasks::Tasks>>().await;
    health_reporter.set_serving::<MemoryServiceServer<service::memory::MemoryHandler>>().await;
    let listener_engine = state.context.clone();
    let reports_listener =
        tokio::spawn(tenant::scope(Tenant::All, async move { listener_engine.listen_for_reports().await }));
    let auth = state.auth.clone();
    let keys_listener = tokio::spawn(tenant::scope(Tenant::All, async move {
        if auth.enabled() {
            auth.listen_for_revocations().await;
        }
    }));
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(memex_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(memex_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    // One server span per RPC and its duration (rpc.rs); the span replaces tonic's trace_fn.
    let mut builder = server_builder(&config)?.layer(rpc::RpcLayer::new());
    if config.limits.default_timeout_secs > 0 {
        builder = builder.timeout(Duration::from_secs(config.limits.default_timeout_secs));
    }
    let router = builder
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            EventServiceServer::new(service::events::Events::new(state.clone()))
                .max_decoding_message_size(hard_limit)
                .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            SessionServiceServer::new(service::sessions::Sessions::new(state.clone()))
                .max_decoding_message_size(hard_limit),
        )
        .add_service(
            AdminServiceServer::new(service::admin::Admin::new(state.clone(), eraser.clone()))
                .max_decoding_message_size(hard_limit),
        )
        .add_service(
            ViewServiceServer::new(service::views::ViewHandler::new(state.clone()))
                .max_decoding_message_size(hard_limit)
                .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            SearchServiceServer::new(service::search::Search::new(state.clone())).max_decoding_message_size(hard_limit),
        )
        .add_service(
            ContextServiceServer::new(service::context::Context::new(state.clone()))
                .max_decoding_message_size(hard_limit)
                .max_encoding_message_size(usize::MAX),
        )
        .add_service(
            TaskServiceServer::new(service::context::tasks::Tasks::new(state.clone()))
                .max_decoding_message_size(hard_limit),
        )
        .add_service(
            MemoryServiceServer::new(service::memory::MemoryHandler::new(state.clone()))
                .max_decoding_message_size(hard_limit)
                .max_encoding_message_size(usize::MAX),
        );

    let grace = config.shutdown_grace();
    let (mcp_stop, mcp_task) = match (mcp, addr) {
        (Some(l), Some(grpc)) => {
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let served = memex_mcp::http::serve(l, mcp_options(&config, grpc), async move {
                let _ = stopped.await;
            });
            (Some(stop), Some(tokio::spawn(served)))
        }
        _ => (None, None),
    };
    let (fired_tx, fired_rx) = tokio::sync::oneshot::channel::<()>();
    let not_ready = readiness.clone();
    let signal = async move {
        shutdown.await;
        // MCP takes no new requests either; the ones in flight finish through the gRPC drain.
        if let Some(stop) = mcp_stop {
            let _ = stop.send(());
        }
        tracing::info!(grace_secs = grace.as_secs(), "shutdown requested: no new RPCs; draining in-flight ones");
        not_ready.abort();
        health_reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
        health_reporter.set_not_serving::<EventServiceServer<service::events::Events>>().await;
        let _ = fired_tx.send(());
    };
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tracing::info!(address = ?addr, auth = config.auth.enabled, tls = !config.tls.cert_path.is_empty(), "memex listening");
    let server = router.serve_with_incoming_shutdown(incoming, signal);
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => result?,
        _ = async { if fired_rx.await.is_ok() { tokio::time::sleep(grace).await } else { std::future::pending().await } } => {
            tracing::warn!(grace_secs = grace.as_secs(), "grace period over: cutting off the RPCs still running");
        }
    }
    // What still runs now is abandoned, not waited for: an inference in hand or a cut-off request
    // holding a connection must not keep the process alive past its grace (the embedding worker's
    // lease expires and another worker resumes its sessions).
    reports_listener.abort();
    keys_listener.abort();
    erasure_listener.abort();
    quota_flusher.abort();
    cache_log.abort();
    // What this replica appended since its last flush goes on the record (best effort).
    let _ = tokio::time::timeout(Duration::from_secs(1), state.quotas.flush()).await;
    if let Some(job) = retention_job {
        job.abort();
    }
    readiness.abort();
    if let Some(task) = mcp_task {
        let abort = task.abort_handle();
        match tokio::time::timeout(CLEANUP, task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::error!(error = %e, "MCP over HTTP stopped with an error"),
            Ok(Err(e)) => tracing::error!(error = %e, "MCP over HTTP panicked"),
            Err(_) => {
                tracing::warn!("MCP requests still running after the gRPC drain: cut off");
                abort.abort();
            }
        }
    }
    let cleanup = async {
        if let Some(search) = search {
            search.stop().await;
        }
        if let Some(m) = memory_worker {
            m.stop().await;
        }
        drop(memory_background);
        store.close().await;
    };
    if tokio::time::timeout(CLEANUP, cleanup).await.is_err() {
        tracing::warn!(secs = CLEANUP.as_secs(), "background work did not stop in time: abandoned");
    }
    tracing::info!("memex stopped");
    Ok(())
}
