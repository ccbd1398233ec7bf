//! Compiled sessions: the VCC IR of a session, compiled from its events (or, for an imported
//! trace, from the raw file) and cached by session and version.
//!
//! A session's version is its event count: appends make a new version, so a cached IR is never
//! stale, and old versions age out of the cache by weight.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use memex_store::{SeqRange, Session, Store};
use memex_vcc::{CompileOptions, CompiledTrace, InputFormat};
use opentelemetry::metrics::Counter;
use tonic::Status;
use uuid::Uuid;

use crate::status::store_status;

/// Where an event sits in its session's full view: memex's coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLines {
    /// 1-based chain (a trace split by compactions has several full views).
    pub chain: u32,
    pub first_line: u32,
    pub last_line: u32,
}

/// One compiled version of a session.
pub struct CompiledSession {
    pub session: Session,
    pub trace: CompiledTrace,
    /// Rendered full views, per chain, made on first use: the hot path of `CompileView`.
    full: Vec<OnceLock<bytes::Bytes>>,
    /// Input line of a record → the full-view lines of the blocks it produced.
    by_source_line: OnceLock<HashMap<u32, EventLines>>,
}

impl CompiledSession {
    fn new(session: Session, trace: CompiledTrace) -> CompiledSession {
        let full = (0..trace.chains().len()).map(|_| OnceLock::new()).collect();
        CompiledSession { session, trace, full, by_source_line: OnceLock::new() }
    }

    /// The full-view lines of the blocks made from the input record at `source_line`.
    pub fn lines_of_record(&self, source_line: u32) -> Option<EventLines> {
        self.by_source_line
            .get_or_init(|| {
                let mut map: HashMap<u32, EventLines> = HashMap::new();
                for (c, chain) in self.trace.chains().iter().enumerate() {
                    for b in chain.blocks() {
                        let r = b.range();
                        map.entry(b.source_line())
                            .and_modify(|e| {
                                e.first_line = e.first_line.min(r.start);
                                e.last_line = e.last_line.max(r.end);
                            })
                            .or_insert(EventLines { chain: c as u32 + 1, first_line: r.start, last_line: r.end });
                    }
                }
                map
            })
            .get(&source_line)
            .copied()
    }

    /// The full view of chain `i` (0-based); cloning the bytes is free.
    pub fn full_view(&self, i: usize) -> Option<bytes::Bytes> {
        let chain = self.trace.chains().get(i)?;
        Some(self.full.get(i)?.get_or_init(|| bytes::Bytes::from(chain.full_view())).clone())
    }

    fn weight(&self) -> u32 {
        u32::try_from(self.trace.size_bytes().saturating_mul(2)).unwrap_or(u32::MAX)
    }
}

#[derive(Clone)]
pub struct Views {
    store: Store,
    cache: moka::future::Cache<(Uuid, u64), Arc<CompiledSession>>,
    /// Imported sessions never change: found by id alone, without asking the database.
    read_only: moka::future::Cache<Uuid, Arc<CompiledSession>>,
    /// (namespace, live session) → its events exported as the compiler reads them, up to a seq.
    /// Events never change, so a newer version's export is this one plus the events after it:
    /// an agent loop's turn reads and encodes only what it appended, not the whole session.
    exports: moka::sync::Cache<(Uuid, Uuid), Arc<Export>>,
    hits: Counter<u64>,
    misses: Counter<u64>,
}

/// The input format of a session's source, from its `source_format`.
pub fn input_format(source_format: &str) -> InputFormat {
    match source_format {
        "claude" => InputFormat::Claude,
        "codex" => InputFormat::Codex,
        "gemini" => InputFormat::Gemini,
        "memex" => InputFormat::Memex,
        _ => InputFormat::Auto,
    }
}

/// The name `memex view` gives a file's views: the file name without its last extension.
pub fn stem_of(file_name: &str) -> String {
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    match base.rfind('.') {
        Some(i) if i > 0 => base[..i].to_owned(),
        _ => base.to_owned(),
    }
}

/// A live session's events 1..=`count`, as memex-event JSON lines.
pub(crate) struct Export {
    count: u64,
    bytes: bytes::Bytes,
}

