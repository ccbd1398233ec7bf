//! `memex-bench locomo`: the LoCoMo retrieval protocol (notes/benchmarks.md §4) against memex
//! search, with no LLM anywhere. Per conversation a fresh namespace; one memex session per LoCoMo
//! session; every turn one event (`speaker: text`, plus the shared photo's caption) at its session's
//! date. Each question is searched and the hits mapped back to dialog ids; recall accuracy
//! (the share of evidence ids in the top k) at 5/10/25/50, overall and per category.
//!
//! The data is CC BY-NC: it is read from the path given, at run time, and never copied.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use memex_event::EventInput;
use memex_rank::eval::recall_share;
use memex_search::{Fusion, SearchRequest};
use memex_server::flags::SearchArgs;
use memex_store::SeqRange;
use serde_json::{Value, json};
use uuid::Uuid;

use super::searchkit::{Kit, peak_rss_mib};

#[derive(clap::Args, Debug)]
pub struct LocomoArgs {
    /// locomo10.json (snap-research/LoCoMo).
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub search: SearchArgs,
    /// Only the first N conversations (after --skip).
    #[arg(long)]
    pub conversations: Option<usize>,
    /// Skip the first N conversations (tune on 0-4, hold out 5-9).
    #[arg(long, default_value_t = 0)]
    pub skip: usize,
    /// Also print the figures of every strategy tried, not only the default one.
    #[arg(long)]
    pub all_strategies: bool,
    /// Only these strategies (comma-separated names; the default one is always run).
    #[arg(long, value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// Reuse the newest namespaces `locomo<i>-…` of an earlier run (same data file) instead of
    /// ingesting again: their vectors are already embedded, so ranking experiments take minutes.
    #[arg(long)]
    pub reuse: bool,
    /// Which vectors rank: `best` (the model's, as a search does) or `fast` (the static table
    /// distilled from it, as a pack does).
    #[arg(long, default_value = "best", value_parser = ["best", "fast"])]
    pub tier: String,
}

const KS: [usize; 4] = [5, 10, 25, 50];
/// Category numbers of locomo10 and their names (confirmed by the counts in the paper's Table 5).
const CATEGORIES: [(u64, &str); 5] =
    [(1, "multi-hop"), (2, "temporal"), (3, "open-domain"), (4, "single-hop"), (5, "adversarial")];

struct Question {
    conv: usize,
    text: String,
    category: u64,
    evidence: Vec<String>,
    /// How many of `evidence` share no search term with the question (speakers' names aside):
    /// BM25 can reach those only through their neighbours' text, or the vectors.
    unmatched: usize,
}

/// A ranking strategy: the Search request settings.
#[derive(Clone)]
struct Strategy {
    name: &'static str,
    fusion: Fusion,
    bm25: f32,
    vector: f32,
    rrf_k: f32,
    context: f32,
    neighbor: f32,
    session: f32,
}

const fn strat(name: &'static str, bm25: f32, vector: f32, rrf_k: f32, context: f32) -> Strategy {
    Strategy { name, fusion: Fusion::Rrf, bm25, vector, rrf_k, context, neighbor: 0.0, session: 0.0 }
}

/// Score fusion with BM25 weight 1: `BM25 / best + vector × cosine`, then smoothing.
const fn score(name: &'static str, vector: f32, neighbor: f32, session: f32) -> Strategy {
    Strategy { name, fusion: Fusion::Score, bm25: 1.0, vector, rrf_k: 60.0, context: 0.5, neighbor, session }
}

/// What the server does with a request that leaves every setting unset.
fn server_default(c: &memex_search::SearchConfig) -> Strategy {
    Strategy {
        name: "default",
        fusion: c.fusion,
        bm25: c.bm25_weight,
        vector: c.vector_weight,
        rrf_k: c.rrf_k,
        context: c.context_weight,
        neighbor: c.neighbor_weight,
        session: c.session_weight,
    }
}

const fn with_neighbors(s: Strategy, neighbor: f32) -> Strategy {
    Strategy { neighbor, ..s }
}

const fn with_session(s: Strategy, session: f32) -> Strategy {
    Strategy { session, ..s }
}

