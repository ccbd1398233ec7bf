//! A compiled session's line map (input record → full-view lines), stored beside the session
//! (`view_line_maps`), so that a process citing a session's lines answers from a few bytes
//! instead of reading and compiling all its events: memory's answers, search hits' lines and
//! handoffs cite sessions no request has compiled lately.
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use memex_pointer::{LineRange, ViewLines};
use memex_store::tenant::{self, Tenant};
use memex_store::{LineMapRow, Store};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::{CacheStats, CompiledSession};

/// Bytes per entry: source line, chain, first and last line, little-endian u32s.
const ENTRY: usize = 16;
/// Maps waiting to be stored, at most; past it a map is not stored (the next miss of its session
/// compiles again and stores it then).
const QUEUE: usize = 4_096;
/// Maps stored by one statement, at most.
const BATCH: usize = 256;

/// Stores line maps in the background: one task, a statement per namespace for all the maps
/// waiting, so a burst of compiles (a first ListTopics) costs a few writes.
#[derive(Clone, Default)]
pub(crate) struct MapWriter(Arc<OnceLock<mpsc::Sender<(Uuid, LineMapRow)>>>);

impl MapWriter {
    /// Queues a map of a session of namespace `ns` (started on first use, on the caller's runtime).
    pub(crate) fn send(&self, store: &Store, stats: &Arc<CacheStats>, ns: Uuid, map: LineMapRow) {
        let tx = self.0.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(write_maps(store.clone(), stats.clone(), rx));
            tx
        });
        let _ = tx.try_send((ns, map));
    }
}

async fn write_maps(store: Store, stats: Arc<CacheStats>, mut rx: mpsc::Receiver<(Uuid, LineMapRow)>) {
    loop {
        // Whatever is waiting, once at least one is: 0 only when the channel is closed.
        let mut batch = Vec::with_capacity(BATCH);
        if rx.recv_many(&mut batch, BATCH).await == 0 {
            break;
        }
        // Each namespace's maps are written as that tenant; a statement may not touch a row
        // twice, so a session's newest map only.
        let mut by_ns: BTreeMap<Uuid, BTreeMap<Uuid, LineMapRow>> = BTreeMap::new();
        for (ns, map) in batch {
            let maps = by_ns.entry(ns).or_default();
            if maps.get(&map.session_id).is_none_or(|m| m.version < map.version) {
                maps.insert(map.session_id, map);
            }
        }
        for (ns, maps) in by_ns {
            let maps: Vec<LineMapRow> = maps.into_values().collect();
            match tenant::scope(Tenant::Namespace(ns), store.put_line_maps(ns, &maps)).await {
                Ok(n) => {
                    stats.maps_written.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => tracing::debug!(error = %e, maps = maps.len(), "line maps not stored"),
            }
        }
    }
}

/// Where each input record of one compiled version sits, ordered by source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineMap {
    version: u64,
    /// Chain 1's lines before this never change in a later version ([`crate::blocks`]).
    stable_before: u32,
    entries: Vec<(u32, ViewLines)>,
}

