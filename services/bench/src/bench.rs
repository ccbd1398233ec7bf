//! `memex-bench ingest`: durable ingest throughput (batched appends) and single-append latency at
//! N concurrent writers, through the real gRPC API. Prints figures, then one JSON line.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use memex_proto::v1 as pb;
use serde_json::json;

use memex_client::{Authed, Clients, Conn};
use memex_server::flags::ConfigArgs;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Ingest throughput and latency.
    Ingest(IngestArgs),
    /// CompileView and ReadLines latency over an imported trace (cold compile, then cached).
    View(ViewBenchArgs),
    /// Search: indexing throughput, query latency at scale, embedding throughput.
    Search(super::bench_search::SearchBenchArgs),
    /// The LoCoMo retrieval benchmark (recall@k of dialog ids, no LLM).
    Locomo(super::bench_locomo::LocomoArgs),
    /// The LongMemEval retrieval protocol (recall_all/any@k, NDCG@k; session and turn level).
    Longmemeval(super::bench_longmemeval::LongMemEvalArgs),
    /// Needles in compacted trajectories: recall of memex vs truncation and narrative compaction.
    Needle(super::bench_needle::NeedleArgs),
    /// BuildPack latency under open-loop load: p50/p99, phases, saturation point.
    Pack(super::bench_pack::PackArgs),
    /// search and build_pack through MCP (streamable HTTP) vs direct gRPC: p50/p99.
    Mcp(super::bench_mcp::McpBenchArgs),
    /// The events a trace file or a trajectory becomes, with their seqs (for labelling).
    Events(super::bench_events::EventsArgs),
    /// Memory: labelled facts (precision, recall, latest status), LoCoMo through the reader
    /// tools, and the reader tools' latency at scale with the worker's throughput.
    Memory(super::bench_memory::MemoryArgs),
    /// What survives a handoff: BuildSnapshot at 2k/4k tokens over cut trajectories and traces,
    /// against truncation and the pointer manifest; BuildSnapshot's latency at scale.
    Handoff(super::bench_handoff::HandoffArgs),
    /// A real `memex serve` for N minutes above its saturation rate: does it shed fast, does its
    /// RSS stay flat? A line per interval (rates, p50/p99, RSS), then start/end/peak RSS and slope.
    Soak(super::bench_soak::SoakArgs),
}

#[derive(clap::Args, Debug)]
pub struct ViewBenchArgs {
    /// The trace to import (Claude Code JSONL, Codex, Gemini or memex events).
    #[arg(long)]
    pub trace: std::path::PathBuf,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
}

#[derive(clap::Args, Debug)]
pub struct IngestArgs {
    /// Benchmark a running server instead of starting one in-process (needs --api-key or a key
    /// file with write access to --namespace).
    #[arg(long)]
    pub endpoint: Option<String>,
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    #[arg(long, env = "MEMEX_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Events to append in the batched phase.
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    /// Events per AppendEvents call in the batched phase.
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
    /// Concurrent writers in the batched phase (each on its own session).
    #[arg(long, default_value_t = 4)]
    pub batch_writers: usize,
    /// Concurrent writers in the single-append phase.
    #[arg(long, default_value_t = 64)]
    pub writers: usize,
    /// Appends per second per writer in the single-append phase (open loop: latency counted from
    /// each append's scheduled time, as agents that append when they act). Default: closed loop,
    /// each writer appends again as soon as it is answered (the saturation rate; latency then
    /// is writers / throughput by Little's law).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Length of the single-append phase, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Bytes of content per event.
    #[arg(long, default_value_t = 200)]
    pub content_bytes: usize,
    /// All single-append writers share one session (worst case: they serialize on its counter).
    #[arg(long)]
    pub same_session: bool,
    /// gRPC connections the single-append writers spread over (default: one per writer, as
    /// independent agents would have).
    #[arg(long)]
    pub connections: Option<usize>,
    /// Profile only: call the store directly for the single-append phase, skipping gRPC, to
    /// separate the database's share of the latency from the RPC layer's.
    #[arg(long)]
    pub direct: bool,
    /// Before the single-append phase, wait up to this many seconds for the fast tier and the
    /// memory worker to work off the batched phase's events (0: do not wait), so that single
    /// appends are measured beside the background work they cause, not the batched phase's. The
    /// model is not waited for: beside appends it works only in their lulls. In-process only.
    #[arg(long, default_value_t = 120)]
    pub catch_up_secs: u64,
    /// Also print the single-append phase second by second (appends answered, p50, p99, max by the
    /// second they were due in): to tell a steady tail from stalls.
    #[arg(long)]
    pub timeline: bool,
    /// While single appends run, write and `fdatasync` 8 KB in this directory every 10 ms (put it
    /// on the file system of Postgres's WAL), and report those syncs' latency; with --timeline,
    /// each second's slowest beside the appends'. Tells a slow disk from a slow server.
    #[arg(long)]
    pub fsync_probe: Option<std::path::PathBuf>,
}

pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Ingest(args) => ingest(args).await,
        BenchCommand::View(args) => super::bench_view::run(args).await,
        BenchCommand::Search(args) => super::bench_search::run(args).await,
        BenchCommand::Locomo(args) => super::bench_locomo::run(args).await,
        BenchCommand::Longmemeval(args) => super::bench_longmemeval::run(args).await,
        BenchCommand::Needle(args) => super::bench_needle::run(args).await,
        BenchCommand::Pack(args) => super::bench_pack::run(args).await,
        BenchCommand::Mcp(args) => super::bench_mcp::run(args).await,
        BenchCommand::Events(args) => super::bench_events::run(args),
        BenchCommand::Memory(args) => super::bench_memory::run(args).await,
        BenchCommand::Handoff(args) => super::bench_handoff::run(args).await,
        BenchCommand::Soak(args) => super::bench_soak::run(args).await,
    }
}

/// Waits for the in-process server's fast tier and memory worker to read the batched phase's
/// events (their lag is read from the database).
async fn catch_up(args: &IngestArgs, namespace: &str) -> anyhow::Result<()> {
    use super::bench_pack_loop::Backlog;
    let config = args.config.load()?;
    let store = memex_server::connect_store_as(&config, memex_store::Tenant::All).await?;
    let fast = memex_server::search::fast_tier(&config.embedding)?.map(|e| e.info().clone());
    let worker = config.embedding.worker && config.search.enabled;
    let mut waits = Vec::new();
    if let (Some(f), true) = (&fast, worker) {
        waits.push(("the fast tier", Backlog::Vectors(f), 0));
    }
    if config.memory.enabled {
        waits.push(("the memory worker", Backlog::Memory, 0));
    }
    let limit = Duration::from_secs(args.catch_up_secs);
    super::bench_pack_loop::wait_for_backlogs("ingest", &store, namespace, &waits, limit).await
}

/// A running server at `endpoint` (with `namespace` and `api_key`), or one started in-process
/// from `config`; the returned sender, when kept, keeps the in-process server up.
pub async fn connect_or_start(
    endpoint: Option<&str>,
    namespace: &str,
    api_key: Option<&str>,
    config: &ConfigArgs,
) -> anyhow::Result<(Conn, Option<BenchServer>)> {
    Ok(match endpoint {
        Some(endpoint) => (
            Conn {
                endpoint: endpoint.to_owned(),
                namespace: namespace.to_owned(),
                api_key: api_key.map(str::to_owned),
                api_key_file: ".memex/dev.key".into(),
                tls_ca: None,
            },
            None,
        ),
        None => {
            let (conn, server) = start_server(config).await?;
            (conn, Some(server))
        }
    })
}

