//! `memex-bench soak`: a real `memex serve` (a child process with the default configuration, or a
//! server at `--endpoint`) under an open-loop fleet load for `--minutes`, by default at twice the
//! saturation rate found first. Each turn appends an event to a session picked at random among
//! `--sessions` of the corpus, then asks for its pack; latency is counted from the turn's scheduled
//! time. The questions it answers: above saturation, does the server shed with fast
//! RESOURCE_EXHAUSTED refusals, and does its memory stay flat? A line per interval (offered, OK,
//! refused, errors, latency, server RSS and CPU), then start / end / peak RSS, the RSS slope over
//! the second half and totals; last line JSON.
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use memex_client::Conn;
use memex_server::flags::ConfigArgs;
use serde_json::json;

use super::bench::round;
use super::soak_load::{Load, LoadRun};
use super::soak_server::Server;
use super::soak_stats::{IntervalStats, ProcSample, least_squares_slope};

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Minutes of load at the soak rate (after the saturation search).
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Turns per second offered (each an append and a pack); default: twice the saturation rate
    /// found first.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds per report line.
    #[arg(long, default_value_t = 30.0)]
    pub interval: f64,
    /// Sessions of the corpus the turns go to, one at random each.
    #[arg(long, default_value_t = 1000)]
    pub sessions: usize,
    /// Events the corpus namespace must hold (its default name is bench-pack-<events>, the pack
    /// bench's corpus).
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    /// Namespace of the corpus (default: bench-pack-<events>).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Load the corpus when the namespace is missing or short, by replaying the trajectories of
    /// --traces through the server (otherwise that is an error).
    #[arg(long)]
    pub load: bool,
    /// The agent-traces folder (or its .jsonl.gz file), for --load.
    #[arg(long, default_value = "../shared/bench-data/agent-traces")]
    pub traces: PathBuf,
    /// Retrieval budget of each pack (tokens); the other budgets are the server's defaults.
    #[arg(long, default_value_t = 4096)]
    pub retrieval: u32,
    /// Packs only: no append before each pack.
    #[arg(long)]
    pub no_append: bool,
    /// Sessions that end: after this many turns a session's place goes to a new, empty session
    /// (an id derived from its own, the run's and the count's), as a fleet's agents finish tasks
    /// and start others. By default the --sessions sessions take every turn and grow for the whole soak.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub session_turns: Option<u32>,
    /// Saturation search: the first rate (turns/s), raised 1.5x a step until p99 passes 100 ms or
    /// refusals start.
    #[arg(long, default_value_t = 25.0)]
    pub start_rate: f64,
    /// Seconds per saturation step.
    #[arg(long, default_value_t = 10.0)]
    pub step_seconds: f64,
    /// Seconds of unmeasured load at --start-rate first (caches, connections).
    #[arg(long, default_value_t = 20.0)]
    pub warmup: f64,
    /// Deadline of each request (seconds); a turn not answered by then is an error.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Soak a running server instead of starting one (give --server-pid for its RSS).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// The pid of the server at --endpoint, whose /proc/<pid>/status gives its RSS.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// An API key with write access to the namespace (default: one made for the run on the
    /// database, and revoked at its end).
    #[arg(long, env = "MEMEX_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The `memex` binary to start (default: the one beside this binary).
    #[arg(long)]
    pub memex_bin: Option<PathBuf>,
    /// Where the started server's output goes.
    #[arg(long, default_value = "soak-server.log")]
    pub server_log: PathBuf,
    /// Seconds to wait for the server to be ready (a replica rebuilds a missing text index first).
    #[arg(long, default_value_t = 900)]
    pub ready_timeout: u64,
    /// The server's configuration (-c FILE) and database (--database-url), also read by the bench
    /// for the corpus.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// The rule the `rss_flat` verdict applies: at the second half's slope, RSS grows by less than
/// this share of the soak's start RSS over that half.
const FLAT_SHARE: f64 = 0.05;
/// Shorter soaks get no verdict: the caches fill for the first 20-35 minutes at 2x saturation,
/// and a few minutes' half divides a steep slope by a large start (7 minutes at +12.7 MiB/min
/// passed the rule).
const FLAT_MIN_MINUTES: f64 = 30.0;
/// A p99 over this (ms) means saturation, as in `memex-bench pack --saturation`.
const SATURATED_P99_MS: f64 = 100.0;

