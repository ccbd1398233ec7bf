//! Documents caught up but not committed yet ("fresh"), and how a query searches them.
//!
//! A query over a few sessions first catches those sessions up (read-your-writes). Committing
//! that catch-up made a segment per agent turn: at 64 turns/s the index's commits, segment files
//! and merges took about a third of the machine. Now a catch-up keeps its documents here, as a
//! small in-RAM segment per catch-up (a [`Part`]), and a query searches the parts beside the
//! committed index. A commit hands every part's documents to the writer and commits them: the
//! background catch-up's every `sync_interval_ms`, or one started as soon as [`FRESH_MAX_DOCS`] or
//! [`FRESH_MAX_PARTS`] wait or the oldest is [`FRESH_MAX_AGE`] old. Commits run beside the
//! catch-ups, not under their lock: a query never waits for one (it did, and the agent loop's
//! tail was its commits).
//!
//! Every part counts in the statistics, whatever sessions the query asks for: the committed
//! index's and all parts' are summed ([`Combined`]), the statistics of everything the replica has
//! caught up, as the index has them once committed. A query's scores do not depend on what was
//! committed yet, nor on the replica's commit timing.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tantivy::directory::RamDirectory;
use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::Field;
use tantivy::store::Compressor;
use tantivy::tokenizer::TokenizerManager;
use tantivy::{IndexBuilder, IndexSettings, ReloadPolicy, Searcher, TantivyDocument, Term};
use uuid::Uuid;

use crate::IndexError;
use crate::schema::{ANALYZER, analyzer, part_schema};

/// Fresh documents a namespace keeps before a commit starts (a catch-up of more commits itself).
pub(crate) const FRESH_MAX_DOCS: usize = 2_000;
/// Parts kept before a commit starts: each adds a term lookup per query term to every query's
/// statistics.
pub(crate) const FRESH_MAX_PARTS: usize = 64;
/// How long the oldest fresh document waits before a commit starts (the background catch-up
/// commits every `sync_interval_ms` anyway).
pub(crate) const FRESH_MAX_AGE: Duration = Duration::from_secs(2);
/// Past this many times the limits above, commits are failing or far behind: a catch-up then
/// commits itself (and reports the error), so fresh documents do not grow without bound.
const OVERDUE: usize = 4;
/// Memory for the term table of a part: one catch-up's documents, usually a turn's.
const SEGMENT_BUDGET: usize = 1 << 18;

/// Whether fresh parts can answer a query at this context weight: they index only the field
/// that scores at the default weight ([`crate::schema::part_schema`]).
pub(crate) fn parts_answer(context_weight: f32) -> bool {
    context_weight == crate::schema::BODY_CONTEXT_WEIGHT
}

/// One catch-up's uncommitted documents, as a one-segment in-RAM index, and the documents
/// themselves for the commit that takes them into the index.
#[derive(Clone)]
pub(crate) struct Part {
    /// The sessions it holds documents of, sorted.
    pub sessions: Vec<Uuid>,
    pub searcher: Searcher,
    pub docs: Arc<Vec<TantivyDocument>>,
    born: Instant,
}

impl Part {
    /// A part of `docs` (each with its session).
    pub fn of(docs: Vec<(Uuid, TantivyDocument)>) -> Result<Part, IndexError> {
        let mut sessions: Vec<Uuid> = docs.iter().map(|(s, _)| *s).collect();
        sessions.sort_unstable();
        sessions.dedup();
        let docs: Vec<TantivyDocument> = docs.into_iter().map(|(_, d)| d).collect();
        let searcher = segment(docs.iter().cloned())?;
        Ok(Part { sessions, searcher, docs: Arc::new(docs), born: Instant::now() })
    }

    /// Whether it holds documents of any of `sessions` (empty: of any session).
    pub fn holds_any(&self, sessions: &[Uuid]) -> bool {
        sessions.is_empty() || sessions.iter().any(|s| self.sessions.binary_search(s).is_ok())
    }
}

