//! `memex-bench pack`: BuildPack latency under an open-loop load — W agent workers, each asking
//! for a pack R times per second on schedule (not after the previous answer), over a namespace of
//! M events made of real trajectories. Latency is measured from each request's scheduled time, so
//! queueing counts. Reports p50/p90/p99, where the time goes (per BuildPack phase), optionally
//! the saturation point (the rate at which p99 passes 100 ms); last line JSON.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use memex_proto::v1 as pb;
use serde_json::json;

use super::bench_pack_loop::{QUERIES, turn_requests};
use super::pack_prefix::{PrefixMeter, PrefixStats};
use super::traces::{TraceEvent, read_trajectories};
use memex_client::Conn;
use memex_server::flags::ConfigArgs;

#[derive(clap::Args, Debug)]
pub struct PackArgs {
    /// Agent workers, each on its own session.
    #[arg(long, default_value_t = 128)]
    pub workers: usize,
    /// Packs per second each worker asks for.
    #[arg(long, default_value_t = 2.0)]
    pub rate: f64,
    /// Events in the namespace (built from the trajectories once, then reused).
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Also find the saturation point: raise the rate step by step until p99 passes 100 ms.
    #[arg(long)]
    pub saturation: bool,
    /// Seconds per saturation step.
    #[arg(long, default_value_t = 10.0)]
    pub step_seconds: f64,
    /// The agent-traces folder (or its .jsonl.gz file).
    #[arg(long, default_value = "../shared/bench-data/agent-traces")]
    pub traces: PathBuf,
    /// Namespace of the corpus (default: bench-pack-<events>); reused when it already holds it.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Retrieval budget of each pack (tokens); the other budgets are the server's defaults.
    #[arg(long, default_value_t = 4096)]
    pub retrieval: u32,
    /// Ask for whole packs (PACK_VIEW_FULL: every block's text and every candidate's decision)
    /// instead of BuildPack's basic answer.
    #[arg(long)]
    pub full_view: bool,
    /// Each turn first appends an event to the worker's session, as an agent loop does, then asks
    /// for the pack: the session changes before every pack (new tail, new view version, new
    /// events to index). Latency is then the turn's: append and pack.
    #[arg(long)]
    pub append: bool,
    /// With --append: each run makes new sessions, one per worker, in the corpus namespace, each
    /// seeded (before the warm-up, unmeasured) with the same real events, so that every run starts
    /// from the same session lengths and runs are comparable. Implies one session per worker.
    #[arg(long)]
    pub fresh_sessions: bool,
    /// With --fresh-sessions: the events each new session is seeded with, the first N of a real
    /// trajectory at least N long, or of consecutive trajectories when none is [default: 200].
    #[arg(long, value_name = "N")]
    pub seed_events: Option<usize>,
    /// Spread the requests at random over this many sessions of the corpus, as a fleet does (0:
    /// each worker asks about one session of its own, every pack after its first warm).
    #[arg(long, default_value_t = 1000)]
    pub sessions: usize,
    /// Load a new corpus (a namespace of its own) and measure while its index and embeddings are
    /// still being built.
    #[arg(long)]
    pub fresh: bool,
    /// Seconds measured right after a server start (cold caches), before the warm-up; 0: none.
    #[arg(long, default_value_t = 60.0)]
    pub cold_seconds: f64,
    /// Also print each phase second by second (packs answered, p50, p99, max by the second they
    /// were sent in): to tell a steady tail from stalls.
    #[arg(long)]
    pub timeline: bool,
    #[command(flatten)]
    pub config: ConfigArgs,
}