impl Views {
    pub fn new(store: Store, cache_bytes: u64) -> Views {
        let meter = opentelemetry::global::meter("memex");
        Views {
            store,
            cache: moka::future::Cache::builder()
                .max_capacity(cache_bytes)
                .weigher(|_, v: &Arc<CompiledSession>| v.weight())
                .build(),
            read_only: moka::future::Cache::builder()
                .max_capacity(cache_bytes)
                .weigher(|_, v: &Arc<CompiledSession>| v.weight())
                .build(),
            exports: moka::sync::Cache::builder()
                .max_capacity(cache_bytes / 4)
                .weigher(|_, e: &Arc<Export>| u32::try_from(e.bytes.len() + 64).unwrap_or(u32::MAX))
                .build(),
            hits: meter
                .u64_counter("memex.view_cache.hits")
                .with_description("Compiled sessions served from cache")
                .build(),
            misses: meter
                .u64_counter("memex.view_cache.misses")
                .with_description("Sessions compiled on demand")
                .build(),
        }
    }

    /// Seeds the cache (an import has just compiled the trace).
    pub async fn insert(&self, session: Session, trace: CompiledTrace) {
        let compiled = Arc::new(CompiledSession::new(session, trace));
        self.remember(&compiled).await;
    }

    async fn remember(&self, compiled: &Arc<CompiledSession>) {
        let s = &compiled.session;
        if s.source.is_some() {
            self.read_only.insert(s.id, compiled.clone()).await;
        } else {
            self.cache.insert((s.id, s.event_count), compiled.clone()).await;
        }
    }

    /// [`Views::compiled`], when the caller has just read the session's last seq (`head`): a
    /// cached compile of that version is used without reading the session row again.
    pub async fn compiled_at(
        &self,
        ns: Uuid,
        session_id: Uuid,
        head: Option<u64>,
    ) -> Result<Arc<CompiledSession>, Status> {
        if let Some(head) = head
            && let Some(hit) = self.cache.get(&(session_id, head)).await
            && hit.session.namespace_id == ns
        {
            self.hits.add(1, &[]);
            return Ok(hit);
        }
        self.compiled(ns, session_id).await
    }

    /// The current version of a session, compiled.
    pub async fn compiled(&self, ns: Uuid, session_id: Uuid) -> Result<Arc<CompiledSession>, Status> {
        if let Some(hit) = self.read_only.get(&session_id).await
            && hit.session.namespace_id == ns
        {
            self.hits.add(1, &[]);
            return Ok(hit);
        }
        let session = self.store.session(ns, session_id).await.map_err(|e| store_status(&e))?;
        let key = (session.id, session.event_count);
        if let Some(hit) = self.cache.get(&key).await {
            self.hits.add(1, &[]);
            return Ok(hit);
        }
        self.misses.add(1, &[]);
        let store = self.store.clone();
        let exports = self.exports.clone();
        let ns_id = ns;
        let compiled = self
            .cache
            .try_get_with(key, async move {
                let (bytes, stem, format) = source_bytes(&store, &exports, ns_id, &session).await?;
                let trace = tokio::task::spawn_blocking(move || {
                    memex_vcc::compile_trace(&bytes, &stem, CompileOptions { format, strict: false })
                })
                .await
                .map_err(|e| Status::internal(format!("compile task failed: {e}")))?
                .map_err(|e| Status::internal(format!("stored trace no longer compiles: {e}")))?;
                Ok::<_, Status>(Arc::new(CompiledSession::new(session, trace)))
            })
            .await
            .map_err(|e: Arc<Status>| Status::new(e.code(), e.message()))?;
        if compiled.session.source.is_some() {
            self.remember(&compiled).await;
        }
        Ok(compiled)
    }
}

impl Views {
    /// The full-view lines of the given events of a session (by seq); events that render nothing
    /// are absent. An imported trace maps at record granularity: every event of one trace record
    /// gets the lines of all that record's blocks.
    pub async fn event_lines(
        &self,
        ns: Uuid,
        session_id: Uuid,
        seqs: &[u64],
    ) -> Result<HashMap<u64, EventLines>, Status> {
        let compiled = self.compiled(ns, session_id).await?;
        self.lines_in(ns, &compiled, seqs).await
    }

    /// [`Views::event_lines`] in a session already compiled.
    pub async fn lines_in(
        &self,
        ns: Uuid,
        compiled: &CompiledSession,
        seqs: &[u64],
    ) -> Result<HashMap<u64, EventLines>, Status> {
        let records = self.source_lines(ns, compiled, seqs).await?;
        Ok(records.into_iter().filter_map(|(seq, line)| Some((seq, compiled.lines_of_record(line)?))).collect())
    }

