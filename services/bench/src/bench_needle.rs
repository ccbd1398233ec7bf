//! `memex-bench needle` (TRACE A.8): replays real trajectories, plants needles early (exact
//! hashes, exact error lines, file paths), forces compactions with a small window, then asks for
//! each needle through BuildPack — the query describes the needle's context, never the needle —
//! and checks it can be recovered through ExpandManifest and ReadLines. Reports exact-match recall for memex
//! and for two baselines run over the same events and window: truncation and narrative
//! compaction. Last line JSON.
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use memex_proto::v1 as pb;
use memex_proto::v1::context_service_client::ContextServiceClient;
use memex_proto::v1::task_service_client::TaskServiceClient;
use memex_tokens::Tokenizer;
use serde_json::json;
use tokio::sync::Semaphore;

use super::baselines::{Narrative, Truncation};
use super::traces::{Rng, TraceEvent, Trajectory, read_trajectories, task_goal};
use memex_client::{Authed, Clients};
use memex_server::flags::ConfigArgs;

#[derive(clap::Args, Debug)]
pub struct NeedleArgs {
    /// The agent-traces folder (or its .jsonl.gz file).
    #[arg(long, default_value = "../shared/bench-data/agent-traces")]
    pub traces: PathBuf,
    /// Trajectories to replay.
    #[arg(long, default_value_t = 50)]
    pub trajectories: usize,
    /// Trajectories to skip first.
    #[arg(long, default_value_t = 0)]
    pub skip: usize,
    /// The agent's window budget (tokens); small, to force compactions. A trajectory of fewer than
    /// twice as many tokens is replayed in a window of half its tokens (at least headroom + 1000),
    /// so it is compacted too; the baselines get the same window. Trajectories compacted fewer
    /// than `--min-compactions` times are counted in the report.
    #[arg(long, default_value_t = 8000)]
    pub window: u32,
    #[arg(long, default_value_t = 3)]
    pub min_compactions: u32,
    #[arg(long, default_value_t = 1000)]
    pub headroom: u32,
    #[arg(long, default_value_t = 2)]
    pub protected_turns: u32,
    /// The pack's retrieval budget (tokens).
    #[arg(long, default_value_t = 4096)]
    pub retrieval: u32,
    /// The pack's recent-tail budget (tokens).
    #[arg(long, default_value_t = 2000)]
    pub tail: u32,
    /// The narrative baseline's summary size (tokens; default 5% of the window).
    #[arg(long)]
    pub summary_tokens: Option<usize>,
    /// Seed of the needles.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Trajectories replayed at once.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// Print each needle's outcome.
    #[arg(long)]
    pub verbose: bool,
    /// Benchmark a running server instead of starting one in-process.
    #[arg(long)]
    pub endpoint: Option<String>,
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    #[arg(long, env = "MEMEX_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// A planted needle: an exact string, and a query about its context.
#[derive(Debug, Clone)]
pub struct Needle {
    pub kind: &'static str,
    pub value: String,
    pub query: String,
}

const WORDS: &[&str] = &[
    "alpha", "beacon", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper", "krypton",
    "lumen", "marble", "nectar", "onyx", "prism", "quartz", "raven", "sierra", "tundra", "umber", "vertex", "willow",
    "xenon", "yonder", "zephyr",
];

/// Plants three needles after the first three tool results of `t` (early in the trace).
pub fn plant(t: &Trajectory, rng: &mut Rng) -> (Vec<TraceEvent>, Vec<Needle>) {
    let pkg = t.instance_id.split("__").next().unwrap_or("pkg").to_owned();
    let ver = format!("{}.{}.{}", 1 + rng.below(6), rng.below(20), rng.below(10));
    let hash = rng.hex(64);
    let tarball = format!("dist/{pkg}-{ver}.tar.gz");
    let (w1, w2, w3) = (rng.pick(WORDS), rng.pick(WORDS), rng.pick(WORDS));
    let test_path = format!("tests/test_{w1}_{w2}.py");
    let test_fn = format!("test_{w3}_roundtrip");
    let (a, b) = (format!("0.{:06}", rng.below(1_000_000)), format!("0.{:06}", rng.below(1_000_000)));
    let error = format!("AssertionError: assert {b} == {a}");
    let (d1, d2) = (rng.pick(WORDS), rng.pick(WORDS));
    let cfg = format!("./{d1}/{d2}/settings_{}.cfg", rng.hex(8));
    let steps: [(Vec<TraceEvent>, Needle); 3] = [
        (
            vec![
                TraceEvent::new(
                    "assistant_message",
                    "THOUGHT: Before changing anything, record the checksum of the release tarball.",
                ),
                TraceEvent::call("needle_1", format!("sha256sum {tarball}")),
                TraceEvent::result(
                    "needle_1",
                    format!("<returncode>0</returncode>\n<output>\n{hash}  {tarball}\n</output>"),
                ),
            ],
            Needle {
                kind: "hash",
                value: hash,
                query: format!("What SHA-256 checksum did sha256sum print for the {pkg} release tarball in dist?"),
            },
        ),
        (
            vec![
                TraceEvent::new(
                    "assistant_message",
                    format!("THOUGHT: Let me run the {test_fn} test to see whether it fails."),
                ),
                TraceEvent::call("needle_2", format!("python -m pytest {test_path}::{test_fn} -x -q")),
                TraceEvent::result(
                    "needle_2",
                    format!(
                        "<returncode>1</returncode>\n<output>\nF\n=================================== FAILURES ===================================\n____ {test_fn} ____\n\n    def {test_fn}():\n>       assert compute_{w3}(3) == {a}\nE       {error}\nE        +  where {b} = compute_{w3}(3)\n\n{test_path}:{}: AssertionError\n=========================== short test summary info ============================\nFAILED {test_path}::{test_fn} - {error}\n1 failed in 0.{}s\n</output>",
                        10 + rng.below(400),
                        10 + rng.below(90)
                    ),
                ),
            ],
            Needle {
                kind: "error_line",
                value: error,
                query: format!("Which assertion error did the pytest run of {test_fn} fail with?"),
            },
        ),
        (
            vec![
                TraceEvent::new("assistant_message", format!("THOUGHT: Find the settings file used under {d1}.")),
                TraceEvent::call("needle_3", format!("find . -name \"*.cfg\" | grep {d1}")),
                TraceEvent::result("needle_3", format!("<returncode>0</returncode>\n<output>\n{cfg}\n</output>")),
            ],
            Needle {
                kind: "file_path",
                value: cfg,
                query: format!("Which .cfg settings file under {d1} did the find command report?"),
            },
        ),
    ];
    let results: Vec<usize> =
        t.events.iter().enumerate().filter(|(_, e)| e.kind == "tool_result").map(|(i, _)| i + 1).collect();
    let mut out = Vec::with_capacity(t.events.len() + 9);
    let mut needles = Vec::new();
    let mut steps = steps.into_iter();
    let mut next = steps.next();
    for (i, e) in t.events.iter().enumerate() {
        out.push(e.clone());
        if results.iter().take(3).any(|&r| r == i + 1)
            && let Some((events, needle)) = next.take()
        {
            out.extend(events);
            needles.push(needle);
            next = steps.next();
        }
    }
    for (events, needle) in next.into_iter().chain(steps) {
        out.extend(events);
        needles.push(needle);
    }
    (out, needles)
}

/// What happened to one needle under each approach.
#[derive(Debug, Clone, Default)]
struct Outcome {
    kind: &'static str,
    in_pack: bool,
    in_retrieval: bool,
    in_manifest_text: bool,
    recoverable: bool,
    /// Found in the full-view lines the manifests cite (ReadLines).
    read_lines: bool,
    truncation: bool,
    narrative: bool,
}

#[derive(Debug, Default)]
struct TraceResult {
    outcomes: Vec<Outcome>,
    /// The window budget the trajectory was replayed in.
    window: u32,
    compactions: usize,
    narrative_compactions: usize,
    events: usize,
    pack_tokens: Vec<u32>,
    retrieval_tokens: Vec<u32>,
}

struct Ctx {
    ns: String,
    context: ContextServiceClient<Authed>,
    views: memex_proto::v1::view_service_client::ViewServiceClient<Authed>,
    tasks: TaskServiceClient<Authed>,
    clients: Clients,
    args: NeedleArgs,
}

pub async fn run(args: NeedleArgs) -> anyhow::Result<()> {
    let trajectories = read_trajectories(&args.traces, args.skip, args.trajectories)?;
    anyhow::ensure!(!trajectories.is_empty(), "no trajectories in {}", args.traces.display());
    let (conn, _server) = super::bench::connect_or_start(
        args.endpoint.as_deref(),
        &args.namespace,
        args.api_key.as_deref(),
        &args.config,
    )
    .await?;
    let clients = conn.connect().await?;
    let (context, tasks) = super::bench::context_clients(&conn).await?;
    let views = memex_proto::v1::view_service_client::ViewServiceClient::with_interceptor(
        conn.channel().await?,
        conn.bearer()?,
    )
    .max_decoding_message_size(usize::MAX);
    let started = std::time::Instant::now();
    let ctx = Arc::new(Ctx { ns: conn.namespace.clone(), context, tasks, views, clients, args });
    let limit = Arc::new(Semaphore::new(ctx.args.concurrency.max(1)));
    let mut handles = Vec::new();
    for (i, t) in trajectories.into_iter().enumerate() {
        let ctx = ctx.clone();
        let permit = limit.clone().acquire_owned().await?;
        handles.push(tokio::spawn(async move {
            let _permit = permit;
            replay(&ctx, i, t).await
        }));
    }
    let mut results = Vec::new();
    for h in handles {
        results.push(h.await??);
    }
    report(&ctx.args, &results, started.elapsed().as_secs_f64());
    Ok(())
}

async fn replay(ctx: &Ctx, index: usize, t: Trajectory) -> anyhow::Result<TraceResult> {
    let a = &ctx.args;
    let mut rng = Rng::new(a.seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let (events, needles) = plant(&t, &mut rng);
    let task = format!("{}#{}", t.instance_id, a.seed);
    let mut sessions = ctx.clients.sessions.clone();
    let session = sessions
        .create_session(pb::CreateSessionRequest {
            namespace: ctx.ns.clone(),
            agent_id: "needle-agent".into(),
            task_id: task.clone(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .id;
    let goal = task_goal(&events);
    let mut tasks = ctx.tasks.clone();
    tasks
        .update_task_state(pb::UpdateTaskStateRequest {
            namespace: ctx.ns.clone(),
            task_id: task.clone(),
            expected_version: 0,
            state: Some(pb::TaskState { goals: vec![goal], phase: pb::Phase::Execution as i32, ..Default::default() }),
            ..Default::default()
        })
        .await?;

    let tokenizer = Tokenizer::O200kBase;
    let total: usize = events.iter().map(|e| tokenizer.count(&e.content)).sum();
    let window_budget = window_for(a, total);
    let target = (window_budget - a.headroom) as usize;
    let mut truncation = Truncation::new(tokenizer, target);
    let summary = a.summary_tokens.unwrap_or(window_budget as usize / 20);
    let mut narrative = Narrative::new(tokenizer, target, summary, a.protected_turns as usize);
    let replayed = Trajectory { instance_id: t.instance_id.clone(), events };
    let mut seq = 0usize;
    let mut compactions = 0;
    let mut appender = ctx.clients.events.clone();
    let mut context = ctx.context.clone();
    for step in replayed.steps() {
        appender
            .append_events(pb::AppendEventsRequest {
                namespace: ctx.ns.clone(),
                session_id: session.clone(),
                events: step.iter().map(TraceEvent::input).collect(),
                idempotency_key: String::new(),
            })
            .await
            .with_context(|| format!("{}: append", t.instance_id))?;
        for e in step {
            seq += 1;
            truncation.push(seq, e);
            narrative.push(seq, e);
        }
        let r = context
            .compact(pb::CompactRequest {
                namespace: ctx.ns.clone(),
                session_id: session.clone(),
                window_budget,
                headroom: a.headroom,
                protected_turns: Some(a.protected_turns),
                ..Default::default()
            })
            .await
            .with_context(|| format!("{}: compact", t.instance_id))?
            .into_inner();
        compactions += usize::from(r.compacted);
    }

    let window = context
        .get_window(pb::GetWindowRequest {
            namespace: ctx.ns.clone(),
            session_id: session.clone(),
            ..Default::default()
        })
        .await?
        .into_inner();
    // Every evicted event, recovered through the manifests now in the window.
    let mut recovered: Vec<pb::Event> = Vec::new();
    for m in &window.manifests {
        let mut token = String::new();
        loop {
            let page = context
                .expand_manifest(pb::ExpandManifestRequest {
                    namespace: ctx.ns.clone(),
                    manifest_id: m.id.clone(),
                    page_size: 5000,
                    page_token: std::mem::take(&mut token),
                })
                .await?
                .into_inner();
            recovered.extend(page.events);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
    }
    // And through the pointers: the full-view lines each manifest's spans cite (ReadLines).
    let mut cited = String::new();
    for span in window.manifests.iter().flat_map(|m| &m.spans) {
        let Some(l) = &span.lines else { continue };
        let mut first = l.first;
        while first <= l.last {
            let last = l.last.min(first + 10_000);
            let r = ctx
                .views
                .clone()
                .read_lines(pb::ReadLinesRequest {
                    namespace: ctx.ns.clone(),
                    session_id: session.clone(),
                    first_line: first,
                    last_line: last,
                    ..Default::default()
                })
                .await
                .with_context(|| format!("{}: read lines {first}-{last}", t.instance_id))?
                .into_inner();
            for line in r.lines {
                cited.push_str(&line.text);
                cited.push('\n');
            }
            first = last + 1;
        }
    }
    let manifest_text: String = window.manifests.iter().map(|m| m.rendered.as_str()).collect();
    let (trunc_text, narr_text) = (truncation.text(), narrative.text());
    let mut result = TraceResult {
        window: window_budget,
        compactions,
        narrative_compactions: narrative.compactions,
        events: seq,
        ..TraceResult::default()
    };
    for n in &needles {
        let pack = context
            .build_pack(pb::BuildPackRequest {
                namespace: ctx.ns.clone(),
                session_id: session.clone(),
                user_message: n.query.clone(),
                budgets: Some(pb::Budgets {
                    context: Some(a.retrieval + a.tail + 1000 + 800 + 500 + a.headroom),
                    system: Some(1000),
                    task_state: Some(800),
                    tail: Some(a.tail),
                    retrieval: Some(a.retrieval),
                    user: Some(500),
                    headroom: Some(a.headroom),
                    memory: None,
                }),
                // The needle is looked for in the retrieval block's own text.
                view: pb::PackView::Full as i32,
                ..Default::default()
            })
            .await
            .with_context(|| format!("{}: pack", t.instance_id))?
            .into_inner();
        // Evidence is in two blocks: the stable one before the tail, this turn's after it.
        let evidence: Vec<&pb::PackBlock> =
            pack.blocks.iter().filter(|b| b.kind == "retrieval" || b.kind == "turn_retrieval").collect();
        let o = Outcome {
            kind: n.kind,
            in_pack: pack.text.contains(&n.value),
            in_retrieval: evidence.iter().any(|b| b.text.contains(&n.value)),
            in_manifest_text: manifest_text.contains(&n.value),
            recoverable: recovered.iter().any(|e| e.content.contains(&n.value)),
            read_lines: cited.contains(&n.value),
            truncation: trunc_text.contains(&n.value),
            narrative: narr_text.contains(&n.value),
        };
        if a.verbose {
            println!(
                "{} {:<10} pack={} retrieval={} recoverable={} truncation={} narrative={} query={:?}",
                t.instance_id, n.kind, o.in_pack, o.in_retrieval, o.recoverable, o.truncation, o.narrative, n.query
            );
        }
        result.pack_tokens.push(pack.tokens);
        result.retrieval_tokens.push(evidence.iter().map(|b| b.tokens).sum());
        result.outcomes.push(o);
    }
    Ok(result)
}

/// The window a trajectory of `total` tokens is replayed in: `--window`, or half its tokens when
/// that is less.
fn window_for(a: &NeedleArgs, total: usize) -> u32 {
    // Once the window is full, every further step over it compacts: half the trajectory in the
    // window leaves the other half to compact in (each step of it at most once).
    let short = (total / 2).min(u32::MAX as usize) as u32;
    a.window.min(short.max(a.headroom + 1000))
}

/// A yes/no question about one needle's outcome.
type Check = dyn Fn(&Outcome) -> bool;

fn pct(n: usize, d: usize) -> f64 {
    if d == 0 { 0.0 } else { (n as f64 * 1000.0 / d as f64).round() / 10.0 }
}

fn report(a: &NeedleArgs, results: &[TraceResult], secs: f64) {
    let all: Vec<&Outcome> = results.iter().flat_map(|r| &r.outcomes).collect();
    let n = all.len();
    let count = |f: &dyn Fn(&Outcome) -> bool| all.iter().filter(|o| f(o)).count();
    let compactions: Vec<usize> = results.iter().map(|r| r.compactions).collect();
    let windows: Vec<u32> = results.iter().map(|r| r.window).collect();
    let below = compactions.iter().filter(|&&c| c < a.min_compactions as usize).count();
    let min_compactions = compactions.iter().copied().min().unwrap_or(0);
    let mean =
        |v: &[u32]| if v.is_empty() { 0.0 } else { v.iter().map(|x| f64::from(*x)).sum::<f64>() / v.len() as f64 };
    let pack_tokens: Vec<u32> = results.iter().flat_map(|r| r.pack_tokens.iter().copied()).collect();
    let retrieval_tokens: Vec<u32> = results.iter().flat_map(|r| r.retrieval_tokens.iter().copied()).collect();
    println!(
        "needle: {} trajectories, {} events, {n} needles; window {} (headroom {}; {} short trajectories in a smaller one, mean window {:.0}), retrieval budget {}; compactions per trajectory min {} mean {:.1}, {below} below {}",
        results.len(),
        results.iter().map(|r| r.events).sum::<usize>(),
        a.window,
        a.headroom,
        windows.iter().filter(|&&w| w < a.window).count(),
        mean(&windows),
        a.retrieval,
        min_compactions,
        compactions.iter().sum::<usize>() as f64 / results.len().max(1) as f64,
        a.min_compactions,
    );
    let rows: [(&str, &Check); 7] = [
        ("memex: surfaced in the pack", &|o| o.in_pack),
        ("memex: in the retrieval block", &|o| o.in_retrieval),
        ("memex: in a manifest's text", &|o| o.in_manifest_text),
        ("memex: recoverable (ExpandManifest)", &|o| o.recoverable),
        ("memex: recoverable (ReadLines)", &|o| o.read_lines),
        ("baseline truncation", &|o| o.truncation),
        ("baseline narrative", &|o| o.narrative),
    ];
    let kinds = ["hash", "error_line", "file_path"];
    for (name, f) in rows {
        let per_kind: Vec<String> = kinds
            .iter()
            .map(|k| {
                let of: Vec<&&Outcome> = all.iter().filter(|o| o.kind == *k).collect();
                format!("{k} {:.1}%", pct(of.iter().filter(|o| f(o)).count(), of.len()))
            })
            .collect();
        println!("  {name:<38} {:>5.1}%   ({})", pct(count(f), n), per_kind.join(", "));
    }
    println!(
        "  mean pack {:.0} tokens, mean retrieval block {:.0} tokens",
        mean(&pack_tokens),
        mean(&retrieval_tokens)
    );
    let by_kind = |f: &dyn Fn(&Outcome) -> bool| {
        let mut m = serde_json::Map::new();
        for k in kinds {
            let of: Vec<&&Outcome> = all.iter().filter(|o| o.kind == k).collect();
            m.insert(k.into(), json!(pct(of.iter().filter(|o| f(o)).count(), of.len())));
        }
        serde_json::Value::Object(m)
    };
    let summary = json!({
        "bench": "needle",
        "trajectories": results.len(),
        "needles": n,
        "window": a.window, "headroom": a.headroom, "retrieval_budget": a.retrieval, "tail_budget": a.tail,
        "seed": a.seed,
        "compactions": {"min": min_compactions, "mean": compactions.iter().sum::<usize>() as f64 / results.len().max(1) as f64, "trajectories_below_min": below},
        "mean_window": mean(&windows).round(),
        "smaller_windows": windows.iter().filter(|&&w| w < a.window).count(),
        "narrative_compactions_mean": results.iter().map(|r| r.narrative_compactions).sum::<usize>() as f64 / results.len().max(1) as f64,
        "memex": {
            "surfaced_in_pack_pct": pct(count(&|o| o.in_pack), n),
            "in_retrieval_block_pct": pct(count(&|o| o.in_retrieval), n),
            "recoverable_pct": pct(count(&|o| o.recoverable), n),
            "recoverable_read_lines_pct": pct(count(&|o| o.read_lines), n),
            "surfaced_by_kind": by_kind(&|o| o.in_pack),
            "mean_pack_tokens": mean(&pack_tokens).round(),
            "mean_retrieval_tokens": mean(&retrieval_tokens).round(),
        },
        "truncation": {"recall_pct": pct(count(&|o| o.truncation), n), "by_kind": by_kind(&|o| o.truncation)},
        "narrative": {"recall_pct": pct(count(&|o| o.narrative), n), "by_kind": by_kind(&|o| o.narrative)},
        "seconds": (secs * 10.0).round() / 10.0,
    });
    println!("{summary}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needles_are_planted_early_and_queries_never_contain_them() {
        let t = Trajectory {
            instance_id: "astropy__astropy-1".into(),
            events: (0..10)
                .flat_map(|i| {
                    let id = format!("call_{i}");
                    [
                        TraceEvent::new("assistant_message", "THOUGHT"),
                        TraceEvent::call(&id, "ls"),
                        TraceEvent::result(&id, "ok"),
                    ]
                })
                .collect(),
        };
        let (events, needles) = plant(&t, &mut Rng::new(1));
        assert_eq!(needles.len(), 3);
        assert_eq!(events.len(), t.events.len() + 9);
        for n in &needles {
            assert!(!n.query.contains(&n.value));
            let at = events.iter().position(|e| e.content.contains(&n.value)).expect("planted");
            assert!(at < 20, "{} planted at {at}", n.kind);
        }
        assert_eq!(needles[0].value.len(), 64);
        assert!(needles[2].value.starts_with("./") && needles[2].value.ends_with(".cfg"));
        // Deterministic.
        let (_, again) = plant(&t, &mut Rng::new(1));
        assert_eq!(again[0].value, needles[0].value);
    }
}