/// The uncommitted documents' parts, oldest first. Parts are added under the index's watermark
/// lock (by catch-ups, in their order) and taken away under its commit lock (by the commit that
/// took them into the index, the oldest first); read under their own lock together with the
/// searcher (see `NamespaceIndex::snapshot`).
#[derive(Default)]
pub(crate) struct Fresh {
    parts: Vec<Part>,
    docs: usize,
}

impl Fresh {
    pub fn add(&mut self, part: Part) {
        self.docs += part.docs.len();
        self.parts.push(part);
    }

    /// Forgets the `n` oldest parts (a commit has just taken them into the index).
    pub fn forget_oldest(&mut self, n: usize) {
        let gone: usize = self.parts.drain(..n.min(self.parts.len())).map(|p| p.docs.len()).sum();
        self.docs -= gone;
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    pub fn num_docs(&self) -> usize {
        self.docs
    }

    /// Whether a commit should start.
    pub fn due(&self) -> bool {
        self.docs > FRESH_MAX_DOCS
            || self.parts.len() >= FRESH_MAX_PARTS
            || self.parts.first().is_some_and(|p| p.born.elapsed() >= FRESH_MAX_AGE)
    }

    /// Whether a catch-up adding `more` documents should commit them itself: too many for a part,
    /// or the commits are not keeping up.
    pub fn overdue(&self, more: usize) -> bool {
        more > FRESH_MAX_DOCS
            || self.docs + more > OVERDUE * FRESH_MAX_DOCS
            || self.parts.len() >= OVERDUE * FRESH_MAX_PARTS
    }

    pub fn parts(&self) -> Vec<Part> {
        self.parts.clone()
    }
}

/// A one-segment in-RAM index of `docs`, with the namespace index's fields and analyzer (so its
/// field ids and terms are the same; see [`part_schema`] for what it indexes), and a searcher over it.
fn segment(docs: impl Iterator<Item = TantivyDocument>) -> Result<Searcher, IndexError> {
    let tokenizers = TokenizerManager::default();
    tokenizers.register(ANALYZER, analyzer());
    // A part is read in place and never merged (a commit adds its documents to the index's
    // writer): its doc store is not compressed, and not on a thread of its own (tantivy starts
    // one per store writer by default: a thread per agent turn).
    let settings = IndexSettings {
        docstore_compression: Compressor::None,
        docstore_compress_dedicated_thread: false,
        ..IndexSettings::default()
    };
    let mut writer = IndexBuilder::new()
        .schema(part_schema())
        .settings(settings)
        .tokenizers(tokenizers)
        .single_segment_index_writer(RamDirectory::create(), SEGMENT_BUDGET)?;
    for d in docs {
        writer.add_document(d)?;
    }
    let index = writer.finalize()?;
    Ok(index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?.searcher())
}

/// The committed index's statistics and every fresh part's, summed: the statistics of one index
/// holding them all. Remembered per term for the query (every part's weight asks again).
pub(crate) struct Combined<'a> {
    main: &'a dyn Bm25StatisticsProvider,
    parts: &'a [Part],
    doc_freq: Mutex<HashMap<Term, u64>>,
}

impl<'a> Combined<'a> {
    pub fn new(main: &'a dyn Bm25StatisticsProvider, parts: &'a [Part]) -> Self {
        Combined { main, parts, doc_freq: Mutex::new(HashMap::new()) }
    }
}

