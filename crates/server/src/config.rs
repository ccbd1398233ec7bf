//! Typed configuration: defaults < `memex.toml` < `MEMEX_*` environment (`__` between nested keys,
//! e.g. `MEMEX_DATABASE__URL`) < command-line flags. Printed at start-up with secrets redacted.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use memex_context::ContextConfig;
use memex_recall::MemoryConfig;
use memex_search::SearchConfig;
use memex_views::ViewsConfig;
use serde::{Deserialize, Serialize};

/// The whole server configuration. Every field has a documented default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address `memex serve` listens on.
    pub listen: SocketAddr,
    /// What this process does: `all` (one machine), `api` (serves RPCs; no embedding worker) or
    /// `worker` (runs the embedding worker and serves only gRPC health). API and worker
    /// processes scale apart; workers share the work through leases in Postgres.
    pub role: Role,
    pub database: DatabaseConfig,
    pub auth: AuthConfig,
    pub limits: LimitsConfig,
    pub ingest: IngestConfig,
    pub views: ViewsConfig,
    pub search: SearchConfig,
    pub embedding: EmbeddingConfig,
    pub context: ContextConfig,
    /// Memory (Virtual Context): the worker that derives topics, segments and facts, its
    /// interpreter, and the reader tools' defaults. Owned by `memex-recall`.
    pub memory: MemoryConfig,
    pub mcp: McpConfig,
    /// The background job that applies namespaces' retention policies (`memex admin retention`).
    pub retention: RetentionConfig,
    /// gRPC over TLS (rustls): off unless a certificate and key are given.
    pub tls: TlsConfig,
    /// After a shutdown signal, in-flight RPCs get this long to finish before they are cut off.
    pub shutdown_grace_secs: u64,
    pub log: LogConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `postgres://user:password@host:port/db`. The default is the local database `make run` sets up.
    pub url: String,
    /// A hot standby (streaming replica) of `url`'s database, for reads whose rows never change
    /// once written: events, artifacts, stored packs, manifests, task-state versions. A row the
    /// standby has not replayed yet is read on the primary, so answers never lag; what is newest
    /// (session heads, the current task state, windows, keys) and every write stay on the primary.
    /// Empty: the primary serves every read. Its pool has `max_connections` of its own.
    pub read_url: String,
    pub max_connections: u32,
    pub min_connections: u32,
    pub acquire_timeout_secs: u64,
    /// Apply pending migrations when the server starts.
    pub migrate_on_start: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Require an API key on every memex RPC. Turn off only for local development; the server
    /// then logs a warning at start-up and serves every namespace to anyone.
    pub enabled: bool,
    /// How long a verified (or rejected) key is remembered; a revoked key stops working within this.
    pub key_cache_ttl_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest accepted request message, in bytes.
    pub max_message_bytes: usize,
    /// Most events in one AppendEvents batch or one StreamEvents message.
    pub max_batch_events: usize,
    /// Longest identifier (agent id, task id, tool name, tool-call id, idempotency key), in bytes.
    pub max_id_bytes: usize,
    /// Deadline applied to RPCs whose client sets none, in seconds (0: none).
    pub default_timeout_secs: u64,
    /// Largest trace ImportTrace accepts, in bytes.
    pub max_import_bytes: usize,
    /// Expensive RPCs (BuildPack, BuildSnapshot, Search, CompileView, ImportTrace) running at once
    /// (0: four per CPU core, see `in_flight`), and waiting for a turn; beyond both,
    /// RESOURCE_EXHAUSTED at once with a retry hint.
    pub max_in_flight: usize,
    pub max_waiting: usize,
    /// Longest an expensive RPC waits for a turn, in milliseconds; a request that would wait
    /// longer is refused on arrival (RESOURCE_EXHAUSTED + retry hint). 0: no bound in time.
    pub max_queue_wait_ms: u64,
    /// Events a namespace may append per second on each replica, for namespaces with no quota of
    /// their own (`memex admin quota`); 0: no limit.
    pub namespace_events_per_sec: u32,
    /// Bytes a namespace may store (event contents and artifacts), for namespaces with no quota
    /// of their own; 0: no limit.
    pub namespace_stored_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Tool results and errors longer than this are stored as artifacts.
    pub artifact_threshold_bytes: usize,
    /// Size of the inline head…tail excerpt kept for an artifactized output.
    pub excerpt_bytes: usize,
    /// Share of the excerpt taken from the head, in percent.
    pub excerpt_head_percent: u8,
    /// Write concurrent small appends together: one statement and one WAL flush for many
    /// callers, each still all-or-nothing. Off: every append is its own transaction.
    pub group_commit: bool,
    /// Committer tasks (sessions are spread over them).
    pub group_commit_shards: usize,
    /// Appends of more events than this bypass the group committer.
    pub group_commit_max_request_events: usize,
    /// Most events in one shared statement.
    pub group_commit_max_events: usize,
    /// Appends waiting per committer task; past it an append is refused at once with
    /// RESOURCE_EXHAUSTED and a retry hint (memory stays bounded under a write storm).
    pub group_commit_queue: usize,
}

