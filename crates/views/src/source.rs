//! How a session's views are compiled: from the raw file of an imported trace, or from the
//! session's events as JSON lines (the `memex` input format), a live session's new events only.
use std::sync::Arc;

use memex_store::{SeqRange, Session, Store};
use memex_vcc::{CompileOptions, CompiledTrace, Compiler, InputFormat};
use uuid::Uuid;

use crate::ViewError;

/// A live session's compiler after its events 1..=`count` (as memex-event JSON lines), not
/// finished: the next version takes it and resumes with the events it adds.
pub(crate) struct Export {
    count: u64,
    /// Taken (left `None`) by the compile of the next version, which keeps a new export: the
    /// common case, an agent loop's turn after turn, then clones the session's state once, not
    /// twice. A second compile of the same version (rare) finds it taken and starts afresh.
    compiler: std::sync::Mutex<Option<Compiler>>,
    /// The compiler's weight, fixed when kept.
    weight: u32,
}

impl Export {
    fn new(count: u64, compiler: Compiler) -> Export {
        let weight = u32::try_from(compiler.size_bytes() + 64).unwrap_or(u32::MAX);
        Export { count, compiler: std::sync::Mutex::new(Some(compiler)), weight }
    }

    fn take(&self) -> Option<Compiler> {
        // A compile that panicked while holding the lock left nothing half-done in it.
        self.compiler.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }
}

/// (namespace, live session) → its newest compiler. Events never change, so a newer version
/// compiles as this one plus the events after it: an agent loop's turn reads, encodes and lexes
/// only what it appended, not the whole session (a clone of the compiler is byte for byte a
/// compile from scratch: `memex-vcc`'s `tests/resumed.rs`).
pub(crate) type Exports = moka::sync::Cache<(Uuid, Uuid), Arc<Export>>;

pub(crate) fn exports(max_bytes: u64) -> Exports {
    moka::sync::Cache::builder().max_capacity(max_bytes).weigher(|_, e: &Arc<Export>| e.weight).build()
}

/// Compiles a session's current version: an imported trace from its raw file, a live session
/// from its events, resuming the kept compiler of an earlier version when there is one. Also
/// returns the version it resumed from.
pub(crate) async fn compile(
    store: &Store,
    exports: &Exports,
    ns: Uuid,
    session: &Session,
) -> Result<(CompiledTrace, Option<u64>), ViewError> {
    let uncompilable = |e: memex_vcc::CompileError| ViewError::Uncompilable {
        session: memex_event::SessionId(session.id),
        message: e.to_string(),
    };
    if let Some(src) = &session.source {
        let artifact = store.artifact(ns, src.artifact).await?;
        let format = session.source_format.parse().unwrap_or(InputFormat::Auto);
        let stem = memex_vcc::stem_of(&src.file_name);
        let bytes = artifact.bytes;
        return blocking(move || memex_vcc::compile_trace(&bytes, &stem, CompileOptions { format, strict: false }))
            .await?
            .map(|trace| (trace, None))
            .map_err(uncompilable);
    }
    let key = (ns, session.id);
    // The kept compiler of an earlier version, taken out of its export (a compile of an older
    // version than the kept one, from a stale row, starts afresh and leaves it).
    let kept = exports.get(&key).filter(|e| e.count <= session.event_count).and_then(|e| Some((e.count, e.take()?)));
    let resumed = kept.as_ref().map(|(count, _)| *count);
    let from = resumed.map_or(1, |count| count + 1);
    let mut added = Vec::new();
    let mut token: Option<String> = None;
    let range = SeqRange { from, to: Some(session.event_count) };
    // Nothing to read when the kept compiler is of this very version.
    let mut more = from <= session.event_count;
    while more {
        let page = store.events_in_range(ns, session.id, range, 5000, token.as_deref()).await?;
        for e in page.events {
            added.extend_from_slice(e.into_record().to_json_line().as_bytes());
            added.push(b'\n');
        }
        token = page.next_page_token;
        more = token.is_some();
    }
    let stem = session.id.to_string();
    let count = session.event_count;
    let (compiler, trace) = blocking(move || {
        let mut compiler = match kept {
            Some((_, compiler)) => compiler,
            None => Compiler::new(stem, CompileOptions { format: InputFormat::Memex, strict: false }),
        };
        compiler.push(&added);
        let kept = compiler.clone();
        (kept, compiler.finish())
    })
    .await?;
    // Keep the newest compiler (a slower compile of an older version must not replace it).
    if exports.get(&key).is_none_or(|e| e.count <= count) {
        exports.insert(key, Arc::new(Export::new(count, compiler)));
    }
    trace.map(|trace| (trace, resumed)).map_err(uncompilable)
}

/// Runs a compile on the blocking pool: it is CPU work of the session's size.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ViewError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ViewError::Task(e.to_string()))
}
