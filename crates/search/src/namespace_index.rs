//! One namespace's tantivy index on local disk: open (or create, or wipe and recreate), add
//! documents, commit, search, and the per-session watermarks read back from the index itself.
use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tantivy::columnar::Column;
use tantivy::query::{
    Bm25StatisticsProvider, BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, RangeQuery, TermQuery,
    TermSetQuery,
};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::{DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};
use uuid::Uuid;

use crate::collect::{StatsCache, TimeSplit, top_scored};
use crate::doc::DocSpec;
use crate::fresh::{Combined, Fresh, Part, PartQuery};
use crate::schema::{
    ANALYZER, BODY_CONTEXT_WEIGHT, Fields, SCHEMA_VERSION, TIME_FIELD, Tag, analyzer, schema, tag_text,
};
use memex_pointer::LineRange;

use crate::{IndexError, SearchFilter};

/// The file beside each index that names its schema version. Its name is on disk in every
/// replica's index directory: it must not follow renames of the crate (a missing file means
/// "another version", and the index is rebuilt from Postgres).
const VERSION_FILE: &str = "memex-index.json";

/// Memory the writer may buffer before flushing a segment (tantivy's minimum is 15 MB per thread).
const WRITER_BUDGET: usize = 96 * 1024 * 1024;

/// Indexing threads of a serving index's writer. With two, each commit's documents (added one by
/// one) were split between the threads into two segments, twice the segments to merge; and
/// tantivy starts its indexing threads anew at every commit (with a doc-store compressor thread
/// per segment, 120 thread starts a minute under a soak). A serving commit holds about a second's
/// events: one thread writes them as one segment. (Fewer thread starts did not change the soak's
/// RSS slope: docs/performance.md, "Soak: one indexing thread".)
const SERVING_THREADS: usize = 1;

pub(crate) struct NamespaceIndex {
    pub ns: Uuid,
    reader: IndexReader,
    pub fields: Fields,
    writer: Arc<Mutex<IndexWriter>>,
    /// Serialises catch-ups; holds the watermarks. Held across the database reads of a catch-up so
    /// a concurrent query waits for it rather than answering from a stale index.
    pub state: tokio::sync::Mutex<Watermarks>,
    /// Sessions that queries are waiting to see caught up: whoever holds `state` next catches
    /// them all up in one commit (a commit per query made a live agent loop index-bound).
    pub pending: Mutex<std::collections::HashSet<Uuid>>,
    /// Each live segment's id columns: opening them decodes column headers, a cost per segment
    /// per query otherwise. Segments are immutable; entries of merged-away ones are dropped.
    columns: Mutex<HashMap<tantivy::index::SegmentId, Arc<IdColumns>>>,
    /// BM25 statistics of the current searcher generation.
    stats: StatsCache,
    /// Documents caught up but not committed yet, searched beside the committed index.
    fresh: Mutex<Fresh>,
    /// Serialises the writer's users: a commit, and a catch-up that hands documents to the writer
    /// itself (see [`Writing`]). Apart from the watermarks, so a catch-up that keeps its documents
    /// fresh never waits for a commit.
    writing: tokio::sync::Mutex<()>,
    /// A commit of the fresh documents is under way or queued ([`NamespaceIndex::start_commit`]).
    commit_started: std::sync::atomic::AtomicBool,
    /// The last namespace-wide catch-up check found nothing new: the next namespace-wide query
    /// runs BM25 beside its check instead of after it (see `SearchIndex::ranking`).
    pub quiet: std::sync::atomic::AtomicBool,
}

/// The right to use the index's writer: documents handed to it go into the next commit, and
/// nothing else commits meanwhile (a commit of someone else's half-added documents would show
/// events that the watermarks do not record yet). Taken after the watermarks, if both are held.
pub(crate) struct Writing<'a>(#[allow(dead_code)] tokio::sync::MutexGuard<'a, ()>);

/// Indexed seq per session (every event up to it has its documents committed, in the writer
/// about to be, or fresh), and their sum.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Watermarks {
    pub by_session: HashMap<Uuid, u64>,
    pub total: u64,
}

impl Watermarks {
    pub fn of(&self, session: &Uuid) -> u64 {
        self.by_session.get(session).copied().unwrap_or(0)
    }

    /// Sum over `sessions` (all when None).
    pub fn sum(&self, sessions: Option<&[Uuid]>) -> u64 {
        match sessions {
            None => self.total,
            Some(ids) => {
                let mut seen = std::collections::HashSet::new();
                ids.iter().filter(|id| seen.insert(**id)).map(|id| self.of(id)).sum()
            }
        }
    }

    pub fn set(&mut self, session: Uuid, seq: u64) {
        let old = self.by_session.insert(session, seq).unwrap_or(0);
        self.total = self.total - old + seq;
    }
}

/// A chunk document that matched, with what ranking needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChunkHit {
    pub addr: DocAddress,
    pub score: f32,
    pub doc_key: u64,
    pub event_id: Uuid,
    /// The event's session and seq (fast fields), for neighbour smoothing.
    pub session: Uuid,
    pub seq: u64,
    /// Found in this fresh part of the query's snapshot rather than the committed index.
    pub fresh: Option<usize>,
}

/// The stored fields a hit reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredChunk {
    pub source: String,
    pub chunk: u32,
    pub lines: Option<LineRange>,
    pub chunk_first_line: u32,
    pub chunk_last_line: u32,
    pub text: String,
}

