//! `memex-bench memory`: does memory work? Three parts, each optional, against a real server
//! in-process with the configured memory (the heuristic interpreter by default):
//!
//! - **facts**: the hand-labelled facts of `tests/facts` (public traces and SWE-bench
//!   trajectories, cited by event seq): precision and recall of the extracted facts per type, and
//!   the accuracy of "latest status" questions (supersession, `as_of`);
//! - **locomo**: LoCoMo through the reader tools: evidence recall of FindQuote and RememberWhen at
//!   5 and 10 (the protocol of `bench locomo`, at the level of the quoted segments and of the
//!   hits themselves), and the tokens a reader is handed per question;
//! - **latency** (`--events N`): the worker's throughput reading a corpus of N events of real
//!   trajectories (the pack bench's corpus), then each reader tool's p50/p99 under an open-loop
//!   load; with `--endpoint`, against a server in a process of its own.
//!
//! Last line JSON. LoCoMo is CC BY-NC: read from the path given, never copied.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};
use memex_client::Authed;
use memex_proto::v1 as pb;
use memex_proto::v1::memory_service_client::MemoryServiceClient;
use memex_server::flags::ConfigArgs;
use serde_json::{Value, json};
use tonic::transport::Channel;

use super::traces::read_trajectories;

#[derive(clap::Args, Debug)]
pub struct MemoryArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The labelled facts (labels.jsonl, questions.jsonl); empty to skip.
    #[arg(long, default_value = "tests/facts")]
    pub facts: PathBuf,
    /// The public traces the labels cite (`trace:<dir>/<file>`).
    #[arg(long, default_value = "../shared/traces/public")]
    pub public: PathBuf,
    /// The agent-traces folder (SWE-bench trajectories, `trajectory:<n>`; the latency corpus).
    #[arg(long, default_value = "../shared/bench-data/agent-traces")]
    pub traces: PathBuf,
    /// locomo10.json, for recall through the reader tools; skipped when not given.
    #[arg(long)]
    pub locomo: Option<PathBuf>,
    /// Only the first N LoCoMo conversations.
    #[arg(long)]
    pub conversations: Option<usize>,
    /// Events of the latency corpus (0: skip the latency part).
    #[arg(long, default_value_t = 0)]
    pub events: u64,
    /// Namespace of the latency corpus (default: bench-pack-<events>, shared with `bench pack`).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Requests per second to each reader tool in the latency part.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Seconds each tool is measured.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Seconds of unrecorded load before each tool is measured (other topics and subjects).
    #[arg(long, default_value_t = 5.0)]
    pub warmup: f64,
    /// Measure the reader tools at once over what memory holds, the worker still reading its
    /// backlog beside them (the default waits until the corpus is read and the topics current).
    #[arg(long)]
    pub under_backlog: bool,
    /// Measure the latency part against a running server (memory on, same database) instead of
    /// one in this process, so that the load and the server share no runtime. The facts and
    /// LoCoMo parts always start their own, since they set its memory configuration.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Only these reader tools in the latency part (comma-separated; default: all seven).
    #[arg(long, value_delimiter = ',', value_parser = TOOLS)]
    pub tools: Vec<String>,
    /// API key for --endpoint (a server with auth on).
    #[arg(long, env = "MEMEX_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
}

/// The tools the latency part measures, in order.
const TOOLS: [&str; 7] =
    ["find_quote", "query_facts", "expand_topic", "remember_when", "recall_all", "list_topics", "get_memory_status"];

/// Where the warm-up's request numbers start: far from the measured ones, so that the topics and
/// subjects it asks about are others.
const WARMUP_OFFSET: usize = 7_919;

pub async fn run(args: MemoryArgs) -> anyhow::Result<()> {
    let mut config = args.config.load()?;
    config.memory.enabled = true;
    // Benchmarks ingest whole traces: their last turns close at once rather than after a pause.
    config.memory.idle_close_secs = 0;
    config.memory.poll_interval_ms = config.memory.poll_interval_ms.min(100);
    let mut out = serde_json::Map::new();
    out.insert("bench".into(), json!("memory"));
    out.insert("interpreter".into(), json!(config.memory.interpreter_name()));
    let facts_dir = (!args.facts.as_os_str().is_empty()).then_some(args.facts.clone());
    if let Some(dir) = facts_dir.filter(|d| d.join("labels.jsonl").exists()) {
        let ns = format!("bench-facts-{}", ulid::Ulid::generate().to_string().to_lowercase());
        let (conn, server, store) = super::bench::start_server_with(config.clone(), Some(&ns)).await?;
        let r = facts(&args, &dir, &conn.channel().await?, &ns, &store).await;
        server.stop().await;
        out.insert("facts".into(), r?);
    }
    if let Some(path) = &args.locomo {
        let ns = format!("bench-memlocomo-{}", ulid::Ulid::generate().to_string().to_lowercase());
        let (conn, server, store) = super::bench::start_server_with(config.clone(), Some(&ns)).await?;
        let r = locomo(&args, path, &conn.channel().await?, &store, &config).await;
        server.stop().await;
        out.insert("locomo".into(), r?);
    }
    if args.events > 0 {
        let ns = args.namespace.clone().unwrap_or_else(|| format!("bench-pack-{}", args.events));
        // The corpus first, with memory off, so the worker then reads a backlog of all of it.
        let mut off = config.clone();
        off.memory.enabled = false;
        let r = match &args.endpoint {
            Some(endpoint) => {
                let store = memex_server::connect_store_as(&config, memex_store::Tenant::All)
                    .await
                    .context("bench needs the server's database")?;
                let (conn, _) =
                    super::bench::connect_or_start(Some(endpoint), &ns, args.api_key.as_deref(), &args.config).await?;
                super::bench_pack::ensure_corpus_of(args.events, &args.traces, &conn, &store).await?;
                latency(&args, &conn, &store).await
            }
            None => {
                let (conn, server, store) = super::bench::start_server_with(off, Some(&ns)).await?;
                super::bench_pack::ensure_corpus_of(args.events, &args.traces, &conn, &store).await?;
                server.stop().await;
                let (conn, server, store) = super::bench::start_server_with(config.clone(), Some(&ns)).await?;
                let r = latency(&args, &conn, &store).await;
                server.stop().await;
                r
            }
        };
        let mut r = r?;
        r["server"] = json!(if args.endpoint.is_some() { "external" } else { "in-process" });
        out.insert("latency".into(), r);
    }
    println!("{}", Value::Object(out));
    Ok(())
}

