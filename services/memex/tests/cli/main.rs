//! The client commands as a user runs them: the built `memex` binary against a real server (a
//! `TestServer` on 127.0.0.1 over a real Postgres), asserting stdout, stderr and exit status.
#![allow(clippy::unwrap_used)]

mod context;
mod erase;
mod errors;
mod events;
mod handoff;
mod memory;
mod tasks;
mod views;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use memex_store::Access;
use memex_tests::{Scratch, TestServer};

/// What a run of the binary left behind.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts success; returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "exit {}; stderr: {}", self.code, self.stderr);
        &self.stdout
    }

    /// Asserts a failure with this exit status; returns stderr.
    #[track_caller]
    pub fn fails(&self, code: i32) -> &str {
        assert_eq!(self.code, code, "stdout: {}\nstderr: {}", self.stdout, self.stderr);
        &self.stderr
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

/// The binary, set up to reach one namespace of a server with one key (through the same
/// `MEMEX_*` variables a user would export).
#[derive(Clone)]
pub struct Cli {
    pub endpoint: String,
    pub namespace: String,
    pub key: Option<String>,
    /// The scratch directory the commands run in, removed when the last clone is dropped.
    pub dir: Arc<Scratch>,
}

impl Cli {
    /// A namespace `ns` with a key of `access` on `srv`; runs in a scratch directory.
    pub async fn new(srv: &TestServer, ns: &str, access: Access) -> Cli {
        let (_, key) = srv.namespace_with_key(ns, access).await;
        let dir = Arc::new(Scratch::new(&format!("memex-cli-{}-{ns}-{}", std::process::id(), srv.addr.port())));
        Cli { endpoint: srv.endpoint(), namespace: ns.to_owned(), key: Some(key), dir }
    }

    pub fn with_key(&self, key: Option<&str>) -> Cli {
        Cli { key: key.map(str::to_owned), ..self.clone() }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_memex"));
        c.args(args).current_dir(&**self.dir);
        for v in ["MEMEX_API_KEY", "MEMEX_ENDPOINT", "MEMEX_NAMESPACE"] {
            c.env_remove(v);
        }
        c.env("MEMEX_ENDPOINT", &self.endpoint).env("MEMEX_NAMESPACE", &self.namespace);
        if let Some(k) = &self.key {
            c.env("MEMEX_API_KEY", k);
        }
        c
    }

    pub async fn run(&self, args: &[&str]) -> Run {
        self.run_stdin(args, Vec::new()).await
    }

    /// Runs the binary on a blocking thread (the server answers on this runtime meanwhile).
    pub async fn run_stdin(&self, args: &[&str], stdin: Vec<u8>) -> Run {
        let mut c = self.command(args);
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let out = tokio::task::spawn_blocking(move || {
            let mut child = c.spawn().unwrap();
            let mut input = child.stdin.take().unwrap();
            let writer = std::thread::spawn(move || {
                let _ = input.write_all(&stdin);
            });
            let out = child.wait_with_output().unwrap();
            writer.join().unwrap();
            out
        })
        .await
        .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Starts the binary and leaves it running (for server streams).
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        let mut c = self.command(args);
        c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().unwrap()
    }

    /// A new session of `agent` (optionally of a task); its id.
    pub async fn session(&self, agent: &str, task: Option<&str>) -> String {
        let mut args = vec!["session", "create", "--agent", agent];
        if let Some(t) = task {
            args.extend(["--task", t]);
        }
        self.run(&args).await.ok().trim().to_owned()
    }

    /// Appends events given as `(kind, content)`, plus tool fields where the JSON has them.
    pub async fn append(&self, session: &str, lines: &[serde_json::Value]) -> serde_json::Value {
        let stdin: String = lines.iter().map(|l| format!("{l}\n")).collect();
        self.run_stdin(&["append", "--session", session, "--format", "json"], stdin.into_bytes()).await.json()
    }
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/vcc/tests/fixtures")
}

pub fn trace(name: &str) -> PathBuf {
    fixtures().join("traces/claude-code").join(name)
}

pub fn golden(name: &str, mode: &str, file: &str) -> String {
    std::fs::read_to_string(fixtures().join("golden").join(name).join(mode).join(file)).unwrap()
}