    /// The input record line each event (by seq) was compiled from.
    pub async fn source_lines(
        &self,
        ns: Uuid,
        compiled: &CompiledSession,
        seqs: &[u64],
    ) -> Result<Vec<(u64, u32)>, Status> {
        if compiled.session.source.is_some() {
            let seqs: Vec<i64> = seqs.iter().map(|s| *s as i64).collect();
            self.store.event_source_lines(ns, compiled.session.id, &seqs).await.map_err(|e| store_status(&e))
        } else {
            // A session's own events are compiled from their export, one line per seq.
            Ok(seqs.iter().filter_map(|s| Some((*s, u32::try_from(*s).ok()?))).collect())
        }
    }
}

impl Views {
    /// Whether a session is an imported trace (read-only: its lines never move).
    async fn is_imported(&self, ns: Uuid, session_id: Uuid) -> Result<bool, Status> {
        if self.read_only.contains_key(&session_id) {
            return Ok(true);
        }
        let session = self.store.session(ns, session_id).await.map_err(|e| store_status(&e))?;
        Ok(session.source.is_some())
    }
}

/// The search index's line-range seam, answered from compiled views. While indexing, only
/// imported sessions get ranges (their views never change); a live session's hits get theirs at
/// query time from the cached compile of its current version, so a range is never stale.
pub struct ViewLineRanges(pub Views);

impl memex_search::LineRanges for ViewLineRanges {
    fn line_ranges<'a>(
        &'a self,
        namespace_id: Uuid,
        session_id: Uuid,
        events: &'a [memex_search::EventLines],
        when: memex_search::LineLookup,
    ) -> futures::future::BoxFuture<'a, Result<Vec<memex_search::LineRange>, memex_search::IndexError>> {
        use memex_search::LineRange;
        Box::pin(async move {
            let unknown = vec![LineRange::UNKNOWN; events.len()];
            let lookup = async {
                if when == memex_search::LineLookup::Indexing && !self.0.is_imported(namespace_id, session_id).await? {
                    return Ok(None);
                }
                let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
                self.0.event_lines(namespace_id, session_id, &seqs).await.map(Some)
            };
            // A view that cannot be compiled costs a hit its line range, never the search itself.
            match lookup.await {
                Ok(Some(lines)) => Ok(events
                    .iter()
                    .map(|e| match lines.get(&e.seq) {
                        Some(l) => LineRange { first_line: u64::from(l.first_line), last_line: u64::from(l.last_line) },
                        None => LineRange::UNKNOWN,
                    })
                    .collect()),
                Ok(None) => Ok(unknown),
                Err(status) => {
                    tracing::warn!(session = %session_id, error = %status.message(), "full-view lines unavailable");
                    Ok(unknown)
                }
            }
        })
    }
}

/// What a session's views are compiled from: the raw file of an imported trace, or the session's
/// events as JSON lines (the `memex` format), with the file stem the views are named after.
async fn source_bytes(
    store: &Store,
    exports: &moka::sync::Cache<(Uuid, Uuid), Arc<Export>>,
    ns: Uuid,
    session: &Session,
) -> Result<(bytes::Bytes, String, InputFormat), Status> {
    if let Some(src) = &session.source {
        let artifact = store.artifact(ns, src.artifact).await.map_err(|e| store_status(&e))?;
        return Ok((artifact.bytes.into(), stem_of(&src.file_name), input_format(&session.source_format)));
    }
    let key = (ns, session.id);
    let stem = session.id.to_string();
    let kept = exports.get(&key).filter(|e| e.count <= session.event_count);
    if let Some(e) = &kept
        && e.count == session.event_count
    {
        return Ok((e.bytes.clone(), stem, InputFormat::Memex));
    }
    let mut out = Vec::new();
    let mut from = 1;
    if let Some(e) = &kept {
        out.extend_from_slice(&e.bytes);
        from = e.count + 1;
    }
    let mut token: Option<String> = None;
    loop {
        let page = store
            .events_in_range(ns, session.id, SeqRange { from, to: Some(session.event_count) }, 5000, token.as_deref())
            .await
            .map_err(|e| store_status(&e))?;
        for e in page.events {
            out.extend_from_slice(crate::convert::record(e).to_json_line().as_bytes());
            out.push(b'\n');
        }
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    let bytes = bytes::Bytes::from(out);
    // Keep the newest export (a slower compile of an older version must not replace it).
    if exports.get(&key).is_none_or(|e| e.count < session.event_count) {
        exports.insert(key, Arc::new(Export { count: session.event_count, bytes: bytes.clone() }));
    }
    Ok((bytes, stem, InputFormat::Memex))
}
