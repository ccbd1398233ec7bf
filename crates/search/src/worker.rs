//! The embedding worker: embeds new events in the background, never on the ingest path.
//!
//! Two stages joined by a bounded queue. The **reader** claims sessions whose log is ahead of
//! their embedding progress (a lease in `embedding_progress`, so replicas share the work), reads the
//! next events and queues a job; when the queue is full it waits — that is the backpressure: the
//! worker reads no faster than the model embeds, and appends never wait for either. The
//! **embedder** embeds a job's texts in batches, writes the vectors and advances the session's
//! progress in one transaction, so progress never claims a vector that is not stored.
//!
//! Progress is per (session, model): configuring another model starts from zero and re-embeds
//! everything, while the old model's vectors stay until deleted.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memex_embed::Embedder;
use memex_event::role_of_kind;
use memex_store::tenant::{self, Tenant};
use memex_store::{Event, SeqRange, Store};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::IndexError;
use crate::doc::embed_text;
use crate::vectors::{VectorRow, ensure_model_index, insert};

#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOptions {
    /// Texts per call to the embedder.
    pub batch_size: usize,
    /// Most events of one session in one job.
    pub events_per_job: u32,
    /// Jobs that may wait between the reader and the embedder.
    pub queue_capacity: usize,
    /// Sessions claimed per round.
    pub claim_sessions: u32,
    /// Pause when there is nothing to do (a `wake` cuts it short).
    pub poll_interval: Duration,
    /// How long a claim keeps other replicas off a session.
    pub lease: Duration,
    /// Bytes of an event's text that are embedded.
    pub max_text_bytes: usize,
    /// Keep an HNSW index over this model's vectors (for k-NN over whole namespaces). Its upkeep
    /// is most of an insert's cost (about 60x); a tier searched only session by session goes
    /// without.
    pub vector_index: bool,
    /// Most of one core the embedder may use, in (0, 1]: after each call of `t` seconds the worker
    /// rests `t · (1 / share − 1)`. A bounded share for a model that would otherwise take a core
    /// for hours on a backlog.
    pub max_share: f64,
    /// How long the worker steps aside for a busy foreground before each batch: `Some(d)` at most
    /// `d` (it slows down under load but never stops), `None` until the foreground has been quiet
    /// for [`QUIET`] (a model that would stall the requests runs only in their lulls).
    pub max_yield: Option<Duration>,
    /// Only these namespaces (empty: all). Benchmarks scope their worker to their own namespaces.
    pub namespaces: Vec<Uuid>,
    /// A session's next job waits this long after its last one ended, unless `events_per_job`
    /// events wait: each job's round trips (claim, read, insert, progress) are paid per second
    /// of a live session's appends rather than per append.
    pub settle: Duration,
    /// An idle worker reads every session to find work only after news of an append (from any
    /// replica), for a while after news or work (`settle`), and at least this often: for what no
    /// append announces (a crashed replica's lease).
    pub idle_rescan: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            batch_size: 64,
            events_per_job: 256,
            queue_capacity: 4,
            claim_sessions: 16,
            poll_interval: Duration::from_millis(500),
            lease: Duration::from_secs(120),
            max_text_bytes: 2048,
            vector_index: true,
            max_share: 1.0,
            max_yield: Some(MAX_YIELD),
            namespaces: Vec::new(),
            settle: Duration::ZERO,
            idle_rescan: Duration::from_secs(10),
        }
    }
}

/// The process's foreground load, as background work sees it.
pub trait Foreground: Send + Sync {
    /// True while requests wait for a turn (or enough run at once): background work steps aside.
    fn busy(&self) -> bool;

    /// True while events are being appended. Only a worker that runs in the lulls (no yield
    /// limit: the model's) counts it as foreground: a batch of the model beside single appends,
    /// even at idle priority, took their p99 from about 5 ms to 8-16 ms on two cores. The fast
    /// tier and the memory worker, cheap per event, keep up with ingest instead.
    fn ingesting(&self) -> bool {
        false
    }
}

