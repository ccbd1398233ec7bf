//! `memex-bench handoff`: what survives a handoff. Each SWE-bench trajectory (and each public
//! Claude Code trace) is cut at random points; the events up to a cut go into a session of a
//! real server in-process (trajectories appended, traces imported from their first lines), and
//! BuildSnapshot is asked at 2k and 4k tokens. Against what those events really contain, each
//! cut is scored on five items:
//!
//! - **files**: the files modified so far (Edit/Write/MultiEdit calls; for shell commands that
//!   worked, `sed -i` targets, `>`/`>>` redirections and `tee`): the share whose path the text holds;
//! - **error**: the latest error line (the last line naming an error, exception or failure in the
//!   latest failing tool output), verbatim;
//! - **failed command**: the last command whose result failed (its first line);
//! - **constraints**: the user's sentences that constrain or correct (must, never, do not, don't,
//!   should not, only, instead), verbatim;
//! - **plan step**: the agent's latest stated step (the first sentence of its last message).
//!
//! The same items are scored on two baselines of the same cuts: the last 2k/4k tokens of the
//! events as text (truncation), and the pointer manifest alone (Compact, everything evictable
//! evicted). These truths are the bench's own reading of the events, simpler than memory's
//! extractor and independent of it; a text "holds" an item when it contains its first 120
//! characters with whitespace collapsed. With `--latency-namespace`, BuildSnapshot's p50/p99
//! under an open-loop load over that namespace's sessions (the pack bench's 1M-event corpus).
//! Last line JSON.
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::LazyLock;

use memex_client::Client;
use memex_proto::v1 as pb;
use memex_server::flags::ConfigArgs;
use memex_tokens::{TokenCounter, Tokenizer};
use regex::Regex;
use serde_json::json;

use super::traces::{Rng, read_trajectories};

#[derive(clap::Args, Debug)]
pub struct HandoffArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The agent-traces folder (SWE-bench trajectories).
    #[arg(long, default_value = "../shared/bench-data/agent-traces")]
    pub traces: PathBuf,
    /// How many trajectories (of the 500).
    #[arg(long, default_value_t = 500)]
    pub trajectories: usize,
    /// Public Claude Code traces (a folder of .jsonl files); empty to skip.
    #[arg(long, default_value = "../shared/traces/public/claude-code")]
    pub public: PathBuf,
    /// Cuts per trace.
    #[arg(long, default_value_t = 3)]
    pub cuts: usize,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// A namespace whose sessions BuildSnapshot is timed over (e.g. bench-pack-1000000); empty
    /// to skip the latency part.
    #[arg(long, default_value = "")]
    pub latency_namespace: String,
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Only the first N sessions of the latency namespace (0: all): a few sessions asked again
    /// and again measure the warm path (their views compiled and cached), all of them the cold.
    #[arg(long, default_value_t = 0)]
    pub latency_sessions: usize,
    /// Print up to N items the 4k snapshots miss, per item (to see why).
    #[arg(long, default_value_t = 0)]
    pub show_misses: usize,
}

/// The events of a cut, as the truths read them.
#[derive(Debug, Clone)]
struct Ev {
    kind: String,
    content: String,
    tool: String,
}

#[derive(Debug, Default, Clone)]
struct Truth {
    files: Vec<String>,
    error: Option<String>,
    failed_command: Option<String>,
    constraints: Vec<String>,
    plan_step: Option<String>,
}

const ITEMS: [&str; 5] = ["files", "error", "failed_command", "constraints", "plan_step"];

/// Per item: (found, asked).
#[derive(Debug, Default, Clone, Copy)]
struct Score([(f64, f64); 5]);

impl Score {
    /// Scores `text` against `truth`; returns the items it misses (item, text).
    fn add(&mut self, truth: &Truth, text: &str) -> Vec<(&'static str, String)> {
        let t = norm(text);
        let holds = |s: &str| t.contains(&norm(s).chars().take(120).collect::<String>());
        let mut missed = Vec::new();
        let mut count = |i: usize, items: &[String]| {
            for s in items {
                self.0[i].1 += 1.0;
                if holds(s) {
                    self.0[i].0 += 1.0;
                } else {
                    missed.push((ITEMS[i], s.clone()));
                }
            }
        };
        count(0, &truth.files);
        count(1, truth.error.as_slice());
        count(2, truth.failed_command.as_slice());
        count(3, &truth.constraints);
        count(4, truth.plan_step.as_slice());
        missed
    }

