//! One compiled version of a session, and what is derived from it on first use.
use std::collections::HashMap;
use std::sync::OnceLock;

use memex_pointer::{LineRange, ViewLines};
use memex_store::Session;
use memex_vcc::{CompiledTrace, Compiler};

/// About what a session row's strings take (ids, agent, task, source, metadata).
const SESSION_ROW_BYTES: usize = 512;

/// One compiled version of a session: its IR (one chain per compaction segment) and, made on first
/// use, its rendered full views and the record → lines map.
pub struct CompiledSession {
    pub session: Session,
    pub trace: CompiledTrace,
    /// Rendered full views, per chain: the hot path of `CompileView`.
    full: Vec<OnceLock<bytes::Bytes>>,
    /// Input line of a record → the full-view lines of the blocks it produced.
    by_source_line: OnceLock<HashMap<u32, ViewLines>>,
    /// `trace.size_bytes()`, counted once (it walks every block; weights are asked on hot paths).
    ir_bytes: usize,
    /// A live session's compiler after this version, unfinished: the next version takes it and
    /// reads on from it with the events it adds. Kept here, not in a cache of its own, because
    /// the two share their text: one entry weighs it once, and is evicted as one.
    next: std::sync::Mutex<Option<Compiler>>,
    /// What the compiler holds beside the IR (the text they share counted in `ir_bytes`).
    next_bytes: usize,
}

impl CompiledSession {
    pub(crate) fn new(session: Session, trace: CompiledTrace, next: Option<Compiler>) -> CompiledSession {
        let full = (0..trace.chains().len()).map(|_| OnceLock::new()).collect();
        let ir_bytes = trace.size_bytes();
        let next_bytes = next.as_ref().map_or(0, |c| c.size_bytes().saturating_sub(c.text_bytes()));
        let next = std::sync::Mutex::new(next);
        CompiledSession { session, trace, full, by_source_line: OnceLock::new(), ir_bytes, next, next_bytes }
    }

    /// The compiler after this version, for the next version to read on from; `None` once taken
    /// (a second compile of a later version starts afresh).
    pub(crate) fn take_compiler(&self) -> Option<Compiler> {
        // A compile that panicked while holding the lock left nothing half-done in it.
        self.next.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    /// Whether this is an imported trace (read-only: its lines never move).
    pub fn is_imported(&self) -> bool {
        self.session.source.is_some()
    }

    /// The version its cached derivations are keyed by: an imported trace never changes (0); a
    /// live session's version is its event count, the seq of its last event.
    pub fn version(&self) -> u64 {
        if self.is_imported() { 0 } else { self.session.event_count }
    }

    /// The full-view lines of the blocks made from the input record at `source_line`.
    pub fn lines_of_record(&self, source_line: u32) -> Option<ViewLines> {
        self.record_lines().get(&source_line).copied()
    }

    /// Input line of each record → the full-view lines of the blocks it produced.
    pub(crate) fn record_lines(&self) -> &HashMap<u32, ViewLines> {
        self.by_source_line.get_or_init(|| {
            let mut map: HashMap<u32, ViewLines> = HashMap::new();
            for (c, chain) in self.trace.chains().iter().enumerate() {
                for b in chain.blocks() {
                    let r = b.range();
                    map.entry(b.source_line()).and_modify(|e| e.range = e.range.span(r)).or_insert(ViewLines {
                        chain: c as u32 + 1,
                        range: LineRange { first: r.first, last: r.last },
                    });
                }
            }
            map
        })
    }

    /// The full view of chain `i` (0-based); cloning the bytes is free.
    pub fn full_view(&self, i: usize) -> Option<bytes::Bytes> {
        let chain = self.trace.chains().get(i)?;
        Some(self.full.get(i)?.get_or_init(|| bytes::Bytes::from(chain.full_view())).clone())
    }

    /// What it holds, for the caches' byte caps: the IR and whichever of the rendered full views
    /// and the record → lines map have been made so far. Those are made after the compile is
    /// cached, so whoever makes one weighs it again ([`crate::Views::reweigh`]). A live session's
    /// kept compiler counts as made (its weight stays until the superseded version is dropped).
    pub(crate) fn weight(&self) -> u32 {
        let views: usize = self.full.iter().filter_map(OnceLock::get).map(bytes::Bytes::len).sum();
        let lines =
            self.by_source_line.get().map_or(0, |m| m.capacity() * (std::mem::size_of::<(u32, ViewLines)>() + 1));
        let own = std::mem::size_of::<Self>() + self.full.capacity() * std::mem::size_of::<OnceLock<bytes::Bytes>>();
        let total = self.ir_bytes + self.next_bytes + views + lines + own + SESSION_ROW_BYTES;
        u32::try_from(total).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A rendered full view and the line map are weighed once made, so a cache that weighs the
    /// compile again after either counts what it then holds.
    #[test]
    fn the_weight_counts_the_views_and_the_map_once_made() {
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../vcc/tests/fixtures/traces/claude-code/spotter__tool_heavy.jsonl");
        let bytes = std::fs::read(path).unwrap();
        let opts = memex_vcc::CompileOptions { format: memex_vcc::InputFormat::Auto, strict: false };
        let trace = memex_vcc::compile_trace(&bytes, "s", opts).unwrap();
        let ir = trace.size_bytes();
        let session = Session {
            id: uuid::Uuid::nil(),
            namespace_id: uuid::Uuid::nil(),
            agent_id: "a".into(),
            parent_session_id: None,
            task_id: None,
            source_format: "claude-code".into(),
            metadata: None,
            created_at: chrono::DateTime::UNIX_EPOCH,
            event_count: 1,
            source: None,
            erased_by: None,
        };
        let c = CompiledSession::new(session, trace, None);
        let fresh = c.weight() as usize;
        assert!(fresh >= ir && fresh < ir + 4096, "a fresh compile weighs its IR: {fresh} for {ir}");
        let view = c.full_view(0).unwrap();
        let rendered = c.weight() as usize;
        assert!(rendered >= fresh + view.len(), "the rendered view counts: {rendered} after {fresh} + {}", view.len());
        let records = c.record_lines().len();
        assert!(records > 0);
        assert!(c.weight() as usize >= rendered + records * 16, "the line map counts");
    }
}