fn strategies(vectors: bool) -> Vec<Strategy> {
    let mut v = vec![
        strat("bm25-own", 1.0, 0.0, 60.0, 0.0),
        strat("bm25-ctx0.25", 1.0, 0.0, 60.0, 0.25),
        strat("bm25", 1.0, 0.0, 60.0, 0.5),
        strat("bm25-ctx1", 1.0, 0.0, 60.0, 1.0),
        with_neighbors(strat("bm25-n0.25", 1.0, 0.0, 60.0, 0.5), 0.25),
        with_neighbors(strat("bm25-n0.5", 1.0, 0.0, 60.0, 0.5), 0.5),
        with_neighbors(strat("bm25-own-n0.5", 1.0, 0.0, 60.0, 0.0), 0.5),
        with_session(strat("bm25-s0.1", 1.0, 0.0, 60.0, 0.5), 0.1),
        with_session(strat("bm25-s0.25", 1.0, 0.0, 60.0, 0.5), 0.25),
        with_session(with_neighbors(strat("bm25-n0.25-s0.1", 1.0, 0.0, 60.0, 0.5), 0.25), 0.1),
        with_session(with_neighbors(strat("bm25-n0.25-s0.25", 1.0, 0.0, 60.0, 0.5), 0.25), 0.25),
    ];
    if vectors {
        v.extend([
            strat("vector", 0.0, 1.0, 60.0, 0.5),
            strat("hybrid-own", 1.0, 1.0, 60.0, 0.0),
            strat("hybrid", 1.0, 1.0, 60.0, 0.5),
            strat("hybrid-k10", 1.0, 1.0, 10.0, 0.5),
            strat("hybrid-v2", 1.0, 2.0, 60.0, 0.5),
            strat("hybrid-b2", 2.0, 1.0, 60.0, 0.5),
            strat("hybrid-v0.5", 1.0, 0.5, 60.0, 0.5),
            strat("hybrid-v0.3", 1.0, 0.3, 60.0, 0.5),
            with_neighbors(strat("hybrid-v0.5-n0.25", 1.0, 0.5, 60.0, 0.5), 0.25),
            with_session(with_neighbors(strat("hybrid-v0.3-n0.25-s0.25", 1.0, 0.3, 60.0, 0.5), 0.25), 0.25),
            score("score-v0.25", 0.25, 0.0, 0.0),
            score("score-v0.4", 0.4, 0.0, 0.0),
            score("score-v0.6", 0.6, 0.0, 0.0),
            score("score-v1", 1.0, 0.0, 0.0),
            score("score-v0.25-n0.1-s0.2", 0.25, 0.1, 0.2),
            score("score-v0.4-n0.1-s0.1", 0.4, 0.1, 0.1),
            score("score-v0.4-n0.1-s0.2", 0.4, 0.1, 0.2),
            score("score-v0.4-n0.2-s0.3", 0.4, 0.2, 0.3),
            score("score-v0.4-n0.25-s0.25", 0.4, 0.25, 0.25),
            score("score-v0.6-n0.1-s0.2", 0.6, 0.1, 0.2),
            score("score-v0.6-n0.25-s0.25", 0.6, 0.25, 0.25),
        ]);
    }
    v
}

/// "1:56 pm on 8 May, 2023".
fn session_date(s: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(s.trim(), "%I:%M %p on %d %B, %Y").ok().map(|t| t.and_utc())
}

/// Evidence ids, cleaned as the notes prescribe: split malformed strings on `;` and whitespace,
/// drop ids that name no turn. Returns (ids, number of strings split, number of ids dropped).
fn clean_evidence(raw: &[Value], known: &HashSet<String>) -> (Vec<String>, usize, usize) {
    let (mut out, mut split, mut dropped) = (Vec::new(), 0, 0);
    for e in raw.iter().filter_map(Value::as_str) {
        let parts: Vec<&str> = e.split(|c: char| c == ';' || c.is_whitespace()).filter(|p| !p.is_empty()).collect();
        if parts.len() > 1 {
            split += 1;
        }
        for p in parts {
            if known.contains(p) {
                if !out.iter().any(|x| x == p) {
                    out.push(p.to_owned());
                }
            } else {
                dropped += 1;
            }
        }
    }
    (out, split, dropped)
}

