//! `memex-bench search`: indexing throughput, query latency at scale and embedding throughput.
//!
//! Event text is replayed from real agent traces (the SWE-bench trajectories in
//! `shared/bench-data/agent-traces`, cut into windows of 2–10 lines with kinds cycling through
//! assistant message, tool call and tool result), so the vocabulary and its skew are real. Events
//! are appended straight to the store; the text index is then rebuilt from Postgres and timed;
//! queries (2–3 words drawn from random events) run through `SearchIndex::search` one at a time.
use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use memex_event::EventInput;
use memex_search::SearchFilter;
use memex_server::flags::SearchArgs;
use serde_json::json;
use uuid::Uuid;

use super::searchkit::{Kit, peak_rss_mib};

#[derive(clap::Args, Debug)]
pub struct SearchBenchArgs {
    #[command(flatten)]
    pub search: SearchArgs,
    /// Events in the big namespace (text index and BM25 queries).
    #[arg(long, default_value_t = 1_000_000)]
    pub events: usize,
    /// Sessions they are spread over.
    #[arg(long, default_value_t = 1000)]
    pub sessions: usize,
    /// Queries to time (after 200 warm-up queries).
    #[arg(long, default_value_t = 2000)]
    pub queries: usize,
    /// Events embedded in a second namespace, for embedding throughput and hybrid query latency (0: skip).
    #[arg(long, default_value_t = 5000)]
    pub vector_events: usize,
    /// Source of event text (JSON lines with `messages[].content`, gzip).
    #[arg(
        long,
        default_value = "../shared/bench-data/agent-traces/mini-swe-agent-gemini3pro-swebench-verified-500.jsonl.gz"
    )]
    pub traces: PathBuf,
    /// Reuse the newest `bench-search-…` namespace of an earlier run instead of appending again (with
    /// `--index-dir` of that run, its text index too): for iterating on query speed.
    #[arg(long)]
    pub reuse: bool,
}

/// Lines of every message of the traces.
fn trace_lines(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(file));
    let mut lines = Vec::new();
    for line in reader.lines() {
        let v: serde_json::Value = serde_json::from_str(&line?)?;
        for m in v["messages"].as_array().into_iter().flatten() {
            if let Some(c) = m["content"].as_str() {
                lines.extend(
                    c.lines().filter(|l| !l.trim().is_empty()).map(|l| l.chars().take(300).collect::<String>()),
                );
            }
        }
    }
    anyhow::ensure!(!lines.is_empty(), "no text in {}", path.display());
    Ok(lines)
}

/// Deterministic event generator over the trace lines.
struct Replay {
    lines: Vec<String>,
    cursor: usize,
    i: u64,
}

impl Replay {
    fn next(&mut self) -> EventInput {
        let w = 2 + (self.i.wrapping_mul(7919) % 9) as usize;
        let mut content = String::new();
        for k in 0..w {
            content.push_str(&self.lines[(self.cursor + k) % self.lines.len()]);
            content.push('\n');
        }
        self.cursor = (self.cursor + w) % self.lines.len();
        if self.cursor < w {
            self.cursor += 1 + (self.i as usize % 5); // shift the windows on every pass
        }
        let kind = ["assistant_message", "tool_call", "tool_result"][(self.i % 3) as usize];
        let call_id = format!("c{}", self.i - self.i % 3 + 1);
        self.i += 1;
        let mut e = EventInput { kind: kind.into(), content, ..Default::default() };
        if kind == "tool_call" {
            e.tool_name = "Bash".into();
            e.tool_call_id = call_id;
        } else if kind == "tool_result" {
            e.tool_call_id = call_id;
        }
        e
    }

