//! SearchService through gRPC: provenance, read-your-writes, filters, namespace isolation, bad input.
use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::server_or_skip;

use crate::{assert_status, call, ev, fixture, fixture_with, result};

fn req(ns: &str, query: &str) -> pb::SearchRequest {
    pb::SearchRequest { namespace: ns.into(), query: query.into(), limit: 10, ..Default::default() }
}

async fn search(f: &crate::Fixture, r: pb::SearchRequest) -> Result<pb::SearchResponse, tonic::Status> {
    f.c.search.clone().search(r).await.map(|r| r.into_inner())
}

#[tokio::test]
async fn a_write_is_found_by_the_next_search_with_provenance() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "s1").await;
    let r = f
        .append(vec![
            ev("user_message", "the flaky test is test_parse_header in tests/http.rs"),
            call("c1"),
            result(
                "c1",
                "running 12 tests\ntest test_parse_header ... FAILED\nthread panicked at 'index out of bounds'",
            ),
        ])
        .await
        .unwrap();
    let resp =
        search(&f, pb::SearchRequest { with_text: true, ..req(&f.ns, "panicked index out of bounds") }).await.unwrap();
    assert!(!resp.vectors_used);
    let top = &resp.hits[0];
    assert_eq!(top.event_id, r.event_ids[2]);
    assert_eq!((top.session_id.as_str(), top.seq), (f.session.as_str(), 3));
    assert_eq!((top.kind.as_str(), top.role.as_str(), top.agent_id.as_str()), ("tool_result", "tool", "agent-1"));
    // The hit's full-view lines are the event's own (GetEvents with_lines), looked up at query time.
    let events = f.events_with_lines(&f.session).await;
    let lines = events[2].lines.expect("the result has lines");
    assert!(top.first_line > 0, "{top:?}");
    assert_eq!((top.first_line, top.last_line), (u64::from(lines.first_line), u64::from(lines.last_line)));
    assert_eq!((top.source.as_str(), top.chunk, top.chunk_first_line, top.chunk_last_line), ("event", 0, 0, 2));
    assert!(top.text.contains("index out of bounds"));
    let score = top.score.unwrap();
    assert!(score.bm25 > 0.0 && score.bm25_rank == 1 && score.vector_rank == 0);
    // Score fusion (the default): the best BM25 hit scores bm25_weight × 1, with no vector list.
    assert!((score.fused - 1.0).abs() < 1e-6, "{score:?}");
    assert!(top.event_time.is_some());
    // RRF when asked: weight / (rrf_k + rank), the same order.
    let rrf = search(&f, pb::SearchRequest { fusion: "rrf".into(), ..req(&f.ns, "panicked index out of bounds") })
        .await
        .unwrap();
    assert_eq!(rrf.hits[0].event_id, r.event_ids[2]);
    let fused = rrf.hits[0].score.unwrap().fused;
    assert!((fused - 1.0 / 61.0).abs() < 1e-6, "{fused}");

    // Read-your-writes: the very next search sees a new event.
    let r2 = f.append(vec![ev("decision", "switch the parser to nom for header parsing")]).await.unwrap();
    let resp = search(&f, req(&f.ns, "nom")).await.unwrap();
    assert_eq!(resp.hits.len(), 1);
    assert_eq!(resp.hits[0].event_id, r2.event_ids[0]);
    assert_eq!(resp.hits[0].role, "system");
    // Stemming: "parsing" finds "parse", "parser".
    let resp = search(&f, req(&f.ns, "parsing")).await.unwrap();
    let ids: Vec<&str> = resp.hits.iter().map(|h| h.event_id.as_str()).collect();
    assert!(ids.contains(&r.event_ids[0].as_str()) && ids.contains(&r2.event_ids[0].as_str()), "{ids:?}");
}

#[tokio::test]
async fn artifact_text_is_searchable_beyond_the_excerpt() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "s2").await;
    let mut body = String::new();
    for i in 0..3000 {
        body.push_str(&format!("line {i}: ok\n"));
    }
    let mid = body[body.len() / 2..].find('\n').map(|i| body.len() / 2 + i + 1).unwrap();
    body.insert_str(mid, "needle: ZX_SPECTRUM_48K overflow in the middle\n");
    let needle_line = body[..mid].matches('\n').count() as u32;
    let r = f.append(vec![call("c1"), result("c1", &body)]).await.unwrap();
    assert_eq!(r.artifacts.len(), 1, "the output became an artifact");
    let resp = search(&f, pb::SearchRequest { with_text: true, ..req(&f.ns, "zx_spectrum_48k") }).await.unwrap();
    assert_eq!(resp.hits.len(), 1);
    let h = &resp.hits[0];
    assert_eq!((h.event_id.as_str(), h.source.as_str()), (r.event_ids[1].as_str(), "artifact"));
    assert!(h.chunk > 0 && h.chunk_first_line <= needle_line && needle_line <= h.chunk_last_line, "{h:?}");
    assert!(h.text.contains("ZX_SPECTRUM_48K"));
}