    fn json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (i, name) in ITEMS.iter().enumerate() {
            let (found, asked) = self.0[i];
            let pct = if asked > 0.0 { (1000.0 * found / asked).round() / 10.0 } else { 100.0 };
            m.insert((*name).into(), json!({"recall": pct, "asked": asked as u64}));
        }
        serde_json::Value::Object(m)
    }

    fn line(&self) -> String {
        ITEMS
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let (f, a) = self.0[i];
                format!("{n} {:.1}%", if a > 0.0 { 100.0 * f / a } else { 100.0 })
            })
            .collect::<Vec<_>>()
            .join("  ")
    }
}

fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

static RETURNCODE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)<returncode>(-?\d+)</returncode>|(?i)\bexit(?:ed with)? code:? (-?\d+)").expect("a valid pattern")
});
/// A line that states an error: `ValueError: …`, `numpy.exceptions.XError: …`, `error: …`,
/// `error[E0308]: …`, `FAILED tests/…`, `FAILED (failures=1)` (a traceback's header is not one).
static ERROR_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:E\s+)?(?:[\w.]*(?:Error|Exception)\b|error\b|error\[|FAILED\b)").expect("a valid pattern")
});
/// A file a shell line writes: `> path`, `>> path` (of cat, echo, printf) and `tee path`.
static REDIRECT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^\s*(?:cat|echo|printf)\b[^|;&]*?>>?\s*['"]?([A-Za-z0-9_./-]+)"#).expect("a valid pattern")
});
static TEE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\btee\s+(?:-a\s+)?([A-Za-z0-9_./-]+)").expect("a valid pattern"));
/// A path as a command line names a file: word characters, dots, slashes, an extension.
static PATH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.[A-Za-z0-9]{1,8}$").expect("a valid pattern"));
/// A user's sentence that constrains (must, never, do not, …) or corrects (no, …; actually; instead of).
static CUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(must|never|do not|don't|should not|shouldn't|make sure|always|instead of)\b|^(no|actually)\b")
        .expect("a valid pattern")
});

/// Whether a tool result says its call failed.
fn failed(e: &Ev) -> bool {
    if e.kind == "tool_error" {
        return true;
    }
    if let Some(c) = RETURNCODE.captures(&e.content) {
        let code = c.get(1).or(c.get(2)).and_then(|m| m.as_str().parse::<i64>().ok()).unwrap_or(0);
        return code != 0;
    }
    let t = e.content.trim_start();
    t.starts_with("<tool_use_error>") || t.starts_with("Error:")
}

/// A shell command (Claude Code's Bash, a trajectory's command, Codex's shell).
fn is_shell(call: &Ev) -> bool {
    matches!(call.tool.as_str(), "Bash" | "bash" | "shell" | "exec_command" | "run_shell_command")
}

fn is_result(kind: &str) -> bool {
    matches!(kind, "tool_result" | "tool_error")
}

/// The files a call modified, when its result says it worked.
fn modified(call: &Ev, out: &mut BTreeSet<String>) {
    let v: serde_json::Value = serde_json::from_str(&call.content).unwrap_or(serde_json::Value::Null);
    if matches!(call.tool.as_str(), "Edit" | "Write" | "MultiEdit" | "NotebookEdit") {
        if let Some(p) = v.get("file_path").or(v.get("notebook_path")).and_then(|p| p.as_str()) {
            out.insert(p.to_owned());
        }
        return;
    }
    let line = match v.get("command").and_then(|c| c.as_str()) {
        Some(c) => c.to_owned(),
        None if v.is_null() => call.content.clone(),
        None => return,
    };
    // Heredoc bodies are not commands: only their first lines. Each `&&`/`;` segment apart.
    let mut body = false;
    for l in line.lines() {
        if body {
            if matches!(l.trim(), "EOF" | "'EOF'" | "\"EOF\"") {
                body = false;
            }
            continue;
        }
        body = l.contains("<<");
        for seg in l.split("&&").flat_map(|p| p.split(';')) {
            let seg = seg.trim();
            if seg.starts_with("sed ") && seg.contains(" -i") {
                // sed -i 'expr' FILE…: the files are the path-like tokens after the expression.
                for tok in seg.split_whitespace().skip(2) {
                    let t = tok.trim_matches(|c| c == '\'' || c == '"');
                    if PATH.is_match(t) && !tok.starts_with('\'') && !tok.starts_with('"') {
                        out.insert(t.to_owned());
                    }
                }
            }
            for c in REDIRECT.captures_iter(seg).chain(TEE.captures_iter(seg)) {
                let p = &c[1];
                if PATH.is_match(p) && !p.starts_with("/dev/") {
                    out.insert(p.to_owned());
                }
            }
        }
    }
}

