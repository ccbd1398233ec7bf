//! The shared prefix of consecutive packs of a session in `memex-bench pack`: how much of each
//! pack the next pack of the same session starts with, what a model provider's prompt cache can
//! reuse from one turn to the next.
//!
//! Measured in the measured phase whenever each worker asks about one session of its own
//! (`--fresh-sessions`, or `--sessions 0`): for turns N and N+1 of a session that were both
//! answered, the longest common byte prefix of the two packs' texts (cut back to a character
//! boundary), counted with the pack's tokenizer, over pack N+1's `tokens`. The counting runs on a
//! thread of its own, off the requests' path, and the CPU time it takes is left out of the phase's
//! CPU per pack. Where the prefix ends is attributed to one of pack N+1's blocks: by byte offset
//! when the answer carries the blocks' texts (`--full-view`), else by token position (each block's
//! `tokens`), which can misplace a difference that falls within a token or two of a block boundary.
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use memex_proto::v1 as pb;
use memex_tokens::Tokenizer;
use serde_json::json;

/// The length in bytes of the longest common prefix of `a` and `b`, cut back to a character
/// boundary (the same in both: the bytes before it are the same).
pub(crate) fn common_prefix(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len().min(b.len());
    // Eight bytes at a time, then byte by byte.
    let mut i = 0;
    while i + 8 <= n && a[i..i + 8] == b[i..i + 8] {
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    // A UTF-8 continuation byte (10xxxxxx) at i means the character that holds it started before.
    while i > 0 && a.get(i).is_some_and(|c| c & 0xc0 == 0x80) {
        i -= 1;
    }
    i
}

/// Where a pack's blocks are, in pack order (empty blocks left out, as the text leaves them out).
#[derive(Debug, Clone, PartialEq)]
enum Layout {
    /// Byte ranges in the text: the answer carried each block's text.
    Bytes(Vec<(String, Range<usize>)>),
    /// Each block's tokens: a basic answer.
    Tokens(Vec<(String, u32)>),
}

impl Layout {
    fn of(pack: &pb::Pack) -> Layout {
        let blocks: Vec<&pb::PackBlock> = pack.blocks.iter().filter(|b| b.tokens > 0 || !b.text.is_empty()).collect();
        if !blocks.is_empty()
            && blocks.iter().all(|b| !b.text.is_empty())
            && let Some(spans) = byte_spans(&pack.text, blocks.iter().map(|b| b.text.as_str()))
        {
            return Layout::Bytes(blocks.iter().zip(spans).map(|(b, s)| (b.kind.clone(), s)).collect());
        }
        Layout::Tokens(blocks.iter().map(|b| (b.kind.clone(), b.tokens)).collect())
    }

    #[cfg(test)]
    fn kinds(&self) -> Vec<&str> {
        match self {
            Layout::Bytes(b) => b.iter().map(|(k, _)| k.as_str()).collect(),
            Layout::Tokens(b) => b.iter().map(|(k, _)| k.as_str()).collect(),
        }
    }

    /// The block in which a shared prefix of `bytes` bytes and `tokens` tokens ends, in a pack of
    /// `pack_tokens` tokens: the block the first differing byte belongs to, or the block the
    /// prefix ends with when it ends exactly at a block's end (the separator after it differs).
    fn block_at(&self, bytes: usize, tokens: usize, pack_tokens: u32) -> &str {
        match self {
            Layout::Bytes(blocks) => {
                blocks.iter().find(|(_, span)| bytes <= span.end).or(blocks.last()).map_or(END, |(k, _)| k.as_str())
            }
            Layout::Tokens(blocks) => {
                // What the separators add to the blocks' own counts, spread evenly between them.
                let own: u64 = blocks.iter().map(|(_, t)| u64::from(*t)).sum();
                let gaps = blocks.len().saturating_sub(1).max(1) as f64;
                let separator = (f64::from(pack_tokens) - own as f64).max(0.0) / gaps;
                let mut end = 0.0;
                for (kind, t) in blocks {
                    end += f64::from(*t);
                    if tokens as f64 <= end {
                        return kind;
                    }
                    end += separator;
                }
                blocks.last().map_or(END, |(k, _)| k.as_str())
            }
        }
    }
}

/// The first difference's place when a pack has no blocks.
const END: &str = "end";
/// ... and when two consecutive packs are the same text.
const IDENTICAL: &str = "identical";

/// The byte ranges of `blocks`, found one after the other in `text`; None if one is missing.
fn byte_spans<'a>(text: &str, blocks: impl Iterator<Item = &'a str>) -> Option<Vec<Range<usize>>> {
    let mut at = 0;
    let mut out = Vec::new();
    for b in blocks {
        let start = at + text.get(at..)?.find(b)?;
        out.push(start..start + b.len());
        at = start + b.len();
    }
    Some(out)
}

