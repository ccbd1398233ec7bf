//! Quotas per namespace: events per second and bytes stored. Past either an append is refused
//! with RESOURCE_EXHAUSTED (a retry hint for the rate) and writes nothing; other namespaces are
//! not held back; an erasure gives the bytes back.
use std::time::Duration;

use memex_proto::v1 as pb;
use memex_store::{Access, QuotaChange};
use memex_tests::TestServer;

use crate::{client, ev};

async fn stored(srv: &TestServer, ns: &str) -> u64 {
    let ns = srv.store.namespace(ns).await.unwrap();
    srv.store.quota_and_usage(ns.id).await.unwrap().1
}

#[tokio::test]
async fn a_namespace_over_its_rate_is_refused_with_a_retry_hint_and_others_are_not() {
    let Some(srv) = TestServer::start().await else { return };
    let (_, token) = srv.namespace_with_key("limited", Access::Write).await;
    let (_, other_token) = srv.namespace_with_key("free", Access::Write).await;
    let q = srv.store.set_quota("limited", QuotaChange { events_per_sec: Some(Some(5)), ..Default::default() });
    assert_eq!(q.await.unwrap().events_per_sec, Some(5));
    let (c, other) = (client(&srv, "limited", &token).await, client(&srv, "free", &other_token).await);
    let new = pb::CreateSessionRequest { agent_id: "a".into(), ..Default::default() };
    let (s, o) = (c.create_session(new.clone()).await.unwrap().id, other.create_session(new).await.unwrap().id);

    // A second's worth goes through; the next append in the same second does not.
    let mut raw = srv.clients(Some(&token)).await.events;
    let mut refused = None;
    for i in 0..8 {
        let req = pb::AppendEventsRequest {
            namespace: "limited".into(),
            session_id: s.clone(),
            events: vec![ev("note", &format!("event {i}"))],
            ..Default::default()
        };
        if let Err(e) = raw.append_events(req).await {
            refused = Some((i, e));
            break;
        }
    }
    let (at, status) = refused.expect("the rate is enforced");
    assert!((5..=6).contains(&at), "refused at append {at}");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("5 events per second"), "{status:?}");
    let hint: u64 = status.metadata().get("grpc-retry-pushback-ms").unwrap().to_str().unwrap().parse().unwrap();
    assert!((1..=1000).contains(&hint), "a hint within the second: {hint} ms");
    // Another namespace appends freely meanwhile.
    for i in 0..20 {
        other.append_events(&o, vec![ev("note", &format!("free {i}"))], None).await.unwrap();
    }
    // After the hint, the append goes through; the refused one wrote nothing.
    tokio::time::sleep(Duration::from_millis(hint + 50)).await;
    c.append_events(&s, vec![ev("note", "after the wait")], None).await.unwrap();
    let events = c.session_events(&s).await.unwrap();
    assert_eq!(events.len(), at + 1);
    assert_eq!(events.last().unwrap().content, "after the wait");
}

#[tokio::test]
async fn a_namespace_at_its_storage_quota_is_refused_until_an_erasure_frees_bytes() {
    let Some(srv) = TestServer::start().await else { return };
    let (_, token) = srv.namespace_with_key("small", Access::Admin).await;
    let q = srv.store.set_quota("small", QuotaChange { stored_bytes: Some(Some(10_000)), ..Default::default() });
    assert_eq!(q.await.unwrap().stored_bytes, Some(10_000));
    let c = client(&srv, "small", &token).await;
    let session = |agent: &str| pb::CreateSessionRequest { agent_id: agent.into(), ..Default::default() };
    let (a, b) = (c.create_session(session("a")).await.unwrap().id, c.create_session(session("b")).await.unwrap().id);
    let text = |n: usize| "x".repeat(n);
    for s in [&a, &a, &b] {
        c.append_events(s, vec![ev("note", &text(3000))], None).await.unwrap();
    }
    let e = c.append_events(&b, vec![ev("note", &text(3000))], None).await.expect_err("over the quota");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
    assert!(e.to_string().contains("quota of 10000"), "{e}");
    assert_eq!(c.session_events(&b).await.unwrap().len(), 1, "the refused append wrote nothing");
    // The replica adds what it appended to the record about once a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while stored(&srv, "small").await != 9000 {
        assert!(std::time::Instant::now() < deadline, "usage never recorded: {}", stored(&srv, "small").await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ns = srv.store.namespace("small").await.unwrap();
    assert_eq!(srv.store.recount_usage(ns.id).await.unwrap(), 9000, "the running total is what the rows hold");

    // Erasing session a gives its 6,000 bytes back (tombstones are short).
    c.erase_subject(pb::EraseSubjectRequest {
        session_ids: vec![a.clone()],
        reason: "quota test".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(stored(&srv, "small").await < 3500, "recounted after the erasure");
    c.append_events(&b, vec![ev("note", &text(3000))], None).await.unwrap();
}