fn first_sentence(text: &str) -> Option<String> {
    let t = text.trim().trim_start_matches("THOUGHT:").trim();
    let line = t.lines().next()?.trim();
    let end = line.find(". ").map(|i| i + 1).unwrap_or(line.len());
    let s = line[..end].trim();
    (s.len() >= 8).then(|| s.to_owned())
}

/// What the events up to a cut contain.
fn truth(events: &[Ev]) -> Truth {
    let mut t = Truth::default();
    let mut files = BTreeSet::new();
    let mut last_call: Option<&Ev> = None;
    for e in events {
        match e.kind.as_str() {
            "tool_call" => last_call = Some(e),
            k if is_result(k) => {
                let Some(call) = last_call.take() else { continue };
                if failed(e) && is_shell(call) {
                    t.failed_command = serde_json::from_str::<serde_json::Value>(&call.content)
                        .ok()
                        .and_then(|v| v.get("command").and_then(|c| c.as_str()).map(str::to_owned))
                        .or_else(|| Some(call.content.clone()))
                        .and_then(|c| c.lines().next().map(|l| l.trim().to_owned()))
                        .filter(|c| !c.is_empty());
                    // (mini-swe-agent wraps the output in <output> tags.)
                    if let Some(l) = e
                        .content
                        .lines()
                        .rev()
                        .map(|l| l.replace("<output>", "").replace("</output>", "").trim().to_owned())
                        .find(|l| ERROR_LINE.is_match(l))
                    {
                        t.error = Some(l);
                    }
                } else {
                    modified(call, &mut files);
                }
            }
            "user_message" => {
                // What a harness wrote into the user's turn is not the user's.
                if memex_memory::turns::is_injected_user_text(&e.content)
                    || e.content.trim_start().starts_with("Please always provide")
                {
                    continue;
                }
                for s in memex_memory::facts::dialogue_sentences(&e.content) {
                    if CUE.is_match(&s) && s.len() >= 12 {
                        t.constraints.push(s);
                    }
                }
            }
            "assistant_message" => {
                if let Some(s) = first_sentence(&e.content) {
                    t.plan_step = Some(s);
                }
            }
            _ => {}
        }
    }
    t.files = files.into_iter().collect();
    t.constraints.dedup();
    t
}

/// The last `max` tokens of the events as text.
fn truncation(events: &[Ev], max: usize, counter: &dyn TokenCounter) -> String {
    let lines: Vec<String> = events.iter().map(|e| format!("[{}] {}\n", e.kind, e.content)).collect();
    let mut kept = Vec::new();
    let mut total = 0;
    for l in lines.iter().rev() {
        let n = counter.count(l);
        if total + n > max {
            // The part of this event that still fits, from its end.
            let chars: Vec<char> = l.chars().collect();
            let (mut lo, mut hi) = (0usize, chars.len());
            while lo < hi {
                let mid = (lo + hi) / 2;
                let tail: String = chars[mid..].iter().collect();
                if total + counter.count(&tail) <= max { hi = mid } else { lo = mid + 1 }
            }
            kept.push(chars[lo..].iter().collect::<String>());
            break;
        }
        total += n;
        kept.push(l.clone());
    }
    kept.reverse();
    kept.concat()
}

struct Cut {
    session: String,
    events: Vec<Ev>,
}

fn evs(events: &[pb::Event]) -> Vec<Ev> {
    events.iter().map(|e| Ev { kind: e.kind.clone(), content: e.content.clone(), tool: e.tool_name.clone() }).collect()
}

async fn all_events(c: &Client, session: &str) -> anyhow::Result<Vec<pb::Event>> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .get_events(pb::GetEventsRequest {
                session_id: session.into(),
                from_seq: 1,
                page_size: 5_000,
                page_token: token.clone(),
                ..Default::default()
            })
            .await?;
        out.extend(r.events);
        if r.next_page_token.is_empty() {
            return Ok(out);
        }
        token = r.next_page_token;
    }
}

