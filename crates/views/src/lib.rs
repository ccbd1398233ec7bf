//! Compiled sessions: memex's coordinate system, kept warm.
//!
//! A session's **full view** (the VCC compiler's output over its events, or over the raw file of an
//! imported trace) gives the line numbers every pointer cites. This crate compiles sessions,
//! caches them by version, and answers everything asked of a compiled session:
//!
//! * the use cases of `ViewService`: [`Views::import`] (a raw trace becomes a read-only session,
//!   lexed once), [`Views::render`] (full, UI, adaptive and index views), [`Views::read_lines`]
//!   (dereference a pointer);
//! * the [`memex_pointer::FullView`] seam, through which the search index and the context engine
//!   learn where events sit ([`Views`] implements it);
//! * [`Views::event_lines`] for `GetEvents` with lines.
//!
//! A session's version is its event count: an append makes a new version, so a cached compile is
//! never stale, and old versions age out of the cache by weight. A live session's compiler is kept
//! unfinished after its newest version, and the next version reads on from it with the events it
//! adds and finishes only those (its earlier sections are shared, finished, with the version
//! before).
//!
//! **Architecture invariant:** derived state only. Everything here is rebuilt from the store on a
//! miss; a cached compile is never consulted for a version other than the session's current one.
//! **Architecture invariant:** decisions about views are the compiler's (`memex-vcc`); this crate
//! loads its input, caches its output and validates requests against it.

mod blocks;
mod compiled;
mod error;
mod import;
mod line_map;
mod place;
mod predicate;
mod render;
mod source;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memex_event::{NamespaceId, SessionId};
use memex_store::{Session, Store};
use memex_vcc::CompiledTrace;
use uuid::Uuid;

pub use blocks::block_weight;
pub use compiled::CompiledSession;
pub use error::ViewError;
pub use import::{ImportTrace, Imported};
pub use predicate::{Bm25Blocks, ScoredBlocks};
pub use render::{LinesRead, MAX_READ_LINES, RankedQuery, RenderedView, ViewKind, ViewQuery, ViewRequest};

/// The `[views]` section of `memex.toml`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ViewsConfig {
    /// Memory for compiled sessions (the VCC IR, rendered full views and a live session's kept
    /// compiler, resumed by its next version), in bytes; imported traces get as much again, the
    /// views' blocks (what packs cite) a half, and line maps kept from the store an eighth.
    pub cache_bytes: u64,
}

impl Default for ViewsConfig {
    fn default() -> Self {
        ViewsConfig { cache_bytes: 256 * 1024 * 1024 }
    }
}

/// Live sessions whose newest version is remembered (what finds a kept compiler), at most.
const LATEST_SESSIONS: u64 = 100_000;

/// Compiled sessions by session and version. Cheap to clone (the caches are shared).
#[derive(Clone)]
pub struct Views {
    store: Store,
    /// Async, so that concurrent misses of one version share a single compile.
    /// (namespace, session, version): session ids are unique per namespace only.
    cache: moka::future::Cache<(Uuid, Uuid, u64), Arc<CompiledSession>>,
    /// Imported sessions never change: found by id alone, without asking the database.
    read_only: moka::future::Cache<(Uuid, Uuid), Arc<CompiledSession>>,
    /// (namespace, live session) → its newest compiled version, whose entry in `cache` holds the
    /// compiler the next version reads on from.
    latest: moka::sync::Cache<(Uuid, Uuid), u64>,
    blocks: blocks::BlockCache,
    /// Stores compiled sessions' line maps in the background.
    map_writer: line_map::MapWriter,
    /// Line maps read from the store or made here, kept: a reader citing a session again needs
    /// no bytes from Postgres. Any version answers what it can (`LineMap::answer`).
    maps: moka::sync::Cache<(Uuid, Uuid), Arc<line_map::LineMap>>,
    stats: Arc<CacheStats>,
}

/// How often a compile was found in the cache; read by the server's metrics.
#[derive(Debug, Default)]
pub struct CacheStats {
    hits: AtomicU64,
    misses: AtomicU64,
    /// Placed blocks a live session's new version took over from the previous one.
    carried: AtomicU64,
    /// Lines answered from a stored line map instead of a compile.
    maps_used: AtomicU64,
    /// Of those, answered from a map kept in memory (no map read from the store).
    maps_kept: AtomicU64,
    /// Line maps stored after a compile.
    maps_written: AtomicU64,
}

