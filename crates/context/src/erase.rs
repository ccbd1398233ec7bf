//! What an erasure (or a retention policy) takes from the stored packs (the store streams them;
//! this reads the stored format). A pack goes when it belongs to an erased session or quotes one
//! (its stored bytes name an erased session's id: every item and pointer does), or it expired. A
//! chunk goes when a pack that goes names it, or it names an erased session itself, and no pack
//! that stays names it.
use std::collections::HashSet;

use memex_store::PackScan;
use uuid::Uuid;

use crate::ContextEngine;
use crate::stored::{ChunkId, Stored, decompress_chunk};

struct Scan {
    sessions: HashSet<Uuid>,
    /// Packs that go whatever they hold (expired).
    expired: HashSet<Uuid>,
    needles: Vec<String>,
    /// Chunks whose bytes name an erased session.
    tainted: HashSet<ChunkId>,
    /// Packs of other sessions that go.
    doomed: Vec<Uuid>,
    /// Chunks named by packs that go / that stay.
    dropped: HashSet<ChunkId>,
    kept: HashSet<ChunkId>,
}

impl Scan {
    fn names_erased(&self, bytes: &[u8]) -> bool {
        let text = String::from_utf8_lossy(bytes);
        self.needles.iter().any(|n| text.contains(n.as_str()))
    }
}

impl PackScan for Scan {
    fn chunk(&mut self, id: &[u8], body: &[u8]) -> Result<(), String> {
        let id: ChunkId = id.try_into().map_err(|_| format!("a pack chunk id of {} bytes", id.len()))?;
        let bytes = decompress_chunk(&id, body).map_err(|e| e.to_string())?;
        if self.names_erased(&bytes) {
            self.tainted.insert(id);
        }
        Ok(())
    }

    fn pack(&mut self, id: Uuid, session: Uuid, stored: &[u8]) -> Result<(), String> {
        let bytes = zstd::decode_all(stored).map_err(|e| format!("pack {id}: {e}"))?;
        let chunks = Stored::parse(&bytes).and_then(|s| s.chunk_ids()).map_err(|e| format!("pack {id}: {e}"))?;
        let own = self.sessions.contains(&session);
        let expired = self.expired.contains(&id);
        if own || expired || self.names_erased(&bytes) || chunks.iter().any(|c| self.tainted.contains(c)) {
            if !own && !expired {
                self.doomed.push(id);
            }
            self.dropped.extend(chunks);
        } else {
            self.kept.extend(chunks);
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> (Vec<Uuid>, Vec<[u8; 16]>) {
        let mut chunks: Vec<ChunkId> =
            self.dropped.union(&self.tainted).filter(|c| !self.kept.contains(*c)).copied().collect();
        chunks.sort_unstable();
        (self.doomed, chunks)
    }
}

impl ContextEngine {
    /// The scan an erasure of `sessions` runs over the stored packs.
    pub fn erasure_scan(&self, sessions: &[Uuid]) -> Box<dyn PackScan> {
        self.pack_scan(sessions, &[])
    }

    /// The scan that finds the chunks only `expired` packs name.
    pub fn expiry_scan(&self, expired: &[Uuid]) -> Box<dyn PackScan> {
        self.pack_scan(&[], expired)
    }

    fn pack_scan(&self, sessions: &[Uuid], expired: &[Uuid]) -> Box<dyn PackScan> {
        Box::new(Scan {
            expired: expired.iter().copied().collect(),
            sessions: sessions.iter().copied().collect(),
            needles: sessions.iter().map(Uuid::to_string).collect(),
            tainted: HashSet::new(),
            doomed: Vec::new(),
            dropped: HashSet::new(),
            kept: HashSet::new(),
        })
    }

    /// Forgets everything this process holds about events and packs: after an erasure, events
    /// did change, and chunks known to be stored may be gone.
    pub fn forget_all(&self) {
        self.premises.invalidate_all();
        self.session_tasks.invalidate_all();
        self.words.invalidate_all();
        self.events.invalidate_all();
        self.tails.invalidate_all();
        self.standing.invalidate_all();
        self.tool_names.invalidate_all();
        self.stored_chunks.invalidate_all();
    }
}