pub async fn run(args: SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.minutes > 0.0 && args.interval > 0.0, "--minutes and --interval must be positive");
    anyhow::ensure!(args.rate.is_none_or(|r| r > 0.0) && args.start_rate > 0.0, "rates must be positive");
    anyhow::ensure!(
        args.session_turns.is_none() || !args.no_append,
        "--session-turns counts appended turns: it needs the appends --no-append leaves out"
    );
    let config = args.config.load()?;
    let store = memex_server::connect_store_as(&config, memex_store::Tenant::All)
        .await
        .context("the soak reads the corpus on the server's database (--database-url, -c)")?;
    store.migrate().await?;
    let namespace = args.namespace.clone().unwrap_or_else(|| format!("bench-pack-{}", args.events));
    let ns = match store.namespace(&namespace).await {
        Ok(ns) => ns,
        Err(memex_store::StoreError::NamespaceNotFound(_)) if args.load => store.create_namespace(&namespace).await?,
        Err(memex_store::StoreError::NamespaceNotFound(_)) => anyhow::bail!(
            "no corpus: namespace {namespace} is not on this database; pass --load to build it from --traces, or name another with --namespace"
        ),
        Err(e) => return Err(e.into()),
    };
    let (have,): (i64,) = sqlx::query_as("SELECT count(*) FROM events WHERE namespace_id = $1")
        .bind(ns.id)
        .fetch_one(store.pool())
        .await?;
    anyhow::ensure!(
        args.load || have as u64 >= args.events,
        "namespace {namespace} holds {have} events, fewer than --events {}; pass --load to add the rest, or a smaller --events",
        args.events
    );

    let mut server = match &args.endpoint {
        Some(endpoint) => Server::external(endpoint, args.server_pid),
        None => Server::spawn(&args)?,
    };
    let key = match &args.api_key {
        Some(k) => KeyForRun { token: k.clone(), made: None },
        None => {
            let made = store.create_api_key(&ns, "memex-bench-soak", memex_store::Access::Write).await?;
            KeyForRun { token: made.token, made: Some(made.key.id) }
        }
    };
    let conn = Conn {
        endpoint: server.endpoint.clone(),
        namespace: namespace.clone(),
        api_key: Some(key.token.clone()),
        api_key_file: "/nonexistent".into(),
        tls_ca: None,
    };
    let outcome = soak(&args, &conn, &store, &ns, &mut server).await;
    if let Some(id) = key.made {
        let _ = store.revoke_api_key(&ns, id).await;
    }
    server.stop().await;
    outcome
}

struct KeyForRun {
    token: String,
    /// The key made for this run, revoked at its end.
    made: Option<uuid::Uuid>,
}

