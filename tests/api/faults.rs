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

/// An exhausted connection pool: every connection is held by a statement waiting on a lock, so
/// further calls get none within `acquire_timeout`. They answer `UNAVAILABLE` with a retry hint
/// and have done nothing; the ones holding connections finish once the lock goes; the server
/// serves on without a restart.
#[tokio::test]
async fn an_exhausted_pool_answers_unavailable_with_a_retry_hint_and_recovers() {
    use sqlx::Connection;
    let Some(srv) = TestServer::start_with(|c| {
        c.database.max_connections = 3;
        c.database.acquire_timeout_secs = 1;
    })
    .await
    else {
        return;
    };
    let url = srv.config.database.url.clone();
    let f = fixture(&srv, "pool").await;
    let sessions = f.c.sessions.clone();
    let ns = f.ns.clone();
    let mut locker = sqlx::PgConnection::connect(&url).await.unwrap();
    // An operator's view across the tenancy wall (row-level security).
    sqlx::query("SET memex.tenant = '*'").execute(&mut locker).await.unwrap();
    const COUNT: &str = "SELECT count(*) FROM sessions s JOIN namespaces n ON n.id = s.namespace_id WHERE n.name = $1";
    let before: i64 = sqlx::query_scalar(COUNT).bind(&ns).fetch_one(&mut locker).await.unwrap();

    // Hold the sessions table: creating a session waits on the lock, holding its connection.
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE").execute(&mut locker).await.unwrap();
    let create = |i: usize| {
        let (mut s, ns) = (sessions.clone(), ns.clone());
        tokio::spawn(async move {
            let req =
                pb::CreateSessionRequest { namespace: ns, agent_id: format!("waiting-{i}"), ..Default::default() };
            s.create_session(req).await
        })
    };
    let waiting: Vec<_> = (0..8).map(create).collect();
    // Past the pool's wait, while the lock is still held.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut refused = 0;
    let mut refusals = Vec::new();
    let mut pending = Vec::new();
    for h in waiting {
        if h.is_finished() {
            refusals.push(h.await.unwrap());
        } else {
            pending.push(h);
        }
    }
    for r in &refusals {
        let s = r.as_ref().expect_err("nothing can be created while the table is locked");
        assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
        assert!(s.message().contains("no database connection came free"), "{s:?}");
        assert!(s.metadata().get("grpc-retry-pushback-ms").is_some(), "a retry hint: {s:?}");
        refused += 1;
    }
    assert!(refused >= 1, "with 3 connections, some of 8 calls find none");
    assert!(!pending.is_empty(), "the calls holding connections wait on the lock");

    sqlx::query("COMMIT").execute(&mut locker).await.unwrap();
    let mut created = 0;
    for h in pending {
        match h.await.unwrap() {
            Ok(_) => created += 1,
            Err(s) => assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}"),
        }
    }
    assert!(created >= 1, "a call that held a connection finishes once the lock goes");
    // A refused call did nothing: exactly the answered sessions exist.
    let after: i64 = sqlx::query_scalar(COUNT).bind(&ns).fetch_one(&mut locker).await.unwrap();
    assert_eq!(after - before, created, "sessions created: only the ones answered OK");
    // And the server serves on.
    let mut s = sessions.clone();
    s.create_session(pb::CreateSessionRequest { namespace: ns, agent_id: "after".into(), ..Default::default() })
        .await
        .unwrap();
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Mount(std::path::PathBuf);

