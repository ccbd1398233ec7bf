//! Fresh parts answer as the committed index will once they are committed.
#![allow(clippy::unwrap_used)]

use memex_rank::ChunkOptions;

use crate::SearchFilter;
use crate::namespace_index::tests::event_in;
use crate::namespace_index::{ChunkHit, NamespaceIndex};

/// Fresh documents are found with the scores they get once committed, whether the query asks
/// for the whole namespace or for one session (whose query still counts the other session's
/// fresh documents in its statistics). The committed index does not see them until a commit.
#[tokio::test]
async fn fresh_documents_score_as_they_will_once_committed() {
    let base = std::env::temp_dir().join(format!("memex-fresh-{}", uuid::Uuid::now_v7().simple()));
    let texts = [
        (1, "the parser fails on nested brackets"),
        (1, "fixed the lexer, all tests pass"),
        (2, "parser error again in the nested case"),
        (1, "nested brackets parse now"),
        (2, "unrelated note about deployment"),
    ];
    let events: Vec<_> = texts.iter().enumerate().map(|(i, (s, t))| event_in(*s, i as u64 + 1, t)).collect();
    let docs = |range: std::ops::Range<usize>| {
        events[range].iter().flat_map(|e| crate::doc::event_docs(e, None, None, ChunkOptions::default(), "")).collect()
    };
    let terms = memex_rank::query_terms("nested parser");
    let session_1 = SearchFilter { session_ids: vec![uuid::Uuid::from_u128(1)], ..SearchFilter::default() };
    let scored = |hits: Vec<ChunkHit>| -> Vec<(uuid::Uuid, f32, Option<usize>)> {
        hits.into_iter().map(|h| (h.event_id, h.score, h.fresh)).collect()
    };
    let strip = |v: &[(uuid::Uuid, f32, Option<usize>)]| v.iter().map(|(id, s, _)| (*id, *s)).collect::<Vec<_>>();

    // Everything committed.
    let (all, _) = NamespaceIndex::open(&base.join("all"), uuid::Uuid::from_u128(9)).unwrap();
    all.add(&all.writing().await, docs(0..5)).await.unwrap();
    all.commit(&all.writing().await).await.unwrap();
    let (s, none) = all.snapshot().unwrap();
    assert!(none.is_empty());
    let committed = scored(all.search(&terms, &SearchFilter::default(), 10, 0.5, &s, &[]).unwrap());
    let committed_1 = scored(all.search(&terms, &session_1, 10, 0.5, &s, &[]).unwrap());
    assert_eq!(committed.len(), 3, "{committed:?}");
    assert_eq!(committed_1.len(), 2, "{committed_1:?}");

    // The first two committed, the rest fresh in two catch-ups (two parts).
    let (part, _) = NamespaceIndex::open(&base.join("part"), uuid::Uuid::from_u128(9)).unwrap();
    part.add(&part.writing().await, docs(0..2)).await.unwrap();
    part.commit(&part.writing().await).await.unwrap();
    part.add_fresh(docs(2..3)).await.unwrap();
    part.add_fresh(docs(3..5)).await.unwrap();
    assert!(part.has_fresh().unwrap());
    let (s, parts) = part.snapshot().unwrap();
    assert_eq!(s.num_docs(), 2, "fresh documents are not committed");
    assert_eq!(parts.len(), 2);
    let found = scored(part.search(&terms, &SearchFilter::default(), 10, 0.5, &s, &parts).unwrap());
    assert_eq!(strip(&found), strip(&committed));
    assert_eq!(found.iter().filter(|h| h.2.is_some()).count(), 2, "two of the hits are fresh: {found:?}");
    // A query for session 1 finds session 1's, with the same scores: session 2's part counts
    // in the statistics though none of its documents can match.
    let found_1 = scored(part.search(&terms, &session_1, 10, 0.5, &s, &parts).unwrap());
    assert_eq!(strip(&found_1), strip(&committed_1));
    // At another context weight the parts cannot score (they do not index `text`): only
    // committed documents are searched.
    let other = part.search(&terms, &SearchFilter::default(), 10, 0.0, &s, &parts).unwrap();
    assert!(!other.is_empty() && other.iter().all(|h| h.fresh.is_none()), "{other:?}");

    // A commit takes them into the index and forgets them.
    part.commit(&part.writing().await).await.unwrap();
    assert!(!part.has_fresh().unwrap());
    let (s, none) = part.snapshot().unwrap();
    assert!(none.is_empty());
    assert_eq!(s.num_docs(), 5);
    let after = scored(part.search(&terms, &SearchFilter::default(), 10, 0.5, &s, &[]).unwrap());
    assert_eq!(after, committed);
    let _ = std::fs::remove_dir_all(base);
}

