//! One compiled version of a session, and what is derived from it on first use.
use std::collections::HashMap;
use std::sync::OnceLock;

use memex_pointer::{LineRange, ViewLines};
use memex_store::Session;
use memex_vcc::CompiledTrace;

/// One compiled version of a session: its IR (one chain per compaction segment) and, made on first
/// use, its rendered full views and the record → lines map.
pub struct CompiledSession {
    pub session: Session,
    pub trace: CompiledTrace,
    /// Rendered full views, per chain: the hot path of `CompileView`.
    full: Vec<OnceLock<bytes::Bytes>>,
    /// Input line of a record → the full-view lines of the blocks it produced.
    by_source_line: OnceLock<HashMap<u32, ViewLines>>,
}

impl CompiledSession {
    pub(crate) fn new(session: Session, trace: CompiledTrace) -> CompiledSession {
        let full = (0..trace.chains().len()).map(|_| OnceLock::new()).collect();
        CompiledSession { session, trace, full, by_source_line: OnceLock::new() }
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

    pub(crate) fn weight(&self) -> u32 {
        u32::try_from(self.trace.size_bytes().saturating_mul(2)).unwrap_or(u32::MAX)
    }
}
