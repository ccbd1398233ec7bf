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