pub async fn run(args: HandoffArgs) -> anyhow::Result<()> {
    let config = args.config.load()?;
    let (conn, server, _) = super::bench::start_server_with(config, None).await?;
    let c = conn.client().await?;
    let counter = Tokenizer::O200kBase;
    let mut rng = Rng::new(args.seed);
    let mut cuts: Vec<(&'static str, Cut)> = Vec::new();

    let trajectories = read_trajectories(&args.traces, 0, args.trajectories)?;
    for t in &trajectories {
        let n = t.events.len();
        if n < 6 {
            continue;
        }
        for _ in 0..args.cuts {
            let at = 4 + rng.below(n - 4);
            let s = c
                .create_session(pb::CreateSessionRequest { agent_id: "swe-agent".into(), ..Default::default() })
                .await?;
            let inputs: Vec<pb::EventInput> = t.events[..at].iter().map(|e| e.input()).collect();
            for chunk in inputs.chunks(500) {
                c.append_events(&s.id, chunk.to_vec(), None).await?;
            }
            let events = t.events[..at]
                .iter()
                .map(|e| Ev {
                    kind: e.kind.into(),
                    content: e.content.clone(),
                    tool: e.tool_name.clone().unwrap_or_default(),
                })
                .collect();
            cuts.push(("swe-bench", Cut { session: s.id, events }));
        }
    }
    let mut public: Vec<PathBuf> = match std::fs::read_dir(&args.public) {
        Ok(d) => d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "jsonl")).collect(),
        Err(_) => Vec::new(),
    };
    public.sort();
    for path in &public {
        let bytes = std::fs::read(path)?;
        let lines: Vec<usize> = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
        if lines.len() < 6 {
            continue;
        }
        for _ in 0..args.cuts {
            let end = lines[4 + rng.below(lines.len() - 4)];
            let meta = pb::ImportTraceRequest { agent_id: "claude-code".into(), ..Default::default() };
            let r = c.import_trace(meta, bytes[..end].to_vec(), |_| {}).await?;
            let Some(s) = r.session else { continue };
            let events = evs(&all_events(&c, &s.id).await?);
            cuts.push(("claude-code", Cut { session: s.id, events }));
        }
    }
    eprintln!("{} cuts ({} trajectories, {} public traces)", cuts.len(), trajectories.len(), public.len());

    let mut scores: std::collections::BTreeMap<String, Score> = Default::default();
    let mut tokens = Vec::new();
    let mut misses: Vec<(&'static str, String, String)> = Vec::new();
    for (source, cut) in &cuts {
        let truth = truth(&cut.events);
        for budget in [2_000u32, 4_000] {
            let s = c
                .build_snapshot(pb::BuildSnapshotRequest {
                    session_id: cut.session.clone(),
                    budget_tokens: budget,
                    ..Default::default()
                })
                .await?;
            anyhow::ensure!(s.tokens <= budget, "a snapshot over its budget: {} > {budget}", s.tokens);
            tokens.push(s.tokens);
            scores.entry(format!("snapshot_{}k_{source}", budget / 1000)).or_default().add(&truth, &s.text);
            for (item, text) in scores.entry(format!("snapshot_{}k", budget / 1000)).or_default().add(&truth, &s.text) {
                let seen = misses.iter().filter(|(i, _, _)| *i == item).count();
                if budget == 4_000 && seen < args.show_misses {
                    misses.push((item, cut.session.clone(), text));
                }
            }
            let trunc = truncation(&cut.events, budget as usize, &counter);
            scores.entry(format!("truncation_{}k", budget / 1000)).or_default().add(&truth, &trunc);
        }
        let m = c
            .compact(pb::CompactRequest {
                session_id: cut.session.clone(),
                window_budget: 1,
                protected_turns: Some(0),
                ..Default::default()
            })
            .await?;
        let manifest = m.manifest.map(|m| m.rendered).unwrap_or_default();
        scores.entry("manifest".into()).or_default().add(&truth, &manifest);
    }
    for (item, session, text) in &misses {
        println!("missed {item} in {session}: {}", text.chars().take(160).collect::<String>());
    }
    println!("what survives a handoff ({} cuts; recall per item)", cuts.len());
    for (k, s) in &scores {
        println!("  {k:<26} {}", s.line());
    }
    let latency =
        if args.latency_namespace.is_empty() { serde_json::Value::Null } else { latency(&args, &conn).await? };
    server.stop().await;
    let mut out = serde_json::Map::new();
    out.insert("bench".into(), json!("handoff"));
    out.insert("cuts".into(), json!(cuts.len()));
    out.insert("mean_tokens".into(), json!(tokens.iter().map(|t| *t as f64).sum::<f64>() / tokens.len().max(1) as f64));
    for (k, s) in &scores {
        out.insert(k.clone(), s.json());
    }
    out.insert("latency".into(), latency);
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}