#[tokio::test]
async fn filters_narrow_and_namespaces_never_mix() {
    let srv = server_or_skip!();
    let mut a = fixture(&srv, "fa").await;
    let mut b = fixture(&srv, "fb").await;
    let mut user = ev("user_message", "deploy the cache service");
    user.task_id = "t1".into();
    let mut note = ev("note", "deploy notes: cache warmed");
    note.agent_id = "other-agent".into();
    note.event_time = Some(prost_types::Timestamp { seconds: 1_600_000_000, nanos: 0 });
    let ra = a.append(vec![user, note, ev("assistant_message", "deploying cache now")]).await.unwrap();
    b.append(vec![ev("user_message", "deploy the cache service")]).await.unwrap();
    let ids = |r: &pb::SearchResponse| r.hits.iter().map(|h| h.event_id.clone()).collect::<Vec<_>>();

    let all = search(&a, req(&a.ns, "deploy cache")).await.unwrap();
    assert_eq!(all.hits.len(), 3, "namespace fb's event is not here");
    let only_b = search(&b, req(&b.ns, "deploy cache")).await.unwrap();
    assert_eq!(only_b.hits.len(), 1);
    assert!(!ids(&all).contains(&only_b.hits[0].event_id));

    let with = |f: pb::SearchFilter| pb::SearchRequest { filter: Some(f), ..req("fa", "deploy cache") };
    let r = search(&a, with(pb::SearchFilter { roles: vec!["user".into()], ..Default::default() })).await.unwrap();
    assert_eq!(ids(&r), vec![ra.event_ids[0].clone()]);
    let r = search(
        &a,
        with(pb::SearchFilter { kinds: vec!["note".into(), "assistant_message".into()], ..Default::default() }),
    )
    .await
    .unwrap();
    assert_eq!(r.hits.len(), 2);
    let r = search(&a, with(pb::SearchFilter { task_ids: vec!["t1".into()], ..Default::default() })).await.unwrap();
    assert_eq!(ids(&r), vec![ra.event_ids[0].clone()]);
    let r = search(&a, with(pb::SearchFilter { agent_ids: vec!["other-agent".into()], ..Default::default() }))
        .await
        .unwrap();
    assert_eq!(ids(&r), vec![ra.event_ids[1].clone()]);
    let old = pb::SearchFilter {
        time_to: Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 0 }),
        ..Default::default()
    };
    let r = search(&a, with(old)).await.unwrap();
    assert_eq!(ids(&r), vec![ra.event_ids[1].clone()]);
    let recent = pb::SearchFilter {
        time_from: Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 0 }),
        ..Default::default()
    };
    assert_eq!(search(&a, with(recent)).await.unwrap().hits.len(), 2);
    // Another session's id (even one of namespace fb) finds nothing in fa.
    let r = search(&a, with(pb::SearchFilter { session_ids: vec![b.session.clone()], ..Default::default() }))
        .await
        .unwrap();
    assert!(r.hits.is_empty());
    let r = search(&a, with(pb::SearchFilter { session_ids: vec![a.session.clone()], ..Default::default() }))
        .await
        .unwrap();
    assert_eq!(r.hits.len(), 3);

    // A key of fa cannot search fb.
    assert_status(search(&a, req("fb", "deploy")).await, tonic::Code::PermissionDenied, "namespace");
}

#[tokio::test]
async fn a_read_key_may_search_and_bad_input_names_its_field() {
    let srv = server_or_skip!();
    let f = fixture_with(&srv, "bad", Access::Read).await;
    let ns = f.ns.clone();
    assert!(search(&f, req(&ns, "anything")).await.unwrap().hits.is_empty());
    let cases: Vec<(pb::SearchRequest, &str)> = vec![
        (req("", "x"), "namespace"),
        (req(&ns, "   "), "query"),
        (pb::SearchRequest { limit: 5000, ..req(&ns, "x") }, "limit"),
        (pb::SearchRequest { candidates: 3, ..req(&ns, "x") }, "candidates"),
        (pb::SearchRequest { bm25_weight: Some(-1.0), ..req(&ns, "x") }, "bm25_weight"),
        (pb::SearchRequest { vector_weight: Some(f32::NAN), ..req(&ns, "x") }, "vector_weight"),
        (pb::SearchRequest { bm25_weight: Some(0.0), vector_weight: Some(0.0), ..req(&ns, "x") }, "bm25_weight"),
        (pb::SearchRequest { rrf_k: Some(-5.0), ..req(&ns, "x") }, "rrf_k"),
        (pb::SearchRequest { fusion: "max".into(), ..req(&ns, "x") }, "fusion"),
        (pb::SearchRequest { mmr: true, mmr_lambda: Some(1.5), ..req(&ns, "x") }, "mmr_lambda"),
        (
            pb::SearchRequest {
                filter: Some(pb::SearchFilter { session_ids: vec!["nope".into()], ..Default::default() }),
                ..req(&ns, "x")
            },
            "filter.session_ids[0]",
        ),
        (
            pb::SearchRequest {
                filter: Some(pb::SearchFilter { roles: vec!["robot".into()], ..Default::default() }),
                ..req(&ns, "x")
            },
            "filter.roles[0]",
        ),
        (
            pb::SearchRequest {
                filter: Some(pb::SearchFilter { kinds: vec![String::new()], ..Default::default() }),
                ..req(&ns, "x")
            },
            "filter.kinds[0]",
        ),
        (
            pb::SearchRequest {
                filter: Some(pb::SearchFilter {
                    time_from: Some(prost_types::Timestamp { seconds: 2_000_000_000, nanos: 0 }),
                    time_to: Some(prost_types::Timestamp { seconds: 1_000_000_000, nanos: 0 }),
                    ..Default::default()
                }),
                ..req(&ns, "x")
            },
            "filter.time_to",
        ),
        (
            pb::SearchRequest {
                filter: Some(pb::SearchFilter {
                    time_from: Some(prost_types::Timestamp { seconds: 0, nanos: -1 }),
                    ..Default::default()
                }),
                ..req(&ns, "x")
            },
            "filter.time_from",
        ),
    ];
    for (r, field) in cases {
        assert_status(search(&f, r).await, tonic::Code::InvalidArgument, field);
    }
    let mut anon = srv.clients(None).await;
    assert_status(anon.search.search(req(&ns, "x")).await, tonic::Code::Unauthenticated, "API key");
    assert_status(search(&f, req("missing-ns", "x")).await, tonic::Code::PermissionDenied, "namespace");
}
