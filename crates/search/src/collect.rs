//! Running a query cheaply: BM25 statistics remembered per searcher, only the segments that can
//! match, and one top-n across segments (each segment's block-WAND starts from the bar the ones
//! before it set, on a few threads for a large index). All three leave every score exactly as
//! `Searcher::search` gives it; of documents of equal score, the earlier address comes first.
//!
//! A pack's query is a few dozen term clauses, each wrapped to a session or two. tantivy sets
//! every clause up on every segment (a term-dictionary lookup for its postings) and looks every
//! scored term up on every segment once more for its document frequency. At 1M events (about 15
//! segments) those lookups, not the scoring, were most of a search's time.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tantivy::query::{Bm25StatisticsProvider, EnableScoring, Query, Weight};
use tantivy::schema::Field;
use tantivy::{DocAddress, DocId, Score, Searcher, SegmentReader, Term};

/// Above this many remembered terms the statistics start afresh (queries with terms of their own,
/// such as identifiers, would otherwise grow it without bound).
const MAX_TERMS: usize = 1 << 16;

/// Document frequencies and field lengths of one searcher generation. A reload (a commit, a merge)
/// makes a new generation, and the first query of it starts the cache afresh.
#[derive(Default)]
pub(crate) struct StatsCache {
    inner: Mutex<Generation>,
}

#[derive(Default)]
struct Generation {
    id: Option<u64>,
    doc_freq: HashMap<Term, u64>,
    tokens: HashMap<Field, u64>,
}

impl StatsCache {
    /// The statistics of `searcher`, computed from it and remembered.
    pub fn of<'a>(&'a self, searcher: &'a Searcher) -> CachedStats<'a> {
        CachedStats { searcher, cache: self }
    }

    fn remembered<T>(&self, searcher: &Searcher, f: impl FnOnce(&mut Generation) -> Option<T>) -> Option<T> {
        let id = searcher.generation().generation_id();
        // A poisoned lock only loses the memo: the caller computes from the searcher.
        let mut g = self.inner.lock().ok()?;
        if g.id != Some(id) {
            *g = Generation { id: Some(id), ..Generation::default() };
        }
        f(&mut g)
    }

    fn remember(&self, searcher: &Searcher, f: impl FnOnce(&mut Generation)) {
        let id = searcher.generation().generation_id();
        if let Ok(mut g) = self.inner.lock() {
            // Another generation took over meanwhile: what was computed belongs to an older one.
            if g.id == Some(id) {
                if g.doc_freq.len() >= MAX_TERMS {
                    g.doc_freq.clear();
                }
                f(&mut g);
            }
        }
    }
}

/// A searcher's BM25 statistics, read through a [`StatsCache`].
pub(crate) struct CachedStats<'a> {
    searcher: &'a Searcher,
    cache: &'a StatsCache,
}

impl Bm25StatisticsProvider for CachedStats<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        if let Some(n) = self.cache.remembered(self.searcher, |g| g.tokens.get(&field).copied()) {
            return Ok(n);
        }
        let n = self.searcher.total_num_tokens(field)?;
        self.cache.remember(self.searcher, |g| {
            g.tokens.insert(field, n);
        });
        Ok(n)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        // A sum over the segment readers' counts: nothing to look up.
        self.searcher.total_num_docs()
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        if let Some(n) = self.cache.remembered(self.searcher, |g| g.doc_freq.get(term).copied()) {
            return Ok(n);
        }
        let n = self.searcher.doc_freq(term)?;
        self.cache.remember(self.searcher, |g| {
            g.doc_freq.insert(term.clone(), n);
        });
        Ok(n)
    }
}

