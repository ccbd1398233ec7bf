//! Replicas that agree: three `memex serve` processes over one Postgres, each with its own text
//! index and caches, written through concurrently, answer the same requests byte for byte —
//! views, search hits, packs (`BuildPack` and the stored `GetPack`), manifests and task state —
//! and right after a write on one, every other answers about it alike at once (a replica that has
//! not yet indexed a committed event catches up before it answers).
//!
//! Known gap: a search filtered to some sessions catches up only those sessions, while its BM25
//! statistics are the whole namespace index's; a replica behind on *other* sessions scores the
//! same hits slightly differently (seen: 3.3821 vs 3.3868) until its background catch-up (1 s)
//! arrives. The comparisons below run after an unfiltered search, which catches the namespace up.
#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memex_client::{Client, Conn};
use memex_proto::v1 as pb;
use memex_store::Access;

const REPLICAS: usize = 3;

struct Replica {
    child: Child,
    client: Client,
    index_dir: std::path::PathBuf,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.index_dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `memex serve` on a free port over `db_url` and waits until it answers with `token`.
async fn serve(db_url: &str, namespace: &str, token: &str, n: usize) -> Replica {
    let port = free_port();
    let index_dir = std::env::temp_dir().join(format!("memex-replica-{}-{n}-{port}", std::process::id()));
    let child = Command::new(env!("CARGO_BIN_EXE_memex"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--database-url", db_url])
        .env("MEMEX_SEARCH__INDEX_DIR", &index_dir)
        // The vectors live in Postgres, so replicas would agree on them too; the model is left
        // out only to keep three processes light enough for CI.
        .env("MEMEX_EMBEDDING__PROVIDER", "none")
        .env("MEMEX_LOG__FILTER", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let conn = Conn {
        endpoint: format!("http://127.0.0.1:{port}"),
        namespace: namespace.to_owned(),
        api_key: Some(token.to_owned()),
        api_key_file: "/nonexistent".into(),
        tls_ca: None,
    };
    let started = Instant::now();
    let client = loop {
        if let Ok(c) = conn.client().await
            && c.list_sessions(Default::default()).await.is_ok()
        {
            break c;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "replica {n} did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Replica { child, client, index_dir }
}

fn ev(kind: &str, content: String) -> pb::EventInput {
    pb::EventInput { kind: kind.into(), content, ..Default::default() }
}

/// A turn of an agent: a request, a tool call and its result, an answer.
fn turn(writer: usize, session: usize, t: usize) -> Vec<pb::EventInput> {
    let id = format!("call-{writer}-{session}-{t}");
    vec![
        ev("user_message", format!("writer {writer} session {session}: why does the deploy cache fail in step {t}?")),
        pb::EventInput {
            tool_name: "Bash".into(),
            tool_call_id: id.clone(),
            ..ev("tool_call", format!(r#"{{"command":"cargo test -p step{t}"}}"#))
        },
        pb::EventInput {
            tool_call_id: id,
            ..ev(
                "tool_result",
                format!("test step{t}::cache ... FAILED\nerror[E0382]: borrow of moved value in step {t}"),
            )
        },
        ev(
            "assistant_message",
            format!("Step {t} fails because the cache key is moved; decision: clone it (writer {writer})."),
        ),
    ]
}

async fn views(c: &Client, session: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (view, predicate) in [
        (pb::ViewKind::Full, None),
        (pb::ViewKind::Ui, None),
        (pb::ViewKind::Adaptive, Some(pb::Predicate { literal: "cache".into(), ..Default::default() })),
    ] {
        let req = pb::CompileViewRequest {
            session_id: session.to_owned(),
            view: view as i32,
            predicate,
            ..Default::default()
        };
        out.push(c.compile_view(req).await.unwrap().text);
    }
    out
}

async fn search(c: &Client, query: &str, session: Option<&str>) -> Vec<pb::SearchHit> {
    let filter = session.map(|s| pb::SearchFilter { session_ids: vec![s.to_owned()], ..Default::default() });
    let req = pb::SearchRequest { query: query.into(), limit: 20, filter, ..Default::default() };
    c.search(req).await.unwrap().hits
}

fn pack_req(session: &str) -> pb::BuildPackRequest {
    pb::BuildPackRequest {
        session_id: session.to_owned(),
        user_message: "which step's cache failure is still open, and what did we decide?".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn three_replicas_over_one_database_answer_byte_for_byte_alike() {
    let Some(db) = memex_tests::test_db().await else { return };
    let store = db.store().await;
    let ns = store.create_namespace("agree").await.unwrap();
    let token = store.create_api_key(&ns, "replicas", Access::Admin).await.unwrap().token;
    let mut replicas = Vec::new();
    for n in 0..REPLICAS {
        replicas.push(serve(&db.url, "agree", &token, n).await);
    }

    // Concurrent writes through every replica: two sessions each, turns appended in rounds.
    let mut writers = Vec::new();
    for (w, r) in replicas.iter().enumerate() {
        let c = r.client.clone();
        writers.push(tokio::spawn(async move {
            let mut sessions = Vec::new();
            for s in 0..2 {
                let req = pb::CreateSessionRequest {
                    agent_id: format!("agent-{w}-{s}"),
                    task_id: format!("task-{w}"),
                    ..Default::default()
                };
                sessions.push(c.create_session(req).await.unwrap().id);
            }
            for t in 0..8 {
                for (s, id) in sessions.iter().enumerate() {
                    c.append_events(id, turn(w, s, t), None).await.unwrap();
                }
            }
            sessions
        }));
    }
    let mut sessions = Vec::new();
    for w in writers {
        sessions.extend(w.await.unwrap());
    }

    // Task state written on one replica, compaction on another.
    let first = &replicas[0].client;
    let state = pb::TaskState {
        goals: vec!["make the deploy cache pass".into()],
        open_loops: vec!["step 7 still fails".into()],
        next_actions: vec!["clone the cache key in step 7".into()],
        ..Default::default()
    };
    let req = pb::UpdateTaskStateRequest { task_id: "task-0".into(), state: Some(state), ..Default::default() };
    first.update_task_state(req).await.unwrap();
    let compact = pb::CompactRequest { session_id: sessions[0].clone(), window_budget: 600, ..Default::default() };
    let compacted = replicas[1].client.compact(compact).await.unwrap();
    assert!(compacted.compacted, "the window was over budget: {compacted:?}");
    let manifest_id = compacted.manifest.as_ref().unwrap().id.clone();

    // Every replica caught up on the whole namespace (see the known gap above).
    for r in &replicas {
        search(&r.client, "cache", None).await;
    }
    // A pack built on one replica, replayed by every other.
    let pack = replicas[2].client.build_pack(pack_req(&sessions[0])).await.unwrap();
    assert!(!pack.items.is_empty());

    for (n, r) in replicas.iter().enumerate().skip(1) {
        let c = &r.client;
        let base = &replicas[0].client;
        // An unfiltered search catches its replica up on the whole namespace first.
        for q in ["deploy cache fail", "E0382 borrow", "decision clone", "step7"] {
            assert_eq!(search(c, q, None).await, search(base, q, None).await, "replica {n}: search {q:?}");
        }
        for s in &sessions {
            assert_eq!(views(c, s).await, views(base, s).await, "replica {n}, session {s}: views");
            assert_eq!(
                search(c, "cache key moved", Some(s)).await,
                search(base, "cache key moved", Some(s)).await,
                "replica {n}, session {s}: search"
            );
        }
        let replayed = c.get_pack(&pack.pack_id, pb::PackView::Basic).await.unwrap();
        assert_eq!(replayed, replicas[2].client.get_pack(&pack.pack_id, pb::PackView::Basic).await.unwrap());
        let built = c.build_pack(pack_req(&sessions[0])).await.unwrap();
        assert_eq!((&built.text, &built.items, &built.decisions), (&pack.text, &pack.items, &pack.decisions));
        assert_eq!(
            c.expand_manifest_all(&manifest_id).await.unwrap(),
            base.expand_manifest_all(&manifest_id).await.unwrap(),
            "replica {n}: manifest"
        );
        assert_eq!(c.get_task_state("task-0", 0).await.unwrap(), base.get_task_state("task-0", 0).await.unwrap());
    }

    // Read-your-writes across replicas: right after a write on one replica — an event, a task
    // state, a pack, a compaction — every replica answers about it, byte for byte alike, with no
    // wait and no unfiltered search between (each replica's filtered search and pack catch up the
    // session first; earlier sessions were caught up by the previous rounds, see the known gap).
    for (n, r) in replicas.iter().enumerate() {
        let word = format!("zebracache{n}");
        let target = &sessions[(n + 1) % sessions.len()];
        let task = format!("task-{}", (n + 1) % REPLICAS);
        let c = &r.client;
        c.append_events(target, vec![ev("note", format!("the {word} flag fixed it"))], None).await.unwrap();
        let version = c.get_task_state(&task, 0).await.map_or(0, |v| v.version);
        let state = pb::TaskState { goals: vec![format!("ship {word}")], ..Default::default() };
        let req = pb::UpdateTaskStateRequest {
            task_id: task.clone(),
            expected_version: version,
            state: Some(state),
            ..Default::default()
        };
        let written = c.update_task_state(req).await.unwrap();
        let compact = pb::CompactRequest { session_id: target.clone(), window_budget: 600, ..Default::default() };
        let compacted = c.compact(compact).await.unwrap();
        let manifest = compacted.manifest.as_ref().map(|m| m.id.clone()).expect("over budget: a manifest");
        let expanded = c.expand_manifest_all(&manifest).await.unwrap();
        // The pack after the compaction: it reads the window the compaction left.
        let pack = c.build_pack(pack_req(target)).await.unwrap();
        let full_pack = c.get_pack(&pack.pack_id, pb::PackView::Full).await.unwrap();
        let view = views(c, target).await;
        let hits = search(c, &word, Some(target)).await;
        assert_eq!(hits.len(), 1, "replica {n} found its own write: {hits:?}");
        for (m, other) in replicas.iter().enumerate().filter(|(m, _)| *m != n) {
            let o = &other.client;
            assert_eq!(search(o, &word, Some(target)).await, hits, "replica {m} after replica {n}'s write: search");
            assert_eq!(views(o, target).await, view, "replica {m} after replica {n}'s write: views");
            assert_eq!(o.get_task_state(&task, 0).await.unwrap(), written, "replica {m}: task state");
            assert_eq!(o.get_pack(&pack.pack_id, pb::PackView::Full).await.unwrap(), full_pack, "replica {m}: pack");
            let built = o.build_pack(pack_req(target)).await.unwrap();
            assert_eq!((&built.text, &built.items, &built.decisions), (&pack.text, &pack.items, &pack.decisions));
            assert_eq!(o.expand_manifest_all(&manifest).await.unwrap(), expanded, "replica {m}: manifest");
        }
    }
    // And the whole namespace, once every replica has caught up on it.
    for (n, r) in replicas.iter().enumerate().skip(1) {
        for q in ["zebracache flag", "deploy cache fail"] {
            assert_eq!(
                search(&r.client, q, None).await,
                search(&replicas[0].client, q, None).await,
                "replica {n}: {q:?}"
            );
        }
    }
}
