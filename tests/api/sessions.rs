//! Sessions and paginated reads.
use memex_proto::v1 as pb;
use memex_tests::server_or_skip;

use crate::{assert_status, ev, fixture};

#[tokio::test]
async fn sessions_are_created_idempotently_listed_and_filtered() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "sess").await;
    let id = uuid::Uuid::now_v7().to_string();
    let req = pb::CreateSessionRequest {
        namespace: "sess".into(),
        agent_id: "executor".into(),
        parent_session_id: f.session.clone(),
        task_id: "task-7".into(),
        metadata_json: r#"{"repo":"memex"}"#.into(),
        session_id: id.clone(),
        ..Default::default()
    };
    let s1 = f.c.sessions.create_session(req.clone()).await.unwrap().into_inner();
    let s2 = f.c.sessions.create_session(req.clone()).await.unwrap().into_inner();
    assert_eq!(s1, s2);
    assert_eq!((s1.id.as_str(), s1.source_format.as_str(), s1.event_count), (id.as_str(), "memex", 0));
    let mut different = req.clone();
    different.agent_id = "someone-else".into();
    assert_status(f.c.sessions.create_session(different).await, tonic::Code::AlreadyExists, "different attributes");
    let mut orphan = req.clone();
    orphan.session_id.clear();
    orphan.parent_session_id = uuid::Uuid::now_v7().to_string();
    assert_status(f.c.sessions.create_session(orphan).await, tonic::Code::InvalidArgument, "parent_session_id");
    let mut no_agent = req.clone();
    no_agent.session_id.clear();
    no_agent.agent_id.clear();
    assert_status(f.c.sessions.create_session(no_agent).await, tonic::Code::InvalidArgument, "agent_id");

    for i in 0..5 {
        f.c.sessions
            .create_session(pb::CreateSessionRequest {
                namespace: "sess".into(),
                agent_id: format!("worker-{}", i % 2),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // 7 sessions; pages of 3, newest first, no repeats.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page =
            f.c.sessions
                .list_sessions(pb::ListSessionsRequest {
                    namespace: "sess".into(),
                    page_size: 3,
                    page_token: std::mem::take(&mut token),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
        assert!(page.sessions.len() <= 3);
        seen.extend(page.sessions);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen.len(), 7);
    let mut ids: Vec<&str> = seen.iter().map(|s| s.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 7);
    assert!(seen.windows(2).all(|w| (w[0].created_at.as_ref().map(|t| (t.seconds, t.nanos)))
        >= (w[1].created_at.as_ref().map(|t| (t.seconds, t.nanos)))));
    let workers =
        f.c.sessions
            .list_sessions(pb::ListSessionsRequest {
                namespace: "sess".into(),
                agent_id: "worker-0".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(workers.sessions.len(), 3);
    let children =
        f.c.sessions
            .list_sessions(pb::ListSessionsRequest {
                namespace: "sess".into(),
                parent_session_id: f.session.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(children.sessions.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), vec![id.as_str()]);
}

#[tokio::test]
async fn range_reads_paginate_in_seq_order() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "pages").await;
    let batch: Vec<_> = (0..25).map(|i| ev("note", &format!("n{i}"))).collect();
    f.append(batch).await.unwrap();
    let mut got = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page =
            f.c.events
                .get_events(pb::GetEventsRequest {
                    namespace: f.ns.clone(),
                    session_id: f.session.clone(),
                    from_seq: 3,
                    to_seq: 22,
                    page_size: 7,
                    page_token: std::mem::take(&mut token),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
        pages += 1;
        got.extend(page.events.into_iter().map(|e| e.seq));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(got, (3..=22).collect::<Vec<_>>());
    assert_eq!(pages, 3);
    // An empty range of an existing session is empty, not an error.
    let empty =
        f.c.events
            .get_events(pb::GetEventsRequest {
                namespace: f.ns.clone(),
                session_id: f.session.clone(),
                from_seq: 100,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert!(empty.events.is_empty() && empty.next_page_token.is_empty());
}

#[tokio::test]
async fn pages_stay_within_the_message_limit() {
    let srv = server_or_skip!(|c: &mut memex_server::Config| c.limits.max_message_bytes = 64 * 1024);
    let mut f = fixture(&srv, "page-size").await;
    // 10 notes of 20 KB each (notes are never artifactized): 200 KB in all.
    for i in 0..10 {
        f.append(vec![ev("note", &format!("{i}{}", "y".repeat(20_000)))]).await.unwrap();
    }
    let first =
        f.c.events
            .get_events(pb::GetEventsRequest {
                namespace: f.ns.clone(),
                session_id: f.session.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    assert!(first.events.len() < 10 && !first.events.is_empty(), "{} events", first.events.len());
    assert!(!first.next_page_token.is_empty());
    let all = f.all_events().await;
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());
}