/// The `n` best-scoring documents of `query` over the segments of `searcher` in which some term of
/// `required` occurs (every segment when `required` is None), scored with `stats`: the first `n`
/// by score, then address, best first. A segment that holds none of those terms adds nothing when
/// every match must contain one of them, so the hits are those of a full search.
///
/// One bar serves all segments: each segment's block-WAND starts from the n-th best score found
/// so far, where tantivy's `TopDocs` starts every segment from nothing and scores its own n best
/// first. The largest segments go first, to raise the bar early, and an unnarrowed query over 200k
/// documents or more is searched by up to 4 threads sharing the bar. At 1M events (a dozen segments) the
/// per-segment restarts were most of an unfiltered query's time.
///
/// With `split`, a segment is searched by what its documents' times say (see [`TimeSplit`]).
pub(crate) fn top_scored(
    searcher: &Searcher,
    stats: &dyn Bm25StatisticsProvider,
    query: &dyn Query,
    n: usize,
    required: Option<&[Term]>,
    split: Option<&TimeSplit>,
) -> tantivy::Result<Vec<(Score, DocAddress)>> {
    top_scored_in(searcher, stats, (query, split), n, required, PARALLEL_MIN_DOCS)
}

/// A query whose only filter is a time range, and the same query without it. A segment whose
/// documents' times all lie in the range is searched with the bare text query (a union of term
/// queries: block-WAND prunes it, where the filtered query scores every document holding a query
/// term), its scores raised by the `bonus` the range clause adds; a segment with no time in
/// the range is skipped; the others take the filtered query. The hits are the filtered query's.
pub(crate) struct TimeSplit<'a> {
    pub text: &'a dyn Query,
    /// The i64 fast field of the range.
    pub field: &'a str,
    pub from: Option<i64>,
    pub to: Option<i64>,
    /// What the range clause adds to every score of the filtered query.
    pub bonus: Score,
}

/// How one segment is searched under a [`TimeSplit`].
#[derive(Clone, Copy, PartialEq, Debug)]
enum Span {
    /// Some documents in the range, some not (or times unknown): the filtered query.
    Mixed,
    /// Every document in the range: the text query.
    Inside,
    /// None in the range: nothing to search.
    Outside,
}

impl TimeSplit<'_> {
    fn span(&self, segment: &SegmentReader) -> Span {
        // A column that some documents lack says nothing of those: they take the filtered query.
        let Ok(col) = segment.fast_fields().i64(self.field) else { return Span::Mixed };
        if col.get_cardinality() != tantivy::columnar::Cardinality::Full || segment.max_doc() == 0 {
            return Span::Mixed;
        }
        // Bounds over every document, deleted ones too: wider than the live ones', never narrower.
        let (lo, hi) = (col.min_value(), col.max_value());
        let (from, to) = (self.from.unwrap_or(i64::MIN), self.to.unwrap_or(i64::MAX));
        if hi < from || lo > to {
            Span::Outside
        } else if from <= lo && hi <= to {
            Span::Inside
        } else {
            Span::Mixed
        }
    }
}