/// A stored range: 0 stands for none.
fn stored_lines(first: u64, last: u64) -> Option<LineRange> {
    let (first, last) = (u32::try_from(first).ok()?, u32::try_from(last).ok()?);
    if first == 0 { None } else { LineRange::new(first, last) }
}

/// Whether every file of the index's live segments matches its checksum. Damaged postings or
/// term dictionaries otherwise surface as panics inside tantivy (or as wrong answers) when a
/// query reads them; read once per open, this costs a pass over the index (about a second per
/// GB) and turns damage into a rebuild from Postgres.
fn intact(index: &Index, dir: &Path) -> bool {
    match index.validate_checksum() {
        Ok(damaged) if damaged.is_empty() => true,
        Ok(damaged) => {
            tracing::warn!(dir = %dir.display(), files = ?damaged, "text index files fail their checksums");
            false
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot check the text index's checksums");
            false
        }
    }
}

impl NamespaceIndex {
    /// Opens the index in `dir`, or creates it empty. A directory of another schema version, one
    /// tantivy cannot open, or one whose files fail their checksums is deleted first: the
    /// catch-up then rebuilds it from Postgres.
    /// Returns whether the index was (re)created.
    pub fn open(dir: &Path, ns: Uuid) -> Result<(NamespaceIndex, bool), IndexError> {
        let version_ok = std::fs::read_to_string(dir.join(VERSION_FILE))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .is_some_and(|v| v["schema_version"] == SCHEMA_VERSION && v["namespace"] == ns.to_string());
        let existing = if version_ok { Index::open_in_dir(dir).ok() } else { None };
        let (index, created) = match existing {
            Some(index) if index.schema() == schema().0 && intact(&index, dir) => (index, false),
            other => {
                if other.is_some() || dir.exists() {
                    tracing::warn!(dir = %dir.display(), "text index is missing, of another version or unreadable: rebuilding it from Postgres");
                }
                (Self::create(dir, ns)?, true)
            }
        };
        Self::from_index(index, ns, SERVING_THREADS).map(|i| (i, created))
    }

    /// A fresh empty index in `dir` (whatever was there is deleted), opened to be filled from
    /// Postgres: its writer has an indexing thread per core (two at most), as a rebuild is
    /// CPU-bound in tantivy. It is dropped once built, and the server opens it again to serve.
    pub fn create_for_rebuild(dir: &Path, ns: Uuid) -> Result<NamespaceIndex, IndexError> {
        let index = Self::create(dir, ns)?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
        Self::from_index(index, ns, threads)
    }

