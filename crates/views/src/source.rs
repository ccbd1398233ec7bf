//! What a session's views are compiled from: the raw file of an imported trace, or the session's
//! events as JSON lines (the `memex` input format).
use std::sync::Arc;

use memex_store::{SeqRange, Session, Store};
use memex_vcc::InputFormat;
use uuid::Uuid;

use crate::ViewError;

/// A live session's events 1..=`count`, as memex-event JSON lines.
pub(crate) struct Export {
    count: u64,
    bytes: bytes::Bytes,
}

/// (namespace, live session) → its newest export. Events never change, so a newer version's export
/// is this one plus the events after it: an agent loop's turn reads and encodes only what it
/// appended, not the whole session.
pub(crate) type Exports = moka::sync::Cache<(Uuid, Uuid), Arc<Export>>;

pub(crate) fn exports(max_bytes: u64) -> Exports {
    moka::sync::Cache::builder()
        .max_capacity(max_bytes)
        .weigher(|_, e: &Arc<Export>| u32::try_from(e.bytes.len() + 64).unwrap_or(u32::MAX))
        .build()
}

/// The bytes a session compiles from, the stem its views are named after, and their format.
pub(crate) async fn source_bytes(
    store: &Store,
    exports: &Exports,
    ns: Uuid,
    session: &Session,
) -> Result<(bytes::Bytes, String, InputFormat), ViewError> {
    if let Some(src) = &session.source {
        let artifact = store.artifact(ns, src.artifact).await?;
        let format = session.source_format.parse().unwrap_or(InputFormat::Auto);
        return Ok((artifact.bytes.into(), memex_vcc::stem_of(&src.file_name), format));
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
        let range = SeqRange { from, to: Some(session.event_count) };
        let page = store.events_in_range(ns, session.id, range, 5000, token.as_deref()).await?;
        for e in page.events {
            out.extend_from_slice(e.into_record().to_json_line().as_bytes());
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