pub async fn run(args: LocomoArgs) -> anyhow::Result<()> {
    let raw = std::fs::read(&args.data).with_context(|| format!("reading {}", args.data.display()))?;
    let data: Vec<Value> = serde_json::from_slice(&raw).context("locomo10.json is a JSON array of conversations")?;
    let kit = Kit::open(&args.search, true, args.tier == "fast").await?;
    let n_conv = args.conversations.unwrap_or(data.len()).min(data.len().saturating_sub(args.skip));

    // Ingest.
    let t0 = Instant::now();
    let mut namespaces = Vec::new();
    let mut dia_of: HashMap<Uuid, String> = HashMap::new();
    let mut questions = Vec::new();
    let (mut turns, mut split, mut dropped) = (0usize, 0usize, 0usize);
    let existing = if args.reuse { kit.store.list_namespaces().await? } else { Vec::new() };
    for (ci, conv) in data.iter().enumerate().skip(args.skip).take(n_conv) {
        let ci = ci - args.skip;
        let abs = ci + args.skip;
        let ns = if args.reuse {
            let prefix = format!("locomo{abs}-");
            let mut found: Vec<_> = existing.iter().filter(|n| n.name.starts_with(&prefix)).collect();
            found.sort_by(|a, b| a.name.cmp(&b.name));
            let ns = (*found.last().with_context(|| format!("--reuse: no namespace {prefix}…"))?).clone();
            for (session, head) in kit.store.session_heads(ns.id, None).await? {
                let page = kit
                    .store
                    .events_in_range(ns.id, session, SeqRange { from: 1, to: Some(head) }, 100_000, None)
                    .await?;
                for e in page.events {
                    if let Some(d) = e.metadata.as_ref().and_then(|m| m["dia_id"].as_str()) {
                        dia_of.insert(e.id, d.to_owned());
                    }
                }
            }
            ns
        } else {
            kit.namespace(&format!("locomo{abs}")).await?
        };
        let c = &conv["conversation"];
        let speaker_a = c["speaker_a"].as_str().unwrap_or_default();
        let mut known = HashSet::new();
        // Each turn's own terms, and the speakers' names (a term of every turn they speak).
        let mut terms_of: HashMap<String, HashSet<String>> = HashMap::new();
        let mut names: HashSet<String> = HashSet::new();
        for s in 1.. {
            let Some(session) = c.get(format!("session_{s}")).and_then(Value::as_array) else {
                if s > 40 {
                    break;
                }
                continue;
            };
            let date = c.get(format!("session_{s}_date_time")).and_then(Value::as_str).and_then(session_date);
            let mut events = Vec::new();
            let mut dias = Vec::new();
            for (ti, turn) in session.iter().enumerate() {
                let speaker = turn["speaker"].as_str().unwrap_or_default();
                let mut content = format!("{speaker}: {}", turn["text"].as_str().unwrap_or_default());
                if let Some(cap) = turn.get("blip_caption").and_then(Value::as_str) {
                    content.push_str(&format!(" [shares a photo: {cap}]"));
                }
                let dia = turn["dia_id"].as_str().unwrap_or_default().to_owned();
                names.extend(memex_rank::text::tokenize(speaker));
                terms_of.insert(dia.clone(), memex_rank::text::tokenize(&content).into_iter().collect());
                events.push(EventInput {
                    kind: if speaker == speaker_a { "user_message" } else { "assistant_message" }.into(),
                    content,
                    agent_id: speaker.into(),
                    event_time: date.map(|d| d + TimeDelta::seconds(ti as i64)),
                    metadata_json: json!({ "dia_id": dia }).to_string(),
                    ..Default::default()
                });
                known.insert(dia.clone());
                dias.push(dia);
            }
            turns += events.len();
            if args.reuse {
                continue;
            }
            let sid = kit.session(&ns, &format!("locomo-session-{s}")).await?;
            let outcomes = kit.append(&ns, sid, events).await?;
            for (id, dia) in outcomes.iter().flat_map(|o| o.event_ids.iter()).zip(dias) {
                dia_of.insert(*id, dia);
            }
        }
        for q in conv["qa"].as_array().into_iter().flatten() {
            let (evidence, s, d) = clean_evidence(q["evidence"].as_array().map_or(&[][..], |v| &v[..]), &known);
            split += s;
            dropped += d;
            let text = q["question"].as_str().unwrap_or_default().to_owned();
            let asked: Vec<String> =
                memex_rank::text::query_terms(&text).into_iter().filter(|t| !names.contains(t)).collect();
            let unmatched = evidence
                .iter()
                .filter(|d| terms_of.get(*d).is_none_or(|own| !asked.iter().any(|t| own.contains(t))))
                .count();
            questions.push(Question {
                conv: ci,
                text,
                category: q["category"].as_u64().unwrap_or(0),
                evidence,
                unmatched,
            });
        }
        namespaces.push(ns);
    }
    let ingest_secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "ingested {turns} turns of {n_conv} conversations in {ingest_secs:.1} s; {} questions; evidence: {split} malformed strings split, {dropped} dangling ids dropped",
        questions.len()
    );
    let t1 = Instant::now();
    let mut embed = json!(null);
    let worker = kit.worker(&namespaces.iter().map(|n| n.id).collect::<Vec<_>>()).await?;
    if let Some(w) = &worker {
        w.wake();
        anyhow::ensure!(w.wait_idle(Duration::from_secs(3600)).await?, "embedding did not finish");
        let p = w.progress();
        let secs = t1.elapsed().as_secs_f64();
        eprintln!(
            "embedded {} turns in {secs:.1} s ({:.0} texts/s; {:.1} s inside the model)",
            p.embedded_events,
            p.embedded_events as f64 / secs,
            p.embed_seconds
        );
        embed =
            json!({ "texts": p.embedded_events, "seconds": secs, "texts_per_sec": p.embedded_events as f64 / secs });
    }
    let t2 = Instant::now();
    for ns in &namespaces {
        kit.index.catch_up(ns.id, None).await?;
    }
    eprintln!("text-indexed in {:.2} s", t2.elapsed().as_secs_f64());

    // Rank every question with every strategy.
    let default_name = "default";
    let mut all = vec![server_default(&kit.config.search)];
    all.extend(strategies(kit.embedder.is_some()));
    if !args.strategies.is_empty() {
        all.retain(|s| s.name == default_name || args.strategies.iter().any(|x| x == s.name));
    }
    let mut results: Vec<(Strategy, Scores)> = Vec::new();
    for strat in &all {
        let t = Instant::now();
        let mut scores = Scores::default();
        for q in &questions {
            let mut req = SearchRequest::new(q.text.clone(), 50);
            req.fusion = strat.fusion;
            req.bm25_weight = strat.bm25;
            req.vector_weight = strat.vector;
            req.rrf_k = strat.rrf_k;
            req.context_weight = strat.context;
            req.neighbor_weight = strat.neighbor;
            req.session_weight = strat.session;
            req.tier = kit.tier();
            let hits = kit.index.search(namespaces[q.conv].id, &req).await?.hits;
            let ranked: Vec<String> = hits.iter().filter_map(|h| dia_of.get(&h.event_id).cloned()).collect();
            scores.add(q, &ranked);
        }
        eprintln!(
            "{:<12} {}  ({:.1} ms/question)",
            strat.name,
            scores.line(None),
            t.elapsed().as_secs_f64() * 1e3 / questions.len() as f64
        );
        results.push((strat.clone(), scores));
    }
    let (strat, best) = results.iter().find(|(s, _)| s.name == default_name).context("default strategy")?;
    println!(
        "LoCoMo retrieval (dialog level, recall accuracy %), strategy {} (fusion {}, bm25 {}, vector {}, context {}, neighbour {}, session {}):",
        strat.name,
        strat.fusion.as_str(),
        strat.bm25,
        strat.vector,
        strat.context,
        strat.neighbor,
        strat.session
    );
    println!("{:<12} {:>6} {:>6} {:>6} {:>6}   n", "category", "@5", "@10", "@25", "@50");
    for (cat, name) in CATEGORIES {
        println!("{}", best.row(name, Some(cat)));
    }
    println!("{}", best.row("overall", None));
    let unmatched = unmatched_shares(&questions);
    println!(
        "evidence turns sharing no term with their question (speakers' names aside): {}",
        unmatched.iter().map(|(name, share)| format!("{name} {share:.0}%")).collect::<Vec<_>>().join(", ")
    );
    println!("anchor (LoCoMo paper, DRAGON, dialog): overall @5 56.7, @10 66.2, @25 76.7, @50 82.7");
    let mut per_strategy = serde_json::Map::new();
    for (s, sc) in &results {
        per_strategy.insert(s.name.into(), sc.json());
        if args.all_strategies && s.name != strat.name {
            println!("{:<12} {}", s.name, sc.line(None));
        }
    }
    let summary = json!({
        "bench": "locomo",
        "strategy": strat.name,
        "questions": questions.len(),
        "turns": turns,
        "recall": best.json(),
        "evidence_sharing_no_term_pct": unmatched.iter().map(|(n, s)| (n.to_string(), json!(s))).collect::<serde_json::Map<_, _>>(),
        "strategies": per_strategy,
        "embedding": embed,
        "ingest_seconds": ingest_secs,
        "peak_rss_mib": peak_rss_mib(),
    });
    println!("{summary}");
    if let Some(w) = worker {
        w.stop().await;
    }
    Ok(())
}