impl CacheStats {
    /// Placed blocks a live session's new version took over from the previous one instead of
    /// reading their lines again.
    pub fn blocks_carried(&self) -> u64 {
        self.carried.load(Ordering::Relaxed)
    }

    /// Lookups of events' lines that a stored line map answered without compiling the session.
    pub fn line_maps_used(&self) -> u64 {
        self.maps_used.load(Ordering::Relaxed)
    }

    /// Of [`CacheStats::line_maps_used`], those answered from a map this process kept.
    pub fn line_maps_kept(&self) -> u64 {
        self.maps_kept.load(Ordering::Relaxed)
    }

    /// Line maps stored after compiling a session.
    pub fn line_maps_written(&self) -> u64 {
        self.maps_written.load(Ordering::Relaxed)
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }
}

impl Views {
    /// Forgets every compiled session (after an erasure: events that "never change" did).
    pub fn forget_all(&self) {
        self.cache.invalidate_all();
        self.read_only.invalidate_all();
        self.latest.invalidate_all();
        self.blocks.invalidate_all();
        self.maps.invalidate_all();
    }

    pub fn new(store: Store, config: &ViewsConfig) -> Views {
        let cache_bytes = config.cache_bytes;
        fn weigh<K>(_: &K, v: &Arc<CompiledSession>) -> u32 {
            v.weight()
        }
        Views {
            store,
            cache: moka::future::Cache::builder().max_capacity(cache_bytes).weigher(weigh).build(),
            read_only: moka::future::Cache::builder().max_capacity(cache_bytes).weigher(weigh).build(),
            latest: moka::sync::Cache::new(LATEST_SESSIONS),
            blocks: blocks::cache(cache_bytes / 2),
            map_writer: line_map::MapWriter::default(),
            maps: moka::sync::Cache::builder()
                .max_capacity(cache_bytes / 8)
                .weigher(|_, m: &Arc<line_map::LineMap>| m.weight())
                .build(),
            stats: Arc::new(CacheStats::default()),
        }
    }

    /// How full each of the compiled-session caches is (for the metrics; moka's counts are
    /// estimates).
    pub fn cache_sizes(&self) -> Vec<memex_store::CacheSize> {
        use memex_store::{CacheSize, CacheUnit::Bytes};
        let size = |name, entries, weight, capacity: Option<u64>| CacheSize {
            name,
            entries,
            weight,
            capacity: capacity.unwrap_or(0),
            unit: Bytes,
        };
        vec![
            size(
                "views.compiled",
                self.cache.entry_count(),
                self.cache.weighted_size(),
                self.cache.policy().max_capacity(),
            ),
            size(
                "views.read_only",
                self.read_only.entry_count(),
                self.read_only.weighted_size(),
                self.read_only.policy().max_capacity(),
            ),
            size(
                "views.blocks",
                self.blocks.entry_count(),
                self.blocks.weighted_size(),
                self.blocks.policy().max_capacity(),
            ),
            size(
                "views.line_maps",
                self.maps.entry_count(),
                self.maps.weighted_size(),
                self.maps.policy().max_capacity(),
            ),
        ]
    }