/// BuildSnapshot (4k tokens) over random sessions of a namespace, open loop.
async fn latency(args: &HandoffArgs, conn: &memex_client::Conn) -> anyhow::Result<serde_json::Value> {
    let conn = memex_client::Conn { namespace: args.latency_namespace.clone(), ..conn.clone() };
    let c = conn.client().await?;
    let mut sessions = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .list_sessions(pb::ListSessionsRequest {
                page_size: 1_000,
                page_token: token.clone(),
                ..Default::default()
            })
            .await?;
        sessions.extend(r.sessions.into_iter().filter(|s| s.event_count > 0).map(|s| s.id));
        if r.next_page_token.is_empty() || sessions.len() >= 20_000 {
            break;
        }
        token = r.next_page_token;
    }
    anyhow::ensure!(!sessions.is_empty(), "namespace {} has no sessions", args.latency_namespace);
    if args.latency_sessions > 0 {
        sessions.truncate(args.latency_sessions);
    }
    let mut rng = Rng::new(args.seed);
    let order: Vec<String> =
        (0..(args.rate * args.seconds) as usize + 1).map(|_| sessions[rng.below(sessions.len())].clone()).collect();
    // Warm-up, not measured: the server's first requests pay one-time costs (the tokenizer's
    // tables, connections, the plan cache).
    for s in order.iter().take(20) {
        c.build_snapshot(pb::BuildSnapshotRequest {
            session_id: s.clone(),
            budget_tokens: 4_000,
            ..Default::default()
        })
        .await?;
    }
    let ctx = conn.channel().await?;
    let r = super::bench_memory::open_loop(args.rate, args.seconds, |i| {
        let mut client = pb::context_service_client::ContextServiceClient::new(ctx.clone());
        let req = pb::BuildSnapshotRequest {
            namespace: args.latency_namespace.clone(),
            session_id: order[i % order.len()].clone(),
            budget_tokens: 4_000,
            ..Default::default()
        };
        async move { client.build_snapshot(req).await.map(|_| ()) }
    })
    .await;
    println!(
        "BuildSnapshot over {} ({} sessions): {:.1}/s  p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  errors {} {}",
        args.latency_namespace,
        sessions.len(),
        r.rate,
        r.p50,
        r.p99,
        r.max,
        r.errors(),
        r.codes()
    );
    let mut out = r.json();
    out["namespace"] = json!(args.latency_namespace);
    out["sessions"] = json!(sessions.len());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, content: &str, tool: &str) -> Ev {
        Ev { kind: kind.into(), content: content.into(), tool: tool.into() }
    }

    #[test]
    fn the_truth_is_read_from_the_events_up_to_the_cut() {
        let events = vec![
            ev("user_message", "Fix the parser. Do not modify the tests. Thanks!", ""),
            ev("assistant_message", "THOUGHT: I will patch the parser first. Then test.", ""),
            ev("tool_call", "sed -i 's/a/b/g' src/parser.py && cat > notes.txt <<'EOF'\nx > y.txt\nEOF", "Bash"),
            ev("tool_result", "<returncode>0</returncode>\n<output></output>", ""),
            ev("tool_call", r#"{"file_path":"/repo/a.rs","old_string":"x","new_string":"y"}"#, "Edit"),
            ev("tool_result", "The file /repo/a.rs has been updated.", ""),
            ev("tool_call", "python -m pytest tests/ > out.log", "Bash"),
            ev(
                "tool_result",
                "<returncode>1</returncode>\n<output>E   ValueError: bad header\nIssue reproduced: an Error\nFAILED tests/t.py::test_x</output>\n1 failed",
                "",
            ),
        ];
        let t = truth(&events);
        assert_eq!(t.files, vec!["/repo/a.rs", "notes.txt", "src/parser.py"]);
        assert_eq!(t.failed_command.as_deref(), Some("python -m pytest tests/ > out.log"));
        assert_eq!(t.error.as_deref(), Some("FAILED tests/t.py::test_x"));
        assert_eq!(t.constraints, vec!["Do not modify the tests."]);
        assert_eq!(t.plan_step.as_deref(), Some("I will patch the parser first."));
        let mut s = Score::default();
        s.add(&t, "src/parser.py notes.txt I will patch the parser first.");
        assert_eq!(s.0[0], (2.0, 3.0));
        assert_eq!(s.0[4], (1.0, 1.0));
    }

    #[test]
    fn truncation_keeps_the_last_tokens() {
        let events: Vec<Ev> = (0..200).map(|i| ev("assistant_message", &format!("step {i} done"), "")).collect();
        let t = truncation(&events, 50, &Tokenizer::O200kBase);
        assert!(Tokenizer::O200kBase.count(&t) <= 50);
        assert!(t.ends_with("step 199 done\n") && !t.contains("step 100 "), "{t}");
    }
}