    /// Events for one session: whole call/result pairs.
    fn batch(&mut self, n: usize) -> Vec<EventInput> {
        let n = n - n % 3;
        self.i -= self.i % 3;
        (0..n).map(|_| self.next()).collect()
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn time_queries(
    kit: &Kit,
    ns: Uuid,
    queries: &[String],
    sessions: &[Uuid],
    hybrid: bool,
    filtered: bool,
) -> anyhow::Result<serde_json::Value> {
    let mut ms = Vec::with_capacity(queries.len());
    let mut hits = 0usize;
    for (i, q) in queries.iter().enumerate() {
        let mut r = kit.config.search.request(q.clone(), 10);
        if !hybrid {
            r.vector_weight = 0.0;
        }
        if filtered {
            r.filter = SearchFilter {
                session_ids: vec![sessions[i % sessions.len()]],
                kinds: vec!["tool_result".into()],
                ..Default::default()
            };
        }
        let t = Instant::now();
        hits += kit.index.search(ns, &r).await?.hits.len();
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    Ok(json!({
        "queries": queries.len(),
        "p50_ms": percentile(&ms, 0.50),
        "p90_ms": percentile(&ms, 0.90),
        "p99_ms": percentile(&ms, 0.99),
        "max_ms": percentile(&ms, 1.0),
        "mean_hits": hits as f64 / queries.len().max(1) as f64,
    }))
}

fn make_queries(lines: &[String], n: usize, seed: u64) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    let mut x = seed;
    while out.len() < n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let line = &lines[(x >> 33) as usize % lines.len()];
        let words: Vec<&str> = line.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() >= 3).collect();
        if words.len() < 3 {
            continue;
        }
        let take = 2 + (x % 2) as usize;
        let start = (x >> 20) as usize % (words.len() - take + 1);
        out.push(words[start..start + take].join(" "));
    }
    out
}

