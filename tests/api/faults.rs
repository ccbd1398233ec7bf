//! Faults of the derived state: a text index damaged on disk is detected and rebuilt from
//! Postgres; searches meanwhile answer UNAVAILABLE (retryable) or right, never INTERNAL and
//! never a wrong answer.
use std::time::Duration;

use memex_proto::v1 as pb;
use memex_tests::{TestServer, server_or_skip};

use crate::{ev, fixture};

/// Every file of the namespace indexes under `dir` with this extension, largest first.
fn files(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    out.sort_by_key(|p| std::cmp::Reverse(std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)));
    out
}

#[tokio::test]
async fn a_damaged_index_segment_is_detected_and_rebuilt_from_postgres() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "faults").await;
    for i in 0..20 {
        f.append((0..50).map(|j| ev("note", &format!("deploy cache failure number {i}-{j} in stage {j}"))).collect())
            .await
            .unwrap();
    }
    let token = f.token.trim_start_matches("Bearer ").to_owned();
    async fn search(
        srv: &TestServer,
        token: &str,
        ns: &str,
    ) -> Result<tonic::Response<pb::SearchResponse>, tonic::Status> {
        let req = pb::SearchRequest {
            namespace: ns.into(),
            query: "deploy cache failure".into(),
            limit: 5,
            ..Default::default()
        };
        srv.clients(Some(token)).await.search.search(req).await
    }
    let ns = f.ns.clone();
    let answer = |r: pb::SearchResponse| -> Vec<(String, String)> {
        r.hits.iter().map(|h| (h.event_id.clone(), format!("{:?}", h.score))).collect()
    };
    let before = answer(search(&srv, &token, &ns).await.unwrap().into_inner());
    assert_eq!(before.len(), 5);
    let (mut config, store) = (srv.config.clone(), srv.store.clone());
    let dir = std::env::temp_dir().join(format!("memex-faults-{}", uuid::Uuid::now_v7().simple()));
    config.search.index_dir = dir.display().to_string();
    srv.stop().await;
    let srv = TestServer::restart(config.clone(), store.clone()).await;
    search(&srv, &token, &ns).await.unwrap();
    srv.stop().await;

    // Scribble over the middle of the largest postings and term files.
    let mut damaged = 0;
    for ext in ["idx", "term", "store"] {
        for p in files(&dir, ext).into_iter().take(1) {
            let mut bytes = std::fs::read(&p).unwrap();
            let mid = bytes.len() / 2;
            let end = (mid + 64).min(bytes.len());
            bytes[mid..end].iter_mut().for_each(|b| *b = !*b);
            std::fs::write(&p, bytes).unwrap();
            damaged += 1;
        }
    }
    assert!(damaged >= 2, "found index files to damage under {}", dir.display());

    let srv = TestServer::restart(config, store).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match search(&srv, &token, &ns).await {
            Ok(r) => {
                assert_eq!(answer(r.into_inner()), before, "the same answer as before the damage");
                break;
            }
            Err(s) if s.code() == tonic::Code::Unavailable => {}
            Err(s) => panic!("a damaged index must be rebuilt, not answered with {s:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "the damaged index was never rebuilt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