    /// A fresh empty index in `dir` (whatever was there is deleted).
    pub fn create(dir: &Path, ns: Uuid) -> Result<Index, IndexError> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| IndexError::io(dir, e))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| IndexError::io(dir, e))?;
        let index = Index::create_in_dir(dir, schema().0)?;
        let version = serde_json::json!({"schema_version": SCHEMA_VERSION, "namespace": ns.to_string()});
        let path = dir.join(VERSION_FILE);
        std::fs::write(&path, version.to_string()).map_err(|e| IndexError::io(&path, e))?;
        Ok(index)
    }

    fn from_index(mut index: Index, ns: Uuid, threads: usize) -> Result<NamespaceIndex, IndexError> {
        index.tokenizers().register(ANALYZER, analyzer());
        // The doc store is compressed in the thread that writes the segment, not in one started
        // for it (see SERVING_THREADS).
        index.settings_mut().docstore_compress_dedicated_thread = false;
        let (_, fields) = schema();
        let writer: IndexWriter = index.writer_with_num_threads(threads, WRITER_BUDGET)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        let ni = NamespaceIndex {
            ns,
            reader,
            fields,
            writer: Arc::new(Mutex::new(writer)),
            state: tokio::sync::Mutex::new(Watermarks::default()),
            pending: Mutex::new(std::collections::HashSet::new()),
            columns: Mutex::new(HashMap::new()),
            stats: StatsCache::default(),
            fresh: Mutex::new(Fresh::default()),
            writing: tokio::sync::Mutex::new(()),
            commit_started: std::sync::atomic::AtomicBool::new(false),
            quiet: std::sync::atomic::AtomicBool::new(false),
        };
        let marks = ni.scan_watermarks()?;
        *ni.state.try_lock().map_err(|e| IndexError::Task(e.to_string()))? = marks;
        Ok(ni)
    }

    /// Reads every document's (session, seq) from the fast fields: the highest seq per session is
    /// that session's watermark, because a catch-up commits all documents of the events it indexed
    /// at once and every event has at least one document.
    fn scan_watermarks(&self) -> Result<Watermarks, IndexError> {
        let searcher = self.reader.searcher();
        let mut marks = Watermarks::default();
        for seg in searcher.segment_readers() {
            let c = IdColumns::open(seg)?;
            let mut max_by_session: HashMap<Uuid, u64> = HashMap::new();
            for doc in 0..seg.max_doc() {
                if let (Some(session), Some(seq)) = (c.session(doc), c.seq.first(doc)) {
                    let m = max_by_session.entry(session).or_default();
                    *m = (*m).max(seq);
                }
            }
            for (id, seq) in max_by_session {
                if seq > marks.of(&id) {
                    marks.set(id, seq);
                }
            }
        }
        Ok(marks)
    }

    /// Documents caught up: committed and fresh.
    pub fn num_docs(&self) -> u64 {
        let fresh = self.fresh.lock().map_or(0, |f| f.num_docs());
        self.reader.searcher().num_docs() + fresh as u64
    }

    /// Takes the writer (see [`Writing`]).
    pub async fn writing(&self) -> Writing<'_> {
        Writing(self.writing.lock().await)
    }

    /// Hands documents to the writer (on the blocking pool); they become visible at `commit`.
    pub async fn add(&self, _: &Writing<'_>, docs: Vec<DocSpec>) -> Result<(), IndexError> {
        if docs.is_empty() {
            return Ok(());
        }
        let (writer, fields, ns) = (self.writer.clone(), self.fields, self.ns.to_string());
        tokio::task::spawn_blocking(move || -> Result<(), IndexError> {
            let w = writer.lock().map_err(|e| IndexError::Task(e.to_string()))?;
            for d in docs {
                w.add_document(to_document(&fields, &ns, d))?;
            }
            Ok(())
        })
        .await
        .map_err(|e| IndexError::Task(e.to_string()))?
    }

    /// Keeps documents fresh: searched from now on, committed by the next commit. Called with the
    /// watermark lock held, so parts are added in the order of the catch-ups.
    pub async fn add_fresh(&self, docs: Vec<DocSpec>) -> Result<(), IndexError> {
        if docs.is_empty() {
            return Ok(());
        }
        let (fields, ns) = (self.fields, self.ns.to_string());
        let part = tokio::task::spawn_blocking(move || {
            Part::of(docs.into_iter().map(|d| (d.session, to_document(&fields, &ns, d))).collect(), &fields)
        })
        .await
        .map_err(|e| IndexError::Task(e.to_string()))?;
        self.fresh_lock()?.add(part);
        Ok(())
    }

    fn fresh_lock(&self) -> Result<std::sync::MutexGuard<'_, Fresh>, IndexError> {
        self.fresh.lock().map_err(|_| IndexError::Task("fresh documents lock poisoned".into()))
    }

    /// Whether a commit of the fresh documents should start.
    pub fn fresh_due(&self) -> Result<bool, IndexError> {
        Ok(self.fresh_lock()?.due())
    }

    /// Whether a catch-up of `more` documents should commit rather than keep them fresh.
    pub fn fresh_overdue(&self, more: usize) -> Result<bool, IndexError> {
        Ok(self.fresh_lock()?.overdue(more))
    }

    pub fn has_fresh(&self) -> Result<bool, IndexError> {
        Ok(!self.fresh_lock()?.is_empty())
    }

    /// The committed index as of now and the fresh parts, together: a commit reloads the reader
    /// and forgets the parts it took under the same lock, so a document is in exactly one of the two.
    pub fn snapshot(&self) -> Result<(Searcher, Vec<Part>), IndexError> {
        let f = self.fresh_lock()?;
        Ok((self.reader.searcher(), f.parts()))
    }

    /// Commits what the writer holds and every fresh part as of now (their documents are handed
    /// to the writer first), and makes it visible to searches: the reader reloads and those parts
    /// are forgotten at once. Parts added meanwhile stay fresh. On failure the writer drops
    /// everything it held (the parts stay fresh for the next commit).
    pub async fn commit(&self, w: &Writing<'_>) -> Result<(), IndexError> {
        self.commit_deleting(w, Vec::new()).await
    }

    /// [`NamespaceIndex::commit`], deleting the documents holding any of `deletes` (applied after
    /// the fresh parts' documents are added, so they are deleted too).
    async fn commit_deleting(&self, w: &Writing<'_>, deletes: Vec<Term>) -> Result<(), IndexError> {
        let parts = self.fresh_lock()?.parts();
        let writer = self.writer.clone();
        let taken = parts.len();
        let committed = tokio::task::spawn_blocking(move || -> Result<(), IndexError> {
            let mut w = writer.lock().map_err(|e| IndexError::Task(e.to_string()))?;
            for p in &parts {
                for d in p.docs.iter() {
                    w.add_document(d.clone())?;
                }
            }
            for t in deletes {
                w.delete_term(t);
            }
            w.commit()?;
            Ok(())
        })
        .await
        .map_err(|e| IndexError::Task(e.to_string()))
        .and_then(|r| r);
        if let Err(e) = committed {
            self.rollback(w).await;
            return Err(e);
        }
        let mut f = self.fresh_lock()?;
        self.reader.reload()?;
        f.forget_oldest(taken);
        Ok(())
    }

    /// Starts a commit of the fresh documents in the background, unless one is under way; `done`
    /// gets its outcome. A query's catch-up that finds enough waiting starts one and goes on.
    pub fn start_commit(self: &Arc<Self>, done: impl FnOnce(Result<(), IndexError>) + Send + 'static) {
        use std::sync::atomic::Ordering;
        if self.commit_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let idx = self.clone();
        tokio::spawn(async move {
            let w = idx.writing().await;
            // Cleared before the commit reads the parts: a part added from here on is either
            // taken by this commit or can start the next.
            idx.commit_started.store(false, Ordering::Release);
            let r = idx.commit(&w).await;
            drop(w);
            done(r);
        });
    }

    /// Deletes every document of `sessions` and commits, and marks them unindexed, so the next
    /// catch-up indexes them again from Postgres (after an erasure, as tombstones). Holds the
    /// watermarks meanwhile, so no query or catch-up sees them half gone. Fresh documents are
    /// handed to the writer before the deletes, which take them too.
    pub async fn forget_sessions(&self, sessions: &[Uuid]) -> Result<(), IndexError> {
        let mut marks = self.state.lock().await;
        let w = self.writing().await;
        let terms: Vec<Term> = sessions
            .iter()
            .map(|s| Term::from_field_text(self.fields.tags, &tag_text(Tag::Session, &s.to_string())))
            .collect();
        self.commit_deleting(&w, terms).await?;
        for s in sessions {
            marks.set(*s, 0);
        }
        Ok(())
    }

    /// Drops everything handed to the writer since the last commit (after a failed catch-up or
    /// commit, so the index never holds part of what the watermarks do not record). Fresh parts
    /// are not in the writer and stay.
    pub async fn rollback(&self, _: &Writing<'_>) {
        let writer = self.writer.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(mut w) = writer.lock() {
                let _ = w.rollback();
            }
        })
        .await;
    }

    /// The best chunks for `terms` (analysed query terms) under `filter`, best first, at least
    /// every chunk scoring as high as the `limit`-th (so ties at the cut are all present), ordered
    /// by score, then `doc_key`: the same order in any index holding the same documents.
    /// `fresh`: the fresh parts of the query's snapshot: those holding the filter's sessions are
    /// searched too, and all count in the statistics ([`Combined`]).
    pub fn search(
        &self,
        terms: &[String],
        filter: &SearchFilter,
        limit: usize,
        context_boost: f32,
        searcher: &Searcher,
        fresh: &[Part],
    ) -> Result<Vec<ChunkHit>, IndexError> {
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        // Parts index only what the default weight scores on: another weight's caller committed
        // them first (`SearchIndex::ranking`), and one added since is not searched.
        let fresh = if crate::fresh::parts_answer(context_boost) { fresh } else { &[] };
        let query = self.query(terms, filter, context_boost);
        // Every match is in one of a few sessions: segments without them are skipped.
        let sessions = self.few_sessions(filter);
        let cached = self.stats.of(searcher);
        let combined = Combined::new(&cached, fresh);
        let stats: &dyn Bm25StatisticsProvider = if fresh.is_empty() { &cached } else { &combined };
        // A time range alone: segments wholly inside it are searched without it (`TimeSplit`).
        let text = match filter.time_micros() {
            Some(range) if filter.tag_clauses().is_empty() => {
                let all = SearchFilter { time: crate::TimeRange::default(), ..filter.clone() };
                Some((self.query(terms, &all, context_boost), range))
            }
            _ => None,
        };
        let split = text.as_ref().map(|(text, (from, to))| TimeSplit {
            text,
            field: TIME_FIELD,
            from: *from,
            to: *to,
            bonus: TIME_CLAUSE_SCORE,
        });
        let mut hits = self.top_hits(searcher, stats, &query, limit, sessions.as_deref(), split.as_ref())?;
        if !fresh.is_empty() {
            let q = PartQuery::new(&self.fields, terms, filter, stats)?;
            for (i, part) in fresh.iter().enumerate() {
                if part.holds_any(&filter.session_ids) {
                    hits.extend(part.hits(&q, limit, i));
                }
            }
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.doc_key.cmp(&b.doc_key)));
        Ok(hits)
    }

    /// The best chunks of one searcher: every chunk scoring (rounded) as high as its `limit`-th,
    /// and no other, so that the answer does not depend on how the index is cut into segments.
    fn top_hits(
        &self,
        searcher: &Searcher,
        stats: &dyn Bm25StatisticsProvider,
        query: &BooleanQuery,
        limit: usize,
        sessions: Option<&[Term]>,
        split: Option<&TimeSplit>,
    ) -> Result<Vec<ChunkHit>, IndexError> {
        // A little past the limit, so that the last one asked for usually scores below the
        // limit-th and one search is enough. Asked for exactly `limit`, the last was always the
        // limit-th itself, and every search ran a second time for four times as many.
        let mut n = limit + (limit / 8).max(8);
        let mut top = loop {
            let top = top_scored(searcher, stats, query, n, sessions, split)?;
            let cut = top.get(limit - 1).map(|t| stable_score(t.0));
            let complete = top.len() < n || n >= 1 << 20 || top.last().map(|t| stable_score(t.0)) < cut;
            if complete {
                break top;
            }
            n *= 4;
        };
        if let Some(cut) = top.get(limit - 1).map(|t| stable_score(t.0)) {
            top.retain(|t| stable_score(t.0) >= cut);
        }
        let mut hits = Vec::with_capacity(top.len());
        let mut cols: HashMap<u32, Arc<IdColumns>> = HashMap::new();
        for (score, addr) in top {
            let c = match cols.entry(addr.segment_ord) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => v.insert(self.id_columns(searcher, addr.segment_ord)?),
            };
            let Some(event_id) = c.event(addr.doc_id) else { continue };
            let doc_key = c.doc_key.first(addr.doc_id).unwrap_or(0);
            let seq = c.seq.first(addr.doc_id).unwrap_or(0);
            let session = c.session(addr.doc_id).unwrap_or_default();
            hits.push(ChunkHit { addr, score: stable_score(score), doc_key, event_id, session, seq, fresh: None });
        }
        Ok(hits)
    }

    pub(crate) fn query(&self, terms: &[String], filter: &SearchFilter, context_boost: f32) -> BooleanQuery {
        let f = &self.fields;
        let distinct = distinct_terms(terms);
        // A few sessions' documents are far fewer than a common term's: each term is then
        // intersected with them (scoring 0, so scores are unchanged), and the union scores only
        // the sessions' documents instead of every document of the term near them.
        let sessions = self.few_sessions(filter);
        let within = |q: Box<dyn Query>| -> Box<dyn Query> {
            let Some(sessions) = &sessions else { return q };
            let only = any_of(sessions, 0.0);
            Box::new(BooleanQuery::new(vec![(Occur::Must, q), (Occur::Must, only)]))
        };
        let mut text: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        // At the weight `body` is indexed for, one field scores own text and context together.
        let own = if context_boost == BODY_CONTEXT_WEIGHT { f.body } else { f.text };
        for t in distinct {
            let q = TermQuery::new(Term::from_field_text(own, t), IndexRecordOption::WithFreqs);
            text.push((Occur::Should, within(Box::new(q))));
            if context_boost > 0.0 && own == f.text {
                let q = TermQuery::new(Term::from_field_text(f.context, t), IndexRecordOption::WithFreqs);
                text.push((Occur::Should, within(Box::new(BoostQuery::new(Box::new(q), context_boost)))));
            }
        }
        let text = BooleanQuery::new(text);
        let tags = filter.tag_clauses();
        let time = filter.time_micros();
        if tags.is_empty() && time.is_none() {
            // A bare union of term queries: tantivy then prunes with block-WAND instead of scoring
            // every document that contains a query term (≈10x faster on common terms at 1M chunks).
            return text;
        }
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, Box::new(text))];
        for (tag, values) in tags {
            let terms: Vec<Term> = values.iter().map(|v| f.tag(tag, v)).collect();
            // A TermSetQuery builds an FST of its terms for every segment it runs on: more than a
            // whole pack's query costs when the set is a session or two. A union of term queries
            // answers small sets without building anything; constant 1.0, the score a TermSetQuery
            // adds, so ranks and scores are the same either way.
            let q: Box<dyn Query> =
                if terms.len() <= SMALL_TERM_SET { any_of(&terms, 1.0) } else { Box::new(TermSetQuery::new(terms)) };
            clauses.push((Occur::Must, q));
        }
        if let Some((from, to)) = time {
            let bound = |t: Option<i64>| match t {
                Some(t) => Bound::Included(Term::from_field_i64(f.time, t)),
                None => Bound::Unbounded,
            };
            // Wrapped so that it scores 1.0 like the other filters in every segment: where a
            // segment's times all lie in the range, tantivy answers a bare range with a match-all
            // scorer, which a boolean query drops from its intersection, score and all, and a
            // document's score then depended on the segment it sat in.
            let range = RangeQuery::new(bound(from), bound(to));
            clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(Box::new(range), TIME_CLAUSE_SCORE))));
        }
        BooleanQuery::new(clauses)
    }

    /// The session terms of `filter` when it names a few sessions (`SearchFilter::FEW_SESSIONS`):
    /// then every term is intersected with them, and only segments holding them are searched.
    fn few_sessions(&self, filter: &SearchFilter) -> Option<Vec<Term>> {
        filter
            .names_few_sessions()
            .then(|| filter.session_ids.iter().map(|s| self.fields.tag(Tag::Session, &s.to_string())).collect())
    }

    /// The id columns of a segment of `searcher`, from the cache when it has them.
    fn id_columns(&self, searcher: &Searcher, segment_ord: u32) -> Result<Arc<IdColumns>, IndexError> {
        let seg = searcher.segment_reader(segment_ord);
        let poisoned = || IndexError::Task("id column cache lock poisoned".into());
        if let Some(c) = self.columns.lock().map_err(|_| poisoned())?.get(&seg.segment_id()) {
            return Ok(c.clone());
        }
        let c = Arc::new(IdColumns::open(seg)?);
        let mut cache = self.columns.lock().map_err(|_| poisoned())?;
        if cache.len() >= 2 * searcher.segment_readers().len().max(8) {
            // Merges leave entries of segments no searcher reads any more: keep the live ones.
            let live: std::collections::HashSet<tantivy::index::SegmentId> =
                searcher.segment_readers().iter().map(|s| s.segment_id()).collect();
            cache.retain(|id, _| live.contains(id));
        }
        cache.insert(seg.segment_id(), c.clone());
        Ok(c)
    }

    /// A point-in-time view of the index. A `DocAddress` is only meaningful in the searcher that
    /// produced it (a reload renumbers segments), so one query uses one searcher throughout.
    #[cfg(test)]
    pub fn searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    /// The stored fields of a chunk matched in `searcher`.
    pub fn stored(&self, searcher: &Searcher, addr: DocAddress) -> Result<StoredChunk, IndexError> {
        let doc: TantivyDocument = searcher.doc(addr)?;
        Ok(self.stored_of(&doc))
    }

    /// The stored fields of the document of fresh part `part` that `addr` names.
    pub fn stored_fresh(&self, part: &Part, addr: DocAddress) -> Result<StoredChunk, IndexError> {
        let doc =
            part.docs.get(addr.doc_id as usize).ok_or_else(|| IndexError::Task("a fresh hit past its part".into()))?;
        Ok(self.stored_of(doc))
    }

    fn stored_of(&self, doc: &TantivyDocument) -> StoredChunk {
        let f = &self.fields;
        let text = |field| doc.get_first(field).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let num = |field| doc.get_first(field).and_then(|v| v.as_u64()).unwrap_or(0);
        StoredChunk {
            source: text(f.source),
            chunk: num(f.chunk) as u32,
            lines: stored_lines(num(f.first_line), num(f.last_line)),
            chunk_first_line: num(f.chunk_first_line) as u32,
            chunk_last_line: num(f.chunk_last_line) as u32,
            text: text(f.text),
        }
    }
}