/// Waits until the worker has read every event of `ns` and the topics are current.
async fn settle(m: &mut MemoryServiceClient<Authed>, ns: &str, patience: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + patience;
    let mut stable = 0;
    while Instant::now() < until {
        let s = m.get_memory_status(pb::GetMemoryStatusRequest { namespace: ns.into() }).await?.into_inner();
        if s.lag_events == 0 && s.topics_current {
            stable += 1;
            // The last turns close one round after the events are read; topics rebuild after.
            if stable >= 5 {
                return Ok(());
            }
        } else {
            stable = 0;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("memory of {ns} did not settle within {patience:?}")
}

// ---------------------------------------------------------------------------------------------
// Facts.

#[derive(Debug, Clone, serde::Deserialize)]
struct Label {
    source: String,
    seq: u64,
    #[serde(rename = "type")]
    fact_type: String,
    verb: String,
    #[serde(rename = "match")]
    pattern: String,
}

#[derive(Debug, Clone, serde::Deserialize)]
struct Question {
    source: String,
    as_of_seq: u64,
    #[serde(rename = "type")]
    fact_type: String,
    #[serde(rename = "match")]
    pattern: String,
    expected_verb: String,
}

fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{}:{}", path.display(), i + 1)))
        .collect()
}

/// The (type, verb) pairs the labels cover: precision is measured over extracted facts of these.
const LABELLED: &[(&str, &str)] = &[
    ("file", "created"),
    ("file", "edited"),
    ("file", "deleted"),
    ("test", "passed"),
    ("test", "failed"),
    ("package", "installed"),
    ("package", "install failed"),
    ("error", "seen"),
    ("error", "resolved"),
    ("command", "failed"),
    ("constraint", "requires"),
    ("preference", "prefers"),
    ("correction", "corrected"),
    ("decision", "decided"),
];

fn pb_time(t: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: t.timestamp(), nanos: t.timestamp_subsec_nanos() as i32 }
}

/// Loads a labelled source into a session of `ns`: a public trace imported as `memex import`
/// does, a trajectory appended as the benchmarks do (one second between events).
async fn load_source(channel: &Channel, ns: &str, source: &str, args: &MemoryArgs) -> anyhow::Result<String> {
    if let Some(rel) = source.strip_prefix("trace:") {
        let path = args.public.join(rel);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut msgs = vec![pb::ImportTraceRequest {
            namespace: ns.into(),
            agent_id: "bench".into(),
            file_name: rel.rsplit('/').next().unwrap_or(rel).into(),
            ..Default::default()
        }];
        for chunk in bytes.chunks(1 << 20) {
            msgs.push(pb::ImportTraceRequest { chunk: chunk.to_vec(), ..Default::default() });
        }
        let mut views = pb::view_service_client::ViewServiceClient::new(channel.clone());
        let r = views.import_trace(tokio_stream::iter(msgs)).await?.into_inner();
        return r.session.map(|s| s.id).context("the import answered no session");
    }
    let n: usize = source
        .strip_prefix("trajectory:")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("source {source:?}: expected trace:<dir>/<file> or trajectory:<n>"))?;
    let t = read_trajectories(&args.traces, n, 1)?.pop().with_context(|| format!("no trajectory {n}"))?;
    let mut sessions = pb::session_service_client::SessionServiceClient::new(channel.clone());
    let session = sessions
        .create_session(pb::CreateSessionRequest {
            namespace: ns.into(),
            agent_id: format!("swe-{n}"),
            ..Default::default()
        })
        .await?
        .into_inner()
        .id;
    let base = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")?.to_utc();
    let inputs: Vec<pb::EventInput> = t
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| pb::EventInput { event_time: Some(pb_time(base + TimeDelta::seconds(i as i64))), ..e.input() })
        .collect();
    let mut events = pb::event_service_client::EventServiceClient::new(channel.clone());
    events
        .append_events(pb::AppendEventsRequest {
            namespace: ns.into(),
            session_id: session.clone(),
            events: inputs,
            idempotency_key: String::new(),
        })
        .await?;
    Ok(session)
}

fn contains(hay: &str, needle: &str) -> bool {
    hay.to_lowercase().contains(&needle.to_lowercase())
}