async fn soak(
    args: &SoakArgs,
    conn: &Conn,
    store: &memex_store::Store,
    ns: &memex_store::Namespace,
    server: &mut Server,
) -> anyhow::Result<()> {
    let waited = server.wait_ready(conn, Duration::from_secs(args.ready_timeout)).await?;
    let at_ready = server.sample();
    println!(
        "soak: server {} (pid {}) ready after {:.1} s; RSS {}",
        conn.endpoint,
        server.pid.map_or("unknown".into(), |p| p.to_string()),
        waited.as_secs_f64(),
        mib_or_unknown(at_ready.as_ref()),
    );
    if args.load {
        super::bench_pack::ensure_corpus_of(args.events, &args.traces, conn, store).await?;
    }
    let sessions = super::bench_pack::corpus_sessions(store, ns.id, args.sessions).await?;
    anyhow::ensure!(
        sessions.len() >= args.sessions && !sessions.is_empty(),
        "namespace {} has {} sessions of the corpus, fewer than --sessions {}",
        ns.name,
        sessions.len(),
        args.sessions
    );
    let load = Load::new(args, conn, sessions).await?;
    println!(
        "soak: turns over {} sessions of {} ({} each{}), open loop, {} s deadline",
        args.sessions,
        ns.name,
        if args.no_append { "a pack" } else { "an append, then a pack" },
        args.session_turns
            .map_or(String::new(), |n| format!("; a session ends after {n} turns and a new one takes its place")),
        args.timeout
    );
    load.run(args.start_rate, args.warmup, args.warmup, None).await?;

    let mut steps = Vec::new();
    let (rate, saturation) = match args.rate {
        Some(r) => (r, None),
        None => {
            let mut rate = args.start_rate;
            let mut found = None;
            for _ in 0..12 {
                let s = load.run(rate, args.step_seconds, args.step_seconds, None).await?.intervals.remove(0);
                println!("  saturation step {rate:>7.1}/s: {}", s.line());
                steps.push(s.json());
                if s.p99_ms > SATURATED_P99_MS || s.refused > 0 {
                    found = Some(rate);
                    break;
                }
                rate *= 1.5;
            }
            let found = found.with_context(|| {
                format!(
                    "no saturation up to {rate:.0} turns/s (p99 under {SATURATED_P99_MS} ms, no refusals): give --rate"
                )
            })?;
            println!("  saturation: p99 passes {SATURATED_P99_MS} ms or refusals start at {found:.1} turns/s offered");
            // Let the last step's queue drain before the soak starts.
            tokio::time::sleep(Duration::from_secs(5)).await;
            (2.0 * found, Some(found))
        }
    };

    println!(
        "soak: {rate:.1} turns/s for {} min{}; a line every {} s",
        args.minutes,
        saturation.map_or(String::new(), |s| format!(" (2 x saturation {s:.1}/s)")),
        args.interval
    );
    println!(
        "  {:>6} {:>9} {:>8} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "t(s)", "offered/s", "OK/s", "refused/s", "errors", "p50 ms", "p99 ms", "max ms", "refusal99", "RSS MiB", "CPU"
    );
    let started = server.sample();
    let run = load.run(rate, args.minutes * 60.0, args.interval, Some(&*server)).await?;
    let ended = server.sample();
    let caches = server.caches();
    report(args, rate, saturation, steps, &run, (started.as_ref(), ended.as_ref()), &caches);
    Ok(())
}