/// Every filter a search takes (each alone, several together, a session set larger than a
/// query narrows segment by segment, a time range) finds the same fresh documents with the
/// same scores as the committed index finds once they are committed, with and without
/// context, for one term, several, and a term repeated.
#[tokio::test]
async fn every_filter_scores_fresh_documents_as_committed_ones() {
    use chrono::TimeZone;
    use memex_event::Role;

    let base = std::env::temp_dir().join(format!("memex-fresh-filters-{}", uuid::Uuid::now_v7().simple()));
    let words = ["parser", "nested", "bracket", "lexer", "test", "fails", "deploy", "config", "error", "retry"];
    let kinds = ["user_message", "assistant_message", "tool_call", "tool_result", "note"];
    let t0 = chrono::Utc.timestamp_opt(1_800_000_000, 0).single().unwrap();
    let mut events = Vec::new();
    for i in 0..60u64 {
        // Texts of varied lengths and term frequencies, deterministic.
        let text: Vec<&str> = (0..(3 + i * 7 % 23)).map(|j| words[((i * 31 + j * j * 7) % 10) as usize]).collect();
        let mut e = event_in(u128::from(i % 20) + 1, i / 20 + 1, &text.join(" "));
        e.kind = kinds[(i % 5) as usize].into();
        e.agent_id = format!("agent-{}", i % 3);
        e.task_id = (i % 4 != 0).then(|| format!("task-{}", i % 4));
        e.event_time = t0 + chrono::Duration::seconds(i as i64 * 10);
        events.push(e);
    }
    let docs = |range: std::ops::Range<usize>| -> Vec<_> {
        events
            .iter()
            .enumerate()
            .skip(range.start)
            .take(range.len())
            .flat_map(|(i, e)| {
                let context = if i % 3 == 0 { "nested parser context words" } else { "" };
                crate::doc::event_docs(e, None, None, ChunkOptions::default(), context)
            })
            .collect()
    };
    let (all, _) = NamespaceIndex::open(&base.join("all"), uuid::Uuid::from_u128(9)).unwrap();
    all.add(&all.writing().await, docs(0..60)).await.unwrap();
    all.commit(&all.writing().await).await.unwrap();
    let (part, _) = NamespaceIndex::open(&base.join("part"), uuid::Uuid::from_u128(9)).unwrap();
    part.add(&part.writing().await, docs(0..20)).await.unwrap();
    part.commit(&part.writing().await).await.unwrap();
    for range in [20..21, 21..35, 35..36, 36..60] {
        part.add_fresh(docs(range)).await.unwrap();
    }
    let (committed, none) = all.snapshot().unwrap();
    assert!(none.is_empty());
    let (s, parts) = part.snapshot().unwrap();
    assert_eq!(parts.len(), 4);

    let session = |n: u128| uuid::Uuid::from_u128(n);
    let at = |secs: i64| Some(t0 + chrono::Duration::seconds(secs));
    let filters = vec![
        SearchFilter::default(),
        SearchFilter { session_ids: vec![session(3)], ..SearchFilter::default() },
        SearchFilter { session_ids: (1..=18).map(session).collect(), ..SearchFilter::default() },
        SearchFilter { task_ids: vec!["task-1".into(), "task-3".into()], ..SearchFilter::default() },
        SearchFilter { agent_ids: vec!["agent-2".into()], ..SearchFilter::default() },
        SearchFilter { kinds: vec!["tool_result".into(), "note".into()], ..SearchFilter::default() },
        SearchFilter { roles: vec![Role::User], ..SearchFilter::default() },
        SearchFilter { time: crate::TimeRange { from: at(150), to: at(450) }, ..SearchFilter::default() },
        SearchFilter { time: crate::TimeRange { from: None, to: at(300) }, ..SearchFilter::default() },
        SearchFilter {
            session_ids: vec![session(2), session(5), session(9)],
            kinds: vec!["assistant_message".into(), "tool_call".into(), "note".into()],
            time: crate::TimeRange { from: at(100), to: None },
            ..SearchFilter::default()
        },
    ];
    let queries = ["parser", "nested bracket fails", "retry retry config error", "absent"];
    let mut compared = 0;
    for filter in &filters {
        for q in queries {
            let terms = memex_rank::query_terms(q);
            for limit in [3, 50] {
                let want: Vec<(uuid::Uuid, f32)> = all
                    .search(&terms, filter, limit, 0.5, &committed, &[])
                    .unwrap()
                    .into_iter()
                    .map(|h| (h.event_id, h.score))
                    .collect();
                let found = part.search(&terms, filter, limit, 0.5, &s, &parts).unwrap();
                let got: Vec<(uuid::Uuid, f32)> = found.iter().map(|h| (h.event_id, h.score)).collect();
                // The same best `limit`, and at the cut's score both have every tie.
                let n = want.len().min(got.len()).min(limit.max(1));
                assert_eq!(got[..n], want[..n], "{q:?} under {filter:?}, limit {limit}");
                if want.len() < limit {
                    assert_eq!(got, want, "{q:?} under {filter:?}: every match");
                }
                compared += want.len();
                // Whatever a fresh hit names is its document's, as committed.
                let everything = all.search(&terms, filter, 1000, 0.5, &committed, &[]).unwrap();
                for h in found.iter().filter(|h| h.fresh.is_some()) {
                    let stored = part.stored_fresh(&parts[h.fresh.unwrap()], h.addr).unwrap();
                    let c = everything.iter().find(|c| c.event_id == h.event_id).unwrap();
                    assert_eq!(stored, all.stored(&committed, c.addr).unwrap());
                    assert_eq!((h.session, h.seq, h.doc_key), (c.session, c.seq, c.doc_key));
                }
            }
        }
    }
    assert!(compared > 300, "{compared} hits compared");
    let _ = std::fs::remove_dir_all(base);
}