/// What the meter keeps of an answered pack.
struct Seen {
    text: String,
    tokens: u32,
    tokenizer: Tokenizer,
    layout: Layout,
    /// Each block's tokens, in pack order.
    blocks: Vec<(String, u32)>,
}

impl Seen {
    fn of(mut pack: pb::Pack) -> Seen {
        let layout = Layout::of(&pack);
        Seen {
            text: std::mem::take(&mut pack.text),
            tokens: pack.tokens,
            tokenizer: pack.tokenizer.parse().unwrap_or_default(),
            layout,
            blocks: pack.blocks.into_iter().filter(|b| b.tokens > 0).map(|b| (b.kind, b.tokens)).collect(),
        }
    }
}

/// One pair of consecutive packs of a session, measured.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PairMeasure {
    /// Tokens of the shared prefix.
    pub shared_tokens: usize,
    /// Tokens of the later pack.
    pub pack_tokens: u32,
    /// The later pack's block in which the shared prefix ends.
    pub first_difference: String,
    /// The later pack's blocks and their tokens.
    pub blocks: Vec<(String, u32)>,
    /// Block by block, how much of each block of the later pack was in the earlier one: only when
    /// both answers carried the blocks' texts.
    pub reuse: Vec<BlockReuse>,
}

/// One block of a pack beside the same block of the pack before.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BlockReuse {
    pub kind: String,
    /// The same text.
    pub same: bool,
    /// The block's common prefix with the block before, as a fraction of the block's bytes.
    pub prefix: f64,
}

impl PairMeasure {
    fn fraction(&self) -> f64 {
        (self.shared_tokens as f64 / f64::from(self.pack_tokens.max(1))).min(1.0)
    }
}

fn measure(older: &Seen, newer: &Seen) -> PairMeasure {
    let bytes = common_prefix(&older.text, &newer.text);
    let shared_tokens = newer.tokenizer.count(&newer.text[..bytes]).min(newer.tokens as usize);
    let first_difference = if bytes == older.text.len() && bytes == newer.text.len() {
        IDENTICAL
    } else {
        newer.layout.block_at(bytes, shared_tokens, newer.tokens)
    };
    let reuse = match (&older.layout, &newer.layout) {
        (Layout::Bytes(before), Layout::Bytes(now)) => now
            .iter()
            .map(|(kind, span)| {
                let now = &newer.text[span.clone()];
                let before = before.iter().find(|(k, _)| k == kind).map_or("", |(_, s)| &older.text[s.clone()]);
                BlockReuse {
                    kind: kind.clone(),
                    same: now == before,
                    prefix: common_prefix(before, now) as f64 / now.len().max(1) as f64,
                }
            })
            .collect(),
        _ => Vec::new(),
    };
    PairMeasure {
        shared_tokens,
        pack_tokens: newer.tokens,
        first_difference: first_difference.to_owned(),
        blocks: newer.blocks.clone(),
        reuse,
    }
}

/// Fractions in [0, 1], kept as a count per basis point: an exact mean, quantiles to 0.01%, and
/// memory that does not grow with the number of values.
#[derive(Debug, Clone)]
pub(crate) struct FractionStats {
    buckets: Vec<u64>,
    sum: f64,
    n: u64,
}

impl Default for FractionStats {
    fn default() -> Self {
        FractionStats { buckets: vec![0; 10_001], sum: 0.0, n: 0 }
    }
}

impl FractionStats {
    pub fn add(&mut self, f: f64) {
        let f = if f.is_nan() { 0.0 } else { f.clamp(0.0, 1.0) };
        self.buckets[(f * 10_000.0).round() as usize] += 1;
        self.sum += f;
        self.n += 1;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }

    /// The `q`-quantile by nearest rank: the least value with at least a fraction `q` of the
    /// values at or below it (to the basis point).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(i as f64 / 10_000.0);
            }
        }
        None
    }
}

/// The shared-prefix figures of a phase.
#[derive(Debug, Clone, Default)]
pub(crate) struct PrefixStats {
    pub fractions: FractionStats,
    shared_tokens: u64,
    pack_tokens: u64,
    /// Per block kind (in the order first met): pairs whose shared prefix ends in it.
    first_difference: Vec<(String, u64)>,
    /// Per block kind: its tokens summed over the later packs.
    block_tokens: Vec<(String, u64)>,
    /// Whether the blocks were placed by byte offset (full answers) rather than by tokens.
    by_bytes: bool,
    /// Per block kind (full answers only): pairs, pairs with the block unchanged, and the sum of
    /// its in-block shared-prefix fractions.
    reuse: Vec<(String, (u64, u64, f64))>,
}

