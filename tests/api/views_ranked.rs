//! CompileView with ranked predicates: BM25 over a chain's blocks, semantic over the index's
//! embeddings, and their bad input.
use std::time::{Duration, Instant};

use memex_proto::v1 as pb;
use memex_tests::server_or_skip;

use crate::fixture;
use crate::views::{req, view};

fn ranked(ranker: pb::Ranker, query: &str, top_k: u32) -> Option<pb::Predicate> {
    Some(pb::Predicate { ranker: ranker as i32, query: query.into(), top_k, ..Default::default() })
}

/// The line ranges of a view's pointers, `(file.txt:first-last)` or `...(from file.txt:first-last)`.
fn pointers(text: &str) -> Vec<(u32, u32)> {
    text.split(".txt:")
        .skip(1)
        .filter_map(|rest| {
            let (first, last) = rest.split_once(')')?.0.split_once('-')?;
            Some((first.parse().ok()?, last.parse().ok()?))
        })
        .collect()
}

async fn lines_of(f: &crate::Fixture, seq: u64) -> pb::FullViewLines {
    let events = f.events_with_lines(&f.session).await;
    events.iter().find(|e| e.seq == seq).and_then(|e| e.lines).expect("the event has lines")
}

#[tokio::test]
async fn bm25_keeps_the_top_k_blocks_with_their_matching_lines() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "rk1").await;
    f.append(vec![
        crate::ev("user_message", "please fix the build"),
        crate::ev("assistant_message", "The build failed.\nlinker error: undefined symbol foo\nretrying now"),
        crate::ev("user_message", "what is the weather like"),
        crate::ev("assistant_message", "sunny; the linker is not involved"),
    ])
    .await
    .unwrap();
    let session = f.session.clone();
    let (_, text) = view(
        &f,
        pb::CompileViewRequest {
            predicate: ranked(pb::Ranker::Bm25, "linker error", 1),
            ..req(&f, &session, pb::ViewKind::Adaptive)
        },
    )
    .await
    .unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("linker error: undefined symbol foo"), "{text}");
    assert!(!text.contains("retrying now"), "only the lines holding a query term: {text}");
    assert!(!text.contains("weather") && !text.contains("not involved"), "top 1 only: {text}");
    let found = pointers(&text);
    let l = lines_of(&f, 2).await;
    assert_eq!(found.len(), 1, "{text}");
    assert!(l.first_line <= found[0].0 && found[0].1 <= l.last_line, "{found:?} within {l:?}");

    // k = 2 adds the other block naming the linker; the index view lists the same hits.
    let (_, two) = view(
        &f,
        pb::CompileViewRequest {
            predicate: ranked(pb::Ranker::Bm25, "linker error", 2),
            ..req(&f, &session, pb::ViewKind::Index)
        },
    )
    .await
    .unwrap();
    let two = String::from_utf8(two).unwrap();
    assert!(two.contains("linker"), "{two}");
    assert!(!two.contains("weather"), "{two}");
}

#[tokio::test]
async fn ranked_predicates_reject_bad_input_naming_the_field() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "rk2").await;
    f.append(vec![crate::ev("user_message", "hello there")]).await.unwrap();
    let session = f.session.clone();
    let cases: Vec<(Option<pb::Predicate>, tonic::Code, &str)> = vec![
        (ranked(pb::Ranker::Bm25, "  ", 3), tonic::Code::InvalidArgument, "predicate.query"),
        (ranked(pb::Ranker::Bm25, "?!", 3), tonic::Code::InvalidArgument, "predicate.query"),
        (ranked(pb::Ranker::Bm25, "hello", 5000), tonic::Code::InvalidArgument, "predicate.top_k"),
        (
            Some(pb::Predicate { regex: "x".into(), ..ranked(pb::Ranker::Bm25, "hello", 3).unwrap() }),
            tonic::Code::InvalidArgument,
            "predicate",
        ),
        (
            Some(pb::Predicate { query: "hello".into(), ..Default::default() }),
            tonic::Code::InvalidArgument,
            "predicate.query",
        ),
        (Some(pb::Predicate { ranker: 99, ..Default::default() }), tonic::Code::InvalidArgument, "predicate.ranker"),
        // This server has no embedding provider.
        (ranked(pb::Ranker::Semantic, "hello", 3), tonic::Code::FailedPrecondition, "predicate.ranker"),
    ];
    for (predicate, code, field) in cases {
        let r = view(
            &f,
            pb::CompileViewRequest { predicate: predicate.clone(), ..req(&f, &session, pb::ViewKind::Adaptive) },
        )
        .await;
        let e = r.expect_err(&format!("{predicate:?}"));
        assert_eq!(e.code(), code, "{predicate:?}: {}", e.message());
        assert!(e.message().starts_with(field), "{predicate:?}: {}", e.message());
    }
}

#[tokio::test]
async fn semantic_ranks_the_sessions_events_by_their_embeddings() {
    let Some(model_dir) = memex_embed::test_model_dir() else { return };
    let srv = server_or_skip!(|c: &mut memex_server::Config| {
        c.embedding.provider = memex_server::config::EmbeddingProvider::Minilm;
        c.embedding.model_dir = model_dir.display().to_string();
        c.embedding.worker = true;
    });
    let mut f = fixture(&srv, "rk3").await;
    f.append(vec![
        crate::ev("user_message", "stock prices fell sharply on Monday"),
        crate::ev("assistant_message", "the feline rested on the rug all afternoon"),
        crate::ev("user_message", "the database migration finished"),
    ])
    .await
    .unwrap();
    let session = f.session.clone();
    let want = lines_of(&f, 2).await;
    // The embedding worker runs in the background: wait until the session's events have vectors.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, text) = view(
            &f,
            pb::CompileViewRequest {
                // No word in common with the cat sentence: only the vectors can find it.
                predicate: ranked(pb::Ranker::Semantic, "cat sleeping carpet", 1),
                ..req(&f, &session, pb::ViewKind::Adaptive)
            },
        )
        .await
        .unwrap();
        let text = String::from_utf8(text).unwrap();
        let found = pointers(&text);
        if !found.is_empty() {
            assert_eq!(found.len(), 1, "{text}");
            assert!(want.first_line <= found[0].0 && found[0].1 <= want.last_line, "{found:?} within {want:?}: {text}");
            break;
        }
        assert!(Instant::now() < deadline, "no semantic hit after 120 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