fn fact_matches(f: &pb::Fact, l: &Label) -> bool {
    f.fact_type == l.fact_type
        && f.verb == l.verb
        && f.first_seq <= l.seq
        && l.seq <= f.last_seq
        && (contains(&f.subject, &l.pattern) || contains(&f.object, &l.pattern) || contains(&f.what, &l.pattern))
}

async fn all_facts(m: &mut MemoryServiceClient<Authed>, ns: &str, session: &str) -> anyhow::Result<Vec<pb::Fact>> {
    let mut out = Vec::new();
    for t in [
        "file",
        "command",
        "test",
        "package",
        "error",
        "decision",
        "constraint",
        "preference",
        "correction",
        "personal",
        "experience",
        "world",
    ] {
        let r = m
            .query_facts(pb::QueryFactsRequest {
                namespace: ns.into(),
                fact_type: t.into(),
                include_superseded: true,
                limit: 500,
                session_ids: vec![session.into()],
                ..Default::default()
            })
            .await?
            .into_inner();
        anyhow::ensure!(r.facts.len() < 500, "more than 500 {t} facts in one session: raise the limit");
        out.extend(r.facts);
    }
    // Labels are matched greedily: in an order that does not depend on the run's session ids
    // (facts of one event are ordered by id, derived from the session; recall moved by 3 points).
    out.sort_by(|a, b| {
        (a.first_seq, a.last_seq, &a.fact_type, &a.verb, &a.subject, &a.object).cmp(&(
            b.first_seq,
            b.last_seq,
            &b.fact_type,
            &b.verb,
            &b.subject,
            &b.object,
        ))
    });
    Ok(out)
}

#[derive(Default, Clone, Copy)]
struct Counts {
    labels: usize,
    found: usize,
    extracted: usize,
    correct: usize,
}

async fn facts(
    args: &MemoryArgs,
    dir: &Path,
    channel: &Channel,
    ns: &str,
    store: &memex_store::Store,
) -> anyhow::Result<Value> {
    let labels: Vec<Label> = read_jsonl(&dir.join("labels.jsonl"))?;
    let questions: Vec<Question> = read_jsonl(&dir.join("questions.jsonl"))?;
    let mut sources: Vec<String> =
        labels.iter().map(|l| l.source.clone()).chain(questions.iter().map(|q| q.source.clone())).collect();
    sources.sort();
    sources.dedup();
    // Each source is a project of its own: a namespace each (file paths and commands of two
    // projects are not the same file or the same command).
    let t0 = Instant::now();
    let mut session_of: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (i, s) in sources.iter().enumerate() {
        let name = format!("{ns}-{i}");
        store.create_namespace(&name).await?;
        let session = load_source(channel, &name, s, args).await.with_context(|| format!("loading {s}"))?;
        session_of.insert(s.clone(), (name, session));
    }
    let mut m = MemoryServiceClient::with_interceptor(channel.clone(), memex_client::Bearer::none())
        .max_decoding_message_size(usize::MAX);
    for (name, _) in session_of.values() {
        settle(&mut m, name, Duration::from_secs(600)).await?;
    }
    let read_secs = t0.elapsed().as_secs_f64();

    let mut by_type: BTreeMap<String, Counts> = BTreeMap::new();
    let mut misses: Vec<String> = Vec::new();
    let mut wrong: Vec<String> = Vec::new();
    let mut events_total = 0u64;
    for s in &sources {
        let (ns, session) = &session_of[s];
        let facts = all_facts(&mut m, ns, session).await?;
        let mine: Vec<&Label> = labels.iter().filter(|l| &l.source == s).collect();
        // One extracted fact per label (greedy, in label order).
        let mut used = vec![false; facts.len()];
        for l in &mine {
            let c = by_type.entry(l.fact_type.clone()).or_default();
            c.labels += 1;
            match facts.iter().enumerate().find(|(i, f)| !used[*i] && fact_matches(f, l)) {
                Some((i, _)) => {
                    used[i] = true;
                    c.found += 1;
                }
                None => misses.push(format!("{s} seq {} {} {} {:?}", l.seq, l.fact_type, l.verb, l.pattern)),
            }
        }
        for (i, f) in facts.iter().enumerate() {
            if !LABELLED.contains(&(f.fact_type.as_str(), f.verb.as_str())) {
                continue;
            }
            let c = by_type.entry(f.fact_type.clone()).or_default();
            c.extracted += 1;
            // Correct: it answers a label (matched above, or another label of the same fact).
            if used[i] || mine.iter().any(|l| fact_matches(f, l)) {
                c.correct += 1;
            } else if wrong.len() < 400 {
                wrong.push(format!(
                    "{s} seqs {}-{} {} {} {:?}",
                    f.first_seq, f.last_seq, f.fact_type, f.verb, f.subject
                ));
            }
        }
        let sid: uuid::Uuid = session.parse()?;
        events_total += store.session(store.namespace(ns).await?.id, sid).await?.event_count;
    }
    // Latest status: the newest current fact about the subject, as of the question's event.
    let mut correct = 0usize;
    let mut q_wrong = Vec::new();
    for q in &questions {
        let (ns, session) = &session_of[&q.source];
        let nsid = store.namespace(ns).await?.id;
        let sid: uuid::Uuid = session.parse()?;
        let page = store
            .events_in_range(nsid, sid, memex_store::SeqRange { from: q.as_of_seq, to: Some(q.as_of_seq) }, 1, None)
            .await?;
        let at = page.events.first().map(|e| e.event_time).context("question's event")?;
        let r = m
            .query_facts(pb::QueryFactsRequest {
                namespace: ns.clone(),
                fact_type: q.fact_type.clone(),
                as_of: Some(pb_time(at)),
                limit: 500,
                session_ids: vec![session.clone()],
                ..Default::default()
            })
            .await?
            .into_inner();
        let newest = r
            .facts
            .iter()
            .filter(|f| f.verb != "read" && f.first_seq <= q.as_of_seq)
            .filter(|f| contains(&f.subject, &q.pattern) || contains(&f.object, &q.pattern))
            .max_by_key(|f| (f.when.as_ref().map(|t| (t.seconds, t.nanos)), f.last_seq));
        match newest {
            Some(f) if f.verb == q.expected_verb => correct += 1,
            other => q_wrong.push(format!(
                "{} @{} {} {:?}: expected {}, got {}",
                q.source,
                q.as_of_seq,
                q.fact_type,
                q.pattern,
                q.expected_verb,
                other.map_or("nothing".to_owned(), |f| f.verb.clone())
            )),
        }
    }
    let pct = |a: usize, b: usize| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
    println!(
        "facts: {} labels in {} sources ({events_total} events, read in {read_secs:.1} s)",
        labels.len(),
        sources.len()
    );
    println!("{:<12} {:>7} {:>10} {:>7}   {:>9} {:>7}", "type", "labels", "precision", "recall", "extracted", "found");
    let mut total = Counts::default();
    let mut per_type = serde_json::Map::new();
    for (t, c) in &by_type {
        println!(
            "{t:<12} {:>7} {:>9.1}% {:>6.1}%   {:>9} {:>7}",
            c.labels,
            pct(c.correct, c.extracted),
            pct(c.found, c.labels),
            c.extracted,
            c.found
        );
        per_type.insert(
            t.clone(),
            json!({"labels": c.labels, "extracted": c.extracted, "precision": pct(c.correct, c.extracted), "recall": pct(c.found, c.labels)}),
        );
        total.labels += c.labels;
        total.found += c.found;
        total.extracted += c.extracted;
        total.correct += c.correct;
    }
    println!(
        "{:<12} {:>7} {:>9.1}% {:>6.1}%   {:>9} {:>7}",
        "overall",
        total.labels,
        pct(total.correct, total.extracted),
        pct(total.found, total.labels),
        total.extracted,
        total.found
    );
    println!("latest-status questions: {correct}/{} correct ({:.1}%)", questions.len(), pct(correct, questions.len()));
    if std::env::var_os("MEMEX_BENCH_VERBOSE").is_some() {
        for x in misses.iter().chain(&wrong).chain(&q_wrong) {
            println!("  {x}");
        }
    } else {
        println!(
            "  (MEMEX_BENCH_VERBOSE=1 lists the {} misses, {} unlabelled extractions, {} wrong answers)",
            misses.len(),
            wrong.len(),
            q_wrong.len()
        );
    }
    Ok(json!({
        "labels": total.labels,
        "sources": sources.len(),
        "events": events_total,
        "precision": pct(total.correct, total.extracted),
        "recall": pct(total.found, total.labels),
        "per_type": per_type,
        "latest_status": {"questions": questions.len(), "correct": correct, "accuracy": pct(correct, questions.len())},
        "read_seconds": read_secs,
    }))
}