/// Embeddings: which model, and the background worker that computes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// `minilm` (all-MiniLM-L6-v2 run locally; fetched by `scripts/fetch-model.sh`), `openai` (an
    /// OpenAI-compatible `/v1/embeddings` server) or `none` (BM25 only).
    pub provider: EmbeddingProvider,
    /// The MiniLM model directory.
    pub model_dir: String,
    /// The model name vectors are tagged with (and, for `openai`, sent as `model`). Empty: the
    /// provider's default (`all-MiniLM-L6-v2`). Changing it re-embeds every event.
    pub model: String,
    /// For `openai`: base URL (`http://host:port/v1`), vector dimension, key and timeout.
    pub base_url: String,
    pub dim: usize,
    pub api_key: String,
    pub timeout_secs: u64,
    /// Run the background embedding worker on this replica.
    pub worker: bool,
    /// Texts per embedding call, and jobs queued between the reader and the model.
    pub batch_size: usize,
    pub queue_capacity: usize,
    /// With `minilm`: a static table distilled from the model (once, about half a minute, written
    /// to `static_dir`) embeds every event at once and every pack's query, so packs rank by meaning
    /// at a fleet's rate; MiniLM's vectors follow in the background and rank searches that can
    /// wait for the model.
    pub static_tier: bool,
    /// Where the static table is kept (empty: `<model_dir>-static`).
    pub static_dir: String,
    /// Most of one core the model's background worker may take (0..=1): on a backlog it would
    /// otherwise take a core for hours. The fast tier's worker is cheap and not bounded.
    pub worker_share: f64,
    /// A session's next embedding job waits this long after its last one ended (milliseconds),
    /// unless a full job's events wait: a live session is embedded a second of appends at a time,
    /// not once per append. 0: as soon as an event arrives.
    pub settle_ms: u64,
    /// An idle embedding worker reads every session to find work only after news of an append
    /// (from any replica), for a while after news or work, and at least this often
    /// (milliseconds).
    pub idle_rescan_ms: u64,
}

/// MCP over streamable HTTP (`POST http://<http_addr>/mcp`), served beside gRPC by `memex serve`.
/// Off by default: a second port is opened only when asked for (`memex serve --mcp-http-addr`,
/// or `http = true`). It is a gRPC client of this server over loopback, forwarding each request's
/// `Authorization: Bearer`, so `auth` applies to it exactly as to gRPC. Local agents can use
/// TLS for the gRPC port (and the worker role's health port). PEM files, read at start-up.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The server's certificate chain; with `key_path`, the port speaks only TLS.
    pub cert_path: String,
    pub key_path: String,
    /// Optional: accept only clients with a certificate this CA signed (mutual TLS).
    pub client_ca_path: String,
}

/// Retention: how often the job runs (on `all` and `worker` processes). The policies themselves
/// are per namespace, in the database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Seconds between runs; 0 turns the job off.
    pub interval_secs: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig { interval_secs: 3600 }
    }
}