/// Commits run beside catch-ups that add parts, and a searcher never sees a document twice
/// or misses one: a commit reloads the reader and forgets the parts it took at once, and the
/// parts added while it ran stay fresh for the next. A query holding no lock but the
/// watermarks' (as a catch-up does) is not held up by a commit's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_beside_catch_ups_show_every_document_exactly_once() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const N: usize = 150;
    let base = std::env::temp_dir().join(format!("memex-fresh-{}", uuid::Uuid::now_v7().simple()));
    let (idx, _) = NamespaceIndex::open(&base, uuid::Uuid::from_u128(9)).unwrap();
    let idx = Arc::new(idx);
    // Parts added (after `add_fresh` returned) and begun (before it was called).
    let added = Arc::new(AtomicUsize::new(0));
    let begun = Arc::new(AtomicUsize::new(1));
    let done = Arc::new(AtomicBool::new(false));

    // A catch-up's documents go fresh while another task holds the writer.
    {
        let held = idx.writing().await;
        let e = event_in(1, 1, "first event while a commit is under way");
        let docs = crate::doc::event_docs(&e, None, None, ChunkOptions::default(), "");
        tokio::time::timeout(std::time::Duration::from_secs(10), idx.add_fresh(docs))
            .await
            .expect("adding fresh documents does not wait for the writer")
            .unwrap();
        added.store(1, Ordering::SeqCst);
        drop(held);
    }

    let adder = {
        let (idx, added, begun) = (idx.clone(), added.clone(), begun.clone());
        tokio::spawn(async move {
            for i in 2..=N {
                let e = event_in((i % 3) as u128 + 1, i as u64, &format!("event number {i} of the run"));
                let _marks = idx.state.lock().await;
                begun.store(i, Ordering::SeqCst);
                idx.add_fresh(crate::doc::event_docs(&e, None, None, ChunkOptions::default(), "")).await.unwrap();
                added.store(i, Ordering::SeqCst);
                drop(_marks);
                // A part is built in microseconds, a commit takes milliseconds: spread the
                // adds so that several commits run among them.
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
    };
    let committer = {
        let (idx, done) = (idx.clone(), done.clone());
        tokio::spawn(async move {
            let mut commits = 0;
            while !done.load(Ordering::SeqCst) {
                idx.commit(&idx.writing().await).await.unwrap();
                commits += 1;
                tokio::task::yield_now().await;
            }
            commits
        })
    };
    let mut checks = 0;
    while added.load(Ordering::SeqCst) < N {
        let before = added.load(Ordering::SeqCst);
        let (s, parts) = idx.snapshot().unwrap();
        let after = begun.load(Ordering::SeqCst);
        let seen = s.num_docs() as usize + parts.iter().map(|p| p.num_docs() as usize).sum::<usize>();
        assert!(before <= seen && seen <= after, "{before} <= {seen} <= {after}");
        checks += 1;
        tokio::task::yield_now().await;
    }
    adder.await.unwrap();
    done.store(true, Ordering::SeqCst);
    let commits = committer.await.unwrap();
    assert!(commits > 1 && checks > 1, "{commits} commits, {checks} checks");
    idx.commit(&idx.writing().await).await.unwrap();
    let (s, parts) = idx.snapshot().unwrap();
    assert!(parts.is_empty());
    assert_eq!(s.num_docs() as usize, N);
    let _ = std::fs::remove_dir_all(base);
}