/// The default longest a worker steps aside before a batch: it keeps a share of the machine
/// however loaded the replica is, and its lease never lapses while it waits.
pub const MAX_YIELD: Duration = Duration::from_secs(1);

/// How long the foreground must have been quiet before a worker without a yield limit starts a
/// batch.
pub const QUIET: Duration = Duration::from_millis(200);

/// A snapshot of the worker's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerProgress {
    /// Events whose vector is stored.
    pub embedded_events: u64,
    /// Events passed over because they have no text.
    pub skipped_events: u64,
    /// Bytes of text embedded.
    pub embedded_bytes: u64,
    /// Calls to the embedder.
    pub batches: u64,
    /// Seconds spent inside the embedder.
    pub embed_seconds: f64,
    /// Jobs waiting in the queue now, and the most ever seen (never above the capacity).
    pub queued_jobs: u64,
    pub max_queued_jobs: u64,
    /// Events appended but not yet embedded, as last measured.
    pub backlog_events: u64,
    pub errors: u64,
    pub last_error: Option<String>,
    /// Seconds spent stepping aside for the foreground.
    pub yielded_seconds: f64,
}

#[derive(Default)]
struct Counters {
    yielded_micros: AtomicU64,
    embedded_events: AtomicU64,
    skipped_events: AtomicU64,
    embedded_bytes: AtomicU64,
    batches: AtomicU64,
    embed_micros: AtomicU64,
    queued_jobs: AtomicU64,
    max_queued_jobs: AtomicU64,
    backlog_events: AtomicU64,
    in_flight: AtomicU64,
    errors: AtomicU64,
    last_error: std::sync::Mutex<Option<String>>,
}

struct Shared {
    store: Store,
    embedder: Arc<dyn Embedder>,
    opts: WorkerOptions,
    owner: String,
    counters: Counters,
    wake: Notify,
    /// Stepped aside for before each batch.
    foreground: Option<Arc<dyn Foreground>>,
    /// Sessions with a job of this worker queued or being embedded: never claimed again meanwhile,
    /// or a slow model (a job waiting longer than the lease) would have the same events embedded twice.
    /// By id alone: a session of another namespace under the same id waits for the next claim.
    busy: std::sync::Mutex<std::collections::HashSet<Uuid>>,
    /// True once the worker is asked to stop: one waiting for a quiet foreground gives up its job.
    stop: watch::Receiver<bool>,
}

/// A claimed piece of work: events `(after, upto]` of one session.
struct Job {
    namespace_id: Uuid,
    session_id: Uuid,
    upto: u64,
    events: Vec<Event>,
}

pub struct EmbeddingWorker {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl EmbeddingWorker {
    /// Makes sure the model's vector index exists, then starts the two stages.
    pub async fn start(store: Store, embedder: Arc<dyn Embedder>, opts: WorkerOptions) -> Result<Self, IndexError> {
        Self::start_yielding(store, embedder, opts, None).await
    }

    /// [`EmbeddingWorker::start`], stepping aside before each batch while `foreground` is busy
    /// (for up to a second: background work keeps a bounded share, never none).
    pub async fn start_yielding(
        store: Store,
        embedder: Arc<dyn Embedder>,
        opts: WorkerOptions,
        foreground: Option<Arc<dyn Foreground>>,
    ) -> Result<Self, IndexError> {
        if opts.vector_index {
            ensure_model_index(store.pool(), embedder.info()).await?;
        }
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            foreground,
            store,
            embedder,
            opts: opts.clone(),
            owner: format!("memex-{}-{}", std::process::id(), Uuid::now_v7().simple()),
            counters: Counters::default(),
            wake: Notify::new(),
            busy: std::sync::Mutex::new(std::collections::HashSet::new()),
            stop: stop_rx,
        });
        let (tx, rx) = mpsc::channel::<Job>(opts.queue_capacity.max(1));
        // The worker embeds every namespace's events: its loops run as `Tenant::All`.
        let reader = tokio::spawn(tenant::scope(Tenant::All, read_loop(shared.clone(), tx)));
        let embedder = tokio::spawn(tenant::scope(Tenant::All, embed_loop(shared.clone(), rx)));
        tracing::info!(model = %shared.embedder.info().name, dim = shared.embedder.info().dim, "embedding worker started");
        Ok(EmbeddingWorker { shared, stop, tasks: vec![reader, embedder] })
    }

    pub fn progress(&self) -> WorkerProgress {
        self.probe().progress()
    }

    /// A handle on this worker's counters that outlives it (the metrics' callbacks hold one).
    pub fn probe(&self) -> WorkerProbe {
        WorkerProbe(self.shared.clone())
    }

    /// Ends the idle pause now (after appends, in tests and benchmarks).
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// Events appended but not embedded by this model, measured now.
    pub async fn backlog(&self) -> Result<u64, IndexError> {
        backlog(&self.shared).await
    }

    /// Waits until nothing is left to embed (true) or `timeout` passes (false).
    pub async fn wait_idle(&self, timeout: Duration) -> Result<bool, IndexError> {
        let until = Instant::now() + timeout;
        loop {
            self.wake();
            let idle = self.shared.counters.in_flight.load(Ordering::SeqCst) == 0 && self.backlog().await? == 0;
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
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        tracing::info!("embedding worker stopped");
    }
}

