//! How a session's views are compiled: from the raw file of an imported trace, or from the
//! session's events as JSON lines (the `memex` input format), a live session's new events only.
use memex_store::{SeqRange, Session, Store};
use memex_vcc::{CompileOptions, CompiledTrace, Compiler, InputFormat};
use uuid::Uuid;

use crate::ViewError;

/// Compiles a session's current version: an imported trace from its raw file, a live session
/// from its events. `kept` is the compiler of an earlier version (not a later one) of a live
/// session and that version (its event count): events never change, so the new version is that compiler fed the
/// events after it, and an agent loop's turn reads, encodes, lexes and finishes only what it
/// appended (a snapshot is byte for byte a compile from scratch: `memex-vcc`'s
/// `tests/resumed.rs`). A live session's compiler is returned, to be kept for the next version.
pub(crate) async fn compile(
    store: &Store,
    ns: Uuid,
    session: &Session,
    kept: Option<(u64, Compiler)>,
) -> Result<(CompiledTrace, Option<Compiler>), ViewError> {
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
    let from = kept.as_ref().map_or(1, |(count, _)| count + 1);
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
    let (compiler, trace) = blocking(move || {
        let mut compiler = match kept {
            Some((_, compiler)) => compiler,
            None => Compiler::new(stem, CompileOptions { format: InputFormat::Memex, strict: false }),
        };
        compiler.push(&added);
        let trace = compiler.snapshot();
        (compiler, trace)
    })
    .await?;
    trace.map(|trace| (trace, Some(compiler))).map_err(uncompilable)
}

/// Runs a compile on the blocking pool: it is CPU work of the session's size.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ViewError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ViewError::Task(e.to_string()))
}
