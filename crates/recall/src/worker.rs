//! The memory worker: interprets new events into turns, segments and facts in the background,
//! never on the ingest path. It leases sessions (`memory_progress`, so replicas share the work),
//! reads each one's events from its open segment on, runs the pure core's `advance` on a
//! blocking thread, and writes the result with the session's progress in one transaction —
//! idempotent (derived ids, upserts) and resumable after a crash from the last committed job.
//! Beside the jobs, a second task rebuilds the topics of namespaces whose segments changed.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use memex_event::{NamespaceId, SessionId};
use memex_memory::session::{Prior, Tools, advance, closes_a_turn};
use memex_memory::{Fact, Interpreter, MemEvent, Verdict};
use memex_pointer::FullView;
use memex_store::tenant::{self, Tenant};
use memex_store::{Event, SeqRange, Store};
use memex_tokens::TokenCounter;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::config::MemoryConfig;
use crate::vectors::SharedVectors;
use crate::{RecallError, tables, topics};

/// The process's foreground load, as the worker sees it (the server's admission).
pub trait Foreground: Send + Sync {
    /// True while requests wait for a turn: background work steps aside.
    fn busy(&self) -> bool;
}

/// The longest the worker steps aside before a job: it keeps a share of the machine however
/// loaded the replica is (memory must keep up with a fleet's ingest).
const MAX_YIELD: Duration = Duration::from_secs(1);

/// A snapshot of the worker's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryProgress {
    /// Events read by the interpreter.
    pub events: u64,
    pub jobs: u64,
    pub facts: u64,
    pub segments_written: u64,
    pub topic_rebuilds: u64,
    /// Times it vacuumed the facts and their keywords (`vacuum_every_facts`).
    pub vacuums: u64,
    /// Sessions read to their last event whose line maps the worker stored (`FullView::prepare`).
    pub line_maps_stored: u64,
    /// Events appended but not yet read, as last measured.
    pub backlog_events: u64,
    /// Times it read every session to find work (an idle worker looks only after news of an
    /// append, while work is recent, and every `idle_rescan_ms`).
    pub looks: u64,
    /// Seconds spent in jobs (reading, interpreting, writing) and stepping aside.
    pub busy_seconds: f64,
    pub yielded_seconds: f64,
    pub errors: u64,
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Counters {
    events: AtomicU64,
    jobs: AtomicU64,
    facts: AtomicU64,
    segments: AtomicU64,
    rebuilds: AtomicU64,
    vacuums: AtomicU64,
    maps: AtomicU64,
    backlog: AtomicU64,
    looks: AtomicU64,
    busy_micros: AtomicU64,
    yielded_micros: AtomicU64,
    in_flight: AtomicU64,
    errors: AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
}

/// What the worker works with.
pub struct WorkerParts {
    pub store: Store,
    pub config: MemoryConfig,
    pub interpreter: Arc<dyn Interpreter>,
    pub vectors: SharedVectors,
    pub counter: Arc<dyn TokenCounter>,
    pub foreground: Option<Arc<dyn Foreground>>,
    /// The sessions' full view: a session read to its last event gets its line map stored here,
    /// so the readers citing it (a QueryFacts answer cites up to 50 sessions) need not compile it.
    pub full_view: Arc<dyn FullView>,
    /// Only these namespaces (empty: all).
    pub namespaces: Vec<Uuid>,
}

struct Shared {
    parts: WorkerParts,
    owner: String,
    counters: Counters,
    wake: Notify,
    stop: watch::Receiver<bool>,
}

pub struct MemoryWorker {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl MemoryWorker {
    pub fn start(parts: WorkerParts) -> MemoryWorker {
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            owner: format!("memex-memory-{}-{}", std::process::id(), Uuid::now_v7().simple()),
            parts,
            counters: Counters::default(),
            wake: Notify::new(),
            stop: stop_rx,
        });
        // The worker claims sessions of every namespace: it runs as `Tenant::All`. Topics are
        // rebuilt beside the jobs, not between rounds: a rebuild of a large namespace takes
        // seconds, and the jobs waited for it.
        let tasks = vec![
            tokio::spawn(tenant::scope(Tenant::All, run(shared.clone()))),
            tokio::spawn(tenant::scope(Tenant::All, upkeep(shared.clone()))),
        ];
        tracing::info!(interpreter = shared.parts.interpreter.name(), "memory worker started");
        MemoryWorker { shared, stop, tasks }
    }

    pub fn probe(&self) -> MemoryProbe {
        MemoryProbe(self.shared.clone())
    }

    pub fn progress(&self) -> MemoryProgress {
        self.probe().progress()
    }

    /// Ends the idle pause now.
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// Waits until every event is read and every due topic rebuild done (true), or `timeout`.
    pub async fn wait_idle(&self, timeout: Duration) -> Result<bool, RecallError> {
        let until = Instant::now() + timeout;
        let pool = self.shared.parts.store.pool();
        let scope = scope(&self.shared);
        loop {
            self.wake();
            let idle = self.shared.counters.in_flight.load(Ordering::SeqCst) == 0
                && tables::backlog(pool, scope.as_deref()).await? == 0
                && !topics::any_due(pool, scope.as_deref()).await?
                && !pending_turns(&self.shared).await?;
            if idle {
                return Ok(true);
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops claiming work, finishes the job in hand and returns.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        self.shared.wake.notify_one();
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
        tracing::info!("memory worker stopped");
    }
}

impl Drop for MemoryWorker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.shared.wake.notify_one();
    }
}