/// A worker's counters, readable from anywhere (the server's metrics), cheap to clone.
#[derive(Clone)]
pub struct WorkerProbe(Arc<Shared>);

impl WorkerProbe {
    /// The model this worker embeds with.
    pub fn model(&self) -> &str {
        &self.0.embedder.info().name
    }

    pub fn progress(&self) -> WorkerProgress {
        let c = &self.0.counters;
        WorkerProgress {
            embedded_events: c.embedded_events.load(Ordering::Relaxed),
            skipped_events: c.skipped_events.load(Ordering::Relaxed),
            embedded_bytes: c.embedded_bytes.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            embed_seconds: c.embed_micros.load(Ordering::Relaxed) as f64 / 1e6,
            queued_jobs: c.queued_jobs.load(Ordering::Relaxed),
            max_queued_jobs: c.max_queued_jobs.load(Ordering::Relaxed),
            backlog_events: c.backlog_events.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            last_error: c.last_error.lock().ok().and_then(|e| e.clone()),
            yielded_seconds: c.yielded_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

impl Drop for EmbeddingWorker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.shared.wake.notify_one();
    }
}

async fn backlog(s: &Shared) -> Result<u64, IndexError> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COALESCE(sum(s.next_seq - 1 - COALESCE(p.seq, 0)), 0)::int8
         FROM sessions s
         LEFT JOIN embedding_progress p ON p.session_id = s.id AND p.namespace_id = s.namespace_id AND p.model = $1
         WHERE s.next_seq > 1 AND ($2::uuid[] IS NULL OR s.namespace_id = ANY($2))",
    )
    .bind(progress_key(s))
    .bind(scope(s))
    .fetch_one(s.store.pool())
    .await?;
    let n = n.max(0) as u64;
    s.counters.backlog_events.store(n, Ordering::Relaxed);
    Ok(n)
}

/// Progress is kept per model name *and* dimension: the same name at another dimension is another
/// model.
fn progress_key(s: &Shared) -> String {
    let m = s.embedder.info();
    format!("{}/{}", m.name, m.dim)
}

fn scope(s: &Shared) -> Option<Vec<Uuid>> {
    (!s.opts.namespaces.is_empty()).then(|| s.opts.namespaces.clone())
}

fn record_error(s: &Shared, what: &str, e: &IndexError) {
    tracing::warn!(error = %e, "embedding worker: {what}");
    s.counters.errors.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut last) = s.counters.last_error.lock() {
        *last = Some(format!("{what}: {e}"));
    }
}