pub async fn run(args: PackArgs) -> anyhow::Result<()> {
    super::bench_pack_loop::check_args(args.append, args.fresh_sessions, args.seed_events)?;
    let namespace = match (&args.namespace, args.fresh) {
        (Some(n), _) => n.clone(),
        (None, false) => format!("bench-pack-{}", args.events),
        (None, true) => format!("bench-pack-{}-{}", args.events, ulid::Ulid::generate().to_string().to_lowercase()),
    };
    let (mut conn, mut server, store) = super::bench::start_server_in(&args.config, Some(&namespace)).await?;
    let sessions = ensure_corpus(&args, &conn, &store).await?;
    let config = args.config.load()?;
    let model = memex_server::search::embedder(&config.embedding)?.map(|e| e.info().clone());
    let fast = memex_server::search::fast_tier(&config.embedding)?.map(|e| e.info().clone());
    let wanted = if args.sessions == 0 { args.workers } else { args.sessions };
    let sessions = if args.fresh_sessions {
        let backlogs = super::bench_pack_loop::backlogs(model.as_ref(), fast.as_ref(), config.memory.enabled);
        super::bench_pack_loop::fresh_sessions(&args, &conn, &store, &backlogs).await?
    } else {
        anyhow::ensure!(
            sessions.len() >= wanted,
            "the corpus has {} sessions, fewer than asked for ({wanted})",
            sessions.len()
        );
        sessions[..wanted].to_vec()
    };
    let sessions = Arc::new(sessions);
    println!(
        "pack: {} workers x {} packs/s = {} packs/s over {} events (namespace {namespace}), {}; sources: {}",
        args.workers,
        args.rate,
        args.workers as f64 * args.rate,
        args.events,
        if args.fresh_sessions {
            "one fresh session per worker".to_owned()
        } else if args.sessions == 0 {
            "one session per worker".to_owned()
        } else {
            format!("each request at a random one of {} sessions", sessions.len())
        },
        source_names(&args.config)?,
    );
    if args.append {
        println!("  each turn appends an event to its session first: latency is the turn's, append and pack");
    }
    let lag_at_start = embedding_lag(&store, &conn.namespace, model.as_ref()).await?;
    let fast_lag_at_start = embedding_lag(&store, &conn.namespace, fast.as_ref()).await?;
    let memory_lag = async |ns: &str| match config.memory.enabled {
        true => super::bench_pack_loop::memory_lag(&store, ns).await.map(Some),
        false => anyhow::Ok(None),
    };
    let memory_lag_at_start = memory_lag(&conn.namespace).await?;
    let mut cold = None;
    if args.cold_seconds > 0.0 {
        // A new server over the same database: this replica's caches are empty, as after a restart.
        server.stop().await;
        (conn, server, _) = super::bench::start_server_in(&args.config, Some(&namespace)).await?;
        let c = phase(&args, &conn, &sessions, args.rate, args.cold_seconds, false).await?;
        println!(
            "  cold (first {:.0} s after a server start): {}",
            args.cold_seconds,
            c.line(args.workers as f64 * args.rate, args.append)
        );
        cold = Some(c);
    }
    // Warm-up (caches, connections), not measured.
    phase(&args, &conn, &sessions, args.rate, args.warmup, false).await?;
    let (packs_before, phases_before) = memex_context::pack_phase_totals();
    let main = phase(&args, &conn, &sessions, args.rate, args.seconds, true).await?;
    let (packs_after, phases_after) = memex_context::pack_phase_totals();
    println!("  warm: {}", main.line(args.workers as f64 * args.rate, args.append));
    if let Some(p) = &main.prefix {
        println!("{}", p.lines());
    }
    let lag_at_end = embedding_lag(&store, &conn.namespace, model.as_ref()).await?;
    let fast_lag_at_end = embedding_lag(&store, &conn.namespace, fast.as_ref()).await?;
    let memory_lag_at_end = memory_lag(&conn.namespace).await?;
    if let (Some(start), Some(end)) = (lag_at_start, lag_at_end) {
        println!("  embedding lag, the model (events without a vector): {start} at start, {end} at the end");
    }
    if let (Some(start), Some(end)) = (fast_lag_at_start, fast_lag_at_end) {
        println!("  embedding lag, the fast tier: {start} at start, {end} at the end");
    }
    if let (Some(start), Some(end)) = (memory_lag_at_start, memory_lag_at_end) {
        println!("  memory lag (events the memory worker has not read): {start} at start, {end} at the end");
    }
    let _ = server;
    let packs = (packs_after - packs_before).max(1);
    let mut breakdown = serde_json::Map::new();
    println!("  where the time goes (mean per pack, server side):");
    for ((name, after), (_, before)) in phases_after.iter().zip(&phases_before) {
        let ms = (*after - *before).as_secs_f64() * 1000.0 / packs as f64;
        println!("    {name:<48} {ms:>7.3} ms");
        breakdown.insert((*name).to_owned(), json!(round(ms)));
    }
    let mut saturation = serde_json::Value::Null;
    if args.saturation {
        let mut steps = Vec::new();
        let mut rate = args.rate;
        // Already past 100 ms at the starting rate: that rate is the bound found.
        let mut passed = (main.p99_ms > 100.0).then_some(args.workers as f64 * args.rate);
        for _ in 0..if passed.is_some() { 0 } else { 10 } {
            rate *= 1.5;
            let r = phase(&args, &conn, &sessions, rate, args.step_seconds, false).await?;
            println!("  saturation step: {}", r.line(args.workers as f64 * rate, args.append));
            let over = r.p99_ms > 100.0;
            steps.push(json!({"offered_per_sec": round(args.workers as f64 * rate), "achieved_per_sec": round(r.achieved), "p50_ms": round(r.p50_ms), "p99_ms": round(r.p99_ms), "errors": r.errors}));
            if over {
                passed = Some(args.workers as f64 * rate);
                break;
            }
        }
        match passed {
            Some(r) => println!("  saturation: p99 passes 100 ms at {r:.0} packs/s offered"),
            None => println!("  saturation: p99 stayed under 100 ms at every step"),
        }
        saturation = json!({"p99_over_100ms_at_per_sec": passed.map(round), "steps": steps});
    }
    let summary = json!({
        "bench": "pack",
        "workers": args.workers, "rate_per_worker": args.rate, "offered_per_sec": args.workers as f64 * args.rate,
        "events": args.events, "seconds": args.seconds, "retrieval_budget": args.retrieval, "full_view": args.full_view, "append": args.append,
        "sessions": sessions.len(), "fresh": args.fresh, "fresh_sessions": args.fresh_sessions,
        "seed_events": args.fresh_sessions.then(|| args.seed_events.unwrap_or(super::bench_pack_loop::DEFAULT_SEED_EVENTS)),
        "packs": main.count, "errors": main.errors, "refused": main.refused, "achieved_per_sec": round(main.achieved),
        "p50_ms": round(main.p50_ms), "p90_ms": round(main.p90_ms), "p99_ms": round(main.p99_ms), "max_ms": round(main.max_ms),
        "with_vectors_pct": round(main.vectors_pct()),
        "cpu_ms_per_pack": main.cpu.map(|(m, _)| round(m)), "process_cpu_ms_per_pack": main.cpu.map(|(_, p)| round(p)),
        "cold": cold.as_ref().map(|c| json!({"seconds": args.cold_seconds, "packs": c.count, "errors": c.errors, "refused": c.refused, "achieved_per_sec": round(c.achieved), "p50_ms": round(c.p50_ms), "p99_ms": round(c.p99_ms), "max_ms": round(c.max_ms), "with_vectors_pct": round(c.vectors_pct())})),
        "embedding_lag": {"start": lag_at_start, "end": lag_at_end},
        "fast_tier_lag": {"start": fast_lag_at_start, "end": fast_lag_at_end},
        "memory_lag": {"start": memory_lag_at_start, "end": memory_lag_at_end},
        "phases_ms": breakdown,
        "shared_prefix": main.prefix.as_ref().map(PrefixStats::json),
        "saturation": saturation,
    });
    println!("{summary}");
    Ok(())
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn source_names(config: &ConfigArgs) -> anyhow::Result<String> {
    let c = config.load()?;
    let search = if c.search.enabled {
        "the search index (BM25; vectors too when an embedding provider is configured)"
    } else {
        "the store scan (BM25 over each session's newest events, context.scan_events): search is disabled"
    };
    Ok(format!("task pointers, standing items, manifest anchors and {search}"))
}

struct PhaseResult {
    count: u64,
    errors: u64,
    /// Refused with RESOURCE_EXHAUSTED (load shed), among `errors`.
    refused: u64,
    /// Packs built with vectors.
    with_vectors: u64,
    achieved: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// CPU time per pack (ms): the whole machine's (server, Postgres, this client) and this
    /// process's (server and client); None where /proc is not there.
    cpu: Option<(f64, f64)>,
    /// The shared prefix of consecutive turns, when measured.
    prefix: Option<PrefixStats>,
}

impl PhaseResult {
    fn vectors_pct(&self) -> f64 {
        100.0 * self.with_vectors as f64 / self.count.max(1) as f64
    }

    /// The phase in a line; `turns`: in an agent loop, where a turn is an append and a pack.
    fn line(&self, offered: f64, turns: bool) -> String {
        let unit = if turns { "turn" } else { "pack" };
        let cpu = match self.cpu {
            Some((machine, process)) => format!("; CPU per {unit} {machine:.2} ms (this process {process:.2} ms)"),
            None => String::new(),
        };
        format!(
            "{} {unit}s ({} errors, {} refused), offered {offered:.0}/s, achieved {:.0}/s; latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {:.1}% with vectors{cpu}",
            self.count,
            self.errors,
            self.refused,
            self.achieved,
            self.p50_ms,
            self.p90_ms,
            self.p99_ms,
            self.max_ms,
            self.vectors_pct()
        )
    }
}

/// CPU seconds used so far: the machine's busy time (`/proc/stat`) and this process's
/// (`/proc/self/stat`). Linux reports both in USER_HZ ticks, 100 per second on every platform.
fn cpu_seconds() -> Option<(f64, f64)> {
    const TICKS: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<f64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    let busy = cpu.get(..8)?.iter().enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum::<f64>();
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = own.rsplit_once(") ")?.1.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((busy / TICKS, (utime + stime) / TICKS))
}

/// One open-loop phase at `rate` packs/s per worker for `seconds`; with `measure`, the shared
/// prefix of consecutive turns too, when each worker has a session of its own.
async fn phase(
    args: &PackArgs,
    conn: &Conn,
    sessions: &Arc<Vec<String>>,
    rate: f64,
    seconds: f64,
    measure: bool,
) -> anyhow::Result<PhaseResult> {
    let hist = Arc::new(Mutex::new(hdrhistogram::Histogram::<u64>::new_with_bounds(1, 120_000_000, 3)?));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let with_vectors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // (second sent in, latency in µs) of every answered pack, for --timeline.
    let timeline: Arc<Mutex<Vec<(u32, u64)>>> = Arc::default();
    let spread = args.sessions > 0 && !args.fresh_sessions;
    let meter = (measure && !spread).then(|| PrefixMeter::start(args.workers).map(Arc::new)).transpose()?;
    // A few HTTP/2 connections shared by the workers, as agents behind a few gateways would.
    let mut clients = Vec::new();
    for _ in 0..8 {
        let events = memex_proto::v1::event_service_client::EventServiceClient::with_interceptor(
            conn.channel().await?,
            conn.bearer()?,
        );
        clients.push((super::bench::context_clients(conn).await?.0, events));
    }
    let cpu_before = cpu_seconds();
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + Duration::from_secs_f64(seconds);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut workers = Vec::new();
    for w in 0..args.workers {
        let mut client = clients[w % clients.len()].clone();
        let (hist, errors, sessions) = (hist.clone(), errors.clone(), sessions.clone());
        let (refused, with_vectors, timeline, meter) =
            (refused.clone(), with_vectors.clone(), timeline.clone(), meter.clone());
        let (ns, retrieval) = (conn.namespace.clone(), args.retrieval);
        let view = if args.full_view { pb::PackView::Full } else { pb::PackView::Basic } as i32;
        let args_append = args.append;
        let args_timeline = args.timeline;
        let offset = interval.mul_f64(w as f64 / args.workers as f64);
        workers.push(tokio::spawn(async move {
            let mut k: u32 = 0;
            // A worker's own stream of sessions: deterministic for a seed, different per worker.
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let mut inflight = Vec::new();
            loop {
                let scheduled = start + offset + interval * k;
                if scheduled >= end {
                    break;
                }
                tokio::time::sleep_until(scheduled.into()).await;
                let scheduled = sent_at(scheduled);
                let session = if spread {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    sessions[(rng % sessions.len() as u64) as usize].clone()
                } else {
                    sessions[w].clone()
                };
                let (append, req) =
                    turn_requests(&ns, session, (w + k as usize) % QUERIES.len(), k, retrieval, view, args_append);
                let ((mut c, mut e), hist, errors) = (client.clone(), hist.clone(), errors.clone());
                let (refused, with_vectors) = (refused.clone(), with_vectors.clone());
                let (timeline, meter, k_turn) = (args_timeline.then(|| timeline.clone()), meter.clone(), k);
                inflight.push(tokio::spawn(async move {
                    let turn = async {
                        if let Some(a) = append {
                            e.append_events(a).await?;
                        }
                        c.build_pack(req).await
                    };
                    match turn.await {
                        Ok(p) => {
                            if p.get_ref().vectors_used {
                                with_vectors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            let us = scheduled.elapsed().as_micros().max(1) as u64;
                            if let Ok(mut h) = hist.lock() {
                                let _ = h.record(us);
                            }
                            if let Some(Ok(mut t)) = timeline.as_ref().map(|t| t.lock()) {
                                t.push((scheduled.saturating_duration_since(start).as_secs() as u32, us));
                            }
                            if let Some(m) = meter {
                                m.observe(w, k_turn, p.into_inner()).await;
                            }
                        }
                        Err(e) => {
                            if e.code() == tonic::Code::ResourceExhausted {
                                refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            if errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                                eprintln!("pack error: {e}");
                            }
                        }
                    }
                }));
                k += 1;
            }
            for t in inflight {
                let _ = t.await;
            }
            let _ = &mut client;
        }));
    }
    for w in workers {
        w.await?;
    }
    let elapsed = start.elapsed().as_secs_f64().max(seconds);
    // The meter's counting thread is this process's, not the server's: its CPU is left out.
    let (prefix, meter_cpu) = match &meter {
        Some(m) => m.finish().await.map(|(stats, cpu)| (Some(stats), cpu.unwrap_or(0.0)))?,
        None => (None, 0.0),
    };
    let h = hist.lock().map_err(|_| anyhow::anyhow!("histogram lock poisoned"))?;
    let packs = h.len().max(1) as f64;
    let cpu = match (cpu_before, cpu_seconds()) {
        (Some((m0, p0)), Some((m1, p1))) => {
            Some(((m1 - m0 - meter_cpu) * 1000.0 / packs, (p1 - p0 - meter_cpu) * 1000.0 / packs))
        }
        _ => None,
    };
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    if args.timeline
        && let Ok(t) = timeline.lock()
    {
        print_timeline(&t, "packs", None);
    }
    Ok(PhaseResult {
        count: h.len(),
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
        refused: refused.load(std::sync::atomic::Ordering::Relaxed),
        with_vectors: with_vectors.load(std::sync::atomic::Ordering::Relaxed),
        achieved: h.len() as f64 / elapsed,
        p50_ms: ms(0.5),
        p90_ms: ms(0.9),
        p99_ms: ms(0.99),
        max_ms: h.max() as f64 / 1000.0,
        cpu,
        prefix,
    })
}

/// Per second sent: requests answered (`noun`), p50, p99 and max latency, and beside them the
/// second's slowest `fdatasync` of a disk probe when one ran.
pub(crate) fn print_timeline(samples: &[(u32, u64)], noun: &str, fsync_max: Option<&BTreeMap<u32, u64>>) {
    let mut by_second: BTreeMap<u32, Vec<u64>> = Default::default();
    for &(s, us) in samples {
        by_second.entry(s).or_default().push(us);
    }
    for (s, mut v) in by_second {
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        let probe = fsync_max
            .and_then(|m| m.get(&s))
            .map(|us| format!("  fsync max {:>8.2} ms", *us as f64 / 1000.0))
            .unwrap_or_default();
        println!(
            "    t={s:>3}s  {:>4} {noun}  p50 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms{probe}",
            v.len(),
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
}

/// The corpus: sessions of replayed trajectories (each with a task and a task state) until the
/// namespace holds `--events` events. Reused when already there. Returns the session ids.
async fn ensure_corpus(args: &PackArgs, conn: &Conn, store: &memex_store::Store) -> anyhow::Result<Vec<String>> {
    ensure_corpus_of(args.events, &args.traces, conn, store).await?;
    let ns = store.namespace(&conn.namespace).await?;
    corpus_sessions(store, ns.id, (args.workers * 4).max(args.sessions)).await
}

/// The first `limit` sessions of the corpus in namespace `namespace_id`, oldest first.
pub(crate) async fn corpus_sessions(
    store: &memex_store::Store,
    namespace_id: uuid::Uuid,
    limit: usize,
) -> anyhow::Result<Vec<String>> {
    let rows: Vec<(uuid::Uuid,)> = sqlx::query_as(
        "SELECT id FROM sessions WHERE namespace_id = $1 AND agent_id LIKE 'packbench-%' ORDER BY created_at LIMIT $2",
    )
    .bind(namespace_id)
    .bind(limit as i64)
    .fetch_all(store.pool())
    .await?;
    Ok(rows.into_iter().map(|(id,)| id.to_string()).collect())
}

/// Events of the namespace without a vector of the configured model (None without a model).
pub(crate) async fn embedding_lag(
    store: &memex_store::Store,
    namespace: &str,
    model: Option<&memex_embed::ModelInfo>,
) -> anyhow::Result<Option<u64>> {
    let Some(model) = model else { return Ok(None) };
    let ns = store.namespace(namespace).await?;
    let (events,): (i64,) = sqlx::query_as("SELECT count(*) FROM events WHERE namespace_id = $1")
        .bind(ns.id)
        .fetch_one(store.pool())
        .await?;
    let vectors = memex_search::vector_count(store.pool(), ns.id, model).await?;
    Ok(Some((events as u64).saturating_sub(vectors)))
}

/// Makes sure the namespace of `conn` holds at least `events` events of real trajectories (the
/// pack bench's corpus, shared with the memory bench).
pub(crate) async fn ensure_corpus_of(
    events: u64,
    traces: &std::path::Path,
    conn: &Conn,
    store: &memex_store::Store,
) -> anyhow::Result<()> {
    let ns = store.namespace(&conn.namespace).await?;
    let (have,): (i64,) = sqlx::query_as("SELECT count(*) FROM events WHERE namespace_id = $1")
        .bind(ns.id)
        .fetch_one(store.pool())
        .await?;
    if (have as u64) < events {
        build_corpus(events, traces, conn, have as u64).await?;
    }
    Ok(())
}

async fn build_corpus(target: u64, traces: &std::path::Path, conn: &Conn, mut have: u64) -> anyhow::Result<()> {
    let trajectories = Arc::new(read_trajectories(traces, 0, usize::MAX)?);
    anyhow::ensure!(!trajectories.is_empty(), "no trajectories in {}", traces.display());
    let clients = conn.connect().await?;
    let (_, tasks) = super::bench::context_clients(conn).await?;
    let started = Instant::now();
    let mut replay = have / 60_000 + 1;
    println!("pack: building the corpus: {have} events present, {target} wanted");
    while have < target {
        let mut handles = Vec::new();
        for chunk in 0..4usize {
            let (trajectories, mut sessions, mut events, mut tasks) =
                (trajectories.clone(), clients.sessions.clone(), clients.events.clone(), tasks.clone());
            let ns = conn.namespace.clone();
            handles.push(tokio::spawn(async move {
                let mut appended = 0u64;
                for (i, t) in trajectories.iter().enumerate().filter(|(i, _)| i % 4 == chunk) {
                    let task = format!("pb-{replay}-{i}");
                    let session = sessions
                        .create_session(pb::CreateSessionRequest {
                            namespace: ns.clone(),
                            agent_id: format!("packbench-{replay}-{i}"),
                            task_id: task.clone(),
                            ..Default::default()
                        })
                        .await?
                        .into_inner()
                        .id;
                    let goal = super::traces::task_goal(&t.events);
                    tasks
                        .update_task_state(pb::UpdateTaskStateRequest {
                            namespace: ns.clone(),
                            task_id: task,
                            state: Some(pb::TaskState {
                                goals: vec![goal],
                                phase: pb::Phase::Execution as i32,
                                ..Default::default()
                            }),
                            ..Default::default()
                        })
                        .await?;
                    let inputs: Vec<pb::EventInput> = t.events.iter().map(TraceEvent::input).collect();
                    appended += inputs.len() as u64;
                    events
                        .append_events(pb::AppendEventsRequest {
                            namespace: ns.clone(),
                            session_id: session,
                            events: inputs,
                            idempotency_key: String::new(),
                        })
                        .await
                        .context("append")?;
                }
                anyhow::Ok(appended)
            }));
        }
        for h in handles {
            have += h.await??;
        }
        println!("pack: corpus at {have} events ({:.0} s)", started.elapsed().as_secs_f64());
        replay += 1;
    }
    Ok(())
}

/// Where an open-loop request's latency is counted from: its scheduled time (so that a client
/// held up by slow answers still counts the wait: no coordinated omission), less the timer's own
/// lateness of up to one tick (tokio's timer rounds a sleep up to the next millisecond, which
/// is the client's, not the server's).
pub(crate) fn sent_at(scheduled: Instant) -> Instant {
    const TICK: Duration = Duration::from_millis(1);
    scheduled.max(Instant::now().checked_sub(TICK).unwrap_or(scheduled))
}