// ---------------------------------------------------------------------------------------------
// LoCoMo.

/// "1:56 pm on 8 May, 2023".
fn session_date(s: &str) -> Option<DateTime<Utc>> {
    chrono::NaiveDateTime::parse_from_str(s.trim(), "%I:%M %p on %d %B, %Y").ok().map(|t| t.and_utc())
}

struct LocomoQuestion {
    ns: String,
    text: String,
    category: u64,
    evidence: Vec<String>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
}

const CATEGORIES: [(u64, &str); 5] =
    [(1, "multi-hop"), (2, "temporal"), (3, "open-domain"), (4, "single-hop"), (5, "adversarial")];

#[derive(Default)]
struct Recall {
    /// (category, [segment@5, segment@10, hit@5, hit@10, shown@5, shown@10]) sums; n per category.
    sum: BTreeMap<u64, [f64; 6]>,
    n: BTreeMap<u64, usize>,
    tokens: usize,
    questions: usize,
}

impl Recall {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        cat: u64,
        evidence: &[String],
        segs: &[Vec<String>],
        hits: &[String],
        shown: &[Vec<String>],
        tokens: usize,
    ) {
        let share = |found: &dyn Fn(&String) -> bool| {
            if evidence.is_empty() {
                0.0
            } else {
                evidence.iter().filter(|e| found(e)).count() as f64 / evidence.len() as f64
            }
        };
        let in_segs = |k: usize| move |e: &String| segs.iter().take(k).any(|s| s.contains(e));
        let in_hits = |k: usize| move |e: &String| hits.iter().take(k).any(|h| h == e);
        let in_shown = |k: usize| move |e: &String| shown.iter().take(k).any(|s| s.contains(e));
        let s = self.sum.entry(cat).or_default();
        s[0] += share(&in_segs(5));
        s[1] += share(&in_segs(10));
        s[2] += share(&in_hits(5));
        s[3] += share(&in_hits(10));
        s[4] += share(&in_shown(5));
        s[5] += share(&in_shown(10));
        *self.n.entry(cat).or_default() += 1;
        self.tokens += tokens;
        self.questions += 1;
    }

    fn at(&self, cat: Option<u64>) -> ([f64; 6], usize) {
        let (mut sum, mut n) = ([0.0; 6], 0);
        for (c, s) in &self.sum {
            if cat.is_none_or(|x| x == *c) {
                for i in 0..6 {
                    sum[i] += s[i];
                }
                n += self.n[c];
            }
        }
        (sum.map(|x| if n == 0 { 0.0 } else { 100.0 * x / n as f64 }), n)
    }

    fn json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (name, cat) in std::iter::once(("overall", None)).chain(CATEGORIES.iter().map(|(c, n)| (*n, Some(*c)))) {
            let (r, n) = self.at(cat);
            m.insert(
                name.into(),
                json!({"n": n, "segment_r@5": r[0], "segment_r@10": r[1], "hit_r@5": r[2], "hit_r@10": r[3],
                       "shown_r@5": r[4], "shown_r@10": r[5]}),
            );
        }
        m.insert("tokens_per_question".into(), json!(self.tokens as f64 / self.questions.max(1) as f64));
        Value::Object(m)
    }
}

