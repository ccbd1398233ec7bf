//! `memex-bench longmemeval`: the LongMemEval retrieval protocol (notes/benchmarks.md §2) against
//! memex search. Per question a fresh namespace holding its haystack — every turn, as events of one
//! memex session per haystack session, at the session's date — and the question searched with the
//! role filter `user` (the paper's user-side keys). Turn ids and session ids given to memex are
//! opaque (the data's `answer_` prefix would leak the label); they are mapped back only to score.
//!
//! Scored like the official code: turn level (user turns with `has_answer`) and session level
//! (sessions by first appearance in the turn ranking; an evidence session with no `has_answer` user
//! turn is not gold), recall_any / recall_all / ndcg_any at 1, 3, 5, 10, 30, 50, averaged over the
//! non-abstention questions (empty gold: recall_all = 1, the paper's n = 470) and strictly (empty
//! gold skipped, n = 419).
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{NaiveDateTime, TimeDelta};
use memex_event::EventInput;
use memex_event::Role;
use memex_rank::eval::{first_appearance, ndcg_any, recall_all, recall_any};
use memex_search::{SearchFilter, SearchRequest};
use memex_server::flags::SearchArgs;
use serde_json::{Value, json};
use sha2::Digest;
use uuid::Uuid;

use super::searchkit::{Kit, peak_rss_mib};

#[derive(clap::Args, Debug)]
pub struct LongMemEvalArgs {
    /// longmemeval_s_cleaned.json, longmemeval_m_cleaned.json, longmemeval_oracle.json, …
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub search: SearchArgs,
    /// Only the first N questions.
    #[arg(long)]
    pub questions: Option<usize>,
}

const KS: [usize; 6] = [1, 3, 5, 10, 30, 50];
/// The published files (notes/benchmarks.md §1), by sha256.
const KNOWN: [(&str, &str); 5] = [
    ("d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442", "longmemeval_s_cleaned.json"),
    ("821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c", "longmemeval_oracle.json"),
    ("08d8dad4be43ee2049a22ff5674eb86725d0ce5ff434cde2627e5e8e7e117894", "longmemeval_s.json"),
    ("9d79e5524794a2e6900a3aa9cb7d9152c5a3e8319c9a87c25494ba1eacee495f", "longmemeval_m_cleaned.json"),
    ("fb5413e3b077c62927daab794836991a2fcfa61ceacab57dc679fb02daaff2d9", "longmemeval_m.json"),
];

/// "2023/05/30 (Tue) 23:40".
fn date(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = s.trim();
    let cleaned: String = match (s.find('('), s.find(')')) {
        (Some(a), Some(b)) if b > a => format!("{}{}", &s[..a], &s[b + 1..]),
        _ => s.to_owned(),
    };
    let cleaned = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    NaiveDateTime::parse_from_str(&cleaned, "%Y/%m/%d %H:%M").ok().map(|t| t.and_utc())
}

/// Sums of the metrics at each k for one level (turn or session).
#[derive(Default, Clone)]
struct Level {
    any: [f64; 6],
    all: [f64; 6],
    ndcg: [f64; 6],
    n: usize,
}

impl Level {
    fn add(&mut self, ranked: &[String], gold: &[String]) {
        for (i, k) in KS.iter().enumerate() {
            self.any[i] += recall_any(ranked, gold, *k);
            self.all[i] += recall_all(ranked, gold, *k);
            self.ndcg[i] += ndcg_any(ranked, gold, gold.len(), *k);
        }
        self.n += 1;
    }

    fn json(&self) -> Value {
        let n = self.n.max(1) as f64;
        let mut m = serde_json::Map::new();
        m.insert("n".into(), json!(self.n));
        for (i, k) in KS.iter().enumerate() {
            m.insert(format!("recall_any@{k}"), json!(self.any[i] / n));
            m.insert(format!("recall_all@{k}"), json!(self.all[i] / n));
            m.insert(format!("ndcg_any@{k}"), json!(self.ndcg[i] / n));
        }
        Value::Object(m)
    }
}

#[derive(Default, Clone)]
struct Tally {
    session: Level,
    turn: Level,
}

