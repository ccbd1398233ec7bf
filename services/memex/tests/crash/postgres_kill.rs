//! Postgres itself dies under load: a private cluster (initdb in a temporary directory, so the
//! shared test database is never touched) is stopped with `pg_ctl stop -m immediate` (as a crash:
//! no checkpoint, WAL replay at the next start) while writers append and readers read through one
//! `memex serve`, then started again, several times. Clients see `UNAVAILABLE` (retryable) and
//! never another status or a wrong answer; the same server process recovers without a restart;
//! afterwards every acknowledged event is there once, and the text index holds exactly them.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use memex_proto::v1 as pb;
use memex_store::Access;
use tokio::sync::Mutex;

use crate::common::*;

/// A throwaway Postgres cluster owned by this test.
struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// Run its commands as `postgres` (initdb refuses root).
    as_postgres: bool,
}

impl Cluster {
    /// None when no Postgres server binaries are installed (the test then says so and skips,
    /// unless REQUIRE_DB is set).
    fn create(port: u16) -> Option<Cluster> {
        let mut bins: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|b| b.join("initdb").exists())
            .collect();
        bins.sort();
        let bin = bins.pop()?;
        let uid = Command::new("id").arg("-u").output().ok()?;
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        let dir = std::env::temp_dir().join(format!("memex-pgcrash-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let c = Cluster { dir, bin, port, as_postgres };
        if as_postgres {
            assert!(Command::new("chown").arg("postgres").arg(&c.dir).status().unwrap().success());
        }
        c.run("initdb", &["-D", &c.data(), "-A", "trust", "-U", "postgres", "--no-sync"]);
        Some(c)
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd.args(args).output().unwrap();
        assert!(out.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn start(&self) {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c max_connections=60",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log").display().to_string();
        self.run("pg_ctl", &["-D", &self.data(), "-l", &log, "-o", &opts, "-w", "start"]);
    }

    /// A crash: no checkpoint, no goodbye to the clients.
    fn stop_immediate(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
    }

    fn url(&self) -> String {
        format!("postgres://memex@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let exe = self.bin.join("pg_ctl");
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let _ = cmd.args(["-D", &data, "-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(Path::new(&self.dir));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// While the database is away, the only acceptable failure: UNAVAILABLE.
fn unavailable(code: tonic::Code, _message: &str) -> bool {
    code == tonic::Code::Unavailable
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_killed_under_load_gives_unavailable_then_recovers_without_a_restart() {
    let Some(cluster) = Cluster::create(free_port()) else {
        assert!(std::env::var_os("REQUIRE_DB").is_none(), "REQUIRE_DB is set but no Postgres binaries are installed");
        eprintln!("skipped: no Postgres server binaries under /usr/lib/postgresql");
        return;
    };
    cluster.start();
    let port = cluster.port.to_string();
    // The server's role owns the database and is no superuser, as in production (row-level
    // security holds it); the extensions need the superuser.
    for sql in [
        "CREATE EXTENSION vector",
        "CREATE EXTENSION pg_trgm",
        "CREATE ROLE memex LOGIN",
        "ALTER DATABASE postgres OWNER TO memex",
    ] {
        cluster.run("psql", &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-c", sql]);
    }
    let opts = memex_store::StoreOptions { unscoped: memex_store::Tenant::All, ..Default::default() };
    let store = memex_store::Store::connect(&cluster.url(), &opts).await.unwrap();
    store.migrate().await.unwrap();
    let ns = store.create_namespace("crash").await.unwrap();
    let token = store.create_api_key(&ns, "crash", Access::Admin).await.unwrap().token;
    store.close().await;

    let port = free_port();
    let index_dir = std::env::temp_dir().join(format!("memex-pgcrash-index-{}-{port}", std::process::id()));
    // A short pool wait, so that calls made while the database is down answer in a second.
    let env = vec![("MEMEX_DATABASE__ACQUIRE_TIMEOUT_SECS", "1".to_owned())];
    let mut server = Server { child: None, port, db_url: cluster.url(), index_dir, env };
    server.spawn();
    let peer = Peer { port, token: token.clone(), client: Arc::new(Mutex::new(None)) };
    let c = peer.get().await;
    let mut sessions = Vec::new();
    for w in 0..WRITERS {
        let s = c.create_session(pb::CreateSessionRequest { agent_id: format!("w{w}"), ..Default::default() }).await;
        sessions.push(s.unwrap().id);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let flight = Arc::new(InFlight::default());
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(w, peer.clone(), sessions[w].clone(), stop.clone(), flight.clone(), unavailable)))
        .collect();
    // A reader: every answer is either right or UNAVAILABLE.
    let read_failures = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (peer, stop, session, failures) = (peer.clone(), stop.clone(), sessions[0].clone(), read_failures.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let c = peer.get().await;
                let search = c.search(pb::SearchRequest { query: "crashprobe".into(), limit: 5, ..Default::default() });
                for r in [c.get_session(&session).await.map(drop), search.await.map(drop)] {
                    if let Err(e) = r {
                        assert_eq!(e.code(), tonic::Code::Unavailable, "a read while the database is away: {e}");
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cluster.stop_immediate();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        cluster.start();
    }
    // The same server process, never restarted, serves again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::SeqCst);
    let mut committed = Vec::new();
    let mut write_failures = 0;
    for w in writers {
        let (batches, failures) = w.await.unwrap();
        committed.push(batches);
        write_failures += failures;
    }
    reader.await.unwrap();
    eprintln!(
        "3 immediate stops: {} batches committed; {write_failures} writes and {} reads answered UNAVAILABLE",
        committed.iter().map(Vec::len).sum::<usize>(),
        read_failures.load(Ordering::SeqCst)
    );
    // Reads may be answered from what the server holds (sessions, the text index) while the
    // database is away; writes cannot.
    assert!(write_failures > 0, "the outages were seen");
    assert!(server.child.as_mut().unwrap().try_wait().unwrap().is_none(), "the server is still the same process");

    let c = peer.get().await;
    for (w, batches) in committed.iter().enumerate() {
        assert_exactly(&c, &sessions[w], batches, &format!("writer {w}")).await;
    }
    assert_indexed(&c, &sessions, &committed).await;
}