async fn ingest(args: IngestArgs) -> anyhow::Result<()> {
    let (conn, _server) =
        connect_or_start(args.endpoint.as_deref(), &args.namespace, args.api_key.as_deref(), &args.config).await?;
    let clients = conn.connect().await?;
    let content = "x".repeat(args.content_bytes.saturating_sub(16));

    // Phase 1: batched appends.
    let sessions = new_sessions(&clients, &conn.namespace, args.batch_writers).await?;
    let remaining = Arc::new(AtomicU64::new(args.events));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for session in sessions {
        let mut events = clients.events.clone();
        let remaining = remaining.clone();
        let (ns, content, batch) = (conn.namespace.clone(), content.clone(), args.batch_size as u64);
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                let claimed = remaining
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| (r > 0).then(|| r.saturating_sub(batch)));
                let Ok(before) = claimed else { break };
                let take = before.min(batch);
                let evs: Vec<pb::EventInput> = (0..take).map(|i| event(n + i, &content)).collect();
                events
                    .append_events(pb::AppendEventsRequest {
                        namespace: ns.clone(),
                        session_id: session.clone(),
                        events: evs,
                        idempotency_key: String::new(),
                    })
                    .await?;
                n += take;
            }
            anyhow::Ok(n)
        }));
    }
    let mut appended = 0;
    for t in tasks {
        appended += t.await??;
    }
    let batched_secs = start.elapsed().as_secs_f64();
    let batched_rate = appended as f64 / batched_secs;
    println!(
        "batched: {appended} events in {batched_secs:.2} s = {batched_rate:.0} events/s ({} writers, {} events/batch, {} B content)",
        args.batch_writers, args.batch_size, args.content_bytes
    );

    if args.direct {
        return direct_single(&args, &content).await;
    }
    if args.endpoint.is_none() && args.catch_up_secs > 0 {
        catch_up(&args, &conn.namespace).await?;
    }

    // Phase 2: single appends at N writers, closed loop or at --rate each.
    let sessions = if args.same_session {
        vec![new_sessions(&clients, &conn.namespace, 1).await?.remove(0); args.writers]
    } else {
        new_sessions(&clients, &conn.namespace, args.writers).await?
    };
    let n_conns = args.connections.unwrap_or(args.writers).clamp(1, args.writers.max(1));
    let mut conns = Vec::with_capacity(n_conns);
    for _ in 0..n_conns {
        conns.push(conn.connect().await?.events);
    }
    let start = Instant::now();
    let probe = args.fsync_probe.as_deref().map(|dir| crate::disk_probe::DiskProbe::start(dir, start)).transpose()?;
    let until = start + Duration::from_secs_f64(args.seconds);
    let period = args.rate.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(1.0 / r));
    let writers = args.writers.max(1) as u32;
    let mut tasks = Vec::new();
    for (w, session) in sessions.into_iter().enumerate() {
        let mut events = conns[w % n_conns].clone();
        let (ns, content, timeline) = (conn.namespace.clone(), content.clone(), args.timeline);
        tasks.push(tokio::spawn(async move {
            let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            // (second due in, latency in µs) of every append, for --timeline.
            let mut seconds: Vec<(u32, u64)> = Vec::new();
            let mut i = 0u64;
            // Open loop: writer w's k-th append is due at start + (k + w/writers) * period, so
            // the writers' sends are spread over each period rather than in step.
            let due = |k: u64| period.map(|p| start + p.mul_f64(k as f64 + w as f64 / writers as f64));
            while Instant::now() < until {
                let t0 = match due(i) {
                    Some(at) => {
                        tokio::time::sleep_until(at.into()).await;
                        crate::bench_pack::sent_at(at)
                    }
                    None => Instant::now(),
                };
                if t0 >= until {
                    break;
                }
                events
                    .append_events(pb::AppendEventsRequest {
                        namespace: ns.clone(),
                        session_id: session.clone(),
                        events: vec![note(i, &content)],
                        idempotency_key: String::new(),
                    })
                    .await?;
                let us = t0.elapsed().as_micros().max(1) as u64;
                hist.record(us)?;
                if timeline {
                    seconds.push((t0.duration_since(start).as_secs() as u32, us));
                }
                i += 1;
            }
            anyhow::Ok((hist, seconds))
        }));
    }
    let (hist, seconds) = join_writers(tasks).await?;
    let fsyncs = probe.map(crate::disk_probe::DiskProbe::stop).transpose()?;
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let rate = hist.len() as f64 / args.seconds;
    println!(
        "single: {} appends at {} writers{} over {n_conns} connections{} in {:.1} s = {rate:.0} appends/s; latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        hist.len(),
        args.writers,
        match period {
            Some(_) => format!(" x {}/s (open loop)", args.rate.unwrap_or_default()),
            None => " (closed loop)".into(),
        },
        if args.same_session { " on one session" } else { "" },
        args.seconds,
        ms(0.5),
        ms(0.9),
        ms(0.99),
        hist.max() as f64 / 1000.0
    );
    let fsync = report_probe(&args, &seconds, fsyncs.as_deref());
    let summary = json!({
        "bench": "ingest",
        "server": if args.endpoint.is_some() { "external" } else { "in-process" },
        "batched": {
            "events": appended, "batch_size": args.batch_size, "writers": args.batch_writers,
            "content_bytes": args.content_bytes, "seconds": round(batched_secs), "events_per_sec": batched_rate.round(),
        },
        "single": {
            "writers": args.writers, "rate_per_writer": args.rate, "connections": n_conns,
            "same_session": args.same_session, "appends": hist.len(),
            "seconds": args.seconds, "appends_per_sec": rate.round(),
            "p50_ms": round(ms(0.5)), "p90_ms": round(ms(0.9)), "p99_ms": round(ms(0.99)),
            "max_ms": round(hist.max() as f64 / 1000.0),
        },
        "fsync_probe": fsync,
    });
    println!("{summary}");
    Ok(())
}