async fn read_loop(s: Arc<Shared>, tx: mpsc::Sender<Job>) {
    let mut stop = s.stop.clone();
    let mut backoff = s.opts.poll_interval;
    let mut registered: Option<Instant> = None;
    let hot = s.opts.settle + 2 * s.opts.poll_interval;
    let mut scan = memex_store::IdleScan::new(s.store.append_news(), hot, s.opts.idle_rescan);
    while !*stop.borrow() {
        let now = Instant::now();
        let look = scan.due(now);
        if !look.any() {
            tokio::select! {
                _ = s.wake.notified() => scan.force(),
                _ = tokio::time::sleep(s.opts.poll_interval) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        // New sessions are looked for at most once per settle: the look reads every session.
        if registered.is_none_or(|at| at.elapsed() >= s.opts.settle) {
            match register_sessions(&s).await {
                Ok(()) => registered = Some(Instant::now()),
                Err(e) => record_error(&s, "registering sessions", &e),
            }
        }
        let claimed = match claim(&s).await {
            Ok(c) => c,
            Err(e) => {
                record_error(&s, "claiming work", &e);
                Vec::new()
            }
        };
        let idle = claimed.is_empty();
        for (namespace_id, session_id, done, head) in claimed {
            set_busy(&s, session_id, true);
            let upto = head.min(done + u64::from(s.opts.events_per_job));
            let range = SeqRange { from: done + 1, to: Some(upto) };
            let job = match s.store.events_in_range(namespace_id, session_id, range, s.opts.events_per_job, None).await
            {
                Ok(page) => Job { namespace_id, session_id, upto, events: page.events },
                Err(e) => {
                    record_error(&s, "reading events", &e.into());
                    set_busy(&s, session_id, false);
                    release(&s, namespace_id, session_id, Some(Duration::from_secs(5))).await;
                    continue;
                }
            };
            s.counters.in_flight.fetch_add(1, Ordering::SeqCst);
            // Blocks while the queue is full: the backpressure.
            if tx.send(job).await.is_err() {
                return;
            }
            let queued = (tx.max_capacity() - tx.capacity()) as u64;
            s.counters.queued_jobs.store(queued, Ordering::SeqCst);
            s.counters.max_queued_jobs.fetch_max(queued, Ordering::SeqCst);
        }
        // Marked once the round's jobs are queued (which waits while the queue is full): a
        // round can outlast the hot window, and the rest of a backlog must be claimed at once,
        // not at the next periodic look.
        scan.looked(Instant::now(), !idle);
        if idle {
            // Without news the backlog has not grown, but another replica may have embedded
            // what it counted: the periodic look measures only a backlog that is not zero.
            if look == memex_store::Look::Full || s.counters.backlog_events.load(Ordering::Relaxed) > 0 {
                match backlog(&s).await {
                    Ok(_) => backoff = s.opts.poll_interval,
                    Err(e) => {
                        record_error(&s, "measuring the backlog", &e);
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                    }
                }
            }
            tokio::select! {
                _ = s.wake.notified() => scan.force(),
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => {}
            }
        }
    }
}

/// Registers the sessions this model has not seen (an anti-join over every session: the reader
/// does it at most once per `settle`).
async fn register_sessions(s: &Shared) -> Result<(), IndexError> {
    sqlx::query(
        "INSERT INTO embedding_progress (session_id, model, namespace_id)
         SELECT s.id, $1, s.namespace_id FROM sessions s
         WHERE s.next_seq > 1 AND ($2::uuid[] IS NULL OR s.namespace_id = ANY($2))
           AND NOT EXISTS (SELECT 1 FROM embedding_progress p
                           WHERE p.session_id = s.id AND p.namespace_id = s.namespace_id AND p.model = $1)
         ON CONFLICT DO NOTHING",
    )
    .bind(progress_key(s))
    .bind(scope(s))
    .execute(s.store.pool())
    .await?;
    Ok(())
}

/// Leases up to `claim_sessions` registered sessions that are behind ([`register_sessions`]).
/// Returns `(namespace, session, embedded up to, head)`.
async fn claim(s: &Shared) -> Result<Vec<(Uuid, Uuid, u64, u64)>, IndexError> {
    let rows: Vec<(Uuid, Uuid, i64, i64)> = sqlx::query_as(
        "WITH c AS (
             SELECT p.session_id, p.namespace_id, s.next_seq - 1 AS head
             FROM embedding_progress p JOIN sessions s ON s.id = p.session_id AND s.namespace_id = p.namespace_id
             WHERE p.model = $1 AND s.next_seq - 1 > p.seq AND (p.leased_until IS NULL OR p.leased_until < now())
               AND (p.done_at IS NULL OR p.done_at <= now() - make_interval(secs => $7) OR s.next_seq - 1 - p.seq >= $8)
               AND ($5::uuid[] IS NULL OR p.namespace_id = ANY($5))
               AND NOT (p.session_id = ANY($6))
             ORDER BY p.session_id LIMIT $4 FOR UPDATE OF p SKIP LOCKED
         )
         UPDATE embedding_progress p SET leased_until = now() + make_interval(secs => $3), leased_by = $2
         FROM c WHERE p.session_id = c.session_id AND p.namespace_id = c.namespace_id AND p.model = $1
         RETURNING p.namespace_id, p.session_id, p.seq, c.head",
    )
    .bind(progress_key(s))
    .bind(&s.owner)
    .bind(s.opts.lease.as_secs_f64())
    .bind(i64::from(s.opts.claim_sessions))
    .bind(scope(s))
    .bind(busy_sessions(s))
    .bind(s.opts.settle.as_secs_f64())
    .bind(i64::from(s.opts.events_per_job))
    .fetch_all(s.store.pool())
    .await?;
    Ok(rows.into_iter().map(|(ns, sid, done, head)| (ns, sid, done as u64, head as u64)).collect())
}

fn set_busy(s: &Shared, session_id: Uuid, busy: bool) {
    if let Ok(mut set) = s.busy.lock() {
        if busy {
            set.insert(session_id);
        } else {
            set.remove(&session_id);
        }
    }
}

fn busy_sessions(s: &Shared) -> Vec<Uuid> {
    s.busy.lock().map(|set| set.iter().copied().collect()).unwrap_or_default()
}

/// Keeps other replicas off a session while its job is embedded (a job may take longer than the
/// lease on a slow model).
async fn renew_lease(s: &Shared, namespace_id: Uuid, session_id: Uuid) -> Result<(), IndexError> {
    sqlx::query(
        "UPDATE embedding_progress SET leased_until = now() + make_interval(secs => $3)
         WHERE session_id = $1 AND namespace_id = $5 AND model = $2 AND leased_by = $4",
    )
    .bind(session_id)
    .bind(progress_key(s))
    .bind(s.opts.lease.as_secs_f64())
    .bind(&s.owner)
    .bind(namespace_id)
    .execute(s.store.pool())
    .await?;
    Ok(())
}

/// Gives a session back: at once, or after `retry_after` (after an error).
async fn release(s: &Shared, namespace_id: Uuid, session_id: Uuid, retry_after: Option<Duration>) {
    let secs = retry_after.map_or(0.0, |d| d.as_secs_f64());
    let r = sqlx::query(
        "UPDATE embedding_progress SET leased_until = CASE WHEN $3 > 0 THEN now() + make_interval(secs => $3) END,
                leased_by = NULL
         WHERE session_id = $1 AND namespace_id = $4 AND model = $2",
    )
    .bind(session_id)
    .bind(progress_key(s))
    .bind(secs)
    .bind(namespace_id)
    .execute(s.store.pool())
    .await;
    if let Err(e) = r {
        record_error(s, "releasing a session", &e.into());
    }
}

async fn embed_loop(s: Arc<Shared>, mut rx: mpsc::Receiver<Job>) {
    while let Some(job) = rx.recv().await {
        s.counters.queued_jobs.store(rx.len() as u64, Ordering::SeqCst);
        let (namespace_id, session_id) = (job.namespace_id, job.session_id);
        match embed_job(&s, job).await {
            Ok(()) => {}
            Err(e) => {
                record_error(&s, "embedding a job", &e);
                release(&s, namespace_id, session_id, Some(Duration::from_secs(5))).await;
            }
        }
        set_busy(&s, session_id, false);
        s.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits while the foreground is busy: at most `max_yield`, or without a limit until it has been
/// quiet for [`QUIET`] (no request load and no appends), keeping the session's lease meanwhile.
/// False when the worker is stopping.
///
/// Why no limit for the model: its batch runs at idle priority and, once started under load,
/// is preempted mid-inference for hundreds of milliseconds at a time while holding what the
/// requests' threads then wait on (measured: per-second p99 of packs 150-530 ms in the seconds
/// a batch ran, 20-40 ms otherwise, with the worker off no such seconds).
async fn step_aside(s: &Shared, namespace_id: Uuid, session_id: Uuid) -> Result<bool, IndexError> {
    let Some(f) = &s.foreground else { return Ok(true) };
    let started = Instant::now();
    let mut renewed = Instant::now();
    let mut quiet_since: Option<Instant> = None;
    let go = loop {
        if *s.stop.borrow() {
            break false;
        }
        let now = Instant::now();
        if f.busy() || (s.opts.max_yield.is_none() && f.ingesting()) {
            quiet_since = None;
        } else {
            let since = *quiet_since.get_or_insert(now);
            if s.opts.max_yield.is_some() || now - since >= QUIET {
                break true;
            }
        }
        if s.opts.max_yield.is_some_and(|max| started.elapsed() >= max) {
            break true;
        }
        if renewed.elapsed() >= s.opts.lease / 4 {
            renew_lease(s, namespace_id, session_id).await?;
            renewed = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    s.counters.yielded_micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    Ok(go)
}

async fn embed_job(s: &Shared, job: Job) -> Result<(), IndexError> {
    let c = &s.counters;
    let mut rows = Vec::with_capacity(job.events.len());
    let with_text: Vec<(&Event, String)> = job
        .events
        .iter()
        .map(|e| (e, embed_text(e, s.opts.max_text_bytes)))
        .filter(|(_, t)| !t.trim().is_empty())
        .collect();
    c.skipped_events.fetch_add((job.events.len() - with_text.len()) as u64, Ordering::Relaxed);
    for batch in with_text.chunks(s.opts.batch_size.max(1)) {
        if !step_aside(s, job.namespace_id, job.session_id).await? {
            // Stopping: the lease is given back; the events are embedded again by whoever
            // claims the session next (a vector is the same whoever makes it).
            release(s, job.namespace_id, job.session_id, None).await;
            return Ok(());
        }
        renew_lease(s, job.namespace_id, job.session_id).await?;
        let texts: Vec<String> = batch.iter().map(|(_, t)| t.clone()).collect();
        let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
        let t0 = Instant::now();
        let vectors = s.embedder.embed(texts).await?;
        let took = t0.elapsed();
        c.embed_micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        let share = s.opts.max_share.clamp(0.01, 1.0);
        if share < 1.0 {
            tokio::time::sleep(took.mul_f64(1.0 / share - 1.0)).await;
        }
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.embedded_bytes.fetch_add(bytes, Ordering::Relaxed);
        if vectors.len() != batch.len() {
            return Err(memex_embed::EmbedError::Protocol(format!(
                "{} vectors for {} texts",
                vectors.len(),
                batch.len()
            ))
            .into());
        }
        for ((e, _), vector) in batch.iter().zip(vectors) {
            rows.push(VectorRow {
                event_id: e.id,
                session_id: e.session_id,
                seq: e.seq,
                kind: e.kind.clone(),
                role: role_of_kind(&e.kind).as_str(),
                agent_id: e.agent_id.clone(),
                task_id: e.task_id.clone(),
                event_time: e.event_time,
                vector,
            });
        }
    }
    let n = rows.len() as u64;
    let mut tx = s.store.pool().begin().await?;
    insert(&mut tx, job.namespace_id, s.embedder.info(), rows).await?;
    sqlx::query(
        "UPDATE embedding_progress SET seq = GREATEST(seq, $3), leased_until = NULL, leased_by = NULL, done_at = now()
         WHERE session_id = $1 AND namespace_id = $4 AND model = $2",
    )
    .bind(job.session_id)
    .bind(progress_key(s))
    .bind(job.upto as i64)
    .bind(job.namespace_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    c.embedded_events.fetch_add(n, Ordering::Relaxed);
    Ok(())
}