/// The value kept for `kind`, made when first met.
fn entry<'a, T: Default>(per_kind: &'a mut Vec<(String, T)>, kind: &str) -> &'a mut T {
    let i = per_kind.iter().position(|(k, _)| k == kind).unwrap_or_else(|| {
        per_kind.push((kind.to_owned(), T::default()));
        per_kind.len() - 1
    });
    &mut per_kind[i].1
}

impl PrefixStats {
    pub fn add(&mut self, m: &PairMeasure) {
        self.fractions.add(m.fraction());
        self.shared_tokens += m.shared_tokens as u64;
        self.pack_tokens += u64::from(m.pack_tokens);
        for (kind, tokens) in &m.blocks {
            *entry(&mut self.block_tokens, kind) += u64::from(*tokens);
        }
        *entry(&mut self.first_difference, &m.first_difference) += 1;
        for r in &m.reuse {
            let (pairs, same, prefix) = entry(&mut self.reuse, &r.kind);
            (*pairs, *same, *prefix) = (*pairs + 1, *same + u64::from(r.same), *prefix + r.prefix);
        }
    }

    /// Per block kind (full answers only): the share of pairs with the block unchanged, and its
    /// mean in-block shared-prefix fraction.
    fn reuse_means(&self) -> impl Iterator<Item = (&str, f64, f64)> {
        self.reuse.iter().map(|(k, (n, same, prefix))| {
            let n = (*n).max(1) as f64;
            (k.as_str(), *same as f64 / n, prefix / n)
        })
    }

    fn mean_of(&self, total: u64) -> f64 {
        total as f64 / self.fractions.count().max(1) as f64
    }

    /// Human lines, each indented as the pack bench's.
    pub fn lines(&self) -> String {
        let (Some(mean), Some(p50), Some(p10)) =
            (self.fractions.mean(), self.fractions.quantile(0.5), self.fractions.quantile(0.1))
        else {
            return "  shared prefix of consecutive turns: no pair of consecutive turns answered".to_owned();
        };
        let pairs = self.fractions.count();
        let pct = |n: u64| 100.0 * n as f64 / pairs as f64;
        let firsts: Vec<String> =
            self.first_difference.iter().map(|(k, n)| format!("{k} {n} ({:.1}%)", pct(*n))).collect();
        let blocks: Vec<String> =
            self.block_tokens.iter().map(|(k, t)| format!("{k} {:.0}", self.mean_of(*t))).collect();
        let mut out = format!(
            "  shared prefix of consecutive turns of a session (prompt-cache reuse): mean {:.1}% of the pack's tokens, p50 {:.1}%, p10 {:.1}% over {pairs} pairs ({:.0} of {:.0} tokens on average)\n    first difference in (by {}): {}\n    blocks (mean tokens): {}",
            100.0 * mean,
            100.0 * p50,
            100.0 * p10,
            self.mean_of(self.shared_tokens),
            self.mean_of(self.pack_tokens),
            if self.by_bytes { "byte offset" } else { "token position" },
            firsts.join(", "),
            blocks.join(", "),
        );
        if !self.reuse.is_empty() {
            let reuse: Vec<String> = self
                .reuse_means()
                .map(|(k, same, p)| format!("{k} {:.0}% (prefix {:.0}%)", 100.0 * same, 100.0 * p))
                .collect();
            out.push_str(&format!(
                "\n    blocks unchanged from the turn before (its shared prefix, of its bytes): {}",
                reuse.join(", ")
            ));
        }
        out
    }

    pub fn json(&self) -> serde_json::Value {
        let r = |x: Option<f64>| x.map(|x| (x * 10_000.0).round() / 10_000.0);
        let firsts: serde_json::Map<String, serde_json::Value> =
            self.first_difference.iter().map(|(k, n)| (k.clone(), json!(n))).collect();
        let blocks: serde_json::Map<String, serde_json::Value> =
            self.block_tokens.iter().map(|(k, t)| (k.clone(), json!(self.mean_of(*t).round()))).collect();
        json!({
            "mean": r(self.fractions.mean()), "p50": r(self.fractions.quantile(0.5)), "p10": r(self.fractions.quantile(0.1)),
            "pairs": self.fractions.count(),
            "shared_tokens_mean": self.mean_of(self.shared_tokens).round(), "pack_tokens_mean": self.mean_of(self.pack_tokens).round(),
            "first_difference": firsts, "located_by": if self.by_bytes { "bytes" } else { "tokens" },
            "block_tokens_mean": blocks,
            "block_reuse": (!self.reuse.is_empty()).then(|| self.reuse_means()
                .map(|(k, same, p)| (k.to_owned(), json!({"same": r(Some(same)), "prefix": r(Some(p))})))
                .collect::<serde_json::Map<_, _>>()),
        })
    }
}

