//! Round trips, idempotency, artifacts.
use memex_proto::v1 as pb;
use memex_tests::server_or_skip;

use crate::{assert_status, call, ev, fixture, result};

#[tokio::test]
async fn content_round_trips_byte_for_byte() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "rt").await;
    let texts = [
        "plain ascii".to_owned(),
        String::new(),
        "héllo wörld — 日本語テキスト — עברית — emoji 🧠🦀 — combining e\u{301}".to_owned(),
        "trailing newline\n\n".to_owned(),
        "\r\nwindows\r\nline ends\r\n\t tabs".to_owned(),
    ];
    let mut batch: Vec<pb::EventInput> = texts.iter().map(|t| ev("assistant_message", t)).collect();
    batch[0].metadata_json = r#"{"model":"m","n":[1,2,{"x":null}],"ü":"✓"}"#.into();
    batch[1].event_time = Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 123_456_000 });
    let r = f.append(batch).await.unwrap();
    assert_eq!((r.first_seq, r.last_seq), (1, 5));
    assert!(!r.replayed);
    let events = f.all_events().await;
    assert_eq!(events.len(), 5);
    for (e, t) in events.iter().zip(&texts) {
        assert_eq!(&e.content, t);
        assert!(e.artifact.is_none());
        assert_eq!(e.agent_id, "agent-1", "agent id defaults to the session's");
    }
    assert_eq!(events.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), r.event_ids);
    let meta: serde_json::Value = serde_json::from_str(&events[0].metadata_json).unwrap();
    assert_eq!(meta, serde_json::json!({"model":"m","n":[1,2,{"x":null}],"ü":"✓"}));
    assert_eq!(events[1].event_time, Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 123_456_000 }));
    // Reading by ids answers in the order asked.
    let ids = vec![r.event_ids[3].clone(), r.event_ids[0].clone()];
    let by_id =
        f.c.events
            .get_events(pb::GetEventsRequest { namespace: f.ns.clone(), event_ids: ids, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(by_id.events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 1]);
}

#[tokio::test]
async fn a_10_mb_tool_output_becomes_an_artifact_and_comes_back_exactly() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "big").await;
    // 10 MB of varied, non-ASCII, multi-line text.
    let mut body = String::with_capacity(10 * 1024 * 1024 + 64);
    let mut i = 0u64;
    while body.len() < 10 * 1024 * 1024 {
        body.push_str(&format!("{i:08} ünïcödé line — {}\n", i.wrapping_mul(2_654_435_761) % 1_000_003));
        i += 1;
    }
    let r = f.append(vec![call("c1"), result("c1", &body)]).await.unwrap();
    assert_eq!(r.artifacts.len(), 1);
    let art = r.artifacts[0].clone();
    assert_eq!(art.size as usize, body.len());
    assert_eq!(art.media_type, "text/plain; charset=utf-8");
    assert!(art.id.starts_with("blake3:"));
    let events = f.all_events().await;
    let stored = &events[1];
    assert_eq!(stored.artifact.as_ref(), Some(&art));
    // The inline excerpt: head lines, a one-line notice naming the artifact and size, tail lines.
    assert!(stored.content.len() < 8 * 1024 + 256, "excerpt is bounded: {} bytes", stored.content.len());
    let notice = stored.content.lines().find(|l| l.starts_with("[memex: ")).expect("notice line");
    assert!(notice.contains(&art.id) && notice.contains(&body.len().to_string()), "{notice}");
    let head = stored.content.split("[memex: ").next().unwrap();
    assert!(body.starts_with(head) && head.ends_with('\n'), "head is cut on a line boundary");
    let tail = stored.content.rsplit_once("]\n").unwrap().1;
    assert!(body.ends_with(tail) && (tail.is_empty() || body[..body.len() - tail.len()].ends_with('\n')));
    // The full bytes, verified by the server against the hash.
    let (info, bytes) = f.artifact(&art.id).await.unwrap();
    assert_eq!(info, art);
    assert!(bytes == body.as_bytes(), "artifact bytes differ from what was appended");
}

#[tokio::test]
async fn content_with_nul_is_kept_exactly() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "nul").await;
    let text = "before\0after\0";
    let r = f.append(vec![ev("user_message", text)]).await.unwrap();
    let art = r.artifacts[0].clone();
    let (_, bytes) = f.artifact(&art.id).await.unwrap();
    assert_eq!(bytes, text.as_bytes());
    let events = f.all_events().await;
    assert!(events[0].content.starts_with("before\u{2400}after"), "{:?}", events[0].content);
}