/// A handle on the worker's counters that outlives it (metrics callbacks hold one).
#[derive(Clone)]
pub struct MemoryProbe(Arc<Shared>);

impl MemoryProbe {
    pub fn progress(&self) -> MemoryProgress {
        let c = &self.0.counters;
        MemoryProgress {
            events: c.events.load(Ordering::Relaxed),
            jobs: c.jobs.load(Ordering::Relaxed),
            facts: c.facts.load(Ordering::Relaxed),
            segments_written: c.segments.load(Ordering::Relaxed),
            topic_rebuilds: c.rebuilds.load(Ordering::Relaxed),
            vacuums: c.vacuums.load(Ordering::Relaxed),
            line_maps_stored: c.maps.load(Ordering::Relaxed),
            backlog_events: c.backlog.load(Ordering::Relaxed),
            looks: c.looks.load(Ordering::Relaxed),
            busy_seconds: c.busy_micros.load(Ordering::Relaxed) as f64 / 1e6,
            yielded_seconds: c.yielded_micros.load(Ordering::Relaxed) as f64 / 1e6,
            errors: c.errors.load(Ordering::Relaxed),
            last_error: c.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }
}

fn scope(s: &Shared) -> Option<Vec<Uuid>> {
    (!s.parts.namespaces.is_empty()).then(|| s.parts.namespaces.clone())
}

/// Sessions whose last turn waits to close (with `idle_close_secs` = 0, now).
async fn pending_turns(s: &Shared) -> Result<bool, RecallError> {
    if s.parts.config.idle_close_secs > 0 {
        return Ok(false);
    }
    let (n,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM memory_progress p JOIN sessions s ON s.id = p.session_id AND s.namespace_id = p.namespace_id
         WHERE s.next_seq - 1 > p.turn_seq AND ($1::uuid[] IS NULL OR p.namespace_id = ANY($1))",
    )
    .bind(scope(s))
    .fetch_one(s.parts.store.pool())
    .await?;
    Ok(n > 0)
}

fn record_error(s: &Shared, what: &str, e: &RecallError) {
    tracing::warn!(error = %e, "memory worker: {what}");
    s.counters.errors.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut last) = s.counters.last_error.lock() {
        *last = Some(format!("{what}: {e}"));
    }
}

