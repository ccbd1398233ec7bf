//! The search layer below gRPC, against the real database: rebuild equals live, restart and
//! corruption recovery, the embedding worker (backpressure, progress, model change) and hybrid
//! ranking with the real model.
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use memex_embed::{EmbedError, Embedder, MiniLm, ModelInfo};
use memex_proto::v1 as pb;
use memex_search::{EmbeddingWorker, SearchConfig, SearchIndex, SearchRequest, WorkerOptions, vector_count};
use memex_store::Store;
use memex_tests::{TestServer, server_or_skip};
use uuid::Uuid;

use crate::{call, ev, fixture, result};

fn index(store: &Store, dir: &std::path::Path, embedder: Option<Arc<dyn Embedder>>) -> SearchIndex {
    let mut opts = SearchConfig::in_dir(dir.to_string_lossy());
    opts.chunk_bytes = 256; // many chunks per event, to exercise grouping
    // Tests that assert what the vectors find must not depend on how loaded the machine is: the
    // query's vector is waited for (the wait and its fallback have tests of their own).
    opts.query_embed_wait_ms = 30_000;
    SearchIndex::open(store.clone(), opts, embedder, Arc::new(memex_pointer::NoFullView))
        .expect("the index directory is this test's")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("memex-idx-{name}-{}", Uuid::now_v7().simple()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

const QUERIES: [&str; 8] =
    ["error", "test failed assertion", "cargo build", "ok", "panicked index", "line 7", "deploy cache", "the"];

async fn answers(idx: &SearchIndex, ns: Uuid) -> Vec<Vec<(Uuid, u32, u32, u32, u32)>> {
    let mut out = Vec::new();
    for q in QUERIES {
        let mut r = SearchRequest::new(q, 25);
        r.vector_weight = 0.0;
        let hits = idx.search(ns, &r).await.unwrap().hits;
        out.push(
            hits.iter()
                .map(|h| (h.event_id, h.score.fused.to_bits(), h.score.bm25.to_bits(), h.score.bm25_rank, h.chunk))
                .collect(),
        );
    }
    out
}

/// Events with repeated texts (score ties), several chunks, an artifact, over several sessions.
async fn populate(srv: &TestServer, ns: &str, rounds: usize, live: Option<(&SearchIndex, Uuid)>) {
    let mut f = fixture(srv, ns).await;
    for round in 0..rounds {
        let mut batch = vec![ev("user_message", "cargo build failed with error E0382"), call(&format!("c{round}"))];
        let mut out = String::new();
        for i in 0..40 {
            out.push_str(&format!(
                "line {i}: test test_{i} ... {}\n",
                if i % 7 == 0 { "FAILED assertion" } else { "ok" }
            ));
        }
        batch.push(result(&format!("c{round}"), &out));
        batch.push(ev("assistant_message", "ok"));
        batch.push(ev("assistant_message", "ok"));
        batch.push(ev("note", &format!("deploy cache round {round}; thread panicked at index {round}")));
        if round == 1 {
            let big = "the quick brown fox jumps over the lazy dog error\n".repeat(400);
            batch.push(call("big"));
            batch.push(result("big", &big));
        }
        f.append(batch).await.unwrap();
        if let Some((idx, nsid)) = live {
            // Searches between appends: the live index grows by small commits (many segments).
            let mut r = SearchRequest::new("error", 5);
            r.vector_weight = 0.0;
            idx.search(nsid, &r).await.unwrap();
        }
    }
}

/// The background round (`sync_all`, once a second on every replica) reads every namespace's
/// head total in one statement: it catches up each namespace with events, indexes nothing on a
/// quiet round, finds the one namespace written to since, and never opens the index of a
/// namespace without sessions (the round used to visit every namespace, with a statement each).
#[tokio::test]
async fn a_background_round_catches_up_every_namespace_with_events_and_opens_no_other() {
    let srv = server_or_skip!();
    let all = memex_store::Tenant::All;
    let (a, b) =
        (srv.store.create_namespace("round-a").await.unwrap(), srv.store.create_namespace("round-b").await.unwrap());
    let empty = srv.store.create_namespace("round-empty").await.unwrap();
    let mut fa = fixture(&srv, "round-a").await;
    fa.append(vec![ev("note", "alpha deploy cache"), ev("note", "alpha second")]).await.unwrap();
    let mut fb = fixture(&srv, "round-b").await;
    fb.append(vec![ev("note", "beta one"), ev("note", "beta two"), ev("note", "beta three")]).await.unwrap();
    let dir = tmp("background-round");
    let idx = index(&srv.store, &dir, None);
    assert_eq!(memex_store::tenant::scope(all, idx.sync_all()).await.unwrap(), 5, "both namespaces' events");
    assert_eq!(memex_store::tenant::scope(all, idx.sync_all()).await.unwrap(), 0, "a quiet round indexes nothing");
    fb.append(vec![ev("note", "beta later zebra")]).await.unwrap();
    assert_eq!(memex_store::tenant::scope(all, idx.sync_all()).await.unwrap(), 1, "only what was appended since");
    assert!(dir.join(a.id.to_string()).exists() && dir.join(b.id.to_string()).exists());
    assert!(!dir.join(empty.id.to_string()).exists(), "a namespace without sessions is not opened");
    let mut r = SearchRequest::new("zebra", 5);
    r.vector_weight = 0.0;
    assert_eq!(idx.search(b.id, &r).await.unwrap().hits.len(), 1);
    drop(idx);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_rebuilt_index_answers_exactly_like_the_live_one() {
    let srv = server_or_skip!();
    let ns = srv.store.create_namespace("rebuild").await.unwrap();
    let live_dir = tmp("live");
    let live = index(&srv.store, &live_dir, None);
    populate(&srv, "rebuild", 12, Some((&live, ns.id))).await;
    let live_answers = answers(&live, ns.id).await;
    assert!(live_answers.iter().all(|a| !a.is_empty()));
    assert!(live_answers.iter().any(|a| a.len() == 25), "some query is cut by the limit (ties at the cut)");

    // Another replica, from nothing.
    let other_dir = tmp("other");
    let other = index(&srv.store, &other_dir, None);
    assert_eq!(answers(&other, ns.id).await, live_answers);
    // In-place rebuild (`memex reindex`): same answers again.
    assert!(live.rebuild(ns.id).await.unwrap() > 0);
    assert_eq!(answers(&live, ns.id).await, live_answers);

    // Restart: a new process opens the same directory, finds its watermarks in the index and
    // indexes nothing twice.
    drop(live);
    let reopened = index(&srv.store, &live_dir, None);
    assert_eq!(reopened.catch_up(ns.id, None).await.unwrap(), 0, "nothing to re-index after a restart");
    assert_eq!(answers(&reopened, ns.id).await, live_answers);
    drop(reopened);

    // A directory of another schema version, or garbage, is rebuilt at open.
    let ns_dir = other_dir.join(ns.id.to_string());
    drop(other);
    std::fs::write(ns_dir.join("memex-index.json"), r#"{"schema_version":0}"#).unwrap();
    let again = index(&srv.store, &other_dir, None);
    assert_eq!(answers(&again, ns.id).await, live_answers);
    drop(again);
    std::fs::write(ns_dir.join("meta.json"), "garbage").unwrap();
    let again = index(&srv.store, &other_dir, None);
    assert_eq!(answers(&again, ns.id).await, live_answers);
    for d in [live_dir, other_dir] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// When a few events have many matching chunks, the first top-n of chunks names too few events:
/// the search asks again for more, and still returns every matching event once.
#[tokio::test]
async fn events_of_many_matching_chunks_are_all_found_once() {
    let srv = server_or_skip!();
    let ns = srv.store.create_namespace("manychunks").await.unwrap();
    let dir = tmp("manychunks");
    let idx = index(&srv.store, &dir, None);
    // 10 results of several chunks (under the 8 KiB that would make an artifact), each line
    // saying "test" twice, then 20 results saying it once: the first top-n (45 chunks) is
    // nearly all of the 10, so the other 20 need a second, larger one.
    let mut f = fixture(&srv, "manychunks").await;
    for round in 0..30 {
        let mut out = String::new();
        for i in 0..300 {
            if round < 10 {
                out.push_str(&format!("line {i}: test test_{round}_{i}\n"));
            } else if i < 5 {
                out.push_str(&format!("line {i}: {}\n", if i == 0 { "one test" } else { "ok" }));
            }
        }
        f.append(vec![call(&format!("c{round}")), result(&format!("c{round}"), &out)]).await.unwrap();
    }
    let mut r = SearchRequest::new("test", 30);
    r.vector_weight = 0.0;
    // Own text only: a call after a result would match through its context.
    r.context_weight = 0.0;
    // As many candidates as hits: the first top-n is 1.5 chunks per candidate.
    r.candidates = 30;
    let hits = idx.search(ns.id, &r).await.unwrap().hits;
    let mut ids: Vec<Uuid> = hits.iter().map(|h| h.event_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), hits.len(), "each event once");
    assert_eq!(hits.len(), 30, "every tool result");
    assert!(hits.iter().all(|h| h.kind == "tool_result"));
    let _ = std::fs::remove_dir_all(dir);
}

/// A namespace's catch-up runs in rounds of a few thousand events (so that a query waits for
/// one round, not for the whole namespace): together they index every event once, and the
/// index answers exactly as one built in a single pass.
#[tokio::test]
async fn a_catch_up_in_rounds_indexes_everything_once() {
    let srv = server_or_skip!();
    let ns = srv.store.create_namespace("rounds").await.unwrap();
    for s in 0..5 {
        let mut f = fixture(&srv, "rounds").await;
        for b in 0..6 {
            let batch = (0..100)
                .map(|i| ev("note", &format!("session {s} batch {b} event {i}: deploy cache error {}", i % 7)))
                .collect();
            f.append(batch).await.unwrap();
        }
    }
    let dir = tmp("rounds");
    let rounds = index(&srv.store, &dir, None);
    assert_eq!(rounds.catch_up(ns.id, None).await.unwrap(), 3000, "more than one round's worth");
    assert_eq!(rounds.catch_up(ns.id, None).await.unwrap(), 0, "nothing twice");
    let one_pass_dir = tmp("one-pass");
    let one_pass = index(&srv.store, &one_pass_dir, None);
    assert_eq!(one_pass.rebuild(ns.id).await.unwrap(), 3000);
    assert_eq!(answers(&rounds, ns.id).await, answers(&one_pass, ns.id).await);
    drop((rounds, one_pass));
    for d in [dir, one_pass_dir] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Two processes given one index directory would fight over tantivy's writer lock at their
/// first search; the second is refused when it opens the directory instead, with a message that
/// names the option to change.
#[tokio::test]
async fn a_second_owner_of_an_index_directory_is_refused_at_open() {
    let srv = server_or_skip!();
    let dir = tmp("owned");
    let first = index(&srv.store, &dir, None);
    let opts = SearchConfig::in_dir(dir.to_string_lossy());
    let second = SearchIndex::open(srv.store.clone(), opts.clone(), None, Arc::new(memex_pointer::NoFullView));
    let err = second.err().expect("the directory is taken");
    assert!(matches!(err, memex_search::IndexError::DirInUse { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&*dir.to_string_lossy()) && message.contains("search.index_dir"), "{message}");
    drop(first);
    SearchIndex::open(srv.store.clone(), opts, None, Arc::new(memex_pointer::NoFullView)).expect("free again");
    let _ = std::fs::remove_dir_all(dir);
}

/// An embedder that waits at a gate before each batch, to hold the worker still.
struct Gated {
    inner: MiniLm,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Embedder for Gated {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move {
            self.gate.acquire().await.expect("gate").forget();
            self.inner.embed(texts).await
        })
    }
}

fn tiny(name: &str, dim: usize) -> MiniLm {
    memex_embed::minilm::tiny_random(name, dim, &["deploy", "cache", "error", "test", "ok", "note"]).unwrap()
}

#[tokio::test]
async fn the_worker_never_blocks_ingest_applies_backpressure_and_reports_progress() {
    let srv = server_or_skip!();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let embedder: Arc<dyn Embedder> = Arc::new(Gated { inner: tiny("gated", 8), gate: gate.clone() });
    let opts = WorkerOptions {
        batch_size: 4,
        events_per_job: 5,
        queue_capacity: 2,
        poll_interval: Duration::from_millis(20),
        ..WorkerOptions::default()
    };
    let worker = EmbeddingWorker::start(srv.store.clone(), embedder.clone(), opts).await.unwrap();
    // 6 sessions x 20 events (and one empty event, which has nothing to embed).
    let mut total = 0;
    for s in 0..6 {
        let mut f = fixture(&srv, "bp").await;
        let mut batch: Vec<pb::EventInput> = (0..20).map(|i| ev("note", &format!("deploy cache {s} {i}"))).collect();
        batch[0] = ev("note", "");
        let t0 = std::time::Instant::now();
        f.append(batch).await.unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "appends do not wait for the stalled worker");
        total += 20;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p = worker.progress();
    assert_eq!(p.embedded_events, 0, "the gate is closed");
    assert!(p.queued_jobs <= 2 && p.max_queued_jobs <= 2, "the queue never outgrows its capacity: {p:?}");
    assert!(p.max_queued_jobs >= 1, "{p:?}");
    assert_eq!(worker.backlog().await.unwrap(), total);

    gate.add_permits(10_000);
    assert!(worker.wait_idle(Duration::from_secs(60)).await.unwrap(), "{:?}", worker.progress());
    let p = worker.progress();
    assert_eq!(p.embedded_events + p.skipped_events, total, "{p:?}");
    assert_eq!(p.skipped_events, 6);
    assert_eq!(p.backlog_events, 0);
    assert!(p.batches >= (total - 6) / 4 && p.errors == 0 && p.embedded_bytes > 0, "{p:?}");
    let ns = srv.store.namespace("bp").await.unwrap();
    assert_eq!(vector_count(srv.store.pool(), ns.id, embedder.info()).await.unwrap(), total - 6);
    worker.stop().await;
}

/// A job that waits longer than the lease (slow model, full queue) must not be claimed and embedded
/// a second time by the same worker.
#[tokio::test]
async fn a_slow_model_embeds_each_event_once() {
    let srv = server_or_skip!();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let embedder: Arc<dyn Embedder> = Arc::new(Gated { inner: tiny("slow", 8), gate: gate.clone() });
    let opts = WorkerOptions {
        batch_size: 4,
        events_per_job: 5,
        queue_capacity: 2,
        poll_interval: Duration::from_millis(20),
        lease: Duration::from_secs(1),
        ..WorkerOptions::default()
    };
    let worker = EmbeddingWorker::start(srv.store.clone(), embedder.clone(), opts).await.unwrap();
    let mut total = 0;
    for s in 0..3 {
        let mut f = fixture(&srv, "slow").await;
        f.append((0..12).map(|i| ev("note", &format!("deploy cache {s} {i}"))).collect()).await.unwrap();
        total += 12;
    }
    // Every claim's lease runs out while the gate is closed.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    gate.add_permits(10_000);
    assert!(worker.wait_idle(Duration::from_secs(60)).await.unwrap(), "{:?}", worker.progress());
    let p = worker.progress();
    assert_eq!(p.embedded_events, total, "each event embedded once: {p:?}");
    worker.stop().await;
}

#[tokio::test]
async fn a_model_change_re_embeds_and_search_uses_only_the_current_model() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "mc").await;
    f.append((0..30).map(|i| ev("note", &format!("deploy cache error {i}"))).collect()).await.unwrap();
    let ns = srv.store.namespace("mc").await.unwrap();
    let opts = WorkerOptions { poll_interval: Duration::from_millis(20), ..WorkerOptions::default() };
    let m1: Arc<dyn Embedder> = Arc::new(tiny("m1", 8));
    let w = EmbeddingWorker::start(srv.store.clone(), m1.clone(), opts.clone()).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap());
    w.stop().await;
    assert_eq!(vector_count(srv.store.pool(), ns.id, m1.info()).await.unwrap(), 30);

    let m2: Arc<dyn Embedder> = Arc::new(tiny("m2", 12));
    let w = EmbeddingWorker::start(srv.store.clone(), m2.clone(), opts).await.unwrap();
    assert_eq!(w.backlog().await.unwrap(), 30, "a new model starts from zero");
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap());
    w.stop().await;
    assert_eq!(vector_count(srv.store.pool(), ns.id, m2.info()).await.unwrap(), 30);
    assert_eq!(vector_count(srv.store.pool(), ns.id, m1.info()).await.unwrap(), 30, "old vectors are kept");

    // Search with m2: the vector list ranks m2's vectors (dimension 12); m1's would not even fit.
    let dir = tmp("mc");
    let idx = index(&srv.store, &dir, Some(m2));
    let mut r = SearchRequest::new("deploy", 40);
    r.bm25_weight = 0.0;
    let hits = idx.search(ns.id, &r).await.unwrap().hits;
    assert_eq!(hits.len(), 30);
    assert!(hits.iter().all(|h| h.score.vector_rank > 0 && h.score.bm25_rank == 0));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn hybrid_search_finds_paraphrases_and_mmr_spreads_duplicates() {
    let Some(model_dir) = memex_embed::test_model_dir() else { return };
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "hy").await;
    let r = f
        .append(vec![
            ev("user_message", "the feline rested on the rug all afternoon"),
            ev("user_message", "stock prices fell sharply on Monday"),
            ev("note", "the database migration finished"),
            ev("note", "the database migration finished."),
            ev("note", "the database migration finished!"),
            ev("note", "rollback plan: restore the snapshot taken before the migration"),
        ])
        .await
        .unwrap();
    let ids: Vec<Uuid> = r.event_ids.iter().map(|i| i.parse().unwrap()).collect();
    let ns = srv.store.namespace("hy").await.unwrap();
    let model: Arc<dyn Embedder> = Arc::new(MiniLm::load(&model_dir, memex_embed::MiniLmOptions::default()).unwrap());
    let w = EmbeddingWorker::start(srv.store.clone(), model.clone(), WorkerOptions::default()).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(120)).await.unwrap());
    w.stop().await;
    let dir = tmp("hy");
    let idx = index(&srv.store, &dir, Some(model));

    // No word in common: BM25 finds nothing, the vectors find the cat (with its text: a hit
    // without a matching chunk shows the event's own content).
    let mut cat = SearchRequest::new("cat sleeping carpet", 3);
    cat.with_text = true;
    let hits = idx.search(ns.id, &cat).await.unwrap().hits;
    assert_eq!(hits[0].event_id, ids[0]);
    assert_eq!((hits[0].score.bm25_rank, hits[0].score.vector_rank), (0, 1));
    assert!(hits[0].score.vector > 0.4);
    assert_eq!(hits[0].text.as_deref(), Some("the feline rested on the rug all afternoon"));

    // Three near-identical notes: without MMR they fill the top 3; with MMR the rollback note gets in.
    let mut q = SearchRequest::new("database migration", 3);
    let plain: Vec<Uuid> = idx.search(ns.id, &q).await.unwrap().hits.iter().map(|h| h.event_id).collect();
    assert!(!plain.contains(&ids[5]), "{plain:?}");
    q.mmr_lambda = Some(0.5);
    let diverse: Vec<Uuid> = idx.search(ns.id, &q).await.unwrap().hits.iter().map(|h| h.event_id).collect();
    assert!(diverse.contains(&ids[5]), "{diverse:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A query over the whole namespace sees what was appended after one that found the index
/// current (which lets the next run BM25 beside its check): it catches up and searches again.
/// Hits show their matching chunk, not the head of a large output.
#[tokio::test]
async fn a_namespace_wide_query_after_a_quiet_one_still_sees_new_events() {
    let srv = server_or_skip!();
    let ns = srv.store.create_namespace("quiet").await.unwrap();
    let mut f = fixture(&srv, "quiet").await;
    let mut out: String = (0..400).map(|i| format!("line {i}: nothing to see here\n")).collect();
    out.push_str("line 400: the needle zqneedle is here\n");
    f.append(vec![ev("note", "zqfirst words"), call("c1"), result("c1", &out)]).await.unwrap();
    let dir = tmp("quiet");
    let idx = index(&srv.store, &dir, None);
    let ask = |q: &str| {
        let mut r = SearchRequest::new(q, 5);
        r.vector_weight = 0.0;
        r.with_text = true;
        r
    };
    for word in ["zqalpha", "zqbeta", "zqgamma"] {
        // Two searches, the second of which finds the index current (the first may catch up:
        // the first time, nothing was indexed; later, nothing is new), so the marker's search
        // runs BM25 beside its check and must notice the append.
        for _ in 0..2 {
            let hits = idx.search(ns.id, &ask("zqfirst")).await.unwrap().hits;
            assert_eq!(hits[0].text.as_deref(), Some("zqfirst words"));
        }
        f.append(vec![ev("note", &format!("marker {word} here"))]).await.unwrap();
        let hits = idx.search(ns.id, &ask(word)).await.unwrap().hits;
        assert_eq!(hits.first().and_then(|h| h.text.as_deref()), Some(format!("marker {word} here").as_str()));
    }
    let hits = idx.search(ns.id, &ask("zqneedle")).await.unwrap().hits;
    let text = hits[0].text.as_deref().unwrap_or_default();
    assert!(text.contains("zqneedle") && !text.contains("line 0:"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Queries of many sessions at once, each right after its session's append, each see their own
/// session's new event: one catch-up (one commit) serves the queries waiting for it.
#[tokio::test]
async fn concurrent_queries_of_many_sessions_each_see_their_own_writes() {
    let srv = server_or_skip!();
    let ns = srv.store.create_namespace("concurrent").await.unwrap();
    let dir = tmp("concurrent");
    let idx = Arc::new(index(&srv.store, &dir, None));
    let mut sessions = Vec::new();
    for _ in 0..8 {
        sessions.push(fixture(&srv, "concurrent").await);
    }
    let word = |round: usize, i: usize| format!("zq{}{}", (b'a' + round as u8) as char, (b'a' + i as u8) as char);
    for round in 0..3 {
        let queries = sessions.iter_mut().enumerate().map(|(i, f)| {
            let idx = idx.clone();
            async move {
                f.append(vec![ev("note", &format!("marker {} here", word(round, i)))]).await.unwrap();
                let mut r = SearchRequest::new(word(round, i), 5);
                r.vector_weight = 0.0;
                r.filter.session_ids = vec![f.session.parse().unwrap()];
                idx.search(ns.id, &r).await.unwrap().hits.len()
            }
        });
        let found = futures::future::join_all(queries).await;
        assert_eq!(found, vec![1; 8], "round {round}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A query over a session finds the session's newest events without committing its catch-up
/// (an agent loop asks every turn), with the score they have once the background catch-up has
/// committed them; a query over the whole namespace keeps its catch-up fresh too, and one at
/// another context weight commits.
#[tokio::test]
async fn a_sessions_query_finds_new_events_before_they_are_committed_with_the_same_scores() {
    let srv = server_or_skip!();
    let ns = srv.store.create_namespace("fresh").await.unwrap();
    let dir = tmp("fresh");
    let idx = index(&srv.store, &dir, None);
    let mut f = fixture(&srv, "fresh").await;
    f.append(vec![ev("note", "the parser fails on nested brackets"), ev("note", "unrelated words")]).await.unwrap();
    idx.catch_up(ns.id, None).await.unwrap();
    let commits = idx.index_stats().commits();
    let query = |session: Option<&str>| {
        let mut r = SearchRequest::new("nested brackets parser", 10);
        r.vector_weight = 0.0;
        r.filter.session_ids = session.map(|s| vec![s.parse().unwrap()]).unwrap_or_default();
        r
    };
    let scored = |hits: Vec<memex_search::Hit>| -> Vec<(u64, u32)> {
        hits.iter().map(|h| (h.seq, h.score.bm25.to_bits())).collect()
    };
    let mut found = Vec::new();
    for turn in 0..3 {
        f.append(vec![ev("note", &format!("turn {turn}: nested brackets parse now"))]).await.unwrap();
        let hits = idx.search(ns.id, &query(Some(&f.session))).await.unwrap().hits;
        assert!(hits.iter().any(|h| h.seq == 3 + turn), "turn {turn}: the new event is found: {hits:?}");
        found = scored(hits);
    }
    assert_eq!(idx.index_stats().commits(), commits, "the session's queries committed nothing");
    // The background catch-up commits them; the same query then scores them alike.
    idx.catch_up(ns.id, None).await.unwrap();
    assert_eq!(idx.index_stats().commits(), commits + 1);
    let committed = scored(idx.search(ns.id, &query(Some(&f.session))).await.unwrap().hits);
    assert_eq!(committed, found);
    // A query over the namespace keeps what it catches up fresh too, and finds it.
    f.append(vec![ev("note", "nested once more")]).await.unwrap();
    let hits = idx.search(ns.id, &query(None)).await.unwrap().hits;
    assert!(hits.iter().any(|h| h.seq == 6), "{hits:?}");
    assert_eq!(idx.index_stats().commits(), commits + 1);
    // Fresh parts index only what the default context weight scores on: a query at another
    // weight commits them (and its own catch-up) first, and still finds its new event.
    f.append(vec![ev("note", "nested brackets at another weight")]).await.unwrap();
    let mut other = query(Some(&f.session));
    other.context_weight = 0.0;
    let hits = idx.search(ns.id, &other).await.unwrap().hits;
    assert!(hits.iter().any(|h| h.seq == 7), "{hits:?}");
    assert_eq!(idx.index_stats().commits(), commits + 2);
    let _ = std::fs::remove_dir_all(dir);
}

/// The query's vector never holds a search up: when the model cannot answer within
/// `query_embed_wait_ms`, or its queue is full, the search runs on BM25 alone and says so; the
/// vector, once made, is kept for the next ask; a query whose caller is gone is not embedded.
#[tokio::test]
async fn a_saturated_model_costs_searches_their_vectors_not_their_answers() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "qv").await;
    f.append((0..20).map(|i| ev("note", &format!("deploy cache error {i}"))).collect()).await.unwrap();
    let ns = srv.store.namespace("qv").await.unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let embedder: Arc<dyn Embedder> = Arc::new(Gated { inner: tiny("qv", 8), gate: gate.clone() });
    let dir = tmp("qv");
    let mut opts = SearchConfig::in_dir(dir.to_string_lossy());
    opts.query_embed_wait_ms = 50;
    opts.query_embed_queue = 2;
    let idx = Arc::new(
        SearchIndex::open(srv.store.clone(), opts, Some(embedder), Arc::new(memex_pointer::NoFullView)).unwrap(),
    );
    let stats = idx.query_vector_stats().expect("an embedder");

    // The model is stuck: the answer comes from BM25, in time, and says it had no vectors.
    let started = std::time::Instant::now();
    let r = idx.search(ns.id, &SearchRequest::new("deploy", 5)).await.unwrap();
    assert!(!r.vectors_used);
    assert_eq!(r.hits.len(), 5);
    assert!(r.hits.iter().all(|h| h.score.bm25_rank > 0 && h.score.vector_rank == 0));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(stats.late.load(std::sync::atomic::Ordering::Relaxed), 1);

    // More queries than the queue holds: the rest are shed at once.
    let many: Vec<_> = (0..6)
        .map(|i| {
            let idx = idx.clone();
            tokio::spawn(async move { idx.search(ns.id, &SearchRequest::new(format!("cache {i}"), 5)).await })
        })
        .collect();
    for h in many {
        assert!(!h.await.unwrap().unwrap().vectors_used);
    }
    assert!(stats.shed.load(std::sync::atomic::Ordering::Relaxed) >= 3, "{stats:?}");

    // The model frees up: the stuck batch (the first query, whose caller is gone, is dropped at
    // its turn) and the next ones run; a query asked again is found in the cache.
    gate.add_permits(1000);
    let worker_opts = WorkerOptions { poll_interval: Duration::from_millis(20), ..WorkerOptions::default() };
    let embedder: Arc<dyn Embedder> = Arc::new(Gated { inner: tiny("qv", 8), gate: gate.clone() });
    let w = EmbeddingWorker::start(srv.store.clone(), embedder, worker_opts).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap());
    w.stop().await;
    let mut used = false;
    for _ in 0..100 {
        if idx.search(ns.id, &SearchRequest::new("deploy", 5)).await.unwrap().vectors_used {
            used = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(used, "{stats:?}");
    assert!(stats.abandoned.load(std::sync::atomic::Ordering::Relaxed) >= 1, "queued, then given up: {stats:?}");
    let again = idx.search(ns.id, &SearchRequest::new("deploy", 5)).await.unwrap();
    assert!(again.vectors_used && again.hits.iter().any(|h| h.score.vector_rank > 0));
    assert!(stats.cached.load(std::sync::atomic::Ordering::Relaxed) >= 1, "{stats:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A k-NN that Postgres cannot answer within `knn_timeout_ms` (here: the embeddings are locked,
/// as an HNSW scan waits behind inserts) costs the search its vectors, not its answer: BM25
/// alone, in time, said so and counted; once the table is free, vectors again.
#[tokio::test]
async fn a_slow_knn_costs_a_search_its_vectors_not_its_answer() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "kt").await;
    f.append((0..20).map(|i| ev("note", &format!("deploy cache error {i}"))).collect()).await.unwrap();
    let ns = srv.store.namespace("kt").await.unwrap();
    let opts = WorkerOptions { poll_interval: Duration::from_millis(20), ..WorkerOptions::default() };
    let w = EmbeddingWorker::start(srv.store.clone(), Arc::new(tiny("kt", 8)), opts).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap());
    w.stop().await;
    let dir = tmp("kt");
    let mut opts = SearchConfig::in_dir(dir.to_string_lossy());
    opts.exact_knn_max = 0; // the HNSW path, which the timeout bounds
    opts.knn_timeout_ms = 200;
    let idx =
        SearchIndex::open(srv.store.clone(), opts, Some(Arc::new(tiny("kt", 8))), Arc::new(memex_pointer::NoFullView))
            .unwrap();
    let stats = idx.query_vector_stats().expect("an embedder");
    let r = idx.search(ns.id, &SearchRequest::new("deploy cache", 5)).await.unwrap();
    assert!(r.vectors_used && r.hits.iter().any(|h| h.score.vector_rank > 0), "{r:?}");

    let mut lock = srv.store.pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE embeddings IN ACCESS EXCLUSIVE MODE").execute(&mut *lock).await.unwrap();
    let started = std::time::Instant::now();
    let r = idx.search(ns.id, &SearchRequest::new("deploy cache", 5)).await.unwrap();
    let took = started.elapsed();
    assert!(!r.vectors_used, "{r:?}");
    assert_eq!(r.hits.len(), 5);
    assert!(r.hits.iter().all(|h| h.score.bm25_rank > 0 && h.score.vector_rank == 0), "{r:?}");
    assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(stats.knn_late.load(std::sync::atomic::Ordering::Relaxed), 1);
    lock.rollback().await.unwrap();

    let r = idx.search(ns.id, &SearchRequest::new("deploy cache", 5)).await.unwrap();
    assert!(r.vectors_used && r.hits.iter().any(|h| h.score.vector_rank > 0), "{r:?}");
    assert_eq!(stats.knn_late.load(std::sync::atomic::Ordering::Relaxed), 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// The fast tier (a static table distilled from the model) gives packs their vectors at a fleet's
/// rate: a `Fast` search ranks by its vectors without waiting on the model, and a `Best` search
/// whose model vector is late falls back to it instead of to BM25 alone.
#[tokio::test]
async fn the_fast_tier_answers_when_the_model_cannot() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "ft").await;
    f.append((0..20).map(|i| ev("note", &format!("deploy cache error {i}"))).collect()).await.unwrap();
    let ns = srv.store.namespace("ft").await.unwrap();
    let model = tiny("ft", 8);
    let table_dir = tmp("ft-static");
    memex_embed::StaticTable::distill(&model, &table_dir).unwrap();
    let fast: Arc<dyn Embedder> = Arc::new(memex_embed::StaticTable::load(&table_dir, "ft-static".into()).unwrap());
    // The fast tier's worker embeds every event.
    let opts = WorkerOptions { poll_interval: Duration::from_millis(20), ..WorkerOptions::default() };
    let w = EmbeddingWorker::start(srv.store.clone(), fast.clone(), opts).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap());
    w.stop().await;
    assert_eq!(vector_count(srv.store.pool(), ns.id, fast.info()).await.unwrap(), 20);

    // The model itself is stuck.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let stuck: Arc<dyn Embedder> = Arc::new(Gated { inner: model, gate });
    let dir = tmp("ft");
    let mut opts = SearchConfig::in_dir(dir.to_string_lossy());
    opts.query_embed_wait_ms = 50;
    let idx = SearchIndex::open(srv.store.clone(), opts, Some(stuck), Arc::new(memex_pointer::NoFullView))
        .unwrap()
        .with_fast_tier(fast);
    let mut fast_req = SearchRequest::new("deploy cache", 5);
    fast_req.tier = memex_search::VectorTier::Fast;
    fast_req.bm25_weight = 0.0;
    let r = idx.search(ns.id, &fast_req).await.unwrap();
    assert!(r.vectors_used && r.hits.len() == 5 && r.hits.iter().all(|h| h.score.vector_rank > 0), "{r:?}");
    let asked = |s: &memex_search::QueryVectorStats| {
        use std::sync::atomic::Ordering::Relaxed;
        s.cached.load(Relaxed) + s.embedded.load(Relaxed) + s.shed.load(Relaxed) + s.late.load(Relaxed)
    };
    let stats = idx.query_vector_stats().expect("a model");
    assert_eq!(asked(&stats), 0, "a Fast search never waits on the model");
    // Best: the model's vector is late, the fast tier's ranks instead of BM25 alone.
    let mut best = SearchRequest::new("deploy cache", 5);
    best.bm25_weight = 0.0;
    let r = idx.search(ns.id, &best).await.unwrap();
    assert!(r.vectors_used && r.hits.iter().all(|h| h.score.vector_rank > 0), "{r:?}");
    assert_eq!(stats.late.load(std::sync::atomic::Ordering::Relaxed), 1, "the model was asked, and was late");
    drop(idx);

    // The fast tier keeps no HNSW index: over a namespace too large for exact k-NN it ranks only
    // a filter of a few sessions, and an unfiltered query goes without vectors.
    let mut opts = SearchConfig::in_dir(dir.to_string_lossy());
    opts.exact_knn_max = 5;
    let fast_only = SearchIndex::open(srv.store.clone(), opts, None, Arc::new(memex_pointer::NoFullView))
        .unwrap()
        .with_fast_tier(Arc::new(memex_embed::StaticTable::load(&table_dir, "ft-static".into()).unwrap()));
    let r = fast_only.search(ns.id, &fast_req).await.unwrap();
    assert!(!r.vectors_used, "20 events over exact_knn_max, no filter: {r:?}");
    fast_req.filter.session_ids = vec![f.session.parse().unwrap()];
    let r = fast_only.search(ns.id, &fast_req).await.unwrap();
    assert!(r.vectors_used && r.hits.iter().all(|h| h.score.vector_rank > 0), "{r:?}");
    for d in [dir, table_dir] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A foreground whose request load (`busy`) and appends (`appending`) a test sets.
#[derive(Default)]
struct Load {
    busy: std::sync::atomic::AtomicBool,
    appending: std::sync::atomic::AtomicBool,
}

impl Load {
    fn busy() -> Arc<Load> {
        let l = Load::default();
        l.busy.store(true, std::sync::atomic::Ordering::Relaxed);
        Arc::new(l)
    }

    fn appending() -> Arc<Load> {
        let l = Load::default();
        l.appending.store(true, std::sync::atomic::Ordering::Relaxed);
        Arc::new(l)
    }
}

impl memex_search::Foreground for Load {
    fn busy(&self) -> bool {
        self.busy.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn ingesting(&self) -> bool {
        self.appending.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Appends are foreground only for the worker that runs in the lulls (no yield limit: the
/// model's): it waits while events arrive; a worker with a yield limit (the fast tier's) does not.
#[tokio::test]
async fn only_the_model_worker_waits_while_events_are_appended() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "yi").await;
    f.append((0..8).map(|i| ev("note", &format!("deploy cache {i}"))).collect()).await.unwrap();
    let appending = Load::appending();
    let lulls = WorkerOptions {
        batch_size: 4,
        poll_interval: Duration::from_millis(20),
        max_yield: None,
        ..WorkerOptions::default()
    };
    let model: Arc<dyn Embedder> = Arc::new(tiny("yi", 8));
    let w = EmbeddingWorker::start_yielding(srv.store.clone(), model.clone(), lulls.clone(), Some(appending.clone()))
        .await
        .unwrap();
    assert!(!w.wait_idle(Duration::from_millis(1500)).await.unwrap(), "{:?}", w.progress());
    assert_eq!(w.progress().embedded_events, 0, "nothing while events are appended");
    w.stop().await;

    let limited = WorkerOptions { max_yield: Some(Duration::from_secs(1)), ..lulls };
    let w = EmbeddingWorker::start_yielding(srv.store.clone(), model, limited, Some(appending)).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap(), "{:?}", w.progress());
    let p = w.progress();
    assert_eq!(p.embedded_events, 8);
    assert!(p.yielded_seconds < 0.5, "appends are no reason for it to wait: {p:?}");
    w.stop().await;
}

/// Background embedding steps aside while the foreground is busy, for at most a second per batch:
/// it slows down under load but never stops.
#[tokio::test]
async fn the_worker_steps_aside_for_requests_but_keeps_going() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "ya").await;
    f.append((0..8).map(|i| ev("note", &format!("deploy cache {i}"))).collect()).await.unwrap();
    let busy = Load::busy();
    let opts = WorkerOptions { batch_size: 4, poll_interval: Duration::from_millis(20), ..WorkerOptions::default() };
    let model: Arc<dyn Embedder> = Arc::new(tiny("ya", 8));
    let w = EmbeddingWorker::start_yielding(srv.store.clone(), model, opts, Some(busy.clone())).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap(), "it keeps going: {:?}", w.progress());
    let p = w.progress();
    assert_eq!(p.embedded_events, 8);
    assert!(p.yielded_seconds >= 1.5, "two batches, each after a second aside: {p:?}");
    // Not busy: no waiting.
    busy.busy.store(false, std::sync::atomic::Ordering::Relaxed);
    f.append((0..8).map(|i| ev("note", &format!("cache deploy {i}"))).collect()).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap());
    let q = w.progress();
    assert_eq!(q.embedded_events, 16);
    assert!(q.yielded_seconds - p.yielded_seconds < 0.5, "{p:?} then {q:?}");
    w.stop().await;
}

/// Without a yield limit (the model beside requests) the worker waits for a quiet foreground:
/// nothing is embedded while it stays busy, everything once it is quiet, and a stop while it
/// waits returns at once.
#[tokio::test]
async fn the_model_worker_waits_for_a_quiet_foreground() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "yq").await;
    f.append((0..8).map(|i| ev("note", &format!("deploy cache {i}"))).collect()).await.unwrap();
    let busy = Load::busy();
    let opts = WorkerOptions {
        batch_size: 4,
        poll_interval: Duration::from_millis(20),
        max_yield: None,
        ..WorkerOptions::default()
    };
    let model: Arc<dyn Embedder> = Arc::new(tiny("yq", 8));
    let w = EmbeddingWorker::start_yielding(srv.store.clone(), model.clone(), opts.clone(), Some(busy.clone()))
        .await
        .unwrap();
    assert!(!w.wait_idle(Duration::from_millis(2500)).await.unwrap(), "{:?}", w.progress());
    assert_eq!(w.progress().embedded_events, 0, "nothing while the foreground is busy");
    busy.busy.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap(), "{:?}", w.progress());
    assert_eq!(w.progress().embedded_events, 8);
    w.stop().await;

    // Busy again, new events: a stop while waiting returns promptly and gives the lease back.
    busy.busy.store(true, std::sync::atomic::Ordering::Relaxed);
    f.append((0..4).map(|i| ev("note", &format!("cache deploy {i}"))).collect()).await.unwrap();
    let w = EmbeddingWorker::start_yielding(srv.store.clone(), model.clone(), opts.clone(), Some(busy.clone()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = std::time::Instant::now();
    w.stop().await;
    assert!(t.elapsed() < Duration::from_secs(2), "stop took {:?}", t.elapsed());
    let w = EmbeddingWorker::start(srv.store.clone(), model, opts).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap(), "the next worker takes the session at once");
    assert_eq!(w.progress().embedded_events, 4);
    w.stop().await;
}