#[tokio::test]
async fn a_retried_batch_returns_the_original_seqs_and_writes_nothing() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "idem").await;
    f.append(vec![ev("note", "first")]).await.unwrap();
    let batch = vec![ev("user_message", "a"), ev("assistant_message", "b")];
    let first = f.c.events.append_events(f.append_req(batch.clone(), "k-1")).await.unwrap().into_inner();
    assert_eq!((first.first_seq, first.last_seq, first.replayed), (2, 3, false));
    for _ in 0..3 {
        let again = f.c.events.append_events(f.append_req(batch.clone(), "k-1")).await.unwrap().into_inner();
        assert!(again.replayed);
        assert_eq!((again.first_seq, again.last_seq), (2, 3));
        assert_eq!(again.event_ids, first.event_ids);
    }
    assert_eq!(f.event_count().await, 3);
    // The same key for another batch is refused, and commits nothing.
    let other = f.c.events.append_events(f.append_req(vec![ev("note", "different")], "k-1")).await;
    assert_status(other, tonic::Code::AlreadyExists, "idempotency_key");
    assert_eq!(f.event_count().await, 3);
    // A new key appends after.
    let next = f.c.events.append_events(f.append_req(batch, "k-2")).await.unwrap().into_inner();
    assert_eq!(next.first_seq, 4);
}

#[tokio::test]
async fn concurrent_retries_of_one_key_commit_once() {
    let srv = server_or_skip!();
    let f = fixture(&srv, "idem-race").await;
    let req = f.append_req(vec![ev("note", "x"), ev("note", "y")], "race");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut c = f.c.events.clone();
        let req = req.clone();
        tasks.push(tokio::spawn(async move { c.append_events(req).await.map(|r| r.into_inner()) }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap().unwrap());
    }
    assert_eq!(answers.iter().filter(|a| !a.replayed).count(), 1, "exactly one commit");
    assert!(answers.iter().all(|a| a.first_seq == 1 && a.last_seq == 2 && a.event_ids == answers[0].event_ids));
    let mut f = f;
    assert_eq!(f.event_count().await, 2);
}

#[tokio::test]
async fn identical_outputs_share_one_artifact_and_corruption_is_detected() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "dedup").await;
    let body = "same output line\n".repeat(2000); // 34 KB
    let r1 = f.append(vec![call("a"), result("a", &body), call("b"), result("b", &body)]).await.unwrap();
    assert_eq!(r1.artifacts.len(), 2);
    assert_eq!(r1.artifacts[0], r1.artifacts[1]);
    let r2 = f.append(vec![call("c"), result("c", &body)]).await.unwrap();
    assert_eq!(r2.artifacts[0], r1.artifacts[0]);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM artifacts").fetch_one(srv.store.pool()).await.unwrap();
    assert_eq!(rows, 1, "stored once per namespace");
    let compressed: i64 =
        sqlx::query_scalar("SELECT length(data)::int8 FROM artifacts").fetch_one(srv.store.pool()).await.unwrap();
    assert!((compressed as usize) < body.len() / 10, "stored compressed ({compressed} bytes)");
    // Tamper with the stored bytes: the server must refuse to serve them.
    let evil = {
        let mut b = body.clone().into_bytes();
        b[0] = b'X'; // was 's'
        b
    };
    let evil_z = zstd_compress(&evil);
    sqlx::query("UPDATE artifacts SET data = $1").bind(evil_z).execute(srv.store.pool()).await.unwrap();
    let got = f.artifact(&r1.artifacts[0].id).await;
    assert_status(got, tonic::Code::DataLoss, "corrupt");
    // Unknown and malformed ids.
    let missing = memex_event::ArtifactId::of(b"nothing").to_string();
    assert_status(f.artifact(&missing).await, tonic::Code::NotFound, "artifact_id");
    assert_status(f.artifact("blake3:xyz").await, tonic::Code::InvalidArgument, "artifact_id");
}

fn zstd_compress(bytes: &[u8]) -> Vec<u8> {
    // The store compresses with zstd; a frame made here decodes the same way.
    zstd::bulk::compress(bytes, 3).unwrap()
}

/// A search that shows its hits' stored chunks reads the events with the content of the ones it
/// shows alone: the others come back whole but with an empty content (never detoasted), in the
/// order asked, with their other fields.
#[tokio::test]
async fn a_content_light_read_carries_only_the_contents_asked_for() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "content-of").await;
    let r = f
        .append(vec![ev("note", "first text"), ev("assistant_message", "second text"), ev("note", "third text")])
        .await
        .unwrap();
    let ns = srv.store.namespace("content-of").await.unwrap().id;
    let ids: Vec<uuid::Uuid> = r.event_ids.iter().map(|s| s.parse().unwrap()).collect();
    let read = srv.store.events_by_ids_content_of(ns, &[ids[2], ids[1], ids[0]], &[ids[1]]).await.unwrap();
    let got: Vec<(u64, &str, &str)> = read.iter().map(|e| (e.seq, e.kind.as_str(), e.content.as_str())).collect();
    assert_eq!(got, vec![(3, "note", ""), (2, "assistant_message", "second text"), (1, "note", "")]);
    let whole = srv.store.events_by_ids(ns, &ids).await.unwrap();
    assert_eq!(
        whole.iter().map(|e| e.content.as_str()).collect::<Vec<_>>(),
        ["first text", "second text", "third text"]
    );
}