pub async fn run(args: SearchBenchArgs) -> anyhow::Result<()> {
    let kit = Kit::open(&args.search, true, false).await?;
    let lines = trace_lines(&args.traces)?;
    eprintln!("{} lines of trace text loaded", lines.len());
    let mut replay = Replay { lines: lines.clone(), cursor: 0, i: 0 };

    // 1. Ingest the big namespace (or find the one of an earlier run).
    let reused = if args.reuse {
        let mut found: Vec<_> =
            kit.store.list_namespaces().await?.into_iter().filter(|n| n.name.starts_with("bench-search-")).collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        Some(found.pop().context("--reuse: no bench-search-… namespace")?)
    } else {
        None
    };
    let ns = match &reused {
        Some(ns) => ns.clone(),
        None => kit.namespace("bench-search").await?,
    };
    let per_session = (args.events / args.sessions.max(1)).max(3);
    let t0 = Instant::now();
    let mut sessions = Vec::new();
    let mut appended = 0usize;
    let mut bytes = 0usize;
    if reused.is_some() {
        sessions = kit.store.session_heads(ns.id, None).await?.into_iter().map(|(s, _)| s).collect();
        appended = args.events;
    }
    while appended < args.events {
        let sid = kit.session(&ns, &format!("agent-{}", sessions.len() % 16)).await?;
        let batch = replay.batch(per_session.min(args.events - appended).max(3));
        appended += batch.len();
        bytes += batch.iter().map(|e| e.content.len()).sum::<usize>();
        kit.append(&ns, sid, batch).await?;
        sessions.push(sid);
    }
    let ingest_secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "appended {appended} events ({:.0} MB of text) in {} sessions in {ingest_secs:.1} s",
        bytes as f64 / 1e6,
        sessions.len()
    );

    // 2. Index from Postgres.
    let t1 = Instant::now();
    let indexed = if reused.is_some() {
        kit.index.catch_up(ns.id, None).await?;
        kit.store.head_total(ns.id, None).await?
    } else {
        kit.index.rebuild(ns.id).await?
    };
    let index_secs = t1.elapsed().as_secs_f64();
    let index_rate = indexed as f64 / index_secs;
    eprintln!("indexed {indexed} events from Postgres in {index_secs:.1} s = {index_rate:.0} events/s");
    let index_bytes = dir_size(&std::path::Path::new(&kit.config.search.index_dir).join(ns.id.to_string()));

    // 3. Queries.
    let queries = make_queries(&lines, args.queries + 200, 42);
    let (warm, timed) = queries.split_at(200);
    time_queries(&kit, ns.id, warm, &sessions, false, false).await?;
    let bm25 = time_queries(&kit, ns.id, timed, &sessions, false, false).await?;
    eprintln!("BM25 queries at {indexed} events: {bm25}");
    let filtered = time_queries(&kit, ns.id, timed, &sessions, false, true).await?;
    eprintln!("BM25 queries with session + kind filters: {filtered}");

    // 4. Embedding throughput and hybrid queries on a smaller namespace.
    let mut embedding = json!(null);
    let mut hybrid = json!(null);
    if args.vector_events > 0 && kit.embedder.is_some() {
        let vns = kit.namespace("bench-vectors").await?;
        let mut vsessions = Vec::new();
        let mut texts = Vec::new();
        let mut done = 0;
        while done < args.vector_events {
            let sid = kit.session(&vns, "agent").await?;
            let batch = replay.batch(300.min(args.vector_events - done).max(3));
            done += batch.len();
            texts.extend(batch.iter().map(|e| e.content.clone()));
            kit.append(&vns, sid, batch).await?;
            vsessions.push(sid);
        }
        let t = Instant::now();
        let worker = kit.worker(&[vns.id]).await?.context("an embedder is configured")?;
        anyhow::ensure!(worker.wait_idle(Duration::from_secs(7200)).await?, "embedding did not finish");
        let secs = t.elapsed().as_secs_f64();
        let p = worker.progress();
        let tokens = count_tokens(&kit, &texts);
        embedding = json!({
            "model": kit.embedder.as_ref().map(|e| e.info().name.clone()),
            "texts": p.embedded_events,
            "seconds": secs,
            "texts_per_sec": p.embedded_events as f64 / secs,
            "tokens": tokens,
            "tokens_per_sec": tokens.map(|t| t as f64 / secs),
            "seconds_in_model": p.embed_seconds,
            "batches": p.batches,
        });
        eprintln!("embedding: {embedding}");
        let vq = make_queries(&lines, 500, 7);
        time_queries(&kit, vns.id, &vq[..50], &vsessions, true, false).await?;
        hybrid = time_queries(&kit, vns.id, &vq[50..], &vsessions, true, false).await?;
        eprintln!("hybrid queries at {done} events: {hybrid}");
        worker.stop().await;
    }
    let summary = json!({
        "bench": "search",
        "events": indexed,
        "sessions": sessions.len(),
        "text_mb": bytes as f64 / 1e6,
        "ingest_seconds": ingest_secs,
        "index_seconds": index_secs,
        "index_events_per_sec": index_rate,
        "index_bytes": index_bytes,
        "bm25_query": bm25,
        "bm25_filtered_query": filtered,
        "embedding": embedding,
        "hybrid_query": hybrid,
        "peak_rss_mib": peak_rss_mib(),
    });
    println!("{summary}");
    Ok(())
}

/// Tokens MiniLM sees for `texts` after truncation (None for other providers).
fn count_tokens(kit: &Kit, texts: &[String]) -> Option<usize> {
    let cfg = &kit.config.embedding;
    if cfg.provider != memex_server::config::EmbeddingProvider::Minilm {
        return None;
    }
    let m =
        memex_embed::MiniLm::load(std::path::Path::new(&cfg.model_dir), memex_embed::MiniLmOptions::default()).ok()?;
    let refs: Vec<&str> = texts
        .iter()
        .map(|t| {
            let mut cut = t.len().min(2048);
            while !t.is_char_boundary(cut) {
                cut -= 1;
            }
            &t[..cut]
        })
        .collect();
    m.count_tokens(&refs).ok()
}

fn dir_size(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p).map_or(0, |rd| rd.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
}