/// `memex mcp` (stdio) instead and need no port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Serve MCP over HTTP.
    pub http: bool,
    /// Where: loopback by default; to let other machines in, bind their interface and list the
    /// host name they use in `allowed_hosts`.
    pub http_addr: SocketAddr,
    /// The namespace of requests that send no `X-Memex-Namespace` header.
    pub namespace: String,
    /// `Host` header values accepted, against DNS rebinding (`*`: any).
    pub allowed_hosts: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    All,
    Api,
    Worker,
}

impl Role {
    /// Whether this process runs the background embedding worker (when one is configured).
    pub fn embeds(self) -> bool {
        matches!(self, Role::All | Role::Worker)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingProvider {
    Minilm,
    Openai,
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `memex=debug,sqlx=warn`. `RUST_LOG` overrides it.
    pub filter: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

pub const DEFAULT_DATABASE_URL: &str = "postgres://memex:memex@127.0.0.1:5432/memex";

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            role: Role::All,
            database: DatabaseConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            ingest: IngestConfig::default(),
            views: ViewsConfig::default(),
            search: SearchConfig::default(),
            embedding: EmbeddingConfig::default(),
            context: ContextConfig::default(),
            memory: MemoryConfig::default(),
            mcp: McpConfig::default(),
            retention: RetentionConfig::default(),
            tls: TlsConfig::default(),
            shutdown_grace_secs: 30,
            log: LogConfig::default(),
        }
    }
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: DEFAULT_DATABASE_URL.to_owned(),
            read_url: String::new(),
            max_connections: 32,
            min_connections: 2,
            acquire_timeout_secs: 10,
            migrate_on_start: true,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig { enabled: true, key_cache_ttl_secs: 30 }
    }
}

impl LimitsConfig {
    /// Turns for the expensive RPCs: `max_in_flight`, or four per core when it is 0. Their work
    /// is mostly CPU on the runtime's threads (one per core), so more at once only lengthens
    /// each one: in `memex-bench soak` at 800 packs/s on 2 cores, 32 turns gave admitted packs
    /// p50 208 ms and 8 gave 126 ms, at the same throughput.
    pub fn in_flight(&self) -> usize {
        match self.max_in_flight {
            0 => 4 * std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get),
            n => n,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_message_bytes: 64 * 1024 * 1024,
            max_batch_events: 10_000,
            max_id_bytes: 256,
            default_timeout_secs: 0,
            max_import_bytes: 256 * 1024 * 1024,
            max_in_flight: 0,
            max_waiting: 64,
            max_queue_wait_ms: 50,
            namespace_events_per_sec: 0,
            namespace_stored_bytes: 0,
        }
    }
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            artifact_threshold_bytes: 8 * 1024,
            excerpt_bytes: 8 * 1024,
            excerpt_head_percent: 60,
            group_commit: true,
            group_commit_shards: 4,
            group_commit_max_request_events: 64,
            group_commit_max_events: 2048,
            group_commit_queue: 4096,
        }
    }
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig {
            provider: EmbeddingProvider::Minilm,
            model_dir: "models/all-MiniLM-L6-v2".to_owned(),
            model: String::new(),
            base_url: String::new(),
            dim: 0,
            api_key: String::new(),
            timeout_secs: 30,
            worker: true,
            batch_size: 16,
            queue_capacity: 4,
            static_tier: true,
            static_dir: String::new(),
            worker_share: 0.5,
            settle_ms: 1_000,
            idle_rescan_ms: 10_000,
        }
    }
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            http: false,
            http_addr: SocketAddr::from(([127, 0, 0, 1], 50052)),
            namespace: "default".to_owned(),
            allowed_hosts: vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()],
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { format: LogFormat::Text, filter: "info,sqlx=warn".to_owned() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("configuration: {0}")]
    Figment(#[from] Box<figment::Error>),
    #[error("configuration file {} does not exist", .0.display())]
    NoFile(PathBuf),
}

/// The top-level keys `MEMEX_*` variables may set; other `MEMEX_*` variables (such as the client's
/// `MEMEX_API_KEY`) are not configuration and are ignored here.
const SECTIONS: [&str; 16] = [
    "retention",
    "tls",
    "memory",
    "listen",
    "role",
    "database",
    "auth",
    "limits",
    "ingest",
    "views",
    "search",
    "embedding",
    "context",
    "mcp",
    "shutdown_grace_secs",
    "log",
];