/// A BM25 score rounded to 14 significant bits. Tantivy sums a document's term scores in an order
/// that depends on the segment layout (block-WAND), and an index rebuilt from the same events
/// (whose indexing threads split documents into segments differently) can differ from the live
/// one in the last bits: seen as one hit ranked 5th in one index and 12th in the other. Rounded,
/// the scores agree (unless a last-bit difference straddles a rounding step, 2^-9 as likely) and
/// ties fall to `doc_key`. Scores are positive and finite: the rounding carries into the exponent.
pub(crate) fn stable_score(s: f32) -> f32 {
    f32::from_bits((s.to_bits() + 0x100) & !0x1FF)
}

/// What a query's time range adds to each score: 1.0, as every filter clause does (a fresh part
/// scores alike).
const TIME_CLAUSE_SCORE: f32 = 1.0;

/// Each of `terms` once, sorted: the order a query's clauses (and so its scores' sums) take.
pub(crate) fn distinct_terms(terms: &[String]) -> Vec<&String> {
    let mut distinct: Vec<&String> = terms.iter().collect();
    distinct.sort();
    distinct.dedup();
    distinct
}

/// Documents with any of `terms`, every one scoring `score`.
fn any_of(terms: &[Term], score: f32) -> Box<dyn Query> {
    let any = terms
        .iter()
        .map(|t| (Occur::Should, Box::new(TermQuery::new(t.clone(), IndexRecordOption::Basic)) as Box<dyn Query>));
    Box::new(ConstScoreQuery::new(Box::new(BooleanQuery::new(any.collect())), score))
}

