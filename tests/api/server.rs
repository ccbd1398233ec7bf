//! Health, reflection, graceful shutdown, deadlines.
use std::time::Duration;

use memex_proto::v1 as pb;
use memex_tests::{TestServer, server_or_skip};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use crate::{ev, fixture};

#[tokio::test]
async fn reflection_lists_every_service_and_health_is_serving() {
    let srv = server_or_skip!();
    let channel = tonic::transport::Channel::from_shared(srv.endpoint()).unwrap().connect().await.unwrap();
    let mut reflection = ServerReflectionClient::new(channel.clone());
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection.server_reflection_info(tokio_stream::iter(vec![req])).await.unwrap().into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected reflection answer");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    for want in [
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "memex.v1.AdminService",
        "memex.v1.EventService",
        "memex.v1.SessionService",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
    }
    // Each memex service can be described (what `grpcurl describe` needs).
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol("memex.v1.EventService".into())),
    };
    let mut answers = reflection.server_reflection_info(tokio_stream::iter(vec![req])).await.unwrap().into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    assert!(
        matches!(answer.message_response, Some(MessageResponse::FileDescriptorResponse(ref f)) if !f.file_descriptor_proto.is_empty())
    );

    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest { service: "memex.v1.EventService".into() })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);
}

#[tokio::test]
async fn shutdown_drains_an_in_flight_stream_then_stops() {
    let mut srv = server_or_skip!();
    let mut f = fixture(&srv, "drain").await;
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::StreamEventsRequest>(4);
    tx.send(pb::StreamEventsRequest {
        namespace: f.ns.clone(),
        session_id: f.session.clone(),
        events: vec![ev("note", "before shutdown")],
        idempotency_key: String::new(),
    })
    .await
    .unwrap();
    let mut acks =
        f.c.events.stream_events(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert_eq!(acks.message().await.unwrap().unwrap().messages_committed, 1);
    srv.trigger_shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The in-flight stream keeps working during the drain.
    tx.send(pb::StreamEventsRequest { events: vec![ev("note", "during drain")], ..Default::default() }).await.unwrap();
    assert_eq!(acks.message().await.unwrap().unwrap().messages_committed, 2);
    drop(tx);
    assert!(acks.message().await.unwrap().is_none(), "the stream ends cleanly");
    let store = srv.store.clone();
    tokio::time::timeout(Duration::from_secs(10), srv.join()).await.expect("server stops after draining").unwrap();
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM events").fetch_one(store.pool()).await.unwrap();
    assert_eq!(count, 2);
}

#[tokio::test]
async fn a_client_deadline_is_honoured() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "deadline").await;
    let big = "x".repeat(4 * 1024 * 1024);
    let mut req = tonic::Request::new(f.append_req(vec![ev("note", &big)], ""));
    req.set_timeout(Duration::from_millis(1));
    let r = f.c.events.append_events(req).await;
    let code = r.expect_err("a 1 ms deadline cannot be met").code();
    assert!(matches!(code, tonic::Code::DeadlineExceeded | tonic::Code::Cancelled), "{code:?}");
}

/// Nothing of a stopped server keeps its index directory locked: a server started right after it
/// on the same directory (as `memex-bench pack --fresh` restarts in-process), while the first was
/// still catching up 16,000 events, opens it and serves Search (UNAVAILABLE at worst, for a
/// moment: never INTERNAL for a lock).
#[tokio::test]
async fn a_server_stopped_during_catch_up_frees_its_index_directory() {
    const EVENTS: usize = 16_000;
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "restart").await;
    let text = "the deploy cache failed with error E0382 again\n".repeat(40);
    for _ in 0..EVENTS / 100 {
        f.append((0..100).map(|_| ev("note", &text)).collect()).await.unwrap();
    }
    let (mut config, store) = (srv.config.clone(), srv.store.clone());
    srv.stop().await;
    // A directory the harness leaves in place between the two starts (it removes its own at each
    // stop); the first start indexes all the events anew.
    let dir = std::env::temp_dir().join(format!("memex-restart-{}", uuid::Uuid::now_v7().simple()));
    config.search.index_dir = dir.display().to_string();
    let catching_up = TestServer::restart(config.clone(), store.clone()).await;
    let started = std::time::Instant::now();
    catching_up.stop().await;
    assert!(started.elapsed() < Duration::from_secs(10), "stopped in {:?}", started.elapsed());
    let again = TestServer::restart(config, store).await;
    let mut search = again.clients(Some(f.token.trim_start_matches("Bearer "))).await.search;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = search
            .search(pb::SearchRequest {
                namespace: f.ns.clone(),
                query: "deploy cache".into(),
                limit: 5,
                ..Default::default()
            })
            .await;
        match r {
            Ok(r) if !r.get_ref().hits.is_empty() => break,
            Ok(_) => {}
            // A round cut off mid-write may hold the writer a moment longer: retryable, never
            // INTERNAL.
            Err(s) if s.code() == tonic::Code::Unavailable => {}
            Err(s) => panic!("the restarted server's Search failed: {s:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "the restarted server never caught up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    again.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
