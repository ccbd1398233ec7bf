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

/// Copies `from` to `to`, each chunk after the proxy's current delay.
async fn pipe(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    delay_ms: &std::sync::atomic::AtomicU64,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let ms = delay_ms.load(std::sync::atomic::Ordering::SeqCst);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        to.write_all(&buf[..n]).await?;
    }
}

/// A TCP proxy to Postgres that the test can slow down, cut and refuse.
struct Proxy {
    addr: std::net::SocketAddr,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    refuse: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let delay_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (d, r, c) = (delay_ms.clone(), refuse.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                if r.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { continue };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let mut cut_rx = c.subscribe();
                let d = d.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = pipe(&mut cr, &mut sw, &d) => {}
                        _ = pipe(&mut sr, &mut cw, &d) => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Proxy { addr, delay_ms, refuse, cut }
    }
}

#[tokio::test]
async fn a_slow_or_flapping_network_to_postgres_gives_deadlines_and_unavailable_never_internal() {
    use std::sync::atomic::Ordering;
    let Some(upstream) = std::env::var("TEST_DATABASE_URL")
        .ok()
        .and_then(|u| url::Url::parse(&u).ok())
        .and_then(|u| Some(format!("{}:{}", u.host_str()?, u.port().unwrap_or(5432))))
    else {
        return;
    };
    let proxy = Proxy::start(upstream.clone()).await;
    let via = proxy.addr.to_string();
    let Some(srv) = TestServer::start_with(|c| {
        c.database.url = c.database.url.replace(&upstream, &via);
        c.database.acquire_timeout_secs = 1;
    })
    .await
    else {
        return;
    };
    let mut f = fixture(&srv, "network").await;
    f.append(vec![ev("note", "written before any trouble")]).await.unwrap();
    let get = |f: &crate::Fixture, timeout: Option<Duration>| {
        let mut req = tonic::Request::new(pb::GetEventsRequest {
            namespace: f.ns.clone(),
            session_id: f.session.clone(),
            ..Default::default()
        });
        if let Some(t) = timeout {
            req.set_timeout(t);
        }
        let mut events = f.c.events.clone();
        async move { events.get_events(req).await }
    };

    // Slow: a caller's deadline is kept (DEADLINE_EXCEEDED from the server, or the client's own
    // timer first); without one, the answer is right.
    proxy.delay_ms.store(400, Ordering::SeqCst);
    let hurried = get(&f, Some(Duration::from_millis(300))).await;
    assert!(
        matches!(
            hurried.as_ref().map_err(|s| s.code()),
            Err(tonic::Code::DeadlineExceeded | tonic::Code::Cancelled | tonic::Code::Unavailable)
        ),
        "{hurried:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let patient = loop {
        // A new pooled connection may take longer than the pool waits: retryable.
        match get(&f, None).await {
            Ok(r) => break r.into_inner(),
            Err(s) => assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "no answer through the slow network");
    };
    assert_eq!(patient.events[0].content, "written before any trouble");
    proxy.delay_ms.store(0, Ordering::SeqCst);

    // Flapping: every connection cut and new ones refused for a while: UNAVAILABLE, then back,
    // with no restart and nothing lost.
    proxy.refuse.store(true, Ordering::SeqCst);
    proxy.cut.send_modify(|n| *n += 1);
    let mut unavailable = 0;
    for _ in 0..3 {
        // An append answered before the cut reached its connection committed: fine.
        if let Err(s) = f.append(vec![ev("note", "while the network is down")]).await {
            assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
            unavailable += 1;
        }
    }
    assert!(unavailable > 0);
    proxy.refuse.store(false, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match f.append(vec![ev("note", "after the network is back")]).await {
            Ok(_) => break,
            Err(s) => assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "the server never reconnected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = f.all_events().await;
    assert_eq!(events[0].content, "written before any trouble");
    assert_eq!(events.last().unwrap().content, "after the network is back");
    assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1), "gapless");
}