/// The `rss_flat` verdict: whether RSS grew (`growth_mib`, over the second half at its slope) by
/// less than [`FLAT_SHARE`] of the start; none under [`FLAT_MIN_MINUTES`] or without both figures.
fn flat_verdict(minutes: f64, growth_mib: Option<f64>, start_mib: Option<f64>) -> Option<bool> {
    match (growth_mib, start_mib) {
        (Some(g), Some(start)) if minutes >= FLAT_MIN_MINUTES => Some(g < FLAT_SHARE * start),
        _ => None,
    }
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn mib_or_unknown(s: Option<&ProcSample>) -> String {
    s.map_or("unknown (no pid)".into(), |s| format!("{:.1} MiB", mib(s.rss_kb)))
}

fn report(
    args: &SoakArgs,
    rate: f64,
    saturation: Option<f64>,
    steps: Vec<serde_json::Value>,
    run: &LoadRun,
    (started, ended): (Option<&ProcSample>, Option<&ProcSample>),
    caches: &[serde_json::Map<String, serde_json::Value>],
) {
    let seconds = args.minutes * 60.0;
    let second_half: Vec<(f64, f64)> =
        run.samples.iter().filter(|(t, _)| *t >= seconds / 2.0).map(|(t, s)| (*t / 60.0, mib(s.rss_kb))).collect();
    let slope = least_squares_slope(&second_half);
    let peak = run.samples.iter().map(|(_, s)| s.rss_kb).chain(ended.map(|s| s.rss_kb)).max();
    let (first, last) = (run.intervals.first(), run.intervals.last());
    let t = &run.total;
    println!(
        "  totals: {} turns offered, {} OK, {} refused ({:.1}%), {} other errors {:?}; OK p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; refusals p99 {:.1} ms",
        t.offered,
        t.ok,
        t.refused,
        100.0 * t.refused as f64 / t.offered.max(1) as f64,
        t.errors,
        run.error_codes,
        t.p50_ms,
        t.p99_ms,
        t.max_ms,
        t.refused_p99_ms
    );
    println!(
        "  p99 of OK turns: first interval {:.1} ms, last interval {:.1} ms",
        first.map_or(0.0, |i| i.p99_ms),
        last.map_or(0.0, |i| i.p99_ms)
    );
    let growth = slope.map(|s| s * args.minutes / 2.0);
    let flat = flat_verdict(args.minutes, growth, started.map(|s| mib(s.rss_kb)));
    if let (Some(s), Some(e)) = (started, ended) {
        println!(
            "  server RSS: start {:.1} MiB (anon {:.1}, file {:.1}), end {:.1} MiB (anon {:.1}, file {:.1}), peak {:.1} MiB sampled ({:.1} MiB VmHWM), threads {} -> {}",
            mib(s.rss_kb),
            mib(s.anon_kb),
            mib(s.file_kb),
            mib(e.rss_kb),
            mib(e.anon_kb),
            mib(e.file_kb),
            mib(peak.unwrap_or(e.rss_kb)),
            mib(e.hwm_kb),
            s.threads,
            e.threads
        );
        println!(
            "  RSS slope over the second half: {:+.2} MiB/min ({:+.1} MiB over that half, {:+.1}% of the start RSS): {}",
            slope.unwrap_or(0.0),
            growth.unwrap_or(0.0),
            100.0 * growth.unwrap_or(0.0) / mib(s.rss_kb).max(1.0),
            match flat {
                Some(true) => "flat".to_string(),
                Some(false) => "growing".to_string(),
                None => format!("not judged (under {FLAT_MIN_MINUTES} minutes)"),
            }
        );
    } else {
        println!("  server RSS: unknown (give --server-pid with --endpoint)");
    }
    // The caches fill over minutes to fixed bounds: RSS that grows while they fill is not a leak.
    if let (Some(first), Some(last)) = (caches.first(), caches.last()) {
        println!("  caches, first and last of {} logged (once a minute):", caches.len());
        for (a, b) in super::soak_server::describe_caches(first).iter().zip(super::soak_server::describe_caches(last)) {
            println!("    {a}  ->  {b}");
        }
    }
    let summary = json!({
        "bench": "soak",
        "minutes": args.minutes, "interval_secs": args.interval, "sessions": args.sessions, "events": args.events,
        "append": !args.no_append, "session_turns": args.session_turns, "retrieval_budget": args.retrieval,
        "saturation_per_sec": saturation.map(round), "saturation_steps": steps, "offered_per_sec": round(rate),
        "turns": t.offered, "ok": t.ok, "refused": t.refused, "errors": t.errors, "error_codes": run.error_codes,
        "p50_ms": round(t.p50_ms), "p99_ms": round(t.p99_ms), "max_ms": round(t.max_ms), "refused_p99_ms": round(t.refused_p99_ms),
        "first_interval_p99_ms": first.map(|i| round(i.p99_ms)), "last_interval_p99_ms": last.map(|i| round(i.p99_ms)),
        "rss_start_mib": started.map(|s| round(mib(s.rss_kb))), "rss_end_mib": ended.map(|s| round(mib(s.rss_kb))),
        "rss_peak_mib": peak.map(|p| round(mib(p))), "vm_hwm_mib": ended.map(|s| round(mib(s.hwm_kb))),
        "rss_anon_start_mib": started.map(|s| round(mib(s.anon_kb))), "rss_anon_end_mib": ended.map(|s| round(mib(s.anon_kb))),
        "rss_slope_mib_per_min_second_half": slope.map(round), "rss_flat": flat,
        "intervals": run.intervals.iter().map(IntervalStats::json).collect::<Vec<_>>(),
        "caches_first": caches.first(), "caches_last": caches.last(),
    });
    println!("{summary}");
}

#[cfg(test)]
mod tests {
    use super::flat_verdict;

    #[test]
    fn short_soaks_get_no_verdict() {
        // The 7-minute run that passed the rule at +12.7 MiB/min (44 MiB over 3.5 minutes).
        assert_eq!(flat_verdict(7.0, Some(44.4), Some(931.0)), None);
        assert_eq!(flat_verdict(29.9, Some(0.0), Some(900.0)), None);
        // Two hours at +1.50 MiB/min from 862 MiB: 90 MiB, 10.4%.
        assert_eq!(flat_verdict(120.0, Some(89.9), Some(861.8)), Some(false));
        // An hour at +1.43 MiB/min from 864 MiB: 43 MiB, 4.9%.
        assert_eq!(flat_verdict(60.0, Some(42.9), Some(864.0)), Some(true));
        assert_eq!(flat_verdict(60.0, None, Some(864.0)), None);
    }
}