async fn run(s: Arc<Shared>) {
    let mut stop = s.stop.clone();
    let poll = Duration::from_millis(s.parts.config.poll_interval_ms.max(10));
    let mut backoff = poll;
    let mut measured = Instant::now();
    let mut registered: Option<Instant> = None;
    let mut mapped: Option<Instant> = None;
    let cfg = &s.parts.config;
    // After news or work, what came may become due only once settled or once its turn is quiet.
    let hot = Duration::from_millis(cfg.settle_ms).max(Duration::from_secs(cfg.idle_close_secs)) + 2 * poll;
    let mut scan =
        memex_store::IdleScan::new(s.parts.store.append_news(), hot, Duration::from_millis(cfg.idle_rescan_ms));
    while !*stop.borrow() {
        let now = Instant::now();
        let look = scan.due(now);
        let full = look == memex_store::Look::Full;
        // New sessions are looked for at most once per settle: the look reads every session.
        let settle = Duration::from_millis(cfg.settle_ms);
        if look.any() && registered.is_none_or(|at| at.elapsed() >= settle) {
            match tables::register(s.parts.store.pool(), scope(&s).as_deref()).await {
                Ok(()) => registered = Some(Instant::now()),
                Err(e) => record_error(&s, "registering sessions", &e),
            }
        }
        let claimed = if !look.any() {
            Vec::new()
        } else {
            match tables::claim(
                s.parts.store.pool(),
                &s.owner,
                cfg.lease_secs as f64,
                cfg.claim_sessions,
                cfg.idle_close_secs as f64,
                (settle.as_secs_f64(), cfg.events_per_job),
                scope(&s).as_deref(),
            )
            .await
            {
                Ok(c) => c,
                Err(e) => {
                    record_error(&s, "claiming work", &e);
                    Vec::new()
                }
            }
        };
        let idle = claimed.is_empty();
        let in_flight = cfg.jobs_in_flight.max(1) as usize;
        futures::stream::iter(claimed).for_each_concurrent(in_flight, |c| run_job(&s, c)).await;
        // Marked after the round's jobs: a round can outlast the hot window, and more work left
        // behind must be claimed at once, not at the next periodic look (the worker read a
        // loaded corpus in bursts 10 s apart when this was marked before the jobs).
        if look.any() {
            scan.looked(Instant::now(), !idle);
            s.counters.looks.fetch_add(1, Ordering::Relaxed);
        }
        // The lag, as the metric reports it: measured when a look found nothing, and at most
        // once a second while working. Without news it cannot have grown, but another replica
        // may have read what it counted: the periodic look measures a lag that is not zero.
        let stale = look.any() && s.counters.backlog.load(Ordering::Relaxed) > 0;
        if (full || stale) && (idle || measured.elapsed() >= Duration::from_secs(1)) {
            measured = Instant::now();
            match tables::backlog(s.parts.store.pool(), scope(&s).as_deref()).await {
                Ok(n) => {
                    s.counters.backlog.store(n, Ordering::Relaxed);
                    backoff = poll;
                }
                Err(e) => {
                    record_error(&s, "measuring the backlog", &e);
                    backoff = longer(backoff);
                }
            }
        }
        if idle && mapped.is_none_or(|at| at.elapsed() >= MAP_BACKFILL_EVERY) {
            match backfill_maps(&s).await {
                // A full batch that stored maps: more may wait, so look again at once.
                Ok((looked, stored)) if looked as i64 == MAP_BACKFILL_BATCH && stored > 0 => mapped = None,
                Ok(_) => mapped = Some(Instant::now()),
                Err(e) => {
                    record_error(&s, "listing sessions without line maps", &e);
                    mapped = Some(Instant::now());
                }
            }
        }
        if idle {
            tokio::select! {
                _ = s.wake.notified() => scan.force(),
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// Rebuilds the topics of namespaces whose segments changed (each at most every
/// `topic_interval_ms`, and every four times its last rebuild's duration), checking every poll;
/// and keeps the facts vacuumed while they pour in ([`vacuum_facts`]).
async fn upkeep(s: Arc<Shared>) {
    let mut stop = s.stop.clone();
    let poll = Duration::from_millis(s.parts.config.poll_interval_ms.max(10));
    let mut backoff = poll;
    let mut vacuumed: (u64, Option<Instant>) = (0, None);
    while !*stop.borrow() {
        vacuum_facts(&s, &mut vacuumed).await;
        match topics::rebuild_due(&s.parts, &s.owner, scope(&s).as_deref()).await {
            Ok(n) => {
                s.counters.rebuilds.fetch_add(n, Ordering::Relaxed);
                backoff = poll;
            }
            Err(e) => {
                record_error(&s, "rebuilding topics", &e);
                backoff = longer(backoff);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => {}
        }
    }
}

/// The pause after a failed statement, doubled up to 30 s.
fn longer(backoff: Duration) -> Duration {
    (backoff * 2).min(Duration::from_secs(30))
}

/// Least time between two vacuums of the facts.
const VACUUM_EVERY: Duration = Duration::from_secs(10);

/// Vacuums and analyzes the facts and their keywords once `vacuum_every_facts` facts were
/// written since the last time (`last`: facts then, and when). A backlog relinks nearly every
/// fact it writes (an update each, never HOT: the links are indexed), and its reads then walk
/// dead versions (`heap_hot_search_buffer`, `_bt_killitems` in the profile) and make a heap
/// fetch per keyword entry on pages not yet marked visible: a candidates read took 20 ms
/// instead of 1, a fact insert 124 ms, under the lock that orders a speaker's facts. Autovacuum
/// first visits a new database up to a minute later, and until then the worker read 300-600
/// events/s instead of 2,200; the planner had no statistics either. A role that may not vacuum
/// gets a warning from Postgres and the worker goes on.
async fn vacuum_facts(s: &Shared, last: &mut (u64, Option<Instant>)) {
    let every = s.parts.config.vacuum_every_facts;
    let facts = s.counters.facts.load(Ordering::Relaxed);
    if every == 0 || facts < last.0 + every || last.1.is_some_and(|t| t.elapsed() < VACUUM_EVERY) {
        return;
    }
    *last = (facts, Some(Instant::now()));
    match sqlx::query("VACUUM (SKIP_LOCKED, ANALYZE) memory_facts, memory_fact_keywords")
        .execute(s.parts.store.pool())
        .await
    {
        Ok(_) => {
            s.counters.vacuums.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => record_error(s, "vacuuming the facts", &e.into()),
    }
}

/// Sessions without a line map the idle worker looks for at a time, and how often it looks.
const MAP_BACKFILL_BATCH: i64 = 64;
const MAP_BACKFILL_EVERY: Duration = Duration::from_secs(60);

/// Stores the line maps of sessions read before the worker stored them (see [`prepare_map`]),
/// a batch at a time, stepping aside for requests like a job. Returns how many sessions it
/// looked at and how many maps it stored.
async fn backfill_maps(s: &Shared) -> Result<(usize, usize), RecallError> {
    let sessions = tables::unmapped(s.parts.store.pool(), scope(s).as_deref(), MAP_BACKFILL_BATCH).await?;
    let mut stored = 0;
    for (ns, session) in &sessions {
        if *s.stop.borrow() {
            break;
        }
        step_aside(s).await;
        stored += usize::from(prepare_map(s, *ns, *session).await);
    }
    Ok((sessions.len(), stored))
}

/// Stores the line map of a session read to its last event, so that readers citing it need not
/// compile it. Derived, and remade on a reader's miss: a failure is logged, not the job's.
/// Returns whether it stored one.
async fn prepare_map(s: &Shared, ns: Uuid, session: Uuid) -> bool {
    match s.parts.full_view.prepare(NamespaceId(ns), SessionId(session)).await {
        Ok(stored) => {
            s.counters.maps.fetch_add(u64::from(stored), Ordering::Relaxed);
            stored
        }
        Err(e) => {
            tracing::debug!(error = %e, session = %session, "memory: line map not stored");
            false
        }
    }
}

/// One claimed session: its job, or its release when the worker is stopping or the job failed.
async fn run_job(s: &Shared, c: tables::Claim) {
    let (ns, session) = (c.namespace_id, c.session_id);
    if *s.stop.borrow() {
        let _ = tables::release(s.parts.store.pool(), ns, session, 0.0).await;
        return;
    }
    step_aside(s).await;
    s.counters.in_flight.fetch_add(1, Ordering::SeqCst);
    let t0 = Instant::now();
    if let Err(e) = job(s, c).await {
        record_error(s, "interpreting a session", &e);
        let _ = tables::release(s.parts.store.pool(), ns, session, 5.0).await;
    }
    let took = t0.elapsed();
    s.counters.busy_micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    s.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
    let share = s.parts.config.worker_share.clamp(0.01, 1.0);
    if share < 1.0 {
        tokio::time::sleep(took.mul_f64(1.0 / share - 1.0)).await;
    }
}

/// Steps aside while requests wait, for at most [`MAX_YIELD`].
async fn step_aside(s: &Shared) {
    let Some(f) = &s.parts.foreground else { return };
    let started = Instant::now();
    while f.busy() && started.elapsed() < MAX_YIELD && !*s.stop.borrow() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.counters.yielded_micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
}

/// The core's view of a session's events. `quiet` (`idle_close_secs`; zero: off) marks the events
/// that arrived after the session had gone quiet that long, where a live worker may have closed
/// the turn: a rebuild cuts the turn there too, so it derives the same memory.
pub fn mem_events(events: Vec<Event>, quiet: chrono::Duration) -> Vec<MemEvent> {
    let mut prev: Option<chrono::DateTime<chrono::Utc>> = None;
    events
        .into_iter()
        .map(|e| {
            let after_quiet = quiet > chrono::Duration::zero() && prev.is_some_and(|p| e.ingest_time - p >= quiet);
            prev = Some(e.ingest_time);
            mem_event(e, after_quiet)
        })
        .collect()
}

fn mem_event(e: Event, after_quiet: bool) -> MemEvent {
    MemEvent {
        seq: e.seq,
        kind: e.kind,
        content: e.content,
        tool_name: e.tool_name,
        tool_call_id: e.tool_call_id,
        agent_id: e.agent_id,
        time: e.event_time,
        after_quiet,
    }
}

/// Reads a session's events `from..=to`, every page.
pub async fn read_events(
    store: &Store,
    ns: Uuid,
    session: Uuid,
    from: u64,
    to: u64,
) -> Result<Vec<Event>, RecallError> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = store.events_in_range(ns, session, SeqRange { from, to: Some(to) }, 1_000, token.as_deref()).await?;
        out.extend(page.events);
        match page.next_page_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => return Ok(out),
        }
    }
}

async fn job(s: &Shared, c: tables::Claim) -> Result<(), RecallError> {
    let cfg = &s.parts.config;
    let store = &s.parts.store;
    let from = c.progress.read_from();
    let upto = c.head.min(c.progress.fact_seq + u64::from(cfg.events_per_job)).max(c.progress.turn_seq);
    let quiet = chrono::Duration::seconds(cfg.idle_close_secs as i64);
    // The open turn and what followed it first: most jobs of a live session close no turn, and
    // then only those are needed. Reading from the open segment's start every time (up to its
    // 20 turns of 64 events, a second of appends at a time) was most of the worker's Postgres
    // load beside a fleet's appends.
    // (Facts are read up to the last event read, turns close within it: fact_seq >= turn_seq;
    // the min keeps every event a fact may still need in the first read regardless.)
    let open_from = (c.progress.turn_seq.min(c.progress.fact_seq) + 1).max(from);
    let open = if upto >= open_from {
        read_events(store, c.namespace_id, c.session_id, open_from, upto).await?
    } else {
        Vec::new()
    };
    let close_last = upto == c.head && open.last().is_some_and(|e| e.ingest_time <= c.claimed_at - quiet);
    let open = mem_events(open, quiet);
    let (events, prior) = if closes_a_turn(&open, close_last) {
        let earlier = if open_from > from {
            mem_events(read_events(store, c.namespace_id, c.session_id, from, open_from - 1).await?, quiet)
        } else {
            Vec::new()
        };
        let prior = tables::prior(store.pool(), c.namespace_id, c.session_id, c.progress.open_seq).await?;
        (earlier.into_iter().chain(open).collect::<Vec<_>>(), prior)
    } else {
        (open, Prior::default())
    };
    let n_new = events.iter().filter(|e| e.seq > c.progress.fact_seq).count() as u64;
    let interpreter = s.parts.interpreter.clone();
    let vectors = s.parts.vectors.clone();
    let counter = s.parts.counter.clone();
    let segment = cfg.segment.clone();
    let progress = c.progress.clone();
    // The core is CPU work (and an LLM interpreter blocks on HTTP): off the async threads.
    let adv = tokio::task::spawn_blocking(move || {
        let embed = vectors.as_ref().map(|v| {
            let v = v.clone();
            move |texts: &[String]| {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                v.vectors(&refs)
            }
        });
        let tools = Tools {
            interpreter: interpreter.as_ref(),
            counter: counter.as_ref(),
            vectors: embed.as_ref().map(|f| f as &memex_memory::session::VectorsFn),
            segment: &segment,
        };
        advance(&progress, &prior, &events, close_last, &tools)
    })
    .await
    .map_err(|e| RecallError::Corrupt(format!("the interpreter panicked: {e}")))??;
    tables::renew(store.pool(), c.namespace_id, c.session_id, &s.owner, cfg.lease_secs as f64).await?;
    let interpreter = s.parts.interpreter.clone();
    let verify = move |older: Fact, newer: Fact| -> futures::future::BoxFuture<'static, bool> {
        let interpreter = interpreter.clone();
        Box::pin(async move {
            // The heuristic accepts the candidate rules' verdict; a model is asked (off the async
            // threads: it blocks on HTTP), and a failure to answer keeps the candidates' verdict.
            if interpreter.name() == "heuristic" {
                return true;
            }
            let verdict = tokio::task::spawn_blocking(move || interpreter.verify(&older, &newer)).await;
            !matches!(verdict, Ok(Ok(Verdict::Distinct)))
        })
    };
    let source = if s.parts.interpreter.name() == "heuristic" { "extractor" } else { "model" };
    let facts = adv.facts.len() as u64;
    let segments = adv.segments.len() as u64;
    // Before the job's writes, so that a session read to its end (lag 0) already has its map.
    if upto == c.head {
        prepare_map(s, c.namespace_id, c.session_id).await;
    }
    tables::write_job(store.pool(), c.namespace_id, c.session_id, &adv, source, &verify).await?;
    s.counters.events.fetch_add(n_new, Ordering::Relaxed);
    s.counters.jobs.fetch_add(1, Ordering::Relaxed);
    s.counters.facts.fetch_add(facts, Ordering::Relaxed);
    s.counters.segments.fetch_add(segments, Ordering::Relaxed);
    Ok(())
}