impl Bm25StatisticsProvider for Combined<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let mut n = self.main.total_num_tokens(field)?;
        for p in self.parts {
            n += p.searcher.total_num_tokens(field)?;
        }
        Ok(n)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        let mut n = self.main.total_num_docs()?;
        for p in self.parts {
            n += Bm25StatisticsProvider::total_num_docs(&p.searcher)?;
        }
        Ok(n)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        if let Some(n) = self.doc_freq.lock().ok().and_then(|m| m.get(term).copied()) {
            return Ok(n);
        }
        let mut n = self.main.doc_freq(term)?;
        for p in self.parts {
            n += p.searcher.doc_freq(term)?;
        }
        if let Ok(mut m) = self.doc_freq.lock() {
            m.insert(term.clone(), n);
        }
        Ok(n)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use memex_rank::ChunkOptions;

    use crate::SearchFilter;
    use crate::namespace_index::tests::event_in;
    use crate::namespace_index::{ChunkHit, NamespaceIndex};

    /// Fresh documents are found with the scores they get once committed, whether the query asks
    /// for the whole namespace or for one session (whose query still counts the other session's
    /// fresh documents in its statistics). The committed index does not see them until a commit.
    #[tokio::test]
    async fn fresh_documents_score_as_they_will_once_committed() {
        let base = std::env::temp_dir().join(format!("memex-fresh-{}", uuid::Uuid::now_v7().simple()));
        let texts = [
            (1, "the parser fails on nested brackets"),
            (1, "fixed the lexer, all tests pass"),
            (2, "parser error again in the nested case"),
            (1, "nested brackets parse now"),
            (2, "unrelated note about deployment"),
        ];
        let events: Vec<_> = texts.iter().enumerate().map(|(i, (s, t))| event_in(*s, i as u64 + 1, t)).collect();
        let docs = |range: std::ops::Range<usize>| {
            events[range]
                .iter()
                .flat_map(|e| crate::doc::event_docs(e, None, None, ChunkOptions::default(), ""))
                .collect()
        };
        let terms = memex_rank::query_terms("nested parser");
        let session_1 = SearchFilter { session_ids: vec![uuid::Uuid::from_u128(1)], ..SearchFilter::default() };
        let scored = |hits: Vec<ChunkHit>| -> Vec<(uuid::Uuid, f32, Option<usize>)> {
            hits.into_iter().map(|h| (h.event_id, h.score, h.fresh)).collect()
        };
        let strip = |v: &[(uuid::Uuid, f32, Option<usize>)]| v.iter().map(|(id, s, _)| (*id, *s)).collect::<Vec<_>>();

        // Everything committed.
        let (all, _) = NamespaceIndex::open(&base.join("all"), uuid::Uuid::from_u128(9)).unwrap();
        all.add(&all.writing().await, docs(0..5)).await.unwrap();
        all.commit(&all.writing().await).await.unwrap();
        let (s, none) = all.snapshot().unwrap();
        assert!(none.is_empty());
        let committed = scored(all.search(&terms, &SearchFilter::default(), 10, 0.5, &s, &[]).unwrap());
        let committed_1 = scored(all.search(&terms, &session_1, 10, 0.5, &s, &[]).unwrap());
        assert_eq!(committed.len(), 3, "{committed:?}");
        assert_eq!(committed_1.len(), 2, "{committed_1:?}");

        // The first two committed, the rest fresh in two catch-ups (two parts).
        let (part, _) = NamespaceIndex::open(&base.join("part"), uuid::Uuid::from_u128(9)).unwrap();
        part.add(&part.writing().await, docs(0..2)).await.unwrap();
        part.commit(&part.writing().await).await.unwrap();
        part.add_fresh(docs(2..3)).await.unwrap();
        part.add_fresh(docs(3..5)).await.unwrap();
        assert!(part.has_fresh().unwrap());
        let (s, parts) = part.snapshot().unwrap();
        assert_eq!(s.num_docs(), 2, "fresh documents are not committed");
        assert_eq!(parts.len(), 2);
        let found = scored(part.search(&terms, &SearchFilter::default(), 10, 0.5, &s, &parts).unwrap());
        assert_eq!(strip(&found), strip(&committed));
        assert_eq!(found.iter().filter(|h| h.2.is_some()).count(), 2, "two of the hits are fresh: {found:?}");
        // A query for session 1 finds session 1's, with the same scores: session 2's part counts
        // in the statistics though none of its documents can match.
        let found_1 = scored(part.search(&terms, &session_1, 10, 0.5, &s, &parts).unwrap());
        assert_eq!(strip(&found_1), strip(&committed_1));
        // At another context weight the parts cannot score (they do not index `text`): only
        // committed documents are searched.
        let other = part.search(&terms, &SearchFilter::default(), 10, 0.0, &s, &parts).unwrap();
        assert!(!other.is_empty() && other.iter().all(|h| h.fresh.is_none()), "{other:?}");

        // A commit takes them into the index and forgets them.
        part.commit(&part.writing().await).await.unwrap();
        assert!(!part.has_fresh().unwrap());
        let (s, none) = part.snapshot().unwrap();
        assert!(none.is_empty());
        assert_eq!(s.num_docs(), 5);
        let after = scored(part.search(&terms, &SearchFilter::default(), 10, 0.5, &s, &[]).unwrap());
        assert_eq!(after, committed);
        let _ = std::fs::remove_dir_all(base);
    }

    /// Commits run beside catch-ups that add parts, and a searcher never sees a document twice
    /// or misses one: a commit reloads the reader and forgets the parts it took at once, and the
    /// parts added while it ran stay fresh for the next. A query holding no lock but the
    /// watermarks' (as a catch-up does) is not held up by a commit's lock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commits_beside_catch_ups_show_every_document_exactly_once() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        const N: usize = 150;
        let base = std::env::temp_dir().join(format!("memex-fresh-{}", uuid::Uuid::now_v7().simple()));
        let (idx, _) = NamespaceIndex::open(&base, uuid::Uuid::from_u128(9)).unwrap();
        let idx = Arc::new(idx);
        // Parts added (after `add_fresh` returned) and begun (before it was called).
        let added = Arc::new(AtomicUsize::new(0));
        let begun = Arc::new(AtomicUsize::new(1));
        let done = Arc::new(AtomicBool::new(false));

        // A catch-up's documents go fresh while another task holds the writer.
        {
            let held = idx.writing().await;
            let e = event_in(1, 1, "first event while a commit is under way");
            let docs = crate::doc::event_docs(&e, None, None, ChunkOptions::default(), "");
            tokio::time::timeout(std::time::Duration::from_secs(10), idx.add_fresh(docs))
                .await
                .expect("adding fresh documents does not wait for the writer")
                .unwrap();
            added.store(1, Ordering::SeqCst);
            drop(held);
        }

        let adder = {
            let (idx, added, begun) = (idx.clone(), added.clone(), begun.clone());
            tokio::spawn(async move {
                for i in 2..=N {
                    let e = event_in((i % 3) as u128 + 1, i as u64, &format!("event number {i} of the run"));
                    let _marks = idx.state.lock().await;
                    begun.store(i, Ordering::SeqCst);
                    idx.add_fresh(crate::doc::event_docs(&e, None, None, ChunkOptions::default(), "")).await.unwrap();
                    added.store(i, Ordering::SeqCst);
                }
            })
        };
        let committer = {
            let (idx, done) = (idx.clone(), done.clone());
            tokio::spawn(async move {
                let mut commits = 0;
                while !done.load(Ordering::SeqCst) {
                    idx.commit(&idx.writing().await).await.unwrap();
                    commits += 1;
                    tokio::task::yield_now().await;
                }
                commits
            })
        };
        let mut checks = 0;
        while added.load(Ordering::SeqCst) < N {
            let before = added.load(Ordering::SeqCst);
            let (s, parts) = idx.snapshot().unwrap();
            let after = begun.load(Ordering::SeqCst);
            let seen = s.num_docs() as usize + parts.iter().map(|p| p.searcher.num_docs() as usize).sum::<usize>();
            assert!(before <= seen && seen <= after, "{before} <= {seen} <= {after}");
            checks += 1;
            tokio::task::yield_now().await;
        }
        adder.await.unwrap();
        done.store(true, Ordering::SeqCst);
        let commits = committer.await.unwrap();
        assert!(commits > 1 && checks > 1, "{commits} commits, {checks} checks");
        idx.commit(&idx.writing().await).await.unwrap();
        let (s, parts) = idx.snapshot().unwrap();
        assert!(parts.is_empty());
        assert_eq!(s.num_docs() as usize, N);
        let _ = std::fs::remove_dir_all(base);
    }
}
