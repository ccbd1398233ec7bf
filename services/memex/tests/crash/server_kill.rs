//! The crash suite: `memex serve` is killed with SIGKILL at random points while writers append
//! (unary and streamed, with artifacts), a trace is imported and a window compacted, then
//! restarted, again and again (≥ 20 times; `MEMEX_CRASH_KILLS` for a heavier run). Afterwards:
//! every acknowledged event is there byte for byte, no batch is partial, seqs are gapless, every
//! batch retried with its idempotency key after a lost answer committed exactly once, every
//! import is whole or absent, every acknowledged manifest expands, and the text index (rebuilt
//! from Postgres) holds exactly the committed events, once each.
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use memex_client::Conn;
use memex_proto::v1 as pb;
use memex_proto::v1::event_service_client::EventServiceClient;
use memex_store::Access;
use tokio::sync::Mutex;

use crate::common::*;

const TRACE: &str = "../../crates/vcc/tests/fixtures/traces/claude-code/ccl__coderabbit__agent-668b5ac2.jsonl";

/// Streams groups of five batches over `StreamEvents`; a broken stream is sent again whole with
/// the same keys (the committed messages replay, the rest commit).
async fn streamer(
    peer: Peer,
    token: String,
    session: String,
    stop: Arc<AtomicBool>,
    flight: Arc<InFlight>,
) -> Vec<Vec<pb::EventInput>> {
    let w = 99;
    let mut done = Vec::new();
    let mut g = 0;
    while !stop.load(Ordering::SeqCst) {
        let group: Vec<(usize, Vec<pb::EventInput>)> = (g * 5..g * 5 + 5).map(|b| (b, batch(w, b))).collect();
        loop {
            peer.get().await;
            let conn = Conn {
                endpoint: format!("http://127.0.0.1:{}", peer.port),
                namespace: "crash".into(),
                api_key: Some(token.clone()),
                api_key_file: "/nonexistent".into(),
                tls_ca: None,
            };
            let Ok(channel) = conn.channel().await else {
                peer.lost().await;
                continue;
            };
            let mut events = EventServiceClient::with_interceptor(channel, conn.bearer().unwrap());
            let msgs: Vec<pb::StreamEventsRequest> = group
                .iter()
                .enumerate()
                .map(|(i, (b, ev))| pb::StreamEventsRequest {
                    namespace: if i == 0 { "crash".into() } else { String::new() },
                    session_id: if i == 0 { session.clone() } else { String::new() },
                    events: ev.clone(),
                    idempotency_key: format!("s-b{b}"),
                })
                .collect();
            let _g = Guard::new(&flight.streams);
            let outcome = async {
                let mut acks = events.stream_events(tokio_stream::iter(msgs)).await?.into_inner();
                let mut committed = 0;
                while let Some(ack) = acks.message().await? {
                    committed = ack.messages_committed;
                }
                Ok::<u64, tonic::Status>(committed)
            }
            .await;
            match outcome {
                Ok(5) => break,
                Ok(n) => panic!("the stream ended after {n} of 5 messages without an error"),
                Err(e) => {
                    assert!(connection_lost(e.code(), e.message()), "stream group {g}: {e}");
                    peer.lost().await;
                }
            }
        }
        done.extend(group.into_iter().map(|(_, ev)| ev));
        g += 1;
    }
    done
}

/// Imports one real trace under a client-chosen session id again and again; an import whose
/// answer was lost is asked again under the same id (ALREADY_EXISTS: it had committed).
async fn importer(peer: Peer, trace: Vec<u8>, stop: Arc<AtomicBool>, flight: Arc<InFlight>) -> (Vec<String>, u64) {
    let mut ids = Vec::new();
    let mut expected = 0;
    while !stop.load(Ordering::SeqCst) {
        let id = uuid::Uuid::now_v7().to_string();
        loop {
            let c = peer.get().await;
            let meta = pb::ImportTraceRequest {
                agent_id: "claude-code".into(),
                file_name: "trace.jsonl".into(),
                session_id: id.clone(),
                ..Default::default()
            };
            let r = {
                let _g = Guard::new(&flight.imports);
                c.import_trace(meta, trace.clone(), |_| {}).await
            };
            match r {
                Ok(resp) => {
                    assert!(expected == 0 || expected == resp.events, "every import of one trace has as many events");
                    expected = resp.events;
                    break;
                }
                Err(e) if e.code() == tonic::Code::AlreadyExists => break,
                Err(e) => {
                    assert!(connection_lost(e.code(), &e.to_string()), "import {id}: {e}");
                    peer.lost().await;
                }
            }
        }
        ids.push(id);
    }
    (ids, expected)
}