impl LineMap {
    pub(crate) fn of(compiled: &CompiledSession) -> LineMap {
        let mut entries: Vec<(u32, ViewLines)> = compiled.record_lines().iter().map(|(l, v)| (*l, *v)).collect();
        entries.sort_unstable_by_key(|(l, _)| *l);
        LineMap { version: compiled.version(), stable_before: crate::blocks::stable_before(compiled), entries }
    }

    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Bytes it holds, about (for the cache's cap).
    pub(crate) fn weight(&self) -> u32 {
        u32::try_from(self.entries.len() * ENTRY + 64).unwrap_or(u32::MAX)
    }

    /// The lines of every record asked (by seq) in version `current`, or `None` when this map
    /// cannot say for one of them.
    pub(crate) fn answer_all(
        &self,
        records: &[(memex_event::Seq, u32)],
        current: u64,
    ) -> Option<std::collections::HashMap<memex_event::Seq, ViewLines>> {
        let mut out = std::collections::HashMap::with_capacity(records.len());
        for (seq, line) in records {
            if let Some(l) = self.answer(*line, current)? {
                out.insert(*seq, l);
            }
        }
        Some(out)
    }

    pub(crate) fn row(&self, session: Uuid) -> LineMapRow {
        let mut map = Vec::with_capacity(self.entries.len() * ENTRY);
        for (line, v) in &self.entries {
            for n in [*line, v.chain, v.range.first, v.range.last] {
                map.extend_from_slice(&n.to_le_bytes());
            }
        }
        LineMapRow { session_id: session, version: self.version, stable_before: self.stable_before, map }
    }

    /// The map a row holds; `None` for bytes this code did not write (then the session is
    /// compiled, and its map written again).
    pub(crate) fn from_row(row: &LineMapRow) -> Option<LineMap> {
        if !row.map.len().is_multiple_of(ENTRY) {
            return None;
        }
        let mut entries = Vec::with_capacity(row.map.len() / ENTRY);
        for e in row.map.chunks_exact(ENTRY) {
            let n = |i: usize| e.get(i * 4..i * 4 + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
            let (line, chain, first, last) = (n(0)?, n(1)?, n(2)?, n(3)?);
            if chain == 0 || first == 0 || last < first || entries.last().is_some_and(|(l, _)| *l >= line) {
                return None;
            }
            entries.push((line, ViewLines { chain, range: LineRange { first, last } }));
        }
        Some(LineMap { version: row.version, stable_before: row.stable_before, entries })
    }

    /// The lines of the record at `source_line` in the session's version `current`: `Some(None)`
    /// when it renders none, `None` when this map cannot say (a later version, and the record
    /// not wholly in chain 1's stable lines).
    pub(crate) fn answer(&self, source_line: u32, current: u64) -> Option<Option<ViewLines>> {
        let found = self.entries.binary_search_by_key(&source_line, |(l, _)| *l).ok().and_then(|i| self.entries.get(i));
        if current == self.version {
            return Some(found.map(|(_, v)| *v));
        }
        match found {
            Some((_, v)) if current > self.version && v.chain == 1 && v.range.last < self.stable_before => {
                Some(Some(*v))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(version: u64, stable_before: u32) -> LineMap {
        let v = |chain, first, last| ViewLines { chain, range: LineRange { first, last } };
        LineMap {
            version,
            stable_before,
            entries: vec![(1, v(1, 1, 3)), (2, v(1, 5, 9)), (4, v(1, 11, 20)), (5, v(2, 1, 4))],
        }
    }

    #[test]
    fn rows_round_trip_and_foreign_bytes_are_refused() {
        let m = map(7, 10);
        let row = m.row(Uuid::nil());
        assert_eq!(row.map.len(), 4 * ENTRY);
        assert_eq!(LineMap::from_row(&row), Some(m));
        let mut short = row.clone();
        short.map.pop();
        assert_eq!(LineMap::from_row(&short), None);
        let mut unsorted = row.clone();
        unsorted.map[0] = 9; // the first source line now follows the second
        assert_eq!(LineMap::from_row(&unsorted), None);
    }

    #[test]
    fn a_later_version_is_answered_only_from_stable_lines() {
        let m = map(7, 10);
        // The very version: every record, and those that render nothing.
        assert_eq!(m.answer(2, 7).flatten().map(|v| v.range.first), Some(5));
        assert_eq!(m.answer(3, 7), Some(None));
        // A later one: chain 1 before line 10 only.
        assert_eq!(m.answer(2, 8).flatten().map(|v| v.range.last), Some(9));
        assert_eq!(m.answer(4, 8), None, "ends past the stable line");
        assert_eq!(m.answer(5, 8), None, "another chain");
        assert_eq!(m.answer(3, 8), None, "rendered nothing then, may render now");
        assert_eq!(m.answer(2, 6), None, "an older version than the map's");
    }
}