fn top_scored_in(
    searcher: &Searcher,
    stats: &dyn Bm25StatisticsProvider,
    (query, split): (&dyn Query, Option<&TimeSplit>),
    n: usize,
    required: Option<&[Term]>,
    parallel_min_docs: u64,
) -> tantivy::Result<Vec<(Score, DocAddress)>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let scoring = EnableScoring::enabled_from_statistics_provider(stats, searcher);
    let weight = query.weight(scoring)?;
    let text = match split {
        Some(s) => Some((s.text.weight(scoring)?, s.bonus)),
        None => None,
    };
    let mut segments: Vec<Seg> = Vec::new();
    for (ord, segment) in searcher.segment_readers().iter().enumerate() {
        if let Some(terms) = required {
            let mut holds = false;
            for t in terms {
                if segment.inverted_index(t.field())?.doc_freq(t)? > 0 {
                    holds = true;
                    break;
                }
            }
            if !holds {
                continue;
            }
        }
        let span = split.map_or(Span::Mixed, |s| s.span(segment));
        if span == Span::Outside {
            continue;
        }
        let ord = u32::try_from(ord).map_err(|_| tantivy::TantivyError::InternalError("segment ordinal".into()))?;
        let plain = match (span, &text) {
            (Span::Inside, Some((w, bonus))) => Some((w.as_ref(), *bonus)),
            _ => None,
        };
        segments.push(Seg { ord, reader: segment, plain });
    }
    segments.sort_by_key(|s| (Reverse(s.reader.num_docs()), s.ord));
    // A large index is searched by a few threads, each over about as many documents.
    let docs: u64 = segments.iter().map(|s| u64::from(s.reader.num_docs())).sum();
    // A query narrowed to a few sessions (a pack's) has little to score: it stays on one thread.
    let threads = if docs >= parallel_min_docs && required.is_none() {
        std::thread::available_parallelism().map_or(1, usize::from).clamp(1, MAX_THREADS).min(segments.len())
    } else {
        1
    };
    let mut groups: Vec<(u64, Vec<Seg>)> = (0..threads.max(1)).map(|_| (0, Vec::new())).collect();
    for seg in segments {
        if let Some(g) = groups.iter_mut().min_by_key(|g| g.0) {
            g.0 += u64::from(seg.reader.num_docs());
            g.1.push(seg);
        }
    }
    let bar = Bar::default();
    let run = |group: &[Seg]| best_of(weight.as_ref(), group, n, &bar);
    let heaps: Vec<Heap> = match groups.split_first() {
        None => Vec::new(),
        Some((first, [])) => vec![run(&first.1)?],
        Some((first, rest)) => std::thread::scope(|scope| {
            let others: Vec<_> = rest.iter().map(|g| scope.spawn(|| run(&g.1))).collect();
            let mut heaps = vec![run(&first.1)?];
            for h in others {
                heaps.push(
                    h.join().map_err(|_| tantivy::TantivyError::InternalError("a search thread panicked".into()))??,
                );
            }
            Ok::<_, tantivy::TantivyError>(heaps)
        })?,
    };
    let mut out: Vec<(Score, DocAddress)> = heaps.into_iter().flatten().map(|Reverse(s)| (s.score, s.addr)).collect();
    out.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    out.truncate(n);
    Ok(out)
}

/// Indexes with fewer documents are searched on the caller's thread alone.
const PARALLEL_MIN_DOCS: u64 = 200_000;
const MAX_THREADS: usize = 4;

type Heap = BinaryHeap<Reverse<Scored>>;

/// The best n-th score any thread has seen (bits of a positive f32; 0: none yet). Every thread
/// has n documents at least this good, so no document below it is among the n best.
#[derive(Default)]
struct Bar(AtomicU32);

impl Bar {
    fn raise(&self, score: Score) {
        // Positive floats order as their bits do.
        if score > 0.0 {
            self.0.fetch_max(score.to_bits(), Ordering::Relaxed);
        }
    }

    /// What a document must beat: the higher of `own` (this thread's n-th best, if it has n)
    /// and the shared bar, less one step, so that a document scoring exactly the bar still gets
    /// in (of equal scores the earlier address is kept, whichever thread finds it first).
    fn threshold(&self, own: Option<Score>) -> Score {
        let shared = self.0.load(Ordering::Relaxed);
        let shared = (shared != 0).then(|| f32::from_bits(shared));
        match own.into_iter().chain(shared).reduce(f32::max) {
            Some(b) => b.next_down(),
            None => Score::MIN,
        }
    }
}

/// A segment to search, and the text weight with its bonus when a [`TimeSplit`] lets it skip the
/// range.
struct Seg<'a> {
    ord: u32,
    reader: &'a SegmentReader,
    plain: Option<(&'a dyn Weight, Score)>,
}

/// The n best documents of `segments` (in their order) under the shared bar.
fn best_of(weight: &dyn Weight, segments: &[Seg], n: usize, bar: &Bar) -> tantivy::Result<Heap> {
    // A min-heap of the best n so far: its top is the n-th best.
    let mut best: Heap = BinaryHeap::with_capacity(n + 1);
    let own = |best: &Heap| best.peek().filter(|_| best.len() >= n).map(|Reverse(s)| s.score);
    for seg in segments {
        let (weight, bonus) = seg.plain.unwrap_or((weight, 0.0));
        let ord = seg.ord;
        let alive = seg.reader.alive_bitset();
        let start = below(bar.threshold(own(&best)), bonus);
        let mut push = |doc: DocId, score: Score| {
            if !alive.is_some_and(|a| a.is_deleted(doc)) {
                let score = score + bonus;
                best.push(Reverse(Scored { score, addr: DocAddress::new(ord, doc) }));
                if best.len() > n {
                    best.pop();
                }
                if let Some(s) = own(&best) {
                    bar.raise(s);
                }
            }
            below(bar.threshold(own(&best)), bonus)
        };
        weight.for_each_pruning(start, seg.reader, &mut push)?;
    }
    Ok(best)
}