/// Filter sets up to this size are a union of term queries, larger ones a `TermSetQuery`.
const SMALL_TERM_SET: usize = 16;

/// A segment's fast-field columns that identify a document's event.
struct IdColumns {
    event_hi: Column<u64>,
    event_lo: Column<u64>,
    session_hi: Column<u64>,
    session_lo: Column<u64>,
    seq: Column<u64>,
    doc_key: Column<u64>,
}

impl IdColumns {
    fn open(seg: &tantivy::SegmentReader) -> Result<IdColumns, IndexError> {
        let ff = seg.fast_fields();
        Ok(IdColumns {
            event_hi: ff.u64("event_hi")?,
            event_lo: ff.u64("event_lo")?,
            session_hi: ff.u64("session_hi")?,
            session_lo: ff.u64("session_lo")?,
            seq: ff.u64("seq")?,
            doc_key: ff.u64("doc_key")?,
        })
    }

    fn event(&self, doc: u32) -> Option<Uuid> {
        Some(Uuid::from_u64_pair(self.event_hi.first(doc)?, self.event_lo.first(doc)?))
    }

    fn session(&self, doc: u32) -> Option<Uuid> {
        Some(Uuid::from_u64_pair(self.session_hi.first(doc)?, self.session_lo.first(doc)?))
    }
}

