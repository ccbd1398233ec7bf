//! Documents handed to the writer but not committed yet ("fresh"), and how a query searches them.
//!
//! A query over a few sessions first catches those sessions up (read-your-writes). Committing
//! that catch-up made a segment per agent turn: at 64 turns/s the index's commits, segment files
//! and merges took about a third of the machine. Now a query's catch-up hands its documents to the
//! writer without committing and keeps a copy here; queries search the copies in a small in-RAM
//! segment (built once per change of the copies, shared by the queries until the next), and the
//! background catch-up (or a catch-up that finds [`FRESH_MAX_DOCS`] waiting, or the oldest older
//! than [`FRESH_MAX_AGE`]) commits them all at once.
//!
//! The segment holds every fresh document, whatever sessions the query asks for (its filter
//! narrows the hits), and both it and the committed index are scored with their statistics summed
//! ([`Combined`]): the statistics of everything the replica has caught up, as the index has them
//! once committed. A query's scores do not depend on what was committed yet.
use std::time::{Duration, Instant};

use tantivy::directory::RamDirectory;
use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::Field;
use tantivy::tokenizer::TokenizerManager;
use tantivy::{IndexBuilder, ReloadPolicy, Searcher, TantivyDocument, Term};

use crate::IndexError;
use crate::schema::{ANALYZER, analyzer, schema};

/// Fresh documents a namespace keeps at most before a catch-up commits them: each change of them
/// costs the next query a segment of them all.
pub(crate) const FRESH_MAX_DOCS: usize = 500;
/// How long the oldest fresh document waits at most before a catch-up commits it (the background
/// catch-up commits every `sync_interval_ms` anyway).
pub(crate) const FRESH_MAX_AGE: Duration = Duration::from_secs(2);
/// Memory for the term table of a query's fresh segment: a few turns' documents.
const SEGMENT_BUDGET: usize = 1 << 20;

/// The uncommitted documents. Changed only under the index's watermark lock (as the writer is),
/// read under its own lock together with the searcher (see `NamespaceIndex::snapshot`).
#[derive(Default)]
pub(crate) struct Fresh {
    docs: Vec<TantivyDocument>,
    since: Option<Instant>,
    /// Bumped by every change: names the segment built from `docs`.
    version: u64,
    segment: Option<(u64, Searcher)>,
}

impl Fresh {
    pub fn add(&mut self, docs: Vec<TantivyDocument>) {
        if docs.is_empty() {
            return;
        }
        self.docs.extend(docs);
        self.since.get_or_insert_with(Instant::now);
        self.version += 1;
    }

    pub fn clear(&mut self) {
        let version = self.version + 1;
        *self = Fresh { version, ..Fresh::default() };
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Whether adding `more` documents should commit instead.
    pub fn due(&self, more: usize) -> bool {
        self.docs.len() + more > FRESH_MAX_DOCS || self.since.is_some_and(|t| t.elapsed() >= FRESH_MAX_AGE)
    }

    /// The segment of the documents as they are, if one was built; else the version and copies
    /// to build it from (outside the lock), then [`Fresh::keep`].
    pub fn segment(&self) -> Result<Option<Searcher>, (u64, Vec<TantivyDocument>)> {
        match &self.segment {
            _ if self.docs.is_empty() => Ok(None),
            Some((v, s)) if *v == self.version => Ok(Some(s.clone())),
            _ => Err((self.version, self.docs.clone())),
        }
    }

    /// Keeps a segment built from `version`'s documents, unless they have changed since.
    pub fn keep(&mut self, version: u64, segment: &Searcher) {
        if version == self.version {
            self.segment = Some((version, segment.clone()));
        }
    }
}

/// A one-segment in-RAM index of `docs`, with the namespace index's schema and analyzer (so its
/// field ids and terms are the same), and a searcher over it.
pub(crate) fn segment(docs: Vec<TantivyDocument>) -> Result<Searcher, IndexError> {
    let tokenizers = TokenizerManager::default();
    tokenizers.register(ANALYZER, analyzer());
    let mut writer = IndexBuilder::new()
        .schema(schema().0)
        .tokenizers(tokenizers)
        .single_segment_index_writer(RamDirectory::create(), SEGMENT_BUDGET)?;
    for d in docs {
        writer.add_document(d)?;
    }
    let index = writer.finalize()?;
    Ok(index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?.searcher())
}

/// The committed index's statistics and the fresh segment's, summed: the statistics of one index
/// holding both.
pub(crate) struct Combined<'a> {
    pub main: &'a dyn Bm25StatisticsProvider,
    pub fresh: &'a Searcher,
}