/// A writer's latencies: the histogram, and (second due in, µs) of each append for --timeline.
type WriterLatencies = (hdrhistogram::Histogram<u64>, Vec<(u32, u64)>);

/// The single-append writers' latencies, merged.
async fn join_writers(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<WriterLatencies>>>,
) -> anyhow::Result<WriterLatencies> {
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut seconds = Vec::new();
    for t in tasks {
        let (h, s) = t.await??;
        hist.add(h)?;
        seconds.extend(s);
    }
    Ok((hist, seconds))
}

/// Prints the probe's figures and, with --timeline, the phase second by second; returns the
/// probe's figures for the JSON summary.
fn report_probe(
    args: &IngestArgs,
    seconds: &[(u32, u64)],
    fsyncs: Option<&[(Duration, Duration)]>,
) -> Option<serde_json::Value> {
    let fsync = fsyncs.map(fsync_summary);
    if let Some(f) = &fsync {
        println!(
            "fsync probe: {} fdatasyncs of 8 KB; p50 {} ms, p99 {} ms, max {} ms; {} over 20 ms",
            f["syncs"], f["p50_ms"], f["p99_ms"], f["max_ms"], f["over_20ms"]
        );
    }
    if args.timeline {
        let by_second = fsyncs.map(crate::disk_probe::max_by_second);
        crate::bench_pack::print_timeline(seconds, "appends", by_second.as_ref());
    }
    fsync
}

