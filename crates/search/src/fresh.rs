//! Documents caught up but not committed yet ("fresh"), and how a query searches them.
//!
//! A query over a few sessions first catches those sessions up (read-your-writes). Committing
//! that catch-up made a segment per agent turn: at 64 turns/s the index's commits, segment files
//! and merges took about a third of the machine. Now a catch-up keeps its documents here, as a
//! [`Part`] per catch-up, and a query searches the parts beside the committed index. A commit
//! hands every part's documents to the writer and commits them: the background catch-up's every
//! `sync_interval_ms`, or one started as soon as [`FRESH_MAX_DOCS`] or [`FRESH_MAX_PARTS`] wait or
//! the oldest is [`FRESH_MAX_AGE`] old. Commits run beside the catch-ups, not under their lock: a
//! query never waits for one (it did, and the agent loop's tail was its commits).
//!
//! A part is not a tantivy segment. It was one (an in-RAM single-segment index), and building it
//! cost about 1.5 ms of CPU whatever it held (a turn's one event, usually), under the namespace's
//! catch-up lock: tantivy's segment writer starts nine 1 MiB arenas, zeroed, and an FST registry
//! per indexed field. A part now keeps what the one query that searches parts asks (`body`
//! postings and lengths, each document's ids, tags and time) in plain maps, and scores with
//! tantivy's own BM25 weights ([`Bm25Weight`]) and length encoding, so a fresh document scores
//! as it will once committed (`fresh_documents_score_as_they_will_once_committed`).
//!
//! Every part counts in the statistics, whatever sessions the query asks for: the committed
//! index's and all parts' are summed ([`Combined`]), the statistics of everything the replica has
//! caught up, as the index has them once committed. A query's scores do not depend on what was
//! committed yet, nor on the replica's commit timing.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tantivy::fieldnorm::FieldNormReader;
use tantivy::query::{Bm25StatisticsProvider, Bm25Weight};
use tantivy::schema::{Field, Value};
use tantivy::tokenizer::{MAX_TOKEN_LEN, TokenStream};
use tantivy::{DocAddress, TantivyDocument, Term};
use uuid::Uuid;

use crate::namespace_index::{ChunkHit, distinct_terms, stable_score};
use crate::schema::{Fields, analyzer, tag_text};
use crate::{IndexError, SearchFilter};

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

/// Whether fresh parts can answer a query at this context weight: they index only the field
/// that scores at the default weight (`body`).
pub(crate) fn parts_answer(context_weight: f32) -> bool {
    context_weight == crate::schema::BODY_CONTEXT_WEIGHT
}

/// One catch-up's uncommitted documents: what a query reads of them, and the documents
/// themselves for the commit that takes them into the index (and for a hit's stored fields).
#[derive(Clone)]
pub(crate) struct Part {
    /// The sessions it holds documents of, sorted.
    pub sessions: Vec<Uuid>,
    pub docs: Arc<Vec<TantivyDocument>>,
    index: Arc<PartIndex>,
    born: Instant,
}

/// A part's documents as the default-weight query reads them.
struct PartIndex {
    body: Field,
    /// A `body` term → the documents holding it (ascending) and its frequency in each.
    postings: HashMap<String, Vec<(u32, u32)>>,
    /// Each document's `body` length in tokens, encoded as tantivy's field norms are.
    norms: Vec<u8>,
    /// `body` tokens of all documents: tantivy's `total_num_tokens` of the field.
    tokens: u64,
    docs: Vec<DocIds>,
}

/// What a hit reports and a filter reads of one document (tantivy's fast columns and `tags`).
struct DocIds {
    event: Option<Uuid>,
    session: Option<Uuid>,
    seq: u64,
    doc_key: u64,
    time: Option<i64>,
    tags: Vec<String>,
}

/// What the default-weight query asks of a part: the same as its tantivy form
/// (`NamespaceIndex::query`), which scores a document the sum of its terms' BM25 scores in
/// term order, plus 1.0 per filter clause.
pub(crate) struct PartQuery {
    /// Distinct `body` terms, sorted, with their weights under the query's statistics.
    terms: Vec<(String, Bm25Weight)>,
    /// Filter clauses: a document holds one of each clause's `tags` values.
    tags: Vec<Vec<String>>,
    /// Inclusive bounds on the time (µs since the epoch), when the filter has any.
    time: Option<(Option<i64>, Option<i64>)>,
}

