//! 64 concurrent writers on one session: gapless seqs, no duplicates, batches contiguous.
use std::collections::HashSet;

use memex_tests::server_or_skip;

use crate::{ev, fixture};

#[tokio::test]
async fn concurrent_writers_on_one_session_get_gapless_unique_seqs() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "conc").await;
    const WRITERS: usize = 64;
    const BATCHES: usize = 5;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut c = f.c.events.clone();
        let base = f.append_req(vec![], "");
        tasks.push(tokio::spawn(async move {
            let mut ranges = Vec::new();
            for b in 0..BATCHES {
                let size = 1 + (w + b) % 3;
                let mut req = base.clone();
                req.events = (0..size).map(|i| ev("note", &format!("w{w} b{b} e{i}"))).collect();
                let r = c.append_events(req).await.unwrap().into_inner();
                assert_eq!(r.last_seq - r.first_seq + 1, size as u64);
                ranges.push((r.first_seq, r.last_seq, w, b));
            }
            ranges
        }));
    }
    let mut ranges = Vec::new();
    for t in tasks {
        ranges.extend(t.await.unwrap());
    }
    ranges.sort();
    let total: u64 = ranges.iter().map(|(a, b, _, _)| b - a + 1).sum();
    let mut expect = 1;
    for (first, last, _, _) in &ranges {
        assert_eq!(*first, expect, "no gap and no overlap between batches");
        expect = last + 1;
    }
    let events = f.all_events().await;
    assert_eq!(events.len() as u64, total);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
    let ids: HashSet<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len() as u64, total, "event ids are unique");
    // Each batch's events are contiguous and in their order.
    for (first, _, w, b) in &ranges {
        let e = &events[(*first - 1) as usize];
        assert_eq!(e.content, format!("w{w} b{b} e0"));
    }
    assert_eq!(f.event_count().await, total);
}

#[tokio::test]
async fn a_missing_session_fails_only_its_own_append_within_a_shared_commit() {
    let srv = server_or_skip!();
    let f = fixture(&srv, "group").await;
    let missing = uuid::Uuid::now_v7().to_string();
    let mut tasks = Vec::new();
    for i in 0..48 {
        let mut c = f.c.events.clone();
        let mut req = f.append_req(vec![ev("note", &format!("e{i}"))], "");
        if i % 6 == 0 {
            req.session_id = missing.clone();
        }
        tasks.push(tokio::spawn(async move { (i, c.append_events(req).await) }));
    }
    let mut ok_seqs = Vec::new();
    for t in tasks {
        let (i, r) = t.await.unwrap();
        if i % 6 == 0 {
            let e = r.expect_err("no such session");
            assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        } else {
            let r = r.unwrap().into_inner();
            assert_eq!(r.first_seq, r.last_seq);
            ok_seqs.push(r.first_seq);
        }
    }
    ok_seqs.sort();
    assert_eq!(ok_seqs, (1..=40).collect::<Vec<_>>());
    let mut f = f;
    assert_eq!(f.event_count().await, 40);
}

/// Two pack writes that share new chunks, listed in opposite orders, both commit: chunks are
/// written in key order, so neither waits on the other's second chunk while holding its first.
#[tokio::test]
async fn concurrent_pack_writes_sharing_new_chunks_both_commit() {
    let srv = server_or_skip!();
    let ns = uuid::Uuid::now_v7();
    for round in 0..10u8 {
        let chunk = |i: u8| memex_store::PackChunk {
            id: [round, i, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
            body: vec![i; 64],
        };
        let row = |chunks: Vec<memex_store::PackChunk>| memex_store::PackRow {
            id: uuid::Uuid::now_v7(),
            session_id: uuid::Uuid::now_v7(),
            task_id: None,
            task_state_version: None,
            tokenizer: "o200k_base".into(),
            tokens: 1,
            request: serde_json::json!({}),
            pack: vec![0],
            chunks,
            created_at: chrono::Utc::now(),
            layout: None,
        };
        let a = row((0..64).map(chunk).collect());
        let b = row((0..64).rev().map(chunk).collect());
        let (ra, rb) = tokio::join!(srv.store.insert_pack(ns, &a), srv.store.insert_pack(ns, &b));
        ra.expect("first write");
        rb.expect("second write");
    }
    let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM pack_chunks WHERE namespace_id = $1")
        .bind(ns)
        .fetch_one(srv.store.pool())
        .await
        .expect("count");
    assert_eq!(n, 640);
}