impl Bm25StatisticsProvider for Combined<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        Ok(self.main.total_num_tokens(field)? + self.fresh.total_num_tokens(field)?)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.main.total_num_docs()? + self.fresh.total_num_docs()?)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        Ok(self.main.doc_freq(term)? + self.fresh.doc_freq(term)?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use memex_rank::ChunkOptions;

    use crate::SearchFilter;
    use crate::namespace_index::NamespaceIndex;
    use crate::namespace_index::tests::event_in;

    /// Fresh documents are found with the scores they get once committed, whether the query asks
    /// for their session or for the whole namespace, and another session's stay out of a query
    /// for one session. The committed index does not see them until a commit.
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
        let scored = |hits: Vec<crate::namespace_index::ChunkHit>| -> Vec<(uuid::Uuid, f32, bool)> {
            hits.into_iter().map(|h| (h.event_id, h.score, h.fresh)).collect()
        };

        // Everything committed.
        let (all, _) = NamespaceIndex::open(&base.join("all"), uuid::Uuid::from_u128(9)).unwrap();
        all.add(docs(0..5)).await.unwrap();
        all.commit().await.unwrap();
        let (s, none) = all.snapshot().unwrap();
        assert!(none.is_none());
        let committed = scored(all.search(&terms, &SearchFilter::default(), 10, 0.5, &s, None).unwrap());
        let committed_1 = scored(all.search(&terms, &session_1, 10, 0.5, &s, None).unwrap());
        assert_eq!(committed.len(), 3, "{committed:?}");
        assert_eq!(committed_1.len(), 2, "{committed_1:?}");

        // The first two committed, the rest fresh.
        let (part, _) = NamespaceIndex::open(&base.join("part"), uuid::Uuid::from_u128(9)).unwrap();
        part.add(docs(0..2)).await.unwrap();
        part.commit().await.unwrap();
        part.add_fresh(docs(2..5)).await.unwrap();
        assert!(part.has_fresh().unwrap());
        let (s, segment) = part.snapshot().unwrap();
        assert_eq!(s.num_docs(), 2, "fresh documents are not committed");
        let segment = segment.expect("a fresh segment");
        let found = scored(part.search(&terms, &SearchFilter::default(), 10, 0.5, &s, Some(&segment)).unwrap());
        let strip = |v: &[(uuid::Uuid, f32, bool)]| v.iter().map(|(id, score, _)| (*id, *score)).collect::<Vec<_>>();
        assert_eq!(strip(&found), strip(&committed));
        assert_eq!(found.iter().filter(|h| h.2).count(), 2, "two of the hits are fresh: {found:?}");

        // A query for session 1 finds session 1's, with the same scores, and the segment is shared
        // until the fresh documents change.
        let (s, again) = part.snapshot().unwrap();
        assert!(
            again.is_some_and(|a| a.segment_readers()[0].segment_id() == segment.segment_readers()[0].segment_id())
        );
        let found_1 = scored(part.search(&terms, &session_1, 10, 0.5, &s, Some(&segment)).unwrap());
        assert_eq!(strip(&found_1), strip(&committed_1));

        // A commit takes them into the index and forgets them.
        part.commit().await.unwrap();
        assert!(!part.has_fresh().unwrap());
        let (s, none) = part.snapshot().unwrap();
        assert!(none.is_none());
        assert_eq!(s.num_docs(), 5);
        let after = scored(part.search(&terms, &SearchFilter::default(), 10, 0.5, &s, None).unwrap());
        assert_eq!(after, committed);
        let _ = std::fs::remove_dir_all(base);
    }
}