/// Waits until every event of `ns` has a vector of each configured model (FindQuote ranks by them).
async fn embedded(store: &memex_store::Store, ns: &str, config: &memex_server::Config) -> anyhow::Result<()> {
    let models: Vec<memex_embed::ModelInfo> = [
        memex_server::search::embedder(&config.embedding)?.map(|e| e.info().clone()),
        memex_server::search::fast_tier(&config.embedding)?.map(|e| e.info().clone()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let id = store.namespace(ns).await?.id;
    let (events,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM events WHERE namespace_id = $1").bind(id).fetch_one(store.pool()).await?;
    for m in &models {
        let until = Instant::now() + Duration::from_secs(3_600);
        while memex_search::vector_count(store.pool(), id, m).await? < events as u64 {
            anyhow::ensure!(Instant::now() < until, "{ns}: {} vectors did not catch up", m.name);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}

async fn locomo(
    args: &MemoryArgs,
    path: &Path,
    channel: &Channel,
    store: &memex_store::Store,
    config: &memex_server::Config,
) -> anyhow::Result<Value> {
    let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let data: Vec<Value> = serde_json::from_slice(&raw).context("locomo10.json is a JSON array")?;
    let n_conv = args.conversations.unwrap_or(data.len()).min(data.len());
    let mut sessions_client = pb::session_service_client::SessionServiceClient::new(channel.clone());
    let mut events_client = pb::event_service_client::EventServiceClient::new(channel.clone());
    let mut m = MemoryServiceClient::with_interceptor(channel.clone(), memex_client::Bearer::none())
        .max_decoding_message_size(usize::MAX);
    let mut questions = Vec::new();
    // (namespace, session id, seq) → dialog id.
    let mut dia: HashMap<(String, u64), String> = HashMap::new();
    let t0 = Instant::now();
    let mut turns = 0usize;
    for (ci, conv) in data.iter().enumerate().take(n_conv) {
        let ns = format!("bench-memlocomo{ci}-{}", ulid::Ulid::generate().to_string().to_lowercase());
        store.create_namespace(&ns).await?;
        let c = &conv["conversation"];
        let speaker_a = c["speaker_a"].as_str().unwrap_or_default();
        let (mut first, mut last) = (None::<DateTime<Utc>>, None::<DateTime<Utc>>);
        for s in 1..=40 {
            let Some(session) = c.get(format!("session_{s}")).and_then(Value::as_array) else { continue };
            let date = c.get(format!("session_{s}_date_time")).and_then(Value::as_str).and_then(session_date);
            if let Some(d) = date {
                first = Some(first.map_or(d, |f: DateTime<Utc>| f.min(d)));
                last = Some(last.map_or(d, |l: DateTime<Utc>| l.max(d)));
            }
            let sid = sessions_client
                .create_session(pb::CreateSessionRequest {
                    namespace: ns.clone(),
                    agent_id: format!("locomo-session-{s}"),
                    ..Default::default()
                })
                .await?
                .into_inner()
                .id;
            let mut inputs = Vec::new();
            for (ti, turn) in session.iter().enumerate() {
                let speaker = turn["speaker"].as_str().unwrap_or_default();
                let mut content = format!("{speaker}: {}", turn["text"].as_str().unwrap_or_default());
                if let Some(cap) = turn.get("blip_caption").and_then(Value::as_str) {
                    content.push_str(&format!(" [shares a photo: {cap}]"));
                }
                dia.insert((sid.clone(), ti as u64 + 1), turn["dia_id"].as_str().unwrap_or_default().to_owned());
                inputs.push(pb::EventInput {
                    kind: if speaker == speaker_a { "user_message" } else { "assistant_message" }.into(),
                    content,
                    agent_id: speaker.into(),
                    event_time: date.map(|d| pb_time(d + TimeDelta::seconds(ti as i64))),
                    ..Default::default()
                });
            }
            turns += inputs.len();
            events_client
                .append_events(pb::AppendEventsRequest {
                    namespace: ns.clone(),
                    session_id: sid,
                    events: inputs,
                    idempotency_key: String::new(),
                })
                .await?;
        }
        let (from, to) = (first.unwrap_or_default(), last.unwrap_or_default() + TimeDelta::days(1));
        for q in conv["qa"].as_array().into_iter().flatten() {
            let evidence: Vec<String> = q["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .flat_map(|e| {
                    e.split(|c: char| c == ';' || c.is_whitespace()).filter(|p| !p.is_empty()).map(str::to_owned)
                })
                .collect();
            questions.push(LocomoQuestion {
                ns: ns.clone(),
                text: q["question"].as_str().unwrap_or_default().to_owned(),
                category: q["category"].as_u64().unwrap_or(0),
                evidence,
                from,
                to,
            });
        }
        settle(&mut m, &ns, Duration::from_secs(1_800)).await?;
        embedded(store, &ns, config).await?;
    }
    let read_secs = t0.elapsed().as_secs_f64();
    let counter = memex_tokens::Tokenizer::O200kBase;
    let mut find = Recall::default();
    let mut when = Recall::default();
    let t1 = Instant::now();
    for q in &questions {
        for (tool, recall) in [("find_quote", &mut find), ("remember_when", &mut when)] {
            let quotes = if tool == "find_quote" {
                m.find_quote(pb::FindQuoteRequest {
                    namespace: q.ns.clone(),
                    query: q.text.clone(),
                    limit: 10,
                    ..Default::default()
                })
                .await?
                .into_inner()
                .quotes
            } else {
                m.remember_when(pb::RememberWhenRequest {
                    namespace: q.ns.clone(),
                    query: q.text.clone(),
                    from: Some(pb_time(q.from)),
                    to: Some(pb_time(q.to)),
                    limit: 10,
                    ..Default::default()
                })
                .await?
                .into_inner()
                .quotes
            };
            let mut segs = Vec::new();
            let mut hits = Vec::new();
            // What the reader is shown of each quote: the hit, and the summary lines' own turns.
            let mut shown = Vec::new();
            let mut tokens = 0;
            for x in &quotes {
                let session = x.segment.as_ref().map(|s| s.session_id.clone()).unwrap_or_default();
                let ids: Vec<String> = match &x.segment {
                    Some(s) => {
                        (s.first_seq..=s.last_seq).filter_map(|seq| dia.get(&(session.clone(), seq)).cloned()).collect()
                    }
                    None => Vec::new(),
                };
                segs.push(ids);
                let hit = dia.get(&(session.clone(), x.hit_seq)).cloned().unwrap_or_default();
                let mut seen: Vec<String> = x
                    .segment
                    .iter()
                    .flat_map(|s| s.summary.iter().filter_map(|l| dia.get(&(session.clone(), l.seq)).cloned()))
                    .collect();
                seen.push(hit.clone());
                shown.push(seen);
                hits.push(hit);
                // What a reader is handed: the excerpt and the segment's summary.
                let summary: String = x
                    .segment
                    .iter()
                    .flat_map(|s| s.summary.iter().map(|l| l.text.as_str()))
                    .collect::<Vec<_>>()
                    .join("\n");
                tokens += counter.count(&x.excerpt) + counter.count(&summary);
            }
            recall.add(q.category, &q.evidence, &segs, &hits, &shown, tokens);
        }
    }
    let ask_ms = t1.elapsed().as_secs_f64() * 1e3 / (2 * questions.len().max(1)) as f64;
    println!("locomo: {turns} turns of {n_conv} conversations read in {read_secs:.1} s; {} questions", questions.len());
    println!(
        "{:<14} {:<12} {:>10} {:>10} {:>7} {:>7} {:>8} {:>8}   n",
        "tool", "category", "segment@5", "segment@10", "hit@5", "hit@10", "shown@5", "shown@10"
    );
    for (tool, r) in [("find_quote", &find), ("remember_when", &when)] {
        for (name, cat) in CATEGORIES.iter().map(|(c, n)| (*n, Some(*c))).chain(std::iter::once(("overall", None))) {
            let (v, n) = r.at(cat);
            println!(
                "{tool:<14} {name:<12} {:>10.1} {:>10.1} {:>7.1} {:>7.1} {:>8.1} {:>8.1}   {n}",
                v[0], v[1], v[2], v[3], v[4], v[5]
            );
        }
        println!("{tool:<14} tokens per question (top 10): {:.0}", r.tokens as f64 / r.questions.max(1) as f64);
    }
    Ok(json!({"questions": questions.len(), "turns": turns, "read_seconds": read_secs, "ms_per_question": ask_ms,
              "find_quote": find.json(), "remember_when": when.json()}))
}

// ---------------------------------------------------------------------------------------------
// Latency at scale.

async fn latency(args: &MemoryArgs, conn: &memex_client::Conn, store: &memex_store::Store) -> anyhow::Result<Value> {
    let ns = conn.namespace.clone();
    let mut m = MemoryServiceClient::with_interceptor(conn.channel().await?, conn.bearer()?)
        .max_decoding_message_size(usize::MAX);
    // The worker's throughput: events read per second of wall time until the corpus is read.
    let t0 = Instant::now();
    let lag0 = m.get_memory_status(pb::GetMemoryStatusRequest { namespace: ns.clone() }).await?.into_inner().lag_events;
    let mut last_print = Instant::now();
    loop {
        if args.under_backlog {
            break;
        }
        let s = m.get_memory_status(pb::GetMemoryStatusRequest { namespace: ns.clone() }).await?.into_inner();
        if s.lag_events == 0 {
            break;
        }
        if last_print.elapsed() > Duration::from_secs(30) {
            let done = lag0.saturating_sub(s.lag_events);
            println!(
                "memory: {done} of {lag0} events read in {:.0} s ({:.0} events/s)",
                t0.elapsed().as_secs_f64(),
                done as f64 / t0.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let read_secs = t0.elapsed().as_secs_f64();
    if !args.under_backlog {
        settle(&mut m, &ns, Duration::from_secs(3_600)).await?;
    }
    let settle_secs = t0.elapsed().as_secs_f64();
    let status = m.get_memory_status(pb::GetMemoryStatusRequest { namespace: ns.clone() }).await?.into_inner();
    let throughput = if lag0 > 0 && !args.under_backlog { lag0 as f64 / read_secs } else { 0.0 };
    if args.under_backlog {
        println!(
            "memory: measuring beside a backlog of {lag0} events; {} segments, {} facts, {} topics so far",
            status.segments, status.facts, status.topics
        );
    } else {
        println!(
            "memory: {lag0} events read in {read_secs:.1} s ({throughput:.0} events/s); topics current after {settle_secs:.1} s; {} segments, {} facts, {} topics",
            status.segments, status.facts, status.topics
        );
    }
    // What the load asks about: topics, fact subjects and queries from the corpus itself.
    let topics: Vec<String> = m
        .list_topics(pb::ListTopicsRequest { namespace: ns.clone(), limit: 1_000, ..Default::default() })
        .await?
        .into_inner()
        .topics
        .into_iter()
        .map(|t| t.tag)
        .collect();
    anyhow::ensure!(!topics.is_empty(), "no topics in {ns}");
    let subjects: Vec<String> = sqlx::query_scalar(
        "SELECT subject FROM memory_facts WHERE namespace_id = $1 AND fact_type IN ('test', 'error', 'file') ORDER BY id LIMIT 500",
    )
    .bind(store.namespace(&ns).await?.id)
    .fetch_all(store.pool())
    .await?;
    let queries = [
        "ValueError traceback in the reproduction script",
        "which test failed after the patch",
        "the function that parses the header",
        "ImportError cannot import name",
        "AssertionError expected output",
        "migration of the model field",
    ];
    let mut results = serde_json::Map::new();
    println!("{:<14} {:>8} {:>9} {:>9} {:>9} {:>7}", "tool", "rate/s", "p50 ms", "p99 ms", "max ms", "errors");
    for &tool in TOOLS.iter().filter(|t| args.tools.is_empty() || args.tools.iter().any(|a| a == *t)) {
        let (topics, subjects, ns) = (topics.clone(), subjects.clone(), ns.clone());
        let m = m.clone();
        let call = move |i: usize| {
            let mut m = m.clone();
            let ns = ns.clone();
            let topic = topics[i % topics.len()].clone();
            let subject = subjects.get(i % subjects.len().max(1)).cloned().unwrap_or_default();
            let query = queries[i % queries.len()].to_owned();
            async move {
                match tool {
                    "find_quote" => m
                        .find_quote(pb::FindQuoteRequest { namespace: ns, query, ..Default::default() })
                        .await
                        .map(|_| ()),
                    "query_facts" => m
                        .query_facts(pb::QueryFactsRequest {
                            namespace: ns,
                            subject: subject.chars().take(40).collect(),
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    "expand_topic" => m
                        .expand_topic(pb::ExpandTopicRequest {
                            namespace: ns,
                            tag: topic,
                            depth: if i.is_multiple_of(2) { "summary" } else { "segments" }.into(),
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    "remember_when" => m
                        .remember_when(pb::RememberWhenRequest {
                            namespace: ns,
                            query,
                            preset: "last_30_days".into(),
                            ..Default::default()
                        })
                        .await
                        .map(|_| ()),
                    "recall_all" => {
                        m.recall_all(pb::RecallAllRequest { namespace: ns, max_tokens: 4_000 }).await.map(|_| ())
                    }
                    "list_topics" => {
                        m.list_topics(pb::ListTopicsRequest { namespace: ns, ..Default::default() }).await.map(|_| ())
                    }
                    _ => m.get_memory_status(pb::GetMemoryStatusRequest { namespace: ns }).await.map(|_| ()),
                }
            }
        };
        // Unrecorded, at the same rate, over other topics and subjects: what a server that has
        // been serving has warm (its connections, line maps, the index's pages).
        if args.warmup > 0.0 {
            open_loop(args.rate, args.warmup, |i| call(i + WARMUP_OFFSET)).await;
        }
        let r = open_loop(args.rate, args.seconds, &call).await;
        println!(
            "{tool:<14} {:>8.1} {:>9.2} {:>9.2} {:>9.2} {:>7} {}",
            r.rate,
            r.p50,
            r.p99,
            r.max,
            r.errors(),
            r.codes()
        );
        // The search-backed tools ask the fixed queries in turn, ExpandTopic alternates its
        // depths: which of them makes the tail.
        let mut json = r.json();
        if matches!(tool, "find_quote" | "remember_when") {
            let by_query: Vec<serde_json::Value> = queries
                .iter()
                .enumerate()
                .map(|(k, q)| {
                    let mut f = r.print_part(k, queries.len(), &format!("\"{q}\""));
                    f["query"] = (*q).into();
                    f
                })
                .collect();
            json["by_query"] = by_query.into();
        }
        if tool == "expand_topic" {
            let by_depth: serde_json::Map<String, serde_json::Value> = ["summary", "segments"]
                .iter()
                .enumerate()
                .map(|(k, depth)| ((*depth).to_owned(), r.print_part(k, 2, &format!("depth {depth}"))))
                .collect();
            json["by_depth"] = by_depth.into();
        }
        results.insert(tool.into(), json);
    }
    Ok(
        json!({"events": args.events, "namespace": ns, "worker": {"under_backlog": args.under_backlog, "events": lag0, "seconds": read_secs, "events_per_sec": throughput,
              "settled_seconds": settle_secs, "segments": status.segments, "facts": status.facts, "topics": status.topics},
              "tools": results}),
    )
}

pub(crate) struct LoadResult {
    pub rate: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// Errors by gRPC status code (`ResourceExhausted`: refused by admission, not failed).
    pub error_codes: std::collections::BTreeMap<String, u64>,
    /// Each call's latency in µs, by its index (`None`: its task panicked).
    pub calls: Vec<Option<u64>>,
}

impl LoadResult {
    pub fn errors(&self) -> u64 {
        self.error_codes.values().sum()
    }

    /// The figures as the benches' JSON lines carry them.
    pub fn json(&self) -> serde_json::Value {
        json!({"rate": self.rate, "p50_ms": self.p50, "p99_ms": self.p99, "max_ms": self.max,
               "errors": self.errors(), "error_codes": self.error_codes})
    }

    /// p50 / p99 / max in ms of the calls whose index is `key` modulo `of`: one of the bench's
    /// fixed queries, when the calls take them in turn.
    pub fn of_key(&self, key: usize, of: usize) -> (f64, f64, f64) {
        figures(self.calls.iter().skip(key).step_by(of.max(1)).flatten().copied())
    }

    /// Prints [`LoadResult::of_key`] as a line of the text report, labelled; its JSON figures.
    fn print_part(&self, key: usize, of: usize, label: &str) -> serde_json::Value {
        let (p50, p99, max) = self.of_key(key, of);
        println!("  {label:<48} {p50:>9.2} {p99:>9.2} {max:>9.2}");
        json!({"p50_ms": p50, "p99_ms": p99, "max_ms": max})
    }

    /// The error codes as `Code×n` pairs, for the text report.
    pub fn codes(&self) -> String {
        self.error_codes.iter().map(|(c, n)| format!("{c}×{n}")).collect::<Vec<_>>().join(" ")
    }
}

/// Sends `rate` requests per second for `seconds` on schedule (not after the previous answer),
/// latency counted from each request's scheduled time.
pub(crate) async fn open_loop<F, Fut>(rate: f64, seconds: f64, make: F) -> LoadResult
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send + 'static,
{
    let n = (rate * seconds).max(1.0) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.01));
    let start = Instant::now();
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let fut = make(i);
        let sent = super::bench_pack::sent_at(due);
        handles.push(tokio::spawn(async move {
            let r = fut.await;
            (sent.elapsed(), r.err().map(|e| e.code()))
        }));
    }
    let mut error_codes = std::collections::BTreeMap::new();
    let mut calls = Vec::with_capacity(n);
    for x in handles {
        let joined = x.await;
        calls.push(joined.as_ref().ok().map(|(d, _)| d.as_micros() as u64));
        if let Ok((_, Some(code))) = joined {
            *error_codes.entry(format!("{code:?}")).or_insert(0) += 1;
        }
    }
    let (p50, p99, max) = figures(calls.iter().flatten().copied());
    LoadResult { rate: n as f64 / start.elapsed().as_secs_f64(), p50, p99, max, error_codes, calls }
}

/// p50 / p99 / max in ms of latencies in µs.
fn figures(us: impl Iterator<Item = u64>) -> (f64, f64, f64) {
    let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("a histogram");
    for v in us {
        let _ = h.record(v);
    }
    let ms = |v: u64| v as f64 / 1000.0;
    (ms(h.value_at_quantile(0.5)), ms(h.value_at_quantile(0.99)), ms(h.max()))
}

#[cfg(test)]
mod tests {
    use super::LoadResult;

    #[test]
    fn a_query_s_figures_are_those_of_its_own_calls() {
        // Three queries in turn; the second is the slow one, and one of the third's calls failed.
        let calls = (0..30).map(|i| if i == 8 { None } else { Some(1_000 + 10_000 * (i % 3 == 1) as u64) });
        let r = LoadResult {
            rate: 1.0,
            p50: 0.0,
            p99: 0.0,
            max: 0.0,
            error_codes: Default::default(),
            calls: calls.collect(),
        };
        // The histogram keeps three significant digits.
        let near = |a: f64, b: f64| (a - b).abs() < 0.05;
        let (p50, p99, max) = r.of_key(0, 3);
        assert!(near(p50, 1.0) && near(p99, 1.0) && near(max, 1.0), "{p50} {p99} {max}");
        let (p50, _, max) = r.of_key(1, 3);
        assert!(near(p50, 11.0) && near(max, 11.0), "{p50} {max}");
        assert!(near(r.of_key(2, 3).2, 1.0));
    }
}