/// An embedder that takes 100 ms per call.
struct Slow(MiniLm);

impl Embedder for Slow {
    fn info(&self) -> &ModelInfo {
        self.0.info()
    }

    fn embed(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.0.embed(texts).await
        })
    }
}

/// `max_share` bounds the model's share of a core: after each call it rests in proportion.
#[tokio::test]
async fn a_worker_with_a_share_rests_after_each_call() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "sh").await;
    f.append((0..12).map(|i| ev("note", &format!("deploy {i}"))).collect()).await.unwrap();
    let opts = WorkerOptions {
        batch_size: 4,
        max_share: 0.25,
        poll_interval: Duration::from_millis(20),
        ..WorkerOptions::default()
    };
    let started = std::time::Instant::now();
    let w = EmbeddingWorker::start(srv.store.clone(), Arc::new(Slow(tiny("sh", 8))), opts).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap());
    let p = w.progress();
    assert_eq!(p.embedded_events, 12);
    // Three calls of 0.1 s, each followed by 0.3 s of rest: the model had a quarter of the time.
    assert!(started.elapsed() >= Duration::from_millis(1100), "{:?} {p:?}", started.elapsed());
    // However slow the calls were on a loaded machine, the rests were three times as long.
    assert!(started.elapsed().as_secs_f64() >= 3.5 * p.embed_seconds, "{:?} {p:?}", started.elapsed());
    w.stop().await;
}