impl PartQuery {
    /// What `NamespaceIndex::query` asks at the default context weight: the same terms with the
    /// weights tantivy's term queries get from `stats`, and the same filter clauses.
    pub fn new(
        fields: &Fields,
        terms: &[String],
        filter: &SearchFilter,
        stats: &dyn Bm25StatisticsProvider,
    ) -> Result<PartQuery, IndexError> {
        let mut weighted = Vec::new();
        for t in distinct_terms(terms) {
            let term = Term::from_field_text(fields.body, t);
            weighted.push((t.clone(), Bm25Weight::for_terms(stats, std::slice::from_ref(&term))?));
        }
        let tags = filter
            .tag_clauses()
            .into_iter()
            .map(|(tag, values)| values.iter().map(|v| tag_text(tag, v)).collect())
            .collect();
        let time = filter.time_micros();
        Ok(PartQuery { terms: weighted, tags, time })
    }

    fn admits(&self, d: &DocIds) -> bool {
        let tagged = self.tags.iter().all(|any| any.iter().any(|t| d.tags.contains(t)));
        let timed = match self.time {
            None => true,
            Some((from, to)) => d.time.is_some_and(|t| from.is_none_or(|f| t >= f) && to.is_none_or(|u| t <= u)),
        };
        tagged && timed
    }

    fn clauses(&self) -> usize {
        self.tags.len() + usize::from(self.time.is_some())
    }
}

impl Part {
    /// A part of `docs` (each with its session), read with the namespace index's `fields` and
    /// analyzer.
    pub fn of(docs: Vec<(Uuid, TantivyDocument)>, fields: &Fields) -> Part {
        let mut sessions: Vec<Uuid> = docs.iter().map(|(s, _)| *s).collect();
        sessions.sort_unstable();
        sessions.dedup();
        let docs: Vec<TantivyDocument> = docs.into_iter().map(|(_, d)| d).collect();
        let index = PartIndex::of(&docs, fields);
        Part { sessions, docs: Arc::new(docs), index: Arc::new(index), born: Instant::now() }
    }

    /// Whether it holds documents of any of `sessions` (empty: of any session).
    pub fn holds_any(&self, sessions: &[Uuid]) -> bool {
        sessions.is_empty() || sessions.iter().any(|s| self.sessions.binary_search(s).is_ok())
    }

    pub fn num_docs(&self) -> u64 {
        self.docs.len() as u64
    }

    /// Tokens of `field` in all documents (only `body` is indexed here).
    pub fn total_num_tokens(&self, field: Field) -> u64 {
        if field == self.index.body { self.index.tokens } else { 0 }
    }

    /// Documents holding `term` (a `body` term; no other field is indexed here).
    pub fn doc_freq(&self, term: &Term) -> u64 {
        if term.field() != self.index.body {
            return 0;
        }
        term.value().as_str().and_then(|t| self.index.postings.get(t)).map_or(0, |p| p.len() as u64)
    }

    /// The ids of document `doc`.
    fn ids(&self, doc: u32) -> Option<&DocIds> {
        self.index.docs.get(doc as usize)
    }

