//! `memex serve` stops within `shutdown_grace_secs` of SIGTERM even while it is loaded with packs
//! whose queries the embedding model has not reached: inferences in hand and queued are
//! abandoned (the process exits; nothing acknowledged is lost, since packs are stored before they
//! are answered).
#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memex_proto::v1 as pb;
use memex_proto::v1::context_service_client::ContextServiceClient;
use memex_proto::v1::event_service_client::EventServiceClient;
use memex_proto::v1::session_service_client::SessionServiceClient;

const GRACE_SECS: u64 = 2;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn sigterm_under_load_drains_within_the_grace_period() {
    let Some(model_dir) = memex_embed::test_model_dir() else { return };
    let Some(db) = memex_tests::test_db().await else { return };
    let ns = "default".to_owned();
    let store = db.store().await;
    store.create_namespace(&ns).await.unwrap();
    let port = free_port();
    let index_dir = std::env::temp_dir().join(format!("memex-shutdown-index-{}", db.name));
    let mut served = Served(
        Command::new(env!("CARGO_BIN_EXE_memex"))
            .args(["serve", "--insecure-disable-auth", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--database-url", &db.url])
            .env("MEMEX_SEARCH__INDEX_DIR", &index_dir)
            .env("MEMEX_EMBEDDING__PROVIDER", "minilm")
            .env("MEMEX_EMBEDDING__MODEL_DIR", &model_dir)
            .env("MEMEX_SHUTDOWN_GRACE_SECS", GRACE_SECS.to_string())
            .env("MEMEX_LOG__FILTER", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let endpoint = format!("http://127.0.0.1:{port}");
    let channel = {
        let started = Instant::now();
        loop {
            if let Ok(c) = tonic::transport::Channel::from_shared(endpoint.clone()).unwrap().connect().await {
                break c;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the server did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let session = SessionServiceClient::new(channel.clone())
        .create_session(pb::CreateSessionRequest { namespace: ns.clone(), agent_id: "a".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let session_id = session.id;
    let events = (0..200)
        .map(|i| pb::EventInput {
            kind: "note".into(),
            content: format!("deploy cache error number {i}: the build broke in module m{}", i % 17),
            ..Default::default()
        })
        .collect();
    EventServiceClient::new(channel.clone())
        .append_events(pb::AppendEventsRequest {
            namespace: ns.clone(),
            session_id: session_id.clone(),
            events,
            ..Default::default()
        })
        .await
        .unwrap();
    // A flood of packs, each with a query of its own for the model to embed.
    let mut load = Vec::new();
    for i in 0..400 {
        let mut c = ContextServiceClient::new(channel.clone());
        let (ns, s) = (ns.clone(), session_id.clone());
        load.push(tokio::spawn(async move {
            let _ = c
                .build_pack(pb::BuildPackRequest {
                    namespace: ns,
                    session_id: s,
                    user_message: format!("which module broke the build in run {i}, and why did the cache fail?"),
                    ..Default::default()
                })
                .await;
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let pid = served.0.id().to_string();
    let signalled = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = loop {
        if let Some(status) = served.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(GRACE_SECS + 4),
            "still running {:?} after SIGTERM (grace {GRACE_SECS} s)",
            signalled.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
    for l in load {
        l.abort();
    }
    let _ = std::fs::remove_dir_all(index_dir);
}
