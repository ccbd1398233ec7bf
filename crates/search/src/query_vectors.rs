//! Query vectors off the request path.
//!
//! A search embeds its query with the same model as the events. Done on the request path, that
//! inference is the most expensive step of a search or a pack by far, and an unbounded number of
//! them queued on the runtime's blocking threads is how a replica collapsed under a fleet: every
//! request waited behind every other request's inference, and requests their clients had given up
//! on were still worked on. Here:
//!
//! * a repeated query (normalised: whitespace collapsed, cut to what the model reads) is answered
//!   from a cache, keyed by the model;
//! * at most `threads` inferences run at once, each on a batch of the queries waiting (padding a
//!   batch costs less than running its queries one by one);
//! * at most `queue` queries wait; a query that finds the queue full, or whose vector is not ready
//!   within `max_wait`, is searched without vectors (BM25 alone) and the answer says so;
//! * a query whose caller went away (gave up, or the search ended without it) before its turn is
//!   dropped, not embedded; one already being embedded is finished and cached for the next ask.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use memex_embed::Embedder;
use tokio::sync::{mpsc, oneshot};

/// Bytes of a query that are embedded (the model reads 256 tokens; this bounds tokenizer work).
const MAX_QUERY_BYTES: usize = 2048;

/// How query vectors are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryVectorOptions {
    /// Inferences in flight at once.
    pub threads: usize,
    /// Queries that may wait for one.
    pub queue: usize,
    /// Most queries embedded together.
    pub batch: usize,
    /// How long a search waits for its query's vector before it goes on without.
    pub max_wait: Duration,
    /// Query vectors kept.
    pub cache_entries: u64,
}

impl Default for QueryVectorOptions {
    fn default() -> Self {
        QueryVectorOptions {
            threads: 1,
            queue: 64,
            batch: 16,
            max_wait: Duration::from_millis(100),
            cache_entries: 10_000,
        }
    }
}

/// Why a search went without vectors, counted for the metrics.
#[derive(Debug, Default)]
pub struct QueryVectorStats {
    pub cached: AtomicU64,
    pub embedded: AtomicU64,
    /// The queue was full.
    pub shed: AtomicU64,
    /// The vector was not ready within `max_wait`.
    pub late: AtomicU64,
    /// The caller was gone before its turn.
    pub abandoned: AtomicU64,
    pub failed: AtomicU64,
    /// The vector was there, but its k-NN in Postgres ran past `search.knn_timeout_ms`.
    pub knn_late: AtomicU64,
}

struct Job {
    text: String,
    reply: oneshot::Sender<Option<Arc<Vec<f32>>>>,
}

/// The query side of a model: cached, bounded, batched.
pub struct QueryVectors {
    cache: moka::sync::Cache<String, Arc<Vec<f32>>>,
    jobs: mpsc::Sender<Job>,
    max_wait: Duration,
    stats: Arc<QueryVectorStats>,
}

impl QueryVectors {
    /// Starts `opts.threads` inference tasks on the current runtime. They end when this is dropped.
    pub fn start(embedder: Arc<dyn Embedder>, opts: QueryVectorOptions) -> QueryVectors {
        let cache = moka::sync::Cache::builder().max_capacity(opts.cache_entries).build();
        let (jobs, rx) = mpsc::channel::<Job>(opts.queue.max(1));
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let stats = Arc::new(QueryVectorStats::default());
        for _ in 0..opts.threads.max(1) {
            let (rx, embedder, cache, stats) = (rx.clone(), embedder.clone(), cache.clone(), stats.clone());
            let batch = opts.batch.max(1);
            tokio::spawn(async move {
                while let Some(jobs) = next_batch(&rx, batch, &stats).await {
                    embed_batch(embedder.as_ref(), jobs, &cache, &stats).await;
                }
            });
        }
        QueryVectors { cache, jobs, max_wait: opts.max_wait, stats }
    }

    /// Forgets every cached query vector.
    pub fn clear(&self) {
        self.cache.invalidate_all();
    }

    pub fn stats(&self) -> Arc<QueryVectorStats> {
        self.stats.clone()
    }

    /// The vector of `query`, or `None` when it cannot be had in time (search with BM25 alone).
    pub async fn vector(&self, query: &str) -> Option<Arc<Vec<f32>>> {
        let text = normalize(query);
        if text.is_empty() {
            return None;
        }
        if let Some(v) = self.cache.get(&text) {
            self.stats.cached.fetch_add(1, Ordering::Relaxed);
            return Some(v);
        }
        let (reply, answer) = oneshot::channel();
        if self.jobs.try_send(Job { text, reply }).is_err() {
            self.stats.shed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        match tokio::time::timeout(self.max_wait, answer).await {
            Ok(Ok(v)) => v,
            Ok(Err(_)) => None,
            Err(_) => {
                self.stats.late.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

/// Whitespace collapsed to single spaces, trimmed, cut (on a character boundary) to what is read.
fn normalize(query: &str) -> String {
    let mut out = String::with_capacity(query.len().min(MAX_QUERY_BYTES));
    for word in query.split_whitespace() {
        if out.len() + word.len() + 1 > MAX_QUERY_BYTES {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// The next jobs to embed together: one awaited, then whatever else is waiting, skipping those
/// whose caller is gone. `None` once every sender is dropped.
async fn next_batch(
    rx: &tokio::sync::Mutex<mpsc::Receiver<Job>>,
    max: usize,
    stats: &QueryVectorStats,
) -> Option<Vec<Job>> {
    let mut rx = rx.lock().await;
    let mut jobs: Vec<Job> = Vec::with_capacity(max);
    let take = |job: Job, jobs: &mut Vec<Job>| {
        if job.reply.is_closed() {
            stats.abandoned.fetch_add(1, Ordering::Relaxed);
        } else {
            jobs.push(job);
        }
    };
    loop {
        let first = rx.recv().await?;
        take(first, &mut jobs);
        while jobs.len() < max {
            match rx.try_recv() {
                Ok(job) => take(job, &mut jobs),
                Err(_) => break,
            }
        }
        if !jobs.is_empty() {
            return Some(jobs);
        }
    }
}

async fn embed_batch(
    embedder: &dyn Embedder,
    jobs: Vec<Job>,
    cache: &moka::sync::Cache<String, Arc<Vec<f32>>>,
    stats: &QueryVectorStats,
) {
    let texts: Vec<String> = jobs.iter().map(|j| j.text.clone()).collect();
    match embedder.embed(texts).await {
        Ok(vectors) if vectors.len() == jobs.len() => {
            stats.embedded.fetch_add(jobs.len() as u64, Ordering::Relaxed);
            for (job, v) in jobs.into_iter().zip(vectors) {
                let v = Arc::new(v);
                cache.insert(job.text, v.clone());
                let _ = job.reply.send(Some(v));
            }
        }
        Ok(_) | Err(_) => {
            stats.failed.fetch_add(jobs.len() as u64, Ordering::Relaxed);
            tracing::warn!(queries = jobs.len(), "query embedding failed; those searches go without vectors");
            for job in jobs {
                let _ = job.reply.send(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_normalised_and_cut() {
        assert_eq!(normalize("  what  did\n\tthe test print? "), "what did the test print?");
        assert_eq!(normalize(""), "");
        let long = "word ".repeat(1000);
        let n = normalize(&long);
        assert!(n.len() <= MAX_QUERY_BYTES && n.ends_with("word"), "{}", n.len());
    }
}