    /// The best documents for `q` (this part being the query's `i`-th): at least every one
    /// scoring as high as the `limit`-th, as `NamespaceIndex::top_hits` answers for the
    /// committed index.
    pub fn hits(&self, q: &PartQuery, limit: usize, i: usize) -> Vec<ChunkHit> {
        let mut found: Vec<(f32, u32, &DocIds)> =
            self.matches(q).into_iter().filter_map(|(s, doc)| Some((stable_score(s), doc, self.ids(doc)?))).collect();
        found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.2.doc_key.cmp(&b.2.doc_key)));
        if let Some(cut) = limit.checked_sub(1).and_then(|l| found.get(l)).map(|t| t.0) {
            found.retain(|t| t.0 >= cut);
        }
        found
            .into_iter()
            .filter_map(|(score, doc, ids)| {
                Some(ChunkHit {
                    addr: DocAddress::new(0, doc),
                    score,
                    doc_key: ids.doc_key,
                    event_id: ids.event?,
                    session: ids.session.unwrap_or_default(),
                    seq: ids.seq,
                    fresh: Some(i),
                })
            })
            .collect()
    }

    /// The documents `q` matches, with their scores (not rounded), in document order.
    fn matches(&self, q: &PartQuery) -> Vec<(f32, u32)> {
        let idx = &self.index;
        let mut scores: Vec<Option<f32>> = vec![None; idx.docs.len()];
        let admitted: Vec<bool> = idx.docs.iter().map(|d| q.admits(d)).collect();
        for (term, weight) in &q.terms {
            for &(doc, tf) in idx.postings.get(term.as_str()).map_or(&[][..], Vec::as_slice) {
                let d = doc as usize;
                if admitted.get(d) != Some(&true) {
                    continue;
                }
                let norm = idx.norms.get(d).copied().unwrap_or(0);
                if let Some(s) = scores.get_mut(d) {
                    // Summed from 0 in term order, as tantivy's union of term scorers sums.
                    *s = Some(s.unwrap_or(0.0) + weight.score(norm, tf));
                }
            }
        }
        let bonus = q.clauses();
        scores
            .into_iter()
            .enumerate()
            .filter_map(|(d, s)| {
                let mut s = s?;
                for _ in 0..bonus {
                    s += 1.0;
                }
                Some((s, d as u32))
            })
            .collect()
    }
}

impl PartIndex {
    fn of(docs: &[TantivyDocument], f: &Fields) -> PartIndex {
        let mut analyzer = analyzer();
        let mut postings: HashMap<String, Vec<(u32, u32)>> = HashMap::new();
        let mut norms = Vec::with_capacity(docs.len());
        let mut tokens = 0u64;
        let mut ids = Vec::with_capacity(docs.len());
        let mut freqs: HashMap<String, u32> = HashMap::new();
        for (d, doc) in docs.iter().enumerate() {
            // As tantivy indexes a text field: every value's tokens, one length for all of them,
            // tokens over its maximum length dropped (the analyzer drops them far earlier).
            let mut n = 0u32;
            for v in doc.get_all(f.body) {
                let Some(text) = v.as_str() else { continue };
                let mut stream = analyzer.token_stream(text);
                while stream.advance() {
                    let t = &stream.token().text;
                    if t.len() > MAX_TOKEN_LEN {
                        continue;
                    }
                    n += 1;
                    match freqs.get_mut(t.as_str()) {
                        Some(c) => *c += 1,
                        None => {
                            freqs.insert(t.clone(), 1);
                        }
                    }
                }
            }
            for (t, tf) in freqs.drain() {
                postings.entry(t).or_default().push((d as u32, tf));
            }
            norms.push(FieldNormReader::fieldnorm_to_id(n));
            tokens += u64::from(n);
            let u64_of = |field| doc.get_first(field).and_then(|v| v.as_u64());
            let uuid_of = |hi, lo| Some(Uuid::from_u64_pair(u64_of(hi)?, u64_of(lo)?));
            ids.push(DocIds {
                event: uuid_of(f.event_hi, f.event_lo),
                session: uuid_of(f.session_hi, f.session_lo),
                seq: u64_of(f.seq).unwrap_or(0),
                doc_key: u64_of(f.doc_key).unwrap_or(0),
                time: doc.get_first(f.time).and_then(|v| v.as_i64()),
                tags: doc.get_all(f.tags).filter_map(|v| v.as_str().map(str::to_owned)).collect(),
            });
        }
        PartIndex { body: f.body, postings, norms, tokens, docs: ids }
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
            n += p.total_num_tokens(field);
        }
        Ok(n)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        let mut n = self.main.total_num_docs()?;
        for p in self.parts {
            n += p.num_docs();
        }
        Ok(n)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        if let Some(n) = self.doc_freq.lock().ok().and_then(|m| m.get(term).copied()) {
            return Ok(n);
        }
        let mut n = self.main.doc_freq(term)?;
        for p in self.parts {
            n += p.doc_freq(term);
        }
        if let Ok(mut m) = self.doc_freq.lock() {
            m.insert(term.clone(), n);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