/// A threshold on scores that `bonus` is still to be added to: lowered by a little more than the
/// bonus, so that rounding in the sum never prunes a document the bar would keep (one kept
/// too many only passes through the heap).
fn below(threshold: Score, bonus: Score) -> Score {
    if bonus == 0.0 { threshold } else { threshold - bonus - (threshold.abs() + bonus) * 1e-6 }
}

/// A scored document, ordered by score, then the later address first (so of equal scores the
/// heap drops the later document).
#[derive(PartialEq)]
struct Scored {
    score: Score,
    addr: DocAddress,
}

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.addr.cmp(&self.addr))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use memex_rank::ChunkOptions;
    use tantivy::collector::TopDocs;
    use uuid::Uuid;

    use super::*;
    use crate::SearchFilter;
    use crate::namespace_index::NamespaceIndex;
    use crate::namespace_index::tests::event_in as event;

    /// Skipping segments and remembering statistics change nothing: the same addresses and the
    /// same scores, bit for bit, as a plain search, before and after the index grows.
    #[tokio::test]
    async fn a_narrowed_search_matches_a_full_one_across_generations() {
        let dir = std::env::temp_dir().join(format!("memex-collect-{}", Uuid::now_v7().simple()));
        let (idx, _) = NamespaceIndex::open(&dir, Uuid::from_u128(1)).unwrap();
        let words = ["alpha common", "beta common common", "gamma delta", "common delta alpha", "delta"];
        let stats = StatsCache::default();
        let terms: Vec<String> = ["common", "delta", "alpha", "absent"].iter().map(|t| t.to_string()).collect();
        let sessions = [Uuid::from_u128(11), Uuid::from_u128(13)];
        let filter = SearchFilter { session_ids: sessions.to_vec(), ..SearchFilter::default() };
        let required: Vec<Term> =
            sessions.iter().map(|s| idx.fields.tag(crate::schema::Tag::Session, &s.to_string())).collect();
        let mut seq = 0;
        for round in 0..2 {
            // One segment per session: most segments hold neither session of the filter.
            for session in 10..16u128 {
                for w in &words[..3 + round] {
                    seq += 1;
                    let e = event(session, seq, w);
                    let docs = crate::doc::event_docs(&e, None, None, ChunkOptions::default(), "");
                    idx.add(&idx.writing().await, docs).await.unwrap();
                }
                idx.commit(&idx.writing().await).await.unwrap();
            }
            let searcher = idx.searcher();
            // Background merges may join segments, but some hold neither session: those are skipped.
            let skipped = searcher.segment_readers().iter().filter(|seg| {
                required.iter().all(|t| seg.inverted_index(t.field()).unwrap().doc_freq(t).unwrap() == 0)
            });
            assert!(skipped.count() > 0);
            for boost in [0.0, 0.5] {
                let query = idx.query(&terms, &filter, boost);
                let mut full = searcher.search(&query, &TopDocs::with_limit(100).order_by_score()).unwrap();
                full.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                let bits = |h: &[(f32, DocAddress)]| h.iter().map(|(s, a)| (s.to_bits(), *a)).collect::<Vec<_>>();
                for _ in 0..2 {
                    // The second time, the statistics come from the cache.
                    let narrowed =
                        top_scored(&searcher, &stats.of(&searcher), &query, 100, Some(&required), None).unwrap();
                    assert_eq!(bits(&narrowed), bits(&full));
                }
                // Every word of the two sessions says a term: 3 per session, then 4 more.
                assert_eq!(full.len(), [6, 14][round]);
                // Fewer than match: the first n of all matches by score, then address.
                let mut all = searcher.search(&query, &TopDocs::with_limit(1000).order_by_score()).unwrap();
                all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                for n in [1, 3, 5, 100] {
                    let want = bits(&all[..n.min(all.len())]);
                    let top = top_scored(&searcher, &stats.of(&searcher), &query, n, None, None).unwrap();
                    assert_eq!(bits(&top), want, "n = {n}");
                    // The same on several threads sharing the bar.
                    let top = top_scored_in(&searcher, &stats.of(&searcher), (&query, None), n, None, 0).unwrap();
                    assert_eq!(bits(&top), want, "n = {n}, threads");
                }
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A time range searched segment by segment (segments wholly inside it without the range,
    /// segments outside it skipped) finds the filtered query's hits with its scores, bit for bit.
    #[tokio::test]
    async fn a_time_split_search_matches_the_filtered_one() {
        let dir = std::env::temp_dir().join(format!("memex-collect-time-{}", Uuid::now_v7().simple()));
        let (idx, _) = NamespaceIndex::open(&dir, Uuid::from_u128(1)).unwrap();
        let t0 = chrono::Utc::now();
        let words = ["alpha common", "beta common common", "gamma delta", "common delta alpha", "delta common"];
        // Ten segments, one per minute of event time, five documents each.
        for minute in 0..10i64 {
            for (i, w) in words.iter().enumerate() {
                let mut e = event(1, (minute * 10 + i as i64) as u64 + 1, w);
                e.event_time = t0 + chrono::Duration::minutes(minute) + chrono::Duration::seconds(i as i64);
                let docs = crate::doc::event_docs(&e, None, None, ChunkOptions::default(), "");
                idx.add(&idx.writing().await, docs).await.unwrap();
            }
            idx.commit(&idx.writing().await).await.unwrap();
        }
        let searcher = idx.searcher();
        let stats = StatsCache::default();
        let terms: Vec<String> = ["common", "delta", "alpha"].iter().map(|t| t.to_string()).collect();
        let at = |m: i64, s: i64| Some(t0 + chrono::Duration::minutes(m) + chrono::Duration::seconds(s));
        let bits = |h: &[(f32, DocAddress)]| h.iter().map(|(s, a)| (s.to_bits(), *a)).collect::<Vec<_>>();
        // Wholly inside, partly inside, outside, open-ended, and a range inside one segment.
        let mut ranges = vec![
            (at(2, 0), at(5, 30)),
            (at(3, 2), at(7, 3)),
            (at(20, 0), None),
            (None, at(4, 59)),
            (at(6, 1), at(6, 3)),
        ];
        // And each segment's own span (background merges decide how many there are).
        for seg in searcher.segment_readers() {
            let col = seg.fast_fields().i64(crate::schema::TIME_FIELD).unwrap();
            let t = |us: i64| chrono::DateTime::from_timestamp_micros(us);
            ranges.push((t(col.min_value()), t(col.max_value())));
        }
        let mut spans = std::collections::BTreeSet::new();
        for (from, to) in ranges {
            let filter = SearchFilter { time: crate::TimeRange { from, to }, ..SearchFilter::default() };
            let (lo, hi) = filter.time_micros().unwrap();
            for boost in [0.0, 0.5] {
                let query = idx.query(&terms, &filter, boost);
                let text = idx.query(&terms, &SearchFilter::default(), boost);
                let split = TimeSplit { text: &text, field: crate::schema::TIME_FIELD, from: lo, to: hi, bonus: 1.0 };
                for seg in searcher.segment_readers() {
                    spans.insert(format!("{:?}", split.span(seg)));
                }
                let mut all = searcher.search(&query, &TopDocs::with_limit(1000).order_by_score()).unwrap();
                all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                for n in [1, 3, 7, 100] {
                    let want = bits(&all[..n.min(all.len())]);
                    let top = top_scored(&searcher, &stats.of(&searcher), &query, n, None, Some(&split)).unwrap();
                    assert_eq!(bits(&top), want, "n = {n}, {from:?}..{to:?}");
                    let top =
                        top_scored_in(&searcher, &stats.of(&searcher), (&query, Some(&split)), n, None, 0).unwrap();
                    assert_eq!(bits(&top), want, "n = {n}, {from:?}..{to:?}, threads");
                }
            }
        }
        // Every way of searching a segment was taken.
        assert_eq!(spans.into_iter().collect::<Vec<_>>(), ["Inside", "Mixed", "Outside"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
