//! Running a query cheaply: BM25 statistics remembered per searcher, and only the segments that
//! can match. Both leave every score and every hit exactly as `Searcher::search` gives them.
//!
//! A pack's query is a few dozen term clauses, each wrapped to a session or two. tantivy sets
//! every clause up on every segment (a term-dictionary lookup for its postings) and looks every
//! scored term up on every segment once more for its document frequency. At 1M events (about 15
//! segments) those lookups, not the scoring, were most of a search's time.
use std::collections::HashMap;
use std::sync::Mutex;

use tantivy::collector::Collector;
use tantivy::query::{Bm25StatisticsProvider, EnableScoring, Query};
use tantivy::schema::Field;
use tantivy::{Searcher, Term};

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

/// `collector` over the segments of `searcher` in which some term of `required` occurs (every
/// segment when `required` is None), scored with `stats`. A segment that holds none of them adds
/// nothing when every match must contain one of them, so the hits are those of a full search.
pub(crate) fn search_segments<C: Collector>(
    searcher: &Searcher,
    stats: &dyn Bm25StatisticsProvider,
    query: &dyn Query,
    collector: &C,
    required: Option<&[Term]>,
) -> tantivy::Result<C::Fruit> {
    let scoring = if collector.requires_scoring() {
        EnableScoring::enabled_from_statistics_provider(stats, searcher)
    } else {
        EnableScoring::disabled_from_searcher(searcher)
    };
    let weight = query.weight(scoring)?;
    collector.check_schema(searcher.schema())?;
    let mut fruits = Vec::new();
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
        let ord = u32::try_from(ord).map_err(|_| tantivy::TantivyError::InternalError("segment ordinal".into()))?;
        fruits.push(collector.collect_segment(weight.as_ref(), ord, segment)?);
    }
    collector.merge_fruits(fruits)
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
                    idx.add(docs).await.unwrap();
                }
                idx.commit().await.unwrap();
            }
            let searcher = idx.searcher();
            // Background merges may join segments, but some hold neither session: those are skipped.
            let skipped = searcher.segment_readers().iter().filter(|seg| {
                required.iter().all(|t| seg.inverted_index(t.field()).unwrap().doc_freq(t).unwrap() == 0)
            });
            assert!(skipped.count() > 0);
            for boost in [0.0, 0.5] {
                let query = idx.query(&terms, &filter, boost);
                let collector = TopDocs::with_limit(100).order_by_score();
                let full = searcher.search(&query, &collector).unwrap();
                for _ in 0..2 {
                    // The second time, the statistics come from the cache.
                    let narrowed =
                        search_segments(&searcher, &stats.of(&searcher), &query, &collector, Some(&required)).unwrap();
                    let bits =
                        |h: &[(f32, tantivy::DocAddress)]| h.iter().map(|(s, a)| (s.to_bits(), *a)).collect::<Vec<_>>();
                    assert_eq!(bits(&narrowed), bits(&full));
                }
                // Every word of the two sessions says a term: 3 per session, then 4 more.
                assert_eq!(full.len(), [6, 14][round]);
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