fn to_document(f: &Fields, ns: &str, d: DocSpec) -> TantivyDocument {
    let mut doc = TantivyDocument::default();
    doc.add_text(f.event_id, d.event_id.to_string());
    doc.add_text(f.namespace, ns);
    doc.add_text(f.tags, tag_text(Tag::Session, &d.session.to_string()));
    let (event_hi, event_lo) = d.event_id.as_u64_pair();
    let (session_hi, session_lo) = d.session.as_u64_pair();
    doc.add_u64(f.event_hi, event_hi);
    doc.add_u64(f.event_lo, event_lo);
    doc.add_u64(f.session_hi, session_hi);
    doc.add_u64(f.session_lo, session_lo);
    doc.add_u64(f.seq, d.seq);
    doc.add_text(f.source, d.source);
    doc.add_u64(f.chunk, u64::from(d.chunk));
    if let Some(t) = &d.task {
        doc.add_text(f.tags, tag_text(Tag::Task, t));
    }
    doc.add_text(f.tags, tag_text(Tag::Agent, &d.agent));
    doc.add_text(f.tags, tag_text(Tag::Kind, &d.kind));
    doc.add_text(f.tags, tag_text(Tag::Role, d.role));
    if let Some(t) = &d.tool {
        doc.add_text(f.tool, t);
    }
    doc.add_i64(f.time, d.time_micros);
    // Stored as two numbers, 0 for none (full-view lines are 1-based).
    let (first, last) = d.lines.map_or((0, 0), |r| (u64::from(r.first), u64::from(r.last)));
    doc.add_u64(f.first_line, first);
    doc.add_u64(f.last_line, last);
    doc.add_u64(f.chunk_first_line, u64::from(d.chunk_first_line));
    doc.add_u64(f.chunk_last_line, u64::from(d.chunk_last_line));
    doc.add_u64(f.doc_key, d.doc_key);
    doc.add_text(f.text, &d.text);
    // Own text twice, context once: see `BODY_CONTEXT_WEIGHT`.
    doc.add_text(f.body, &d.text);
    doc.add_text(f.body, &d.text);
    if !d.context.is_empty() {
        doc.add_text(f.context, &d.context);
        doc.add_text(f.body, &d.context);
    }
    doc
}

