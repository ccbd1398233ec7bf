//! Placed events' blocks (range and lines), kept per session for its newest compiled version:
//! packs place the same events turn after turn, and a new version of a live session takes over
//! the blocks that appending could not have moved.
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use memex_event::{NamespaceId, Seq, SessionId};
use memex_pointer::ViewBlock;
use uuid::Uuid;

use crate::{CompiledSession, ViewError, Views};

/// Session → its newest placed version's blocks by seq. One cache entry per session, not per
/// event: a pack places a couple of hundred events of one or two sessions, and a cache lookup per
/// event was about 6% of a pack's CPU.
/// Keyed by (namespace, session): session ids are unique per namespace only.
pub(crate) type BlockCache = moka::sync::Cache<(Uuid, Uuid), Arc<SessionBlocks>>;

/// The blocks of one compiled session version placed so far, and the bytes they hold.
pub(crate) struct SessionBlocks {
    version: u64,
    /// Blocks ending before this line never change in a later version (see [`stable_before`]).
    stable_before: u32,
    by_seq: RwLock<HashMap<Seq, Option<ViewBlock>>>,
    bytes: AtomicU64,
}

impl SessionBlocks {
    fn of(compiled: &CompiledSession) -> SessionBlocks {
        SessionBlocks {
            version: compiled.version(),
            stable_before: stable_before(compiled),
            by_seq: RwLock::new(HashMap::new()),
            bytes: AtomicU64::new(0),
        }
    }

    /// The blocks of `compiled`, a later version of the same session: those of this version that
    /// lie before its stable line, as they are (an append never moves them), the rest to place.
    fn carried_into(&self, compiled: &CompiledSession) -> SessionBlocks {
        let next = SessionBlocks::of(compiled);
        let carried: HashMap<Seq, Option<ViewBlock>> = match self.by_seq.read() {
            Ok(by_seq) => by_seq
                .iter()
                .filter(|(_, b)| b.as_ref().is_some_and(|b| b.range.last < self.stable_before))
                .map(|(s, b)| (*s, b.clone()))
                .collect(),
            Err(_) => HashMap::new(),
        };
        next.bytes.store(carried.values().map(block_weight).sum(), Ordering::Relaxed);
        if let Ok(mut by_seq) = next.by_seq.write() {
            *by_seq = carried;
        }
        next
    }
}

/// The first full-view line of the session's first chain that a later version may change: the
/// separator before its last section (appending memex events never changes a full-view line
/// before it: `memex-vcc`'s `appending_events_keeps_earlier_lines`). A chain closed by a later
/// one never changes, nor does an imported trace.
pub(crate) fn stable_before(compiled: &CompiledSession) -> u32 {
    let chains = compiled.trace.chains();
    if compiled.is_imported() || chains.len() > 1 {
        return u32::MAX;
    }
    chains.first().and_then(|c| c.sections().last()).map_or(0, |s| s.range().first.saturating_sub(2))
}

pub(crate) fn cache(max_bytes: u64) -> BlockCache {
    // Weighed when (re)inserted: placing inserts an entry again after adding to it.
    let weigh = |_: &(Uuid, Uuid), b: &Arc<SessionBlocks>| {
        u32::try_from(b.bytes.load(Ordering::Relaxed) + 64).unwrap_or(u32::MAX)
    };
    moka::sync::Cache::builder().weigher(weigh).max_capacity(max_bytes).build()
}

/// What a placed block holds in a session's map: each line's text and `String`, and (64) the
/// map's slot for it and the lines' `Arc`. `tests/block_weights.rs` holds it to a counting
/// allocator.
pub fn block_weight(b: &Option<ViewBlock>) -> u64 {
    let lines = b.as_ref().map_or(0, |b| b.lines.iter().map(|l| l.len() + 24).sum::<usize>());
    lines as u64 + 64
}

impl Views {
    /// Each event's block in the first chain of the session's view at `head` (see
    /// [`memex_pointer::FullView::blocks`]).
    pub(crate) async fn place_blocks(
        &self,
        ns: NamespaceId,
        session: SessionId,
        head: Option<Seq>,
        seqs: &[Seq],
    ) -> Result<Vec<Option<ViewBlock>>, ViewError> {
        let compiled = self.compiled_at(ns, session, head.map(Seq::get)).await?;
        let version = compiled.version();
        // The session's newest version is kept; an older one asked for is placed apart.
        let key = (ns.0, session.0);
        let (placed, kept) = match self.blocks.get(&key) {
            Some(b) if b.version == version => (b, true),
            Some(b) if b.version > version => (Arc::new(SessionBlocks::of(&compiled)), false),
            Some(b) => {
                let next = b.carried_into(&compiled);
                let carried = next.by_seq.read().map_or(0, |m| m.len() as u64);
                self.stats.carried.fetch_add(carried, Ordering::Relaxed);
                (Arc::new(next), true)
            }
            None => (Arc::new(SessionBlocks::of(&compiled)), true),
        };
        let poisoned = || ViewError::Task("block cache lock poisoned".to_owned());
        let mut out: Vec<Option<Option<ViewBlock>>> = {
            let by_seq = placed.by_seq.read().map_err(|_| poisoned())?;
            seqs.iter().map(|s| by_seq.get(s).cloned()).collect()
        };
        let missing: Vec<Seq> = seqs.iter().zip(&out).filter(|(_, b)| b.is_none()).map(|(s, _)| *s).collect();
        if missing.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        let by_seq = self.lines_in(ns, &compiled, &missing).await?;
        let chains = compiled.trace.chains();
        let place = |seq: &Seq| {
            let lines = *by_seq.get(seq)?;
            // Pointers cite one line space; events of later chains (after a compaction inside an
            // imported trace) are cited by seq.
            if lines.chain != 1 {
                return None;
            }
            let chain = chains.first()?;
            Some(ViewBlock { range: lines.range, lines: chain.read_line_texts(lines.range).into() })
        };
        // Placed outside the lock (reading a block's lines is the work), kept under it.
        let mut fresh: Vec<(Seq, Option<ViewBlock>)> = Vec::with_capacity(missing.len());
        for (seq, slot) in seqs.iter().zip(out.iter_mut()) {
            if slot.is_none() {
                let block = place(seq);
                fresh.push((*seq, block.clone()));
                *slot = Some(block);
            }
        }
        {
            let mut by_seq = placed.by_seq.write().map_err(|_| poisoned())?;
            for (seq, block) in fresh {
                if let Entry::Vacant(v) = by_seq.entry(seq) {
                    placed.bytes.fetch_add(block_weight(&block), Ordering::Relaxed);
                    v.insert(block);
                }
            }
        }
        // Weighed again with what it now holds (unless a newer version took the place meanwhile).
        if kept && self.blocks.get(&key).is_none_or(|b| b.version <= version) {
            self.blocks.insert(key, placed);
        }
        Ok(out.into_iter().flatten().collect())
    }
}
