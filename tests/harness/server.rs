//! A real memex server for one test.
use std::net::SocketAddr;
use std::time::Duration;

use memex_proto::v1::admin_service_client::AdminServiceClient;
use memex_proto::v1::context_service_client::ContextServiceClient;
use memex_proto::v1::event_service_client::EventServiceClient;
use memex_proto::v1::memory_service_client::MemoryServiceClient;
use memex_proto::v1::search_service_client::SearchServiceClient;
use memex_proto::v1::session_service_client::SessionServiceClient;
use memex_proto::v1::task_service_client::TaskServiceClient;
use memex_server::Config;
use memex_store::{Access, Namespace, Store, StoreOptions, Tenant};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::db::test_db;

pub struct TestServer {
    pub addr: SocketAddr,
    /// Where MCP over streamable HTTP is served (`start_mcp`), if it is.
    pub mcp_addr: Option<SocketAddr>,
    pub config: Config,
    /// A direct handle on the server's database, for set-up and for checking what was stored:
    /// it sees every namespace (`Tenant::All`) unless a test enters a scope.
    pub store: Store,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), memex_server::ServerError>>>,
}

#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

type Authed = InterceptedService<Channel, Bearer>;

/// gRPC clients of one caller (one token, or none).
#[derive(Clone)]
pub struct Clients {
    pub events: EventServiceClient<Authed>,
    pub sessions: SessionServiceClient<Authed>,
    pub admin: AdminServiceClient<Authed>,
    pub search: SearchServiceClient<Authed>,
    pub context: ContextServiceClient<Authed>,
    pub tasks: TaskServiceClient<Authed>,
    pub memory: MemoryServiceClient<Authed>,
    pub channel: Channel,
}

/// Turns memory on as a test of it wants it: the worker polls often, reads each append at once,
/// closes a session's last turn at once and rebuilds topics without waiting.
pub fn memory_on(config: &mut Config) {
    config.memory.enabled = true;
    config.memory.poll_interval_ms = 20;
    config.memory.settle_ms = 0;
    config.memory.idle_close_secs = 0;
    config.memory.topic_interval_ms = 0;
    // Test servers share a database, and every worker claims sessions of every namespace: a
    // server dropped at the end of its test mid-job leaves its lease, which must not hold another
    // test's session for the default two minutes.
    config.memory.lease_secs = 10;
}

impl TestServer {
    /// A server with authentication on and default limits.
    pub async fn start() -> Option<TestServer> {
        Self::start_with(|_| {}).await
    }