/// Per category and overall, the share (%) of evidence turns that share no term with their question.
fn unmatched_shares(questions: &[Question]) -> Vec<(&'static str, f64)> {
    let share = |cat: Option<u64>| {
        let of = questions.iter().filter(|q| cat.is_none_or(|c| c == q.category));
        let (none, all) = of.fold((0, 0), |(n, a), q| (n + q.unmatched, a + q.evidence.len()));
        if all == 0 { 0.0 } else { 100.0 * none as f64 / all as f64 }
    };
    let mut out: Vec<(&'static str, f64)> = CATEGORIES.iter().map(|(c, name)| (*name, share(Some(*c)))).collect();
    out.push(("overall", share(None)));
    out
}

/// Recall sums per category and k.
#[derive(Default)]
struct Scores {
    sum: BTreeMap<u64, [f64; 4]>,
    n: BTreeMap<u64, usize>,
}

impl Scores {
    fn add(&mut self, q: &Question, ranked: &[String]) {
        let s = self.sum.entry(q.category).or_default();
        for (i, k) in KS.iter().enumerate() {
            s[i] += recall_share(ranked, &q.evidence, *k);
        }
        *self.n.entry(q.category).or_default() += 1;
    }

    fn at(&self, cat: Option<u64>) -> ([f64; 4], usize) {
        let mut sum = [0.0; 4];
        let mut n = 0;
        for (c, s) in &self.sum {
            if cat.is_none_or(|x| x == *c) {
                for i in 0..4 {
                    sum[i] += s[i];
                }
                n += self.n[c];
            }
        }
        (sum.map(|x| if n == 0 { 0.0 } else { 100.0 * x / n as f64 }), n)
    }

    fn row(&self, name: &str, cat: Option<u64>) -> String {
        let (r, n) = self.at(cat);
        format!("{name:<12} {:>6.1} {:>6.1} {:>6.1} {:>6.1}   {n}", r[0], r[1], r[2], r[3])
    }

    fn line(&self, cat: Option<u64>) -> String {
        let (r, _) = self.at(cat);
        format!("@5 {:.1}  @10 {:.1}  @25 {:.1}  @50 {:.1}", r[0], r[1], r[2], r[3])
    }

    fn json(&self) -> Value {
        let mut m = serde_json::Map::new();
        let mut put = |name: &str, cat: Option<u64>| {
            let (r, n) = self.at(cat);
            m.insert(name.into(), json!({"n": n, "r@5": r[0], "r@10": r[1], "r@25": r[2], "r@50": r[3]}));
        };
        put("overall", None);
        for (c, name) in CATEGORIES {
            put(name, Some(c));
        }
        Value::Object(m)
    }
}