pub async fn run(args: LongMemEvalArgs) -> anyhow::Result<()> {
    let raw = std::fs::read(&args.data).with_context(|| format!("reading {}", args.data.display()))?;
    let sha = format!("{:x}", sha2::Sha256::digest(&raw));
    let known = KNOWN.iter().find(|(h, _)| *h == sha).map(|(_, n)| *n);
    eprintln!("{}: sha256 {sha} ({})", args.data.display(), known.unwrap_or("not a published LongMemEval file"));
    let items: Vec<Value> = serde_json::from_slice(&raw).context("a LongMemEval file is a JSON array of questions")?;
    let kit = Kit::open(&args.search, true, false).await?;
    let n = args.questions.unwrap_or(items.len()).min(items.len());

    // Averages over the non-abstention questions, and strict ones (questions with gold only), by
    // question type too.
    let (mut all, mut strict) = (Tally::default(), Tally::default());
    let mut by_type: BTreeMap<String, Tally> = BTreeMap::new();
    let (mut skipped_abs, mut turns_total) = (0usize, 0usize);
    let t0 = Instant::now();
    for item in items.iter().take(n) {
        let qid = item["question_id"].as_str().unwrap_or_default();
        if qid.ends_with("_abs") {
            skipped_abs += 1;
            continue;
        }
        let ns = kit.namespace("lme").await?;
        let session_ids = item["haystack_session_ids"].as_array().cloned().unwrap_or_default();
        let dates = item["haystack_dates"].as_array().cloned().unwrap_or_default();
        let sessions = item["haystack_sessions"].as_array().cloned().unwrap_or_default();
        // Opaque: memex sees its own session ids; `label` maps an event back to the data's ids.
        let mut label: HashMap<Uuid, (String, String)> = HashMap::new();
        let (mut gold_sessions, mut gold_turns) = (Vec::new(), Vec::new());
        for (si, turns) in sessions.iter().enumerate() {
            let data_sid = session_ids.get(si).and_then(Value::as_str).unwrap_or_default().to_owned();
            let when = dates.get(si).and_then(Value::as_str).and_then(date);
            let turns = turns.as_array().cloned().unwrap_or_default();
            if turns.is_empty() {
                continue;
            }
            let mut events = Vec::new();
            let mut turn_ids = Vec::new();
            let mut session_has_answer = false;
            for (ti, t) in turns.iter().enumerate() {
                let role = t["role"].as_str().unwrap_or_default();
                let turn_id = format!("{data_sid}_{}", ti + 1);
                let is_answer = t["has_answer"].as_bool().unwrap_or(false);
                if role == "user" && is_answer {
                    session_has_answer = true;
                    if data_sid.contains("answer") {
                        gold_turns.push(turn_id.clone());
                    }
                }
                events.push(EventInput {
                    kind: if role == "user" { "user_message" } else { "assistant_message" }.into(),
                    content: t["content"].as_str().unwrap_or_default().to_owned(),
                    event_time: when.map(|d| d + TimeDelta::seconds(ti as i64)),
                    ..Default::default()
                });
                turn_ids.push(turn_id);
            }
            if data_sid.contains("answer") && session_has_answer {
                gold_sessions.push(data_sid.clone());
            }
            turns_total += events.len();
            let sid = kit.session(&ns, "lme").await?;
            for (id, turn) in kit.append(&ns, sid, events).await?.iter().flat_map(|o| o.event_ids.iter()).zip(turn_ids)
            {
                label.insert(*id, (data_sid.clone(), turn));
            }
        }
        if let Some(w) = kit.worker(&[ns.id]).await? {
            anyhow::ensure!(w.wait_idle(Duration::from_secs(3600)).await?, "embedding did not finish");
            w.stop().await;
        }
        let mut req = SearchRequest::new(item["question"].as_str().unwrap_or_default(), 1000);
        req.candidates = 1000;
        req.filter = SearchFilter { roles: vec![Role::User], ..Default::default() };
        let hits = kit.index.search(ns.id, &req).await?.hits;
        let turns: Vec<String> = hits.iter().filter_map(|h| label.get(&h.event_id).map(|l| l.1.clone())).collect();
        let sessions: Vec<String> = first_appearance(
            &hits.iter().filter_map(|h| label.get(&h.event_id).map(|l| l.0.clone())).collect::<Vec<_>>(),
        );
        let kind = item["question_type"].as_str().unwrap_or("unknown").to_owned();
        for t in [&mut all, by_type.entry(kind).or_default()] {
            t.session.add(&sessions, &gold_sessions);
            t.turn.add(&turns, &gold_turns);
        }
        if !gold_sessions.is_empty() {
            strict.session.add(&sessions, &gold_sessions);
        }
        if !gold_turns.is_empty() {
            strict.turn.add(&turns, &gold_turns);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let types: serde_json::Map<String, Value> =
        by_type.iter().map(|(k, t)| (k.clone(), json!({"session": t.session.json(), "turn": t.turn.json()}))).collect();
    println!(
        "LongMemEval retrieval ({}; {} questions, {skipped_abs} abstention skipped; {turns_total} turns; {secs:.1} s)",
        known.unwrap_or("unpublished file"),
        all.session.n
    );
    for (name, t) in [("all", &all), ("strict", &strict)] {
        let s = t.session.json();
        let u = t.turn.json();
        println!(
            "{name:<7} session recall_all@5 {:.3} ndcg_any@5 {:.3} recall_all@10 {:.3} ndcg_any@10 {:.3} | turn recall_all@10 {:.3} ndcg_any@10 {:.3} recall_all@50 {:.3}",
            s["recall_all@5"].as_f64().unwrap_or(0.0),
            s["ndcg_any@5"].as_f64().unwrap_or(0.0),
            s["recall_all@10"].as_f64().unwrap_or(0.0),
            s["ndcg_any@10"].as_f64().unwrap_or(0.0),
            u["recall_all@10"].as_f64().unwrap_or(0.0),
            u["ndcg_any@10"].as_f64().unwrap_or(0.0),
            u["recall_all@50"].as_f64().unwrap_or(0.0),
        );
    }
    let summary = json!({
        "bench": "longmemeval",
        "file": known,
        "sha256": sha,
        "questions": all.session.n,
        "abstention_skipped": skipped_abs,
        "vectors": kit.embedder.is_some(),
        "all": {"session": all.session.json(), "turn": all.turn.json()},
        "strict": {"session": strict.session.json(), "turn": strict.turn.json()},
        "by_type": types,
        "seconds": secs,
        "peak_rss_mib": peak_rss_mib(),
    });
    println!("{summary}");
    Ok(())
}