/// Compacts writer 0's session to a small window again and again; returns the manifests.
async fn compactor(peer: Peer, session: String, stop: Arc<AtomicBool>, flight: Arc<InFlight>) -> Vec<String> {
    let mut manifests = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let c = peer.get().await;
        let r = {
            let _g = Guard::new(&flight.compactions);
            c.compact(pb::CompactRequest {
                session_id: session.clone(),
                window_budget: 400,
                headroom: 50,
                protected_turns: Some(0),
                ..Default::default()
            })
            .await
        };
        match r {
            Ok(resp) => {
                if let Some(m) = resp.manifest.filter(|_| resp.compacted) {
                    manifests.push(m.id);
                }
            }
            // Another compaction or an append raced this one's plan: fine, try again.
            Err(e) if e.code() == tonic::Code::Aborted => {}
            Err(e) => {
                assert!(connection_lost(e.code(), &e.to_string()), "compaction: {e}");
                peer.lost().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    manifests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_at_random_points_loses_no_acknowledged_event_and_repeats_none() {
    let Some(db) = memex_tests::test_db().await else { return };
    let store = db.store().await;
    let ns = store.create_namespace("crash").await.unwrap();
    let token = store.create_api_key(&ns, "crash", Access::Admin).await.unwrap().token;
    let kills: usize = std::env::var("MEMEX_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let index_dir = std::env::temp_dir().join(format!("memex-crash-{}-{port}", std::process::id()));
    let mut server = Server { child: None, port, db_url: db.url.clone(), index_dir, env: Vec::new() };
    server.spawn();
    let peer = Peer { port, token: token.clone(), client: Arc::new(Mutex::new(None)) };
    let c = peer.get().await;
    let mut sessions = Vec::new();
    for w in 0..=WRITERS {
        let s = c.create_session(pb::CreateSessionRequest { agent_id: format!("w{w}"), ..Default::default() }).await;
        sessions.push(s.unwrap().id);
    }
    let trace = std::fs::read(TRACE).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let flight = Arc::new(InFlight::default());
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            tokio::spawn(writer(w, peer.clone(), sessions[w].clone(), stop.clone(), flight.clone(), connection_lost))
        })
        .collect();
    let streamer =
        tokio::spawn(streamer(peer.clone(), token.clone(), sessions[WRITERS].clone(), stop.clone(), flight.clone()));
    let importer = tokio::spawn(importer(peer.clone(), trace, stop.clone(), flight.clone()));
    let compactor = tokio::spawn(compactor(peer.clone(), sessions[0].clone(), stop.clone(), flight.clone()));

    // Kill at random points, with the work above in flight.
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(port);
    for _ in 0..kills {
        connect(port, &token).await;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        tokio::time::sleep(Duration::from_millis(150 + rng % 600)).await;
        for (name, n) in [
            ("append", &flight.appends),
            ("artifact write", &flight.artifacts),
            ("stream", &flight.streams),
            ("import", &flight.imports),
            ("compaction", &flight.compactions),
        ] {
            if n.load(Ordering::SeqCst) > 0 {
                *seen.entry(name).or_default() += 1;
            }
        }
        server.kill9();
        server.spawn();
    }
    connect(port, &token).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let mut committed = Vec::new();
    for w in writers {
        committed.push(w.await.unwrap().0);
    }
    committed.push(streamer.await.unwrap());
    let (imports, trace_events) = importer.await.unwrap();
    let manifests = compactor.await.unwrap();
    eprintln!("{kills} kills; in flight at a kill: {seen:?}");
    eprintln!(
        "committed: {} batches, {} imports, {} manifests",
        committed.iter().map(Vec::len).sum::<usize>(),
        imports.len(),
        manifests.len()
    );
    for what in ["append", "stream", "import", "compaction"] {
        assert!(seen.get(what).copied().unwrap_or(0) > 0, "no kill landed during a {what}: {seen:?}");
    }

    // One more crash with everything quiet, then the checks against a fresh process.
    server.kill9();
    server.spawn();
    let c = connect(port, &token).await;
    for (w, batches) in committed.iter().enumerate() {
        assert_exactly(&c, &sessions[w], batches, &format!("writer {w}")).await;
    }
    for id in &imports {
        let s = c.get_session(id).await.unwrap();
        assert!(trace_events > 0);
        assert_eq!(s.event_count, trace_events, "import {id} is whole");
    }
    for m in &manifests {
        let (manifest, evicted) = c.expand_manifest_all(m).await.unwrap();
        assert_eq!(manifest.id, *m);
        assert!(!evicted.is_empty(), "manifest {m} expands to its events");
    }
    c.get_window(&sessions[0], "").await.unwrap();

    assert_indexed(&c, &sessions, &committed).await;
}
