//! Clock skew between replicas: three `memex serve` processes on one database, one with a true
//! wall clock, one three hours ahead and one three hours behind (libfaketime, monotonic clocks
//! untouched). Every time that coordinates replicas is the database's: event times, leases,
//! retention, and a rotated key's end, which each replica counts down on its monotonic clock from
//! the time the database says is left. So the skewed replicas accept a rotated key through its
//! overlap and refuse it after, with the true one, and stamp events in the database's order.
use std::time::{Duration, Instant};

use memex_proto::v1 as pb;
use memex_store::Access;

use crate::common::*;

const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
const SKEW_HOURS: i64 = 3;

fn replica(db_url: &str, skew: Option<&str>, tag: &str) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let index_dir = std::env::temp_dir().join(format!("memex-skew-{}-{tag}-{port}", std::process::id()));
    let mut env = Vec::new();
    if let Some(offset) = skew {
        env.push(("LD_PRELOAD", FAKETIME.to_owned()));
        env.push(("FAKETIME", offset.to_owned()));
        env.push(("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()));
    }
    let mut s = Server { child: None, port, db_url: db_url.to_owned(), index_dir, env };
    s.spawn();
    s
}

/// A wall clock `hours` off: what libfaketime gives a child, checked on `date`.
fn skewed_date_works() -> bool {
    let out = std::process::Command::new("date")
        .arg("+%s")
        .env("LD_PRELOAD", FAKETIME)
        .env("FAKETIME", format!("+{SKEW_HOURS}h"))
        .output();
    let Ok(out) = out else { return false };
    let Some(then) = String::from_utf8_lossy(&out.stdout).trim().parse::<i64>().ok() else { return false };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    (then - now - SKEW_HOURS * 3600).abs() < 60
}

async fn works(port: u16, token: &str) -> Result<(), tonic::Status> {
    let conn = memex_client::Conn {
        endpoint: format!("http://127.0.0.1:{port}"),
        namespace: "crash".into(),
        api_key: Some(token.into()),
        api_key_file: "/nonexistent".into(),
        tls_ca: None,
    };
    let c = conn.client().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    c.list_sessions(Default::default()).await.map(|_| ()).map_err(|e| tonic::Status::new(e.code(), e.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_with_skewed_clocks_agree_on_key_expiry_and_event_times() {
    let Some(db) = memex_tests::test_db().await else { return };
    if !std::path::Path::new(FAKETIME).exists() || !skewed_date_works() {
        assert!(
            std::env::var_os("REQUIRE_DB").is_none(),
            "libfaketime is missing ({FAKETIME}): `make setup` installs the faketime package"
        );
        eprintln!("skipped: libfaketime is not installed (apt-get install faketime)");
        return;
    }
    let store = db.store().await;
    let ns = store.create_namespace("crash").await.unwrap();
    let admin = store.create_api_key(&ns, "admin", Access::Admin).await.unwrap().token;
    let rotated = store.create_api_key(&ns, "rotated", Access::Write).await.unwrap();
    let servers = [
        replica(&db.url, None, "true"),
        replica(&db.url, Some(&format!("+{SKEW_HOURS}h")), "ahead"),
        replica(&db.url, Some(&format!("-{SKEW_HOURS}h")), "behind"),
    ];
    let names = ["true clock", "3 h ahead", "3 h behind"];
    let clients = [
        connect(servers[0].port, &admin).await,
        connect(servers[1].port, &admin).await,
        connect(servers[2].port, &admin).await,
    ];

    // Event times: appends through the three replicas in turn, stamped by the database.
    let (db_before,): (chrono::DateTime<chrono::Utc>,) =
        sqlx::query_as("SELECT now()").fetch_one(store.pool()).await.unwrap();
    let session = clients[0]
        .create_session(pb::CreateSessionRequest { agent_id: "skew".into(), ..Default::default() })
        .await
        .unwrap()
        .id;
    for round in 0..3 {
        for (i, c) in clients.iter().enumerate() {
            c.append_events(&session, vec![event("note", format!("round {round} via {}", names[i]))], None)
                .await
                .unwrap();
        }
    }
    let (db_after,): (chrono::DateTime<chrono::Utc>,) =
        sqlx::query_as("SELECT now()").fetch_one(store.pool()).await.unwrap();
    let stored = clients[1].session_events(&session).await.unwrap();
    assert_eq!(stored.len(), 9);
    let time = |t: &Option<prost_types::Timestamp>| {
        let t = t.as_ref().unwrap();
        chrono::DateTime::from_timestamp(t.seconds, t.nanos as u32).unwrap()
    };
    let mut last = db_before;
    for e in &stored {
        for (what, t) in [("ingest_time", time(&e.ingest_time)), ("event_time", time(&e.event_time))] {
            assert!(
                t >= last && t <= db_after,
                "event {} ({}): {what} {t} is not the database's, between {last} and {db_after}",
                e.seq,
                e.content
            );
        }
        last = time(&e.ingest_time);
    }

    // A rotated key: every replica has it cached, then the rotation gives it a 4 s overlap.
    for (i, s) in servers.iter().enumerate() {
        works(s.port, &rotated.token).await.unwrap_or_else(|e| panic!("{}: the key before rotation: {e}", names[i]));
    }
    let overlap = Duration::from_secs(4);
    let started = Instant::now();
    clients[0].rotate_api_key(&rotated.key.id.to_string(), overlap.as_secs() as u32).await.unwrap();
    for (i, s) in servers.iter().enumerate() {
        let r = works(s.port, &rotated.token).await;
        assert!(started.elapsed() < overlap - Duration::from_secs(1), "the checks took too long to mean anything");
        r.unwrap_or_else(|e| panic!("{}: the old key must work through the overlap: {e}", names[i]));
    }
    tokio::time::sleep((overlap + Duration::from_millis(1500)).saturating_sub(started.elapsed())).await;
    for (i, s) in servers.iter().enumerate() {
        let r = works(s.port, &rotated.token).await;
        assert_eq!(
            r.as_ref().map_err(|e| e.code()),
            Err(tonic::Code::Unauthenticated),
            "{}: the old key must stop when its overlap ends: {r:?}",
            names[i]
        );
    }
}