/// The probe's figures for the summary: count, p50/p99/max and syncs over 20 ms.
fn fsync_summary(samples: &[(Duration, Duration)]) -> serde_json::Value {
    let mut ms: Vec<f64> = samples.iter().map(|(_, took)| took.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms.get(((ms.len().saturating_sub(1)) as f64 * q).round() as usize).copied().unwrap_or(0.0);
    json!({
        "syncs": ms.len(), "p50_ms": round(at(0.5)), "p99_ms": round(at(0.99)), "max_ms": round(at(1.0)),
        "over_20ms": ms.iter().filter(|m| **m > 20.0).count(),
    })
}

pub(super) fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn note(i: u64, content: &str) -> pb::EventInput {
    pb::EventInput { kind: "note".into(), content: format!("event {i:>10} {content}"), ..Default::default() }
}

/// A realistic mix: assistant text, then a tool call and its result.
fn event(i: u64, content: &str) -> pb::EventInput {
    match i % 3 {
        0 => pb::EventInput {
            kind: "assistant_message".into(),
            content: format!("event {i:>10} {content}"),
            ..Default::default()
        },
        1 => pb::EventInput {
            kind: "tool_call".into(),
            tool_name: "Bash".into(),
            tool_call_id: format!("call_{i}"),
            content: format!("{{\"command\":\"echo {i}\"}}"),
            ..Default::default()
        },
        _ => pb::EventInput {
            kind: "tool_result".into(),
            tool_call_id: format!("call_{}", i - 1),
            content: format!("event {i:>10} {content}"),
            ..Default::default()
        },
    }
}

async fn new_sessions(c: &Clients, namespace: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::with_capacity(n);
    let mut sessions = c.sessions.clone();
    for i in 0..n {
        let s = sessions
            .create_session(pb::CreateSessionRequest {
                namespace: namespace.to_owned(),
                agent_id: format!("bench-{i}"),
                ..Default::default()
            })
            .await?
            .into_inner();
        out.push(s.id);
    }
    Ok(out)
}

/// Starts a server in-process on 127.0.0.1:0 with auth off, in a fresh namespace.
pub async fn start_server(config: &ConfigArgs) -> anyhow::Result<(Conn, BenchServer)> {
    let (conn, server, _) = start_server_in(config, None).await?;
    Ok((conn, server))
}

/// An in-process server; it stops when this is dropped (or at [`BenchServer::stop`]).
pub struct BenchServer {
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl BenchServer {
    /// Stops the server and waits until it has let go of everything (its index directory too).
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Starts a server in-process on 127.0.0.1:0 with auth off, in `namespace` (created if missing;
/// a fresh one when None). Also returns a direct handle on its database.
pub async fn start_server_in(
    config: &ConfigArgs,
    namespace: Option<&str>,
) -> anyhow::Result<(Conn, BenchServer, memex_store::Store)> {
    start_server_with(config.load()?, namespace).await
}

/// [`start_server_in`] with a configuration already loaded (and adjusted by the benchmark).
pub async fn start_server_with(
    mut config: memex_server::Config,
    namespace: Option<&str>,
) -> anyhow::Result<(Conn, BenchServer, memex_store::Store)> {
    config.auth.enabled = false;
    config.log.filter = "warn".into();
    let store = memex_server::connect_store_as(&config, memex_store::Tenant::All)
        .await
        .context("bench needs the database (make run sets it up)")?;
    store.migrate().await?;
    let namespace = match namespace {
        Some(n) => n.to_owned(),
        None => format!("bench-{}", ulid::Ulid::generate().to_string().to_lowercase()),
    };
    if store.namespace(&namespace).await.is_err() {
        store.create_namespace(&namespace).await?;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        if let Err(e) = memex_server::run(listener, config, async {
            let _ = rx.await;
        })
        .await
        {
            eprintln!("bench server: {e}");
        }
    });
    let conn = Conn {
        endpoint: format!("http://{addr}"),
        namespace,
        api_key: None,
        api_key_file: "/nonexistent".into(),
        tls_ca: None,
    };
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((conn, BenchServer { shutdown: Some(tx), task: Some(task) }, store))
}

/// The single-append phase against the store itself (no gRPC), for profiling.
async fn direct_single(args: &IngestArgs, content: &str) -> anyhow::Result<()> {
    let config = args.config.load()?;
    let store = memex_server::connect_store_as(&config, memex_store::Tenant::All).await?;
    let ns = store.create_namespace(&format!("bench-{}", ulid::Ulid::generate().to_string().to_lowercase())).await?;
    let mut tasks = Vec::new();
    let start = Instant::now();
    let probe = args.fsync_probe.as_deref().map(|dir| crate::disk_probe::DiskProbe::start(dir, start)).transpose()?;
    let until = start + Duration::from_secs_f64(args.seconds);
    for w in 0..args.writers {
        let store = store.clone();
        let session = store
            .create_session(
                ns.id,
                memex_store::NewSession {
                    agent_id: format!("bench-{w}"),
                    source_format: "memex".into(),
                    ..Default::default()
                },
            )
            .await?;
        let (content, timeline) = (content.to_owned(), args.timeline);
        tasks.push(tokio::spawn(async move {
            let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut seconds: Vec<(u32, u64)> = Vec::new();
            let mut i = 0u64;
            while Instant::now() < until {
                let input = memex_event::EventInput {
                    kind: "note".into(),
                    content: format!("event {i:>10} {content}"),
                    ..Default::default()
                };
                let t0 = Instant::now();
                let fingerprint = memex_event::batch_fingerprint("", std::slice::from_ref(&input));
                let batch = memex_event::prepare_batch(vec![input], &Default::default(), &Default::default())?;
                store
                    .append(memex_store::AppendRequest {
                        namespace_id: ns.id,
                        session_id: session.id,
                        batch,
                        idempotency_key: None,
                        fingerprint,
                    })
                    .await?;
                let us = t0.elapsed().as_micros().max(1) as u64;
                hist.record(us)?;
                if timeline {
                    seconds.push((t0.duration_since(start).as_secs() as u32, us));
                }
                i += 1;
            }
            anyhow::Ok((hist, seconds))
        }));
    }
    let (hist, seconds) = join_writers(tasks).await?;
    let fsyncs = probe.map(crate::disk_probe::DiskProbe::stop).transpose()?;
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "direct single (no gRPC): {} appends at {} writers = {:.0} appends/s; p50 {:.2} ms, p99 {:.2} ms",
        hist.len(),
        args.writers,
        hist.len() as f64 / args.seconds,
        ms(0.5),
        ms(0.99)
    );
    report_probe(args, &seconds, fsyncs.as_deref());
    Ok(())
}

/// Context and task clients on `conn`.
pub async fn context_clients(
    conn: &Conn,
) -> anyhow::Result<(
    memex_proto::v1::context_service_client::ContextServiceClient<Authed>,
    memex_proto::v1::task_service_client::TaskServiceClient<Authed>,
)> {
    let channel = conn.channel().await?;
    let bearer = conn.bearer()?;
    Ok((
        memex_proto::v1::context_service_client::ContextServiceClient::with_interceptor(
            channel.clone(),
            bearer.clone(),
        )
        .max_decoding_message_size(usize::MAX),
        memex_proto::v1::task_service_client::TaskServiceClient::with_interceptor(channel, bearer),
    ))
}
