//! `memex watch` as a user runs it: the built binary following a directory of trace files that a
//! test writes as an agent would, against a real server (a `TestServer` over a real Postgres).
//! Every watched session is compared with a one-shot `ImportTrace` of the same bytes.
#![allow(clippy::unwrap_used)]

mod corpus;
mod formats;
mod replay;
mod versions;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use memex_client::{Client, Conn};
use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::TestServer;

/// A real trace from the conformance fixtures.
pub fn fixture(kind: &str, name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/vcc/tests/fixtures/traces").join(kind).join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A server, a namespace with a key, a client of it, and a scratch directory to watch.
pub struct Env {
    pub srv: TestServer,
    pub conn: Conn,
    pub client: Client,
    pub dir: PathBuf,
}

impl Env {
    pub async fn new(tag: &str) -> Option<Env> {
        let srv = TestServer::start().await?;
        let (_, key) = srv.namespace_with_key("watch", Access::Write).await;
        let conn = Conn {
            endpoint: srv.endpoint(),
            namespace: "watch".into(),
            api_key: Some(key),
            api_key_file: "/nonexistent".into(),
            tls_ca: None,
        };
        let client = conn.client().await.unwrap();
        let dir = std::env::temp_dir().join(format!("memex-watch-{}-{tag}-{}", std::process::id(), srv.addr.port()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        Some(Env { srv, conn, client, dir })
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_memex"));
        c.arg("watch")
            .arg(&self.dir)
            .args(["--endpoint", &self.conn.endpoint, "-n", &self.conn.namespace])
            .args(["--api-key", self.conn.api_key.as_deref().unwrap(), "--poll-ms", "50"])
            // The imports the sessions are compared with are made as this agent.
            .args(["--agent", "agent"])
            .args(extra);
        c
    }

    /// `memex watch --once`: catches up and exits; asserts success. (Waited for off the runtime:
    /// the server it talks to runs on this test's runtime.)
    pub async fn once(&self, extra: &[&str]) -> Output {
        let mut cmd = self.command(&[&["--once"], extra].concat());
        let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "memex watch --once failed: {stderr}");
        out
    }

    /// A live `memex watch` (killed when dropped); its stderr goes to `log`.
    pub fn spawn(&self, extra: &[&str], log: &Path) -> Watcher {
        let log = std::fs::File::create(log).unwrap();
        Watcher(self.command(extra).stdout(Stdio::null()).stderr(log).spawn().unwrap())
    }

    /// The session of version `version` of `file` (the watcher derives the same id).
    pub fn session_of(&self, file: &Path, version: u32) -> String {
        memex_watch::layout::session_id(&self.conn.namespace, file, version)
    }

    pub async fn session(&self, id: &str) -> Option<pb::Session> {
        self.client.get_session(id).await.ok()
    }

    /// A one-shot import of `bytes`; returns its session id.
    pub async fn import(&self, bytes: &[u8], name: &str) -> String {
        let meta = pb::ImportTraceRequest { agent_id: "agent".into(), file_name: name.into(), ..Default::default() };
        let r = self.client.import_trace(meta, bytes.to_vec(), |_| {}).await.unwrap();
        r.session.unwrap().id
    }

    /// Every event of a session, in seq order.
    pub async fn events(&self, session: &str) -> Vec<pb::Event> {
        self.client.session_events(session).await.unwrap()
    }

    /// Waits until `session` holds `n` events (panics past `timeout`, or if it holds more).
    pub async fn wait_for(&self, session: &str, n: u64, timeout: Duration, log: &Path) {
        let started = Instant::now();
        loop {
            let count = self.session(session).await.map_or(0, |s| s.event_count);
            assert!(count <= n, "{count} events stored, more than the {n} expected");
            if count == n {
                return;
            }
            let log = std::fs::read_to_string(log).unwrap_or_default();
            assert!(started.elapsed() < timeout, "{count} of {n} events after {timeout:?}; watcher log:\n{log}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Asserts that the watched session holds exactly the imported session's events: kind,
    /// content, tool fields, times, agent, artifacts, and metadata but for the watcher's mark.
    pub async fn assert_same(&self, watched: &str, imported: &str) {
        let (w, i) = (self.events(watched).await, self.events(imported).await);
        assert!(!i.is_empty(), "the import holds no events");
        let (w, i): (Vec<_>, Vec<_>) = (w.iter().map(comparable).collect(), i.iter().map(comparable).collect());
        if let Some(at) = (0..w.len().max(i.len())).find(|&k| w.get(k) != i.get(k)) {
            panic!(
                "{} watched vs {} imported events; first difference at seq {}:\n watched:  {:?}\n imported: {:?}",
                w.len(),
                i.len(),
                at + 1,
                w.get(at),
                i.get(at)
            );
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An event without its ids, seq, ingest time and the watcher's mark (and without its event
/// time when the trace had none it could read: the store then uses the ingest time).
fn comparable(e: &pb::Event) -> String {
    let mut metadata: serde_json::Value = serde_json::from_str(&e.metadata_json).unwrap_or(serde_json::Value::Null);
    let mut event_time = e.event_time.map(|t| (t.seconds, t.nanos));
    if let Some(m) = metadata.as_object_mut() {
        m.remove(memex_watch::MARK_KEY);
        if m.contains_key("source_timestamp") {
            event_time = None;
        }
    }
    serde_json::json!({
        "kind": e.kind, "content": e.content, "tool_name": e.tool_name, "tool_call_id": e.tool_call_id,
        "event_time": event_time, "agent_id": e.agent_id,
        "artifact": e.artifact.as_ref().map(|a| (&a.id, a.size)), "metadata": metadata,
    })
    .to_string()
}

/// A live watcher process; killed (SIGKILL) when dropped.
pub struct Watcher(pub Child);

impl Watcher {
    /// `kill -9`: no chance to finish anything in hand.
    pub fn kill9(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A small deterministic generator (xorshift), seeded per run and printed, so a failure can be
/// replayed.
pub struct Rng(u64);

impl Rng {
    pub fn seeded() -> Rng {
        let seed = std::env::var("WATCH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
        });
        eprintln!("WATCH_SEED={seed}");
        Rng(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Appends `bytes` to `path` (created if missing), as an agent writes.
pub fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
}

/// The byte offset just past the `n`th newline of `bytes`.
pub fn after_lines(bytes: &[u8], n: usize) -> usize {
    bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(n - 1).map_or(bytes.len(), |(i, _)| i + 1)
}