/// A live session is embedded in batches: its next job waits `settle` after its last one ended,
/// unless a full job's events wait. A session never embedded goes at once.
#[tokio::test]
async fn a_live_session_waits_to_settle_unless_a_full_job_waits() {
    let srv = server_or_skip!();
    let mut f = fixture(&srv, "settle").await;
    f.append(vec![ev("note", "the first note")]).await.unwrap();
    let ns = srv.store.namespace("settle").await.unwrap();
    let opts = WorkerOptions {
        poll_interval: Duration::from_millis(20),
        events_per_job: 8,
        settle: Duration::from_secs(3_600),
        ..WorkerOptions::default()
    };
    let m: Arc<dyn Embedder> = Arc::new(tiny("settle", 8));
    let count = || vector_count(srv.store.pool(), ns.id, m.info());
    let w = EmbeddingWorker::start(srv.store.clone(), m.clone(), opts).await.unwrap();
    assert!(w.wait_idle(Duration::from_secs(60)).await.unwrap());
    assert_eq!(count().await.unwrap(), 1);

    // One more event waits for the session to settle (an hour); the worker polls every 20 ms.
    f.append(vec![ev("note", "the second note")]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(count().await.unwrap(), 1, "embedded before its session settled");

    // Nine events wait now, more than a job holds (8): a full job goes at once, and the one
    // left over waits for the session to settle again.
    f.append((0..8).map(|i| ev("note", &format!("note number {i}"))).collect()).await.unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while count().await.unwrap() < 9 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count().await.unwrap(), 9);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count().await.unwrap(), 9, "the rest waits for the session to settle");
    w.stop().await;
}