    pub fn stats(&self) -> Arc<CacheStats> {
        self.stats.clone()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Caches `compiled` again if it has made a rendered view or its line map since it weighed
    /// `before`, so the cache's byte cap counts them.
    pub(crate) async fn reweigh(&self, compiled: &Arc<CompiledSession>, before: u32) {
        if compiled.weight() != before {
            self.remember(compiled.clone()).await;
        }
    }

    async fn remember(&self, compiled: Arc<CompiledSession>) {
        let s = &compiled.session;
        if compiled.is_imported() {
            self.read_only.insert((s.namespace_id, s.id), compiled).await;
        } else {
            self.cache.insert((s.namespace_id, s.id, s.event_count), compiled).await;
        }
    }

    /// [`Views::compiled`], when the caller has just read the session's last seq (`head`): a
    /// cached compile of that version is used without reading the session row again.
    pub async fn compiled_at(
        &self,
        ns: NamespaceId,
        session: SessionId,
        head: Option<u64>,
    ) -> Result<Arc<CompiledSession>, ViewError> {
        if let Some(head) = head
            && let Some(hit) = self.cache.get(&(ns.0, session.0, head)).await
        {
            self.stats.hit();
            return Ok(hit);
        }
        // A newer version of a live session compiled here: its row is the newest version's with
        // the new count (an append changes nothing else of a row; an erased session takes no
        // appends), so it is not read again. An agent loop's every turn is such a version.
        if let Some(head) = head
            && let Some(v) = self.latest.get(&(ns.0, session.0)).filter(|v| *v < head)
            && let Some(newest) = self.cache.get(&(ns.0, session.0, v)).await
            && newest.session.source.is_none()
            && newest.session.erased_by.is_none()
        {
            let mut row = newest.session.clone();
            row.event_count = head;
            drop(newest);
            return self.compile_row(ns, row).await;
        }
        self.compiled(ns, session).await
    }

    /// The current version of a session, compiled.
    pub async fn compiled(&self, ns: NamespaceId, session: SessionId) -> Result<Arc<CompiledSession>, ViewError> {
        match self.cached_or_row(ns, session).await? {
            Ok(hit) => Ok(hit),
            Err(row) => self.compile_row(ns, row).await,
        }
    }

    /// The session's current version if it is compiled here, else its row.
    async fn cached_or_row(
        &self,
        ns: NamespaceId,
        session: SessionId,
    ) -> Result<Result<Arc<CompiledSession>, Session>, ViewError> {
        if let Some(hit) = self.read_only.get(&(ns.0, session.0)).await {
            self.stats.hit();
            return Ok(Ok(hit));
        }
        let row = self.store.session(ns.0, session.0).await?;
        Ok(match self.cached(&row).await {
            Some(hit) => Ok(hit),
            None => Err(row),
        })
    }

    /// Whether some version of a session is compiled and cached here (a live session's newer
    /// version then compiles on from it: its stored map is not needed).
    pub(crate) fn has_compiled(&self, ns: Uuid, session: Uuid) -> bool {
        self.read_only.contains_key(&(ns, session))
            || self.latest.get(&(ns, session)).is_some_and(|v| self.cache.contains_key(&(ns, session, v)))
    }

    /// The version of a session its row names, if it is compiled here.
    async fn cached(&self, row: &Session) -> Option<Arc<CompiledSession>> {
        let hit = match self.read_only.get(&(row.namespace_id, row.id)).await {
            Some(hit) => Some(hit),
            None => self.cache.get(&(row.namespace_id, row.id, row.event_count)).await,
        };
        if hit.is_some() {
            self.stats.hit();
        }
        hit
    }

    /// Compiles the version of a session its row names (once, however many ask at a time).
    async fn compile_row(&self, ns: NamespaceId, row: Session) -> Result<Arc<CompiledSession>, ViewError> {
        let key = (row.namespace_id, row.id, row.event_count);
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        let imported = row.source.is_some();
        let compiled = self
            .cache
            .try_get_with(key, async { self.compile(ns, row).await.map(Arc::new) })
            .await
            .map_err(|e: Arc<ViewError>| Arc::try_unwrap(e).unwrap_or_else(|shared| shared.shared()))?;
        if imported {
            self.remember(compiled.clone()).await;
        }
        Ok(compiled)
    }

    /// A session's trace through the VCC compiler: its own span, the cost a cache miss pays.
    #[tracing::instrument(name = "vcc.compile", level = "debug", skip_all, fields(memex.session_id = %session.id, memex.events = session.event_count))]
    async fn compile(&self, ns: NamespaceId, session: Session) -> Result<CompiledSession, ViewError> {
        let key = (ns.0, session.id);
        let live = session.source.is_none();
        // The newest version's compiler, taken (a stale row, older than that version, compiles
        // afresh and leaves it).
        let mut kept = None;
        if live
            && let Some(v) = self.latest.get(&key).filter(|v| *v <= session.event_count)
            && let Some(newest) = self.cache.get(&(ns.0, session.id, v)).await
        {
            kept = newest.take_compiler().map(|c| (v, c));
        }
        let resumed = kept.as_ref().map(|(v, _)| *v);
        let (trace, compiler) = source::compile(&self.store, ns.0, &session, kept).await?;
        if live && self.latest.get(&key).is_none_or(|v| v <= session.event_count) {
            self.latest.insert(key, session.event_count);
        }
        if let Some(earlier) = resumed.filter(|v| *v < session.event_count) {
            // Superseded: nothing asks for an earlier version by key again (a stale head falls
            // back to the row's version), so its bytes need not crowd out other sessions'. In
            // an agent loop each turn is a new version, and these were most of the cache.
            self.cache.invalidate(&(ns.0, session.id, earlier)).await;
        }
        Ok(CompiledSession::new(session, trace, compiler))
    }

    /// Caches a compile the caller made (an import compiles the trace it stores).
    async fn insert(&self, session: Session, trace: CompiledTrace) {
        self.remember(Arc::new(CompiledSession::new(session, trace, None))).await;
    }
}