impl Config {
    /// Loads the layered configuration from the file the user named, which must exist, or else
    /// `./memex.toml` if there is one. Every binary reads its configuration through here (see
    /// `flags::ConfigArgs`), so they agree on which file counts.
    pub fn load_from(named: Option<&Path>, overrides: impl Serialize) -> Result<Config, ConfigError> {
        let file = match named {
            Some(path) if !path.exists() => return Err(ConfigError::NoFile(path.to_owned())),
            Some(path) => Some(path.to_owned()),
            None => Some(PathBuf::from("memex.toml")).filter(|p| p.exists()),
        };
        Config::load(file.as_deref(), overrides)
    }

    /// Loads the layered configuration. `file` is read if it exists (a missing default file is
    /// fine; a missing file the user named is an error, checked by `load_from`). `overrides` are
    /// the command-line flags, as a partial config.
    pub fn load(file: Option<&Path>, overrides: impl Serialize) -> Result<Config, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            fig = fig.merge(Toml::file_exact(file));
        }
        fig = fig
            .merge(Env::prefixed("MEMEX_").split("__").filter(|k| {
                // The filter may see the key before `split` maps `__` to `.`, and in either case.
                let top = k.as_str().split("__").next().unwrap_or_default();
                let top = top.split('.').next().unwrap_or_default();
                SECTIONS.iter().any(|s| s.eq_ignore_ascii_case(top))
            }))
            .merge(Serialized::defaults(overrides));
        let config: Config = fig.extract().map_err(Box::new)?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if self.database.url.parse::<url::Url>().is_err() {
            return bad("database.url is not a URL");
        }
        if !self.database.read_url.is_empty() && self.database.read_url.parse::<url::Url>().is_err() {
            return bad("database.read_url is not a URL");
        }
        if self.tls.cert_path.is_empty() != self.tls.key_path.is_empty() {
            return bad("tls.cert_path and tls.key_path go together: set both to serve TLS, or neither");
        }
        if !self.tls.client_ca_path.is_empty() && self.tls.cert_path.is_empty() {
            return bad("tls.client_ca_path needs tls.cert_path and tls.key_path");
        }
        if self.database.max_connections == 0 || self.database.min_connections > self.database.max_connections {
            return bad("database.max_connections must be > 0 and >= database.min_connections");
        }
        if self.limits.max_message_bytes < 1024 {
            return bad("limits.max_message_bytes must be at least 1024");
        }
        if self.limits.max_batch_events == 0 {
            return bad("limits.max_batch_events must be > 0");
        }
        if self.ingest.excerpt_head_percent > 100 {
            return bad("ingest.excerpt_head_percent must be 0..=100");
        }
        if self.ingest.excerpt_bytes > self.ingest.artifact_threshold_bytes {
            return bad("ingest.excerpt_bytes must not exceed ingest.artifact_threshold_bytes");
        }
        self.search.check().map_err(ConfigError::Invalid)?;
        let e = &self.embedding;
        if e.provider == EmbeddingProvider::Openai && (e.base_url.is_empty() || e.dim == 0 || e.model.is_empty()) {
            return bad("embedding.provider = \"openai\" needs embedding.base_url, embedding.model and embedding.dim");
        }
        let embeds = e.provider != EmbeddingProvider::None && e.worker;
        if self.role == Role::Worker && !embeds && !self.memory.enabled {
            return bad(
                "role = \"worker\" runs the embedding and memory workers: it needs embedding.provider with embedding.worker = true, or memory.enabled = true",
            );
        }
        if !(e.worker_share > 0.0 && e.worker_share <= 1.0) {
            return bad("embedding.worker_share must be within (0, 1]");
        }
        if e.batch_size == 0 || e.queue_capacity == 0 {
            return bad("embedding.batch_size and embedding.queue_capacity must be > 0");
        }
        self.context.check().map_err(ConfigError::Invalid)?;
        self.memory.check().map_err(ConfigError::Invalid)?;
        if self.mcp.http && self.mcp.http_addr == self.listen {
            return bad("mcp.http_addr must differ from listen");
        }
        if self.mcp.namespace.is_empty() {
            return bad("mcp.namespace must not be empty");
        }
        Ok(())
    }

    /// The configuration as TOML with the database password replaced by `***`, for logs.
    pub fn redacted(&self) -> String {
        let mut copy = self.clone();
        copy.database.url = redact_url(&copy.database.url);
        if !copy.database.read_url.is_empty() {
            copy.database.read_url = redact_url(&copy.database.read_url);
        }
        if !copy.embedding.api_key.is_empty() {
            copy.embedding.api_key = "***".to_owned();
        }
        if !copy.memory.openai.api_key.is_empty() {
            copy.memory.openai.api_key = "***".to_owned();
        }
        toml::to_string(&copy).unwrap_or_else(|e| format!("<unprintable config: {e}>"))
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparseable url>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_auth_is_on() {
        let c = Config::default();
        c.validate().expect("defaults validate");
        assert!(c.auth.enabled);
        assert_eq!(c.listen.to_string(), "127.0.0.1:50051");
    }

    #[test]
    fn turns_default_to_four_per_core() {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        let mut l = LimitsConfig::default();
        assert_eq!((l.max_in_flight, l.in_flight()), (0, 4 * cores));
        l.max_in_flight = 3;
        assert_eq!(l.in_flight(), 3);
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = std::env::temp_dir().join(format!("memex-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let file = dir.join("memex.toml");
        std::fs::write(
            &file,
            "shutdown_grace_secs = 5\n[limits]\nmax_batch_events = 7\n[auth]\nkey_cache_ttl_secs = 9\n",
        )
        .expect("write");
        #[derive(Serialize)]
        struct Flags {
            limits: serde_json::Value,
        }
        // Flags beat the file; the file beats defaults.
        let c = Config::load(Some(&file), Flags { limits: serde_json::json!({"max_batch_events": 11}) }).expect("load");
        assert_eq!(c.limits.max_batch_events, 11);
        assert_eq!(c.shutdown_grace_secs, 5);
        assert_eq!(c.auth.key_cache_ttl_secs, 9);
        assert_eq!(c.limits.max_message_bytes, LimitsConfig::default().max_message_bytes);
        std::fs::write(&file, "[limits]\nmax_batch_evnts = 7\n").expect("write");
        let err = Config::load(Some(&file), serde_json::json!({})).expect_err("typo is an error");
        assert!(err.to_string().contains("max_batch_evnts"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The sections owned by other crates keep their documented keys, and a typo in them is still
    /// an error naming the key.
    #[test]
    fn owned_sections_read_their_documented_keys() {
        let dir = std::env::temp_dir().join(format!("memex-config-owned-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let file = dir.join("memex.toml");
        let toml = "[views]\ncache_bytes = 1024\n[search]\nbm25_weight = 0.5\nchunk_bytes = 512\nfusion = \"rrf\"\n\
                    [context]\ntokenizer = \"cl100k_base\"\nmax_pack_items = 9\n[context.budgets]\ntail = 7000\n";
        std::fs::write(&file, toml).expect("write");
        let c = Config::load(Some(&file), serde_json::json!({})).expect("load");
        assert_eq!(c.views.cache_bytes, 1024);
        assert_eq!((c.search.bm25_weight, c.search.chunk_bytes, c.search.vector_weight), (0.5, 512, 0.4));
        assert_eq!(c.search.fusion, memex_search::Fusion::Rrf);
        assert_eq!(c.context.tokenizer, memex_tokens::Tokenizer::Cl100kBase);
        assert_eq!(c.context.max_pack_items, 9);
        assert_eq!((c.context.budgets.tail, c.context.budgets.context), (7000, 32_000));
        assert!(c.redacted().contains("tokenizer = \"cl100k_base\""), "{}", c.redacted());
        for (bad, key) in [
            ("[context.budgets]\ntial = 1\n", "tial"),
            ("[search]\nbm25_wieght = 1\n", "bm25_wieght"),
            ("[context]\ntokenizer = \"p50k\"\n", "p50k"),
            ("[context.budgets]\ntail = 40000\n", "exceeds context"),
            ("[search]\nfusion = \"max\"\n", "fusion"),
        ] {
            std::fs::write(&file, bad).expect("write");
            let err = Config::load(Some(&file), serde_json::json!({})).expect_err(bad);
            assert!(err.to_string().contains(key), "{bad}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_mcp_section_is_off_by_default_and_layers_like_the_rest() {
        let c = Config::default();
        assert!(!c.mcp.http);
        assert_eq!((c.mcp.http_addr.to_string().as_str(), c.mcp.namespace.as_str()), ("127.0.0.1:50052", "default"));
        let dir = std::env::temp_dir().join(format!("memex-config-mcp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let file = dir.join("memex.toml");
        std::fs::write(&file, "[mcp]\nhttp = true\nhttp_addr = \"0.0.0.0:7000\"\nallowed_hosts = [\"memex.lan\"]\n")
            .expect("write");
        let c = Config::load(Some(&file), serde_json::json!({"mcp": {"namespace": "team"}})).expect("load");
        assert!(c.mcp.http);
        assert_eq!(c.mcp.http_addr.to_string(), "0.0.0.0:7000");
        assert_eq!((c.mcp.allowed_hosts.as_slice(), c.mcp.namespace.as_str()), (&["memex.lan".to_owned()][..], "team"));
        assert!(c.redacted().contains("[mcp]"), "{}", c.redacted());
        for (bad, key) in [
            ("[mcp]\nhttp_adr = \"127.0.0.1:1\"\n", "http_adr"),
            ("[mcp]\nhttp_addr = \"nowhere\"\n", "http_addr"),
            ("listen = \"127.0.0.1:9\"\n[mcp]\nhttp = true\nhttp_addr = \"127.0.0.1:9\"\n", "must differ"),
            ("[mcp]\nnamespace = \"\"\n", "mcp.namespace"),
        ] {
            std::fs::write(&file, bad).expect("write");
            let err = Config::load(Some(&file), serde_json::json!({})).expect_err(bad);
            assert!(err.to_string().contains(key), "{bad}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_worker_needs_something_to_run() {
        let mut c = Config { role: Role::Worker, ..Config::default() };
        c.validate().expect("the default model");
        c.embedding.provider = EmbeddingProvider::None;
        c.validate().expect("the memory worker alone");
        c.memory.enabled = false;
        let err = c.validate().expect_err("nothing to do");
        assert!(err.to_string().contains("role = \"worker\""), "{err}");
        assert!(Config { role: Role::Api, ..Config::default() }.redacted().contains("role = \"api\""));
    }

    #[test]
    fn redaction_hides_the_password_only() {
        let mut c = Config::default();
        c.database.url = "postgres://memex:hunter2@db:5432/memex".into();
        c.database.read_url = "postgres://memex:hunter3@standby:5432/memex".into();
        let text = c.redacted();
        assert!(text.contains("postgres://memex:***@db:5432/memex"), "{text}");
        assert!(text.contains("postgres://memex:***@standby:5432/memex"), "{text}");
        assert!(!text.contains("hunter2") && !text.contains("hunter3"));
    }

    #[test]
    fn the_memory_section_layers_and_names_bad_keys() {
        let c = Config::load(None, serde_json::json!({"memory": {"interpreter": "openai", "openai": {"base_url": "http://llm:8000/v1", "model": "qwen", "api_key": "sk-secret"}}}))
            .expect("load");
        assert_eq!(c.memory.interpreter, memex_recall::InterpreterKind::Openai);
        let text = c.redacted();
        assert!(text.contains("interpreter = \"openai\"") && !text.contains("sk-secret"), "{text}");
        let err = Config::load(None, serde_json::json!({"memory": {"interpreter": "openai"}})).expect_err("no server");
        assert!(err.to_string().contains("memory.openai.base_url"), "{err}");
        let err =
            Config::load(None, serde_json::json!({"memory": {"segment": {"split_belwo": 0.4}}})).expect_err("typo");
        assert!(err.to_string().contains("split_belwo"), "{err}");
    }
}