/// `index.dir/<namespace id>`.
pub(crate) fn namespace_dir(root: &Path, ns: Uuid) -> PathBuf {
    root.join(ns.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use chrono::Utc;
    use memex_rank::ChunkOptions;
    use memex_store::Event;

    use super::*;

    /// An index written by an earlier release (its version file is `memex-index.json`) opens as
    /// it is: an upgrade must not rebuild every replica's index.
    #[test]
    fn an_index_of_this_schema_reopens_without_a_rebuild() {
        let dir = std::env::temp_dir().join(format!("memex-version-file-{}", Uuid::now_v7().simple()));
        let ns = Uuid::now_v7();
        let (_, created) = NamespaceIndex::open(&dir, ns).expect("create");
        assert!(created);
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("memex-index.json")).expect("the version file"))
                .expect("json");
        assert_eq!(written["schema_version"], SCHEMA_VERSION);
        let (_, created) = NamespaceIndex::open(&dir, ns).expect("reopen");
        assert!(!created, "reopened as it was");
        let _ = std::fs::remove_dir_all(dir);
    }

    fn event(seq: u64, content: &str) -> Event {
        event_in(7, seq, content)
    }

    /// A serving index's commit writes its documents as one segment, however many were added
    /// one by one: a second indexing thread would take some of them into a second segment.
    #[tokio::test]
    async fn a_serving_commit_writes_one_segment() {
        let dir = std::env::temp_dir().join(format!("memex-one-segment-{}", Uuid::now_v7().simple()));
        let (idx, _) = NamespaceIndex::open(&dir, Uuid::now_v7()).expect("create");
        for round in 0..3u64 {
            for seq in 1..=200 {
                let e = event(round * 1000 + seq, &format!("event {seq} of round {round}, text to index"));
                idx.add(&idx.writing().await, crate::doc::event_docs(&e, None, None, ChunkOptions::default(), ""))
                    .await
                    .expect("add");
            }
            idx.commit(&idx.writing().await).await.expect("commit");
            let segments = idx.reader.searcher().segment_readers().len();
            assert_eq!(segments as u64, round + 1, "one new segment per commit");
        }
        assert_eq!(idx.reader.searcher().num_docs(), 600);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A note event of session `session` (as a u128), for index tests.
    pub(crate) fn event_in(session: u128, seq: u64, content: &str) -> Event {
        Event {
            id: Uuid::now_v7(),
            session_id: Uuid::from_u128(session),
            seq,
            kind: "note".into(),
            content: content.into(),
            artifact: None,
            agent_id: "a".into(),
            task_id: None,
            tool_name: None,
            tool_call_id: None,
            event_time: Utc::now(),
            ingest_time: Utc::now(),
            metadata: None,
            task_state_version: None,
        }
    }

    /// At the weight `body` is indexed for, own text and context score as one field (BM25F): a
    /// match in both beats one in the own text, which beats one in the context alone. Other
    /// weights score the two fields apart and still find context-only matches; 0 finds none.
    #[tokio::test]
    async fn context_matches_score_through_the_body_field_at_its_weight() {
        let dir = std::env::temp_dir().join(format!("memex-text-body-{}", Uuid::now_v7().simple()));
        let (idx, _) = NamespaceIndex::open(&dir, Uuid::from_u128(1)).unwrap();
        // (own text, context): the term is in the own text, the context, both, or neither.
        let texts = [("zeta here", "nothing"), ("plain words", "zeta before"), ("zeta again", "zeta too"), ("x y", "")];
        let mut ids = Vec::new();
        for (i, (own, ctx)) in texts.iter().enumerate() {
            let e = event(i as u64 + 1, own);
            ids.push(e.id);
            idx.add(&idx.writing().await, crate::doc::event_docs(&e, None, None, ChunkOptions::default(), ctx))
                .await
                .unwrap();
        }
        idx.commit(&idx.writing().await).await.unwrap();
        let searcher = idx.searcher();
        let terms = vec!["zeta".to_owned()];
        let all = SearchFilter::default();
        let order = |boost: f32| -> Vec<Uuid> {
            idx.search(&terms, &all, 10, boost, &searcher, &[]).unwrap().iter().map(|h| h.event_id).collect()
        };
        assert_eq!(order(BODY_CONTEXT_WEIGHT), vec![ids[2], ids[0], ids[1]]);
        assert_eq!(order(0.25), vec![ids[2], ids[0], ids[1]]);
        let mut own_only = order(0.0);
        own_only.sort();
        let mut expected = vec![ids[0], ids[2]];
        expected.sort();
        assert_eq!(own_only, expected);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A search answers every chunk that scores as high as its limit-th (ties included, from
    /// every segment) and none below it: what it returns does not depend on the segments.
    #[tokio::test]
    async fn a_search_returns_the_ties_of_its_last_place_and_nothing_below() {
        let dir = std::env::temp_dir().join(format!("memex-text-ties-{}", Uuid::now_v7().simple()));
        let (idx, _) = NamespaceIndex::open(&dir, Uuid::from_u128(1)).unwrap();
        // Three groups of ten identical texts (equal scores), each spread over three commits (4+3+3).
        let groups = ["zeta zeta zeta", "zeta zeta words", "zeta and other words here"];
        let mut seq = 0;
        for commit in 0..3 {
            for text in groups {
                for _ in 0..(3 + usize::from(commit == 0)) {
                    seq += 1;
                    let e = event(seq, text);
                    idx.add(&idx.writing().await, crate::doc::event_docs(&e, None, None, ChunkOptions::default(), ""))
                        .await
                        .unwrap();
                }
            }
            idx.commit(&idx.writing().await).await.unwrap();
        }
        let searcher = idx.searcher();
        assert!(searcher.segment_readers().len() > 1);
        let terms = vec!["zeta".to_owned()];
        let found =
            |limit: usize| idx.search(&terms, &SearchFilter::default(), limit, 0.0, &searcher, &[]).unwrap().len();
        assert_eq!(found(1), 10, "the first group's ties");
        assert_eq!(found(10), 10);
        assert_eq!(found(11), 20, "the second group whole, none of the third");
        assert_eq!(found(21), 30);
        assert_eq!(found(100), 30);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A merge renumbers segments; addresses from a query stay valid in that query's searcher.
    #[tokio::test]
    async fn hits_are_read_from_the_searcher_that_matched_them_even_after_a_merge() {
        let dir = std::env::temp_dir().join(format!("memex-text-merge-{}", Uuid::now_v7().simple()));
        let (idx, _) = NamespaceIndex::open(&dir, Uuid::from_u128(1)).unwrap();
        let texts = ["alpha common", "beta common", "gamma common", "delta common"];
        for (i, t) in texts.iter().enumerate() {
            let docs = crate::doc::event_docs(&event(i as u64 + 1, t), None, None, ChunkOptions::default(), "");
            idx.add(&idx.writing().await, docs).await.unwrap();
            idx.commit(&idx.writing().await).await.unwrap(); // one segment per commit
        }
        let searcher = idx.searcher();
        assert_eq!(searcher.segment_readers().len(), texts.len());
        let hits = idx.search(&["common".to_owned()], &SearchFilter::default(), 10, 0.0, &searcher, &[]).unwrap();
        assert_eq!(hits.len(), texts.len());

        // Merge everything into one segment and reload: the addresses of `hits` mean nothing in
        // the new searcher (their segment ords are gone).
        let ids = idx.reader.searcher().segment_readers().iter().map(|s| s.segment_id()).collect::<Vec<_>>();
        idx.writer.lock().unwrap().merge(&ids).wait().unwrap();
        idx.reader.reload().unwrap();
        assert_eq!(idx.searcher().segment_readers().len(), 1);

        let mut read: Vec<String> = hits.iter().map(|h| idx.stored(&searcher, h.addr).unwrap().text).collect();
        read.sort();
        let mut want: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        want.sort();
        assert_eq!(read, want);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Small session filters take a union of term queries, large ones a TermSetQuery: the same
    /// documents with the same scores either way, and the ids read back from the fast fields.
    #[tokio::test]
    async fn small_and_large_session_filters_agree() {
        let dir = std::env::temp_dir().join(format!("memex-text-filter-{}", Uuid::now_v7().simple()));
        let (idx, _) = NamespaceIndex::open(&dir, Uuid::from_u128(1)).unwrap();
        let texts = [
            "alpha common",
            "beta common common",
            "gamma delta",
            "common delta words here",
            "common common alpha delta",
            "alpha",
        ];
        let mut events = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let mut e = event(i as u64 + 1, t);
            e.session_id = Uuid::from_u128(10 + (i as u128 % 2));
            idx.add(&idx.writing().await, crate::doc::event_docs(&e, None, None, ChunkOptions::default(), ""))
                .await
                .unwrap();
            events.push(e);
        }
        idx.commit(&idx.writing().await).await.unwrap();
        let searcher = idx.searcher();
        let terms = vec!["common".to_owned(), "delta".to_owned(), "alpha".to_owned()];
        let small = SearchFilter { session_ids: vec![Uuid::from_u128(10)], ..SearchFilter::default() };
        let mut large = small.clone();
        large.session_ids.extend((100..100 + SMALL_TERM_SET as u128).map(Uuid::from_u128));
        let view = |h: &[ChunkHit]| h.iter().map(|c| (c.event_id, c.session, c.seq, c.score)).collect::<Vec<_>>();
        for context_boost in [0.0, 0.5] {
            // Small filters intersect each term with the sessions; large ones filter the union.
            let a = idx.search(&terms, &small, 10, context_boost, &searcher, &[]).unwrap();
            let b = idx.search(&terms, &large, 10, context_boost, &searcher, &[]).unwrap();
            assert_eq!(view(&a), view(&b));
            // Session 10 holds events 1, 3 and 5, and each says one of the terms.
            let mut found: Vec<u64> = a.iter().map(|h| h.seq).collect();
            found.sort_unstable();
            assert_eq!(found, vec![1, 3, 5]);
            assert!(a.iter().all(|h| h.session == Uuid::from_u128(10)));
            // Event 5 says all three terms, "common" twice: it ranks first.
            assert_eq!(a[0].event_id, events[4].id);
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn stable_scores_round_away_last_bit_differences() {
        let a = 12.345_678_f32;
        let b = f32::from_bits(a.to_bits() + 1);
        assert_eq!(stable_score(a), stable_score(b));
        assert!((stable_score(a) - a).abs() <= a * 1e-3);
        assert!(stable_score(2.0) > stable_score(1.999));
        assert_eq!(stable_score(1.0), 1.0);
    }
}