/// Packs a worker's session keeps, newest turns: two, so that answers arriving one out of order
/// still pair.
const WINDOW: usize = 2;

type Pair = (Arc<Seen>, Arc<Seen>);
/// A worker's latest answered turns (turn number, pack), oldest first.
type Window = VecDeque<(u32, Arc<Seen>)>;
/// What the counting thread ends with: the figures and the CPU seconds it took.
type Counted = (PrefixStats, Option<f64>);

/// Measures the shared prefix of consecutive turns, worker by worker (each worker on a session of
/// its own), on a counting thread of its own.
pub(crate) struct PrefixMeter {
    /// Per worker: its window.
    slots: Vec<Mutex<Window>>,
    tx: Mutex<Option<tokio::sync::mpsc::Sender<Pair>>>,
    counter: Mutex<Option<std::thread::JoinHandle<Counted>>>,
}

impl PrefixMeter {
    pub fn start(workers: usize) -> anyhow::Result<PrefixMeter> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Pair>(256);
        let counter = std::thread::Builder::new().name("prefix-meter".into()).spawn(move || {
            let cpu = thread_cpu_seconds();
            let mut stats = PrefixStats::default();
            while let Some((older, newer)) = rx.blocking_recv() {
                stats.by_bytes = matches!(newer.layout, Layout::Bytes(_));
                stats.add(&measure(&older, &newer));
            }
            (stats, cpu.zip(thread_cpu_seconds()).map(|(a, b)| b - a))
        })?;
        Ok(PrefixMeter {
            slots: (0..workers).map(|_| Mutex::default()).collect(),
            tx: Mutex::new(Some(tx)),
            counter: Mutex::new(Some(counter)),
        })
    }

    /// Worker `w`'s answer to its turn `turn`: paired with its turns just before and after, when
    /// those were answered.
    pub async fn observe(&self, w: usize, turn: u32, pack: pb::Pack) {
        let seen = Arc::new(Seen::of(pack));
        let pairs = match self.slots.get(w).map(Mutex::lock) {
            Some(Ok(mut slot)) => window_insert(&mut slot, turn, seen),
            _ => return,
        };
        let tx = self.tx.lock().ok().and_then(|t| t.clone());
        if let Some(tx) = tx {
            for p in pairs {
                let _ = tx.send(p).await;
            }
        }
    }

    /// Once every answer has been observed: the figures, and the CPU seconds the counting took
    /// (None where /proc is not there).
    pub async fn finish(&self) -> anyhow::Result<Counted> {
        drop(self.tx.lock().map_err(|_| anyhow::anyhow!("prefix meter lock poisoned"))?.take());
        let counter = self.counter.lock().map_err(|_| anyhow::anyhow!("prefix meter lock poisoned"))?.take();
        let counter = counter.context("prefix meter already finished")?;
        tokio::task::spawn_blocking(move || counter.join())
            .await?
            .map_err(|_| anyhow::anyhow!("the prefix meter's thread panicked"))
    }
}

/// Puts `item` (turn `turn`) into a worker's window and returns the pairs it makes with the turns
/// just before and after it (older first). The window keeps the [`WINDOW`] newest turns.
fn window_insert<T: Clone>(window: &mut VecDeque<(u32, T)>, turn: u32, item: T) -> Vec<(T, T)> {
    let mut pairs = Vec::new();
    for (t, other) in window.iter() {
        if t.checked_add(1) == Some(turn) {
            pairs.push((other.clone(), item.clone()));
        } else if turn.checked_add(1) == Some(*t) {
            pairs.push((item.clone(), other.clone()));
        }
    }
    let at = window.iter().position(|(t, _)| *t > turn).unwrap_or(window.len());
    window.insert(at, (turn, item));
    while window.len() > WINDOW {
        window.pop_front();
    }
    pairs
}

/// CPU seconds the calling thread has used (`/proc/thread-self/stat`, USER_HZ ticks of 1/100 s).
fn thread_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

#[cfg(test)]
#[path = "pack_prefix_tests.rs"]
mod tests;