    /// A server whose configuration `tweak` may change first.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Option<TestServer> {
        Self::start_inner(tweak, false).await
    }

    /// A server that also serves MCP over streamable HTTP on a port of its own (`mcp_url`).
    pub async fn start_mcp(tweak: impl FnOnce(&mut Config)) -> Option<TestServer> {
        Self::start_inner(tweak, true).await
    }

    /// A server whose settled reads go to the hot standby (`TEST_STANDBY_URL`; see
    /// `standby_of`): `config.database.read_url` is that standby's copy of the test database.
    pub async fn start_standby(tweak: impl FnOnce(&mut Config)) -> Option<TestServer> {
        let db = test_db().await?;
        let standby = crate::db::standby_of(&db).await?;
        Some(
            Self::start_on(
                db,
                |c| {
                    c.database.read_url = standby;
                    tweak(c)
                },
                false,
            )
            .await,
        )
    }

    async fn start_inner(tweak: impl FnOnce(&mut Config), mcp: bool) -> Option<TestServer> {
        let db = test_db().await?;
        Some(Self::start_on(db, tweak, mcp).await)
    }

    async fn start_on(db: crate::TestDb, tweak: impl FnOnce(&mut Config), mcp: bool) -> TestServer {
        let mut config = Config::default();
        config.database.url = db.url.clone();
        config.database.max_connections = 20;
        config.database.min_connections = 1;
        config.shutdown_grace_secs = 5;
        // Each server gets its own text-index directory, and no embedding model unless a test asks
        // for one (loading and running it would slow every other test down).
        config.search.index_dir =
            std::env::temp_dir().join(format!("memex-test-index-{}", db.name)).display().to_string();
        config.embedding.provider = memex_server::config::EmbeddingProvider::None;
        // Likewise no memory worker unless a test asks (`memory_on`).
        config.memory.enabled = false;
        tweak(&mut config);
        // With a standby, the harness's own store reads settled rows from it too (as the server does).
        let standby_url = Some(config.database.read_url.clone()).filter(|u| !u.is_empty());
        // The test's own view of the database, an operator's: every namespace (`Tenant::All`)
        // outside a scope. The server connects on its own, held to each caller's namespace.
        let opts = StoreOptions { max_connections: 4, standby_url, unscoped: Tenant::All, ..Default::default() };
        let store = Store::connect(&db.url, &opts).await.expect("connect the test store");
        Self::serve_mcp(config, store, |_, _| {}, mcp).await
    }

    /// A second server over the same database, with its own text index and cold caches: what
    /// another replica of a scaled-out deployment would be.
    pub async fn replica(&self) -> TestServer {
        let index_dir = self.config.search.index_dir.clone();
        Self::serve(self.config.clone(), self.store.clone(), |config, port| {
            config.search.index_dir = format!("{index_dir}-replica-{port}");
        })
        .await
    }

    /// A server with `config` over `store`'s database, as a restart of a stopped one would be
    /// (its index directory included).
    pub async fn restart(config: Config, store: Store) -> TestServer {
        Self::serve(config, store, |_, _| {}).await
    }

    /// Runs a server with `config` (which `at_port` may adjust once its port is known) on
    /// 127.0.0.1 and waits until it answers.
    async fn serve(config: Config, store: Store, at_port: impl FnOnce(&mut Config, u16)) -> TestServer {
        Self::serve_mcp(config, store, at_port, false).await
    }

    async fn serve_mcp(
        mut config: Config,
        store: Store,
        at_port: impl FnOnce(&mut Config, u16),
        mcp: bool,
    ) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        at_port(&mut config, addr.port());
        let mcp = match mcp {
            true => Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0 for MCP")),
            false => None,
        };
        let mcp_addr = mcp.as_ref().map(|l| l.local_addr().expect("local addr"));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(memex_server::run_with_mcp(listener, mcp, config.clone(), async {
            let _ = rx.await;
        }));
        let srv = TestServer { addr, mcp_addr, config, store, shutdown: Some(tx), task: Some(task) };
        srv.wait_ready().await;
        srv
    }

    async fn wait_ready(&self) {
        if !self.config.tls.cert_path.is_empty() {
            // A TLS server: its test connects with the test CA and retries until it answers.
            return;
        }
        for _ in 0..250 {
            if let Ok(ch) = Channel::from_shared(self.endpoint()).unwrap().connect().await {
                let mut health = tonic_health::pb::health_client::HealthClient::new(ch);
                if health.check(tonic_health::pb::HealthCheckRequest { service: String::new() }).await.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the test server did not become ready");
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The MCP endpoint (`http://127.0.0.1:<port>/mcp`) of a server started with `start_mcp`.
    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.mcp_addr.expect("a server started with start_mcp"))
    }

    /// Creates a namespace and a key with `access` on it; returns the namespace and the token.
    pub async fn namespace_with_key(&self, name: &str, access: Access) -> (Namespace, String) {
        let ns = match self.store.namespace(name).await {
            Ok(ns) => ns,
            Err(_) => self.store.create_namespace(name).await.expect("create namespace"),
        };
        let key = self.store.create_api_key(&ns, "test", access).await.expect("create key");
        (ns, key.token)
    }

    /// Clients sending `token` (None: no authorization metadata).
    pub async fn clients(&self, token: Option<&str>) -> Clients {
        let channel = Channel::from_shared(self.endpoint()).unwrap().connect().await.expect("connect");
        let bearer = Bearer(token.map(|t| format!("Bearer {t}").parse().expect("ascii token")));
        Clients {
            events: EventServiceClient::with_interceptor(channel.clone(), bearer.clone())
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
            sessions: SessionServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            admin: AdminServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            search: SearchServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            context: ContextServiceClient::with_interceptor(channel.clone(), bearer.clone())
                .max_decoding_message_size(usize::MAX),
            tasks: TaskServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            memory: MemoryServiceClient::with_interceptor(channel.clone(), bearer)
                .max_decoding_message_size(usize::MAX),
            channel,
        }
    }

    /// Asks the server to shut down (returns at once).
    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Shuts down and waits for `run` to return.
    pub async fn stop(mut self) {
        self.trigger_shutdown();
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("server ran cleanly");
        }
    }

    /// Waits for `run` to return after `trigger_shutdown`.
    pub async fn join(mut self) -> Result<(), memex_server::ServerError> {
        match self.task.take() {
            Some(task) => task.await.expect("server task"),
            None => Ok(()),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.trigger_shutdown();
        if self.config.search.index_dir.contains("memex-test-index-") {
            let _ = std::fs::remove_dir_all(&self.config.search.index_dir);
        }
    }
}
