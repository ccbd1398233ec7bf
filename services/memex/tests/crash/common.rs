//! What both crash tests share: a `memex serve` process to kill, clients that reconnect, writers
//! that retry with idempotency keys, and the checks of what survived.
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use memex_client::{Client, Conn};
use memex_proto::v1 as pb;
use tokio::sync::Mutex;

pub const WRITERS: usize = 3;
/// A tool output this large is stored as an artifact (ingest.artifact_threshold_bytes is 8 KiB).
pub const BULKY: usize = 12 * 1024;

pub struct Server {
    pub child: Option<Child>,
    pub port: u16,
    pub db_url: String,
    pub index_dir: std::path::PathBuf,
    /// Extra `MEMEX_*` settings.
    pub env: Vec<(&'static str, String)>,
}

impl Server {
    pub fn spawn(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_memex"))
            .args(["serve", "--listen", &format!("127.0.0.1:{}", self.port), "--database-url", &self.db_url])
            .env("MEMEX_SEARCH__INDEX_DIR", &self.index_dir)
            .env("MEMEX_EMBEDDING__PROVIDER", "none")
            .env("MEMEX_LOG__FILTER", "error")
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// `kill -9`: nothing in hand gets finished.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.index_dir);
    }
}

pub async fn connect(port: u16, token: &str) -> Client {
    let conn = Conn {
        endpoint: format!("http://127.0.0.1:{port}"),
        namespace: "crash".into(),
        api_key: Some(token.into()),
        api_key_file: "/nonexistent".into(),
        tls_ca: None,
    };
    let started = Instant::now();
    loop {
        if let Ok(c) = conn.client().await
            && c.list_sessions(Default::default()).await.is_ok()
        {
            return c;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the server did not come back");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A lazily (re)connected client: calls fail while the server is down, and the next call after it
/// is back connects again.
#[derive(Clone)]
pub struct Peer {
    pub port: u16,
    pub token: String,
    pub client: Arc<Mutex<Option<Client>>>,
}

impl Peer {
    pub async fn get(&self) -> Client {
        let mut slot = self.client.lock().await;
        if slot.is_none() {
            *slot = Some(connect(self.port, &self.token).await);
        }
        slot.clone().unwrap()
    }

    pub async fn lost(&self) {
        *self.client.lock().await = None;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A call cut off by the kill: the client's transport says so (the server cannot answer), or a
/// server starting up answers UNAVAILABLE. Any other status would be a wrong answer. A call the
/// client had queued when the connection died is hyper's "operation was canceled" (tonic's
/// CANCELLED): it never reached the server.
pub fn connection_lost(code: tonic::Code, message: &str) -> bool {
    code == tonic::Code::Unavailable
        || (matches!(code, tonic::Code::Unknown | tonic::Code::Cancelled)
            && (message.contains("transport error")
                || message.contains("h2 protocol error")
                || message == "operation was canceled"))
}

pub fn event(kind: &str, content: String) -> pb::EventInput {
    pb::EventInput { kind: kind.into(), content, ..Default::default() }
}

/// Batch `b` of writer `w`: 1–6 events, each naming itself by a unique word; every fifth batch
/// carries a bulky tool output (an artifact).
pub fn batch(w: usize, b: usize) -> Vec<pb::EventInput> {
    let n = 1 + (w * 7 + b * 13) % 6;
    let mut out: Vec<pb::EventInput> =
        (0..n).map(|e| event("note", format!("crashprobe w{w}b{b}e{e} writer {w} batch {b} event {e}"))).collect();
    if b.is_multiple_of(5) {
        let id = format!("call-{w}-{b}");
        out.push(pb::EventInput {
            tool_name: "Bash".into(),
            tool_call_id: id.clone(),
            ..event("tool_call", "ls".into())
        });
        let bulky: String = std::iter::repeat_n(format!("w{w}b{b}bulk output line\n"), BULKY / 20).collect::<String>();
        out.push(pb::EventInput { tool_call_id: id, ..event("tool_result", format!("w{w}b{b}art {bulky}")) });
    }
    out
}

/// Appends batches to its own session until `stop`, each retried with its idempotency key until
/// answered; a failure must be one `failure_ok` accepts. Returns the batches in commit order and
/// the number of failed calls.
pub async fn writer(
    w: usize,
    peer: Peer,
    session: String,
    stop: Arc<AtomicBool>,
    flight: Arc<InFlight>,
    failure_ok: fn(tonic::Code, &str) -> bool,
) -> (Vec<Vec<pb::EventInput>>, usize) {
    let mut done = Vec::new();
    let mut failures = 0;
    let mut b = 0;
    while !stop.load(Ordering::SeqCst) {
        let events = batch(w, b);
        let bulky = events.len() > 1 && events.last().unwrap().content.len() > BULKY / 2;
        loop {
            let c = peer.get().await;
            let r = {
                let _g = Guard::new(&flight.appends);
                let _a = bulky.then(|| Guard::new(&flight.artifacts));
                c.append_events(&session, events.clone(), Some(format!("w{w}-b{b}"))).await
            };
            match r {
                Ok(ack) => {
                    assert_eq!(ack.last_seq - ack.first_seq + 1, events.len() as u64, "an ack covers the whole batch");
                    break;
                }
                Err(e) => {
                    assert!(failure_ok(e.code(), &e.to_string()), "writer {w} batch {b}: {e}");
                    failures += 1;
                    peer.lost().await;
                }
            }
        }
        done.push(events);
        b += 1;
    }
    (done, failures)
}

/// What each operation in flight was doing when a kill landed.
#[derive(Default)]
pub struct InFlight {
    pub appends: AtomicUsize,
    pub artifacts: AtomicUsize,
    pub streams: AtomicUsize,
    pub imports: AtomicUsize,
    pub compactions: AtomicUsize,
}

pub struct Guard<'a>(&'a AtomicUsize);
impl<'a> Guard<'a> {
    pub fn new(c: &'a AtomicUsize) -> Self {
        c.fetch_add(1, Ordering::SeqCst);
        Guard(c)
    }
}
impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A session holds exactly `batches`, in order, gapless from seq 1, byte for byte.
pub async fn assert_exactly(c: &Client, session: &str, batches: &[Vec<pb::EventInput>], who: &str) {
    let stored = c.session_events(session).await.unwrap();
    let sent: Vec<&pb::EventInput> = batches.iter().flatten().collect();
    assert_eq!(stored.len(), sent.len(), "{who}: {} events stored, {} committed", stored.len(), sent.len());
    for (i, (got, want)) in stored.iter().zip(&sent).enumerate() {
        assert_eq!(got.seq, i as u64 + 1, "{who}: seqs are gapless");
        let content = if let Some(artifact) = &got.artifact {
            let mut bytes = Vec::new();
            c.get_artifact(&artifact.id, &mut bytes).await.unwrap();
            String::from_utf8(bytes).unwrap()
        } else {
            got.content.clone()
        };
        assert_eq!(content, want.content, "{who}: event {} is byte-identical", i + 1);
        assert_eq!(got.kind, want.kind, "{who}: event {} kind", i + 1);
    }
}

/// The text index, caught up from Postgres after the crashes, holds each committed event once:
/// a word only one event has finds that event and nothing else. `committed[i]` is what was
/// written to `sessions[i]`; the last writer, if there are more than `WRITERS`, is writer 99.
pub async fn assert_indexed(c: &Client, sessions: &[String], committed: &[Vec<Vec<pb::EventInput>>]) {
    for (w, batches) in committed.iter().enumerate() {
        let (sid, w) = (&sessions[w], if w == WRITERS { 99 } else { w });
        let mut first_seq = 1;
        for (b, events) in batches.iter().enumerate() {
            if b.is_multiple_of(7) {
                for e in [0, events.len() - 1] {
                    let word = if events[e].kind == "note" { format!("w{w}b{b}e{e}") } else { format!("w{w}b{b}art") };
                    let hits = c
                        .search(pb::SearchRequest {
                            query: word.clone(),
                            limit: 10,
                            context_weight: Some(0.0),
                            neighbor_weight: Some(0.0),
                            session_weight: Some(0.0),
                            ..Default::default()
                        })
                        .await
                        .unwrap()
                        .hits;
                    let found: Vec<(&str, u64)> = hits.iter().map(|h| (h.session_id.as_str(), h.seq)).collect();
                    assert_eq!(found, [(sid.as_str(), first_seq + e as u64)], "{word}");
                }
            }
            first_seq += events.len() as u64;
        }
    }
}