impl Mount {
    /// A tmpfs of `size` at a new directory; None where mounting is not allowed (not root).
    fn tmpfs(size: &str) -> Option<Mount> {
        let dir = std::env::temp_dir().join(format!("memex-full-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mount(dir))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fills what is left of the file system under `dir`.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    let mut small = [0u8; 512];
    while f.write_all(&small[..]).is_ok() {
        small[0] = small[0].wrapping_add(1);
    }
    let _ = f.sync_all();
    path
}

/// The disk under the text index fills up: appends still succeed (Postgres holds them), searches
/// answer (from the index and the fresh documents no commit could write) or `UNAVAILABLE`, never
/// `INTERNAL`; once space is back, the index catches up to exactly what was committed, without a
/// restart.
#[tokio::test]
async fn a_full_disk_under_the_index_loses_nothing_and_the_index_catches_up_when_space_returns() {
    let Some(mount) = Mount::tmpfs("16m") else {
        // Mounting needs root (CI runs as root); say so rather than pass quietly where it cannot.
        assert!(not_root(), "running as root, yet a tmpfs could not be mounted for the full-disk test");
        eprintln!("skipped: a tmpfs for the full-disk test needs root");
        return;
    };
    let dir = mount.0.join("index");
    let Some(srv) = TestServer::start_with(|c| c.search.index_dir = dir.display().to_string()).await else {
        return;
    };
    let mut f = fixture(&srv, "fulldisk").await;
    f.append(vec![ev("note", "alpha before the disk fills")]).await.unwrap();
    let search_at = |f: &crate::Fixture, word: &str, context_weight: Option<f32>| {
        // Without neighbours' smoothing, so a word finds its event (and, at context weight 0,
        // only by the event's own text).
        let req = pb::SearchRequest {
            namespace: f.ns.clone(),
            query: word.into(),
            limit: 5,
            context_weight,
            neighbor_weight: Some(0.0),
            session_weight: Some(0.0),
            ..Default::default()
        };
        let mut s = f.c.search.clone();
        // Hits found, or None for UNAVAILABLE; anything else is a wrong answer.
        async move {
            match s.search(req).await {
                Ok(r) => Some(r.into_inner().hits.len()),
                Err(s) if s.code() == tonic::Code::Unavailable => None,
                Err(s) => panic!("a full disk under the index must not answer {s:?}"),
            }
        }
    };
    let search = |f: &crate::Fixture, word: &str| search_at(f, word, Some(0.0));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while search(&f, "alpha").await != Some(1) {
        assert!(std::time::Instant::now() < deadline, "the first event was never indexed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let filler = fill(&mount.0);
    // Appends keep succeeding: the index is derived state, Postgres is the record.
    for i in 0..40 {
        let text: String = (0..200).map(|j| format!("fulldiskword{i}x{j} ")).collect();
        f.append(vec![ev("note", &format!("{text} omega{i}"))]).await.unwrap();
    }
    // Searches meanwhile: an answer or UNAVAILABLE, never INTERNAL. At the default context
    // weight the new events are caught up into RAM (fresh documents) though no commit can write
    // them, and found; at another weight a search must commit first, and may be UNAVAILABLE.
    let mut found_new = 0;
    for _ in 0..20 {
        if let Some(n) = search(&f, "alpha").await {
            assert!(n <= 1);
        }
        if search_at(&f, "omega39", None).await == Some(1) {
            found_new += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found_new > 0, "the new events are searchable before they can be committed");

    std::fs::remove_file(filler).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let found = (search(&f, "omega39").await, search(&f, "omega0").await, search(&f, "alpha").await);
        if found == (Some(1), Some(1), Some(1)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the index never caught up once space returned: {found:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every committed event is in the index once: each event's unique word finds it alone.
    for i in [0, 17, 39] {
        assert_eq!(search(&f, &format!("fulldiskword{i}x7")).await, Some(1), "event {i}");
    }
    let events = f.all_events().await;
    assert_eq!(events.len(), 41, "every append is stored");
    srv.stop().await;
}

fn not_root() -> bool {
    std::process::Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() != "0")
}

/// A write storm against a database that cannot keep up: the group committer's queue is bounded,
/// and an append that finds it full is refused at once (`RESOURCE_EXHAUSTED`, retry hint) with
/// nothing written, instead of waiting behind the others; the queued ones commit once the
/// database moves again.
#[tokio::test]
async fn a_full_group_commit_queue_refuses_appends_at_once() {
    use sqlx::Connection;
    let Some(srv) = TestServer::start_with(|c| {
        c.ingest.group_commit_shards = 1;
        c.ingest.group_commit_queue = 2;
    })
    .await
    else {
        return;
    };
    let mut f = fixture(&srv, "storm").await;
    let mut locker = sqlx::PgConnection::connect(&srv.config.database.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query("LOCK TABLE events IN EXCLUSIVE MODE").execute(&mut locker).await.unwrap();
    let append = |i: usize| {
        let mut events = f.c.events.clone();
        let req = pb::AppendEventsRequest {
            namespace: f.ns.clone(),
            session_id: f.session.clone(),
            events: vec![ev("note", &format!("storm {i}"))],
            ..Default::default()
        };
        tokio::spawn(async move { events.append_events(req).await })
    };
    // One in the committer's statement (waiting on the lock), two queued, the rest refused.
    let calls: Vec<_> = (0..8).map(append).collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (mut refused, mut waiting) = (0, Vec::new());
    for h in calls {
        if h.is_finished() {
            let s = h.await.unwrap().expect_err("nothing commits while the table is locked");
            assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
            assert!(s.metadata().get("grpc-retry-pushback-ms").is_some(), "{s:?}");
            refused += 1;
        } else {
            waiting.push(h);
        }
    }
    assert!(refused >= 4, "a full queue refuses at once: {refused} of 8 refused");
    sqlx::query("COMMIT").execute(&mut locker).await.unwrap();
    let mut committed = 0;
    for h in waiting {
        h.await.unwrap().unwrap();
        committed += 1;
    }
    assert_eq!(f.all_events().await.len(), committed, "the refused appends wrote nothing");
}
