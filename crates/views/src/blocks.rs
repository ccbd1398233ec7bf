//! Placed events' blocks (range and lines), kept per compiled session version: a version's lines
//! never change, and packs place the same events turn after turn.
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use memex_event::{NamespaceId, Seq, SessionId};
use memex_pointer::ViewBlock;
use uuid::Uuid;

use crate::{ViewError, Views};

/// (session, compiled version) → its events' blocks by seq. One cache entry per session, not per
/// event: a pack places a couple of hundred events of one or two sessions, and a cache lookup per
/// event was about 6% of a pack's CPU.
pub(crate) type BlockCache = moka::sync::Cache<(Uuid, u64), Arc<SessionBlocks>>;

/// The blocks of one compiled session version placed so far, and the bytes they hold.
#[derive(Default)]
pub(crate) struct SessionBlocks {
    by_seq: RwLock<HashMap<Seq, Option<ViewBlock>>>,
    bytes: AtomicU64,
}

pub(crate) fn cache(max_bytes: u64) -> BlockCache {
    // Weighed when (re)inserted: placing inserts an entry again after adding to it.
    let weigh = |_: &(Uuid, u64), b: &Arc<SessionBlocks>| {
        u32::try_from(b.bytes.load(Ordering::Relaxed) + 64).unwrap_or(u32::MAX)
    };
    moka::sync::Cache::builder().weigher(weigh).max_capacity(max_bytes).build()
}

fn block_bytes(b: &Option<ViewBlock>) -> u64 {
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
        let key = (session.0, compiled.version());
        let placed = self.blocks.get_with(key, || Arc::new(SessionBlocks::default()));
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
                    placed.bytes.fetch_add(block_bytes(&block), Ordering::Relaxed);
                    v.insert(block);
                }
            }
        }
        // Weighed again with what it now holds.
        self.blocks.insert(key, placed);
        Ok(out.into_iter().flatten().collect())
    }
}
