//! Packs as they are stored: the pack's JSON without its text (a copy of the blocks' texts, rebuilt
//! when read), zstd-compressed with a context kept per thread.
use memex_pack::{Budgets, RetrievalPack};

use crate::{ContextError, Result};

/// zstd level for stored packs: fast, and packs (repetitive JSON) shrink about 4×.
const PACK_ZSTD_LEVEL: i32 = 1;

/// A pack as stored: the pack without its text (a copy of the blocks' texts, rebuilt when read).
#[derive(serde::Serialize)]
struct StoredPack<'a> {
    tokens: usize,
    blocks: &'a [memex_pack::PackBlock],
    items: &'a [memex_pack::PackItem],
    decisions: &'a [memex_pack::Decision],
    budgets: &'a Budgets,
}

/// A pack as stored: its JSON, zstd-compressed.
pub(crate) fn compress_pack(pack: &RetrievalPack) -> Result<Vec<u8>> {
    let stored = StoredPack {
        tokens: pack.tokens,
        blocks: &pack.blocks,
        items: &pack.items,
        decisions: &pack.decisions,
        budgets: &pack.budgets,
    };
    let json =
        serde_json::to_vec(&stored).map_err(|e| ContextError::Corrupt { what: "pack", message: e.to_string() })?;
    thread_local! {
        // A compression context per thread: creating one per pack (zeroed tables) cost as much
        // as the compression itself.
        static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let failed = |e: std::io::Error| ContextError::Corrupt { what: "pack", message: format!("compression: {e}") };
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        let compressor = match c.as_mut() {
            Some(z) => z,
            None => c.insert(zstd::bulk::Compressor::new(PACK_ZSTD_LEVEL).map_err(failed)?),
        };
        compressor.compress(&json).map_err(failed)
    })
}

/// A stored pack, its text rebuilt from its blocks (packs stored before the text was left out
/// still carry it).
pub(crate) fn decompress_pack(stored: &[u8]) -> Result<RetrievalPack> {
    let corrupt = |message: String| ContextError::Corrupt { what: "pack", message };
    let bytes = zstd::decode_all(stored).map_err(|e| corrupt(e.to_string()))?;
    let mut pack: RetrievalPack = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    if pack.text.is_empty() {
        pack.text = RetrievalPack::joined(&pack.blocks);
    }
    Ok(pack)
}

#[cfg(test)]
mod tests {
    use memex_pack::{BlockKind, PackBlock};

    use super::*;

    fn pack() -> RetrievalPack {
        let block = |kind, text: &str| PackBlock { kind, text: text.into(), tokens: 3, budget: 10 };
        let blocks = vec![
            block(BlockKind::System, "## system\nbe brief\n"),
            block(BlockKind::TaskState, ""),
            block(BlockKind::User, "## user\nhi\n"),
        ];
        RetrievalPack {
            text: RetrievalPack::joined(&blocks),
            tokens: 9,
            blocks,
            items: Vec::new(),
            decisions: Vec::new(),
            budgets: Budgets::default(),
        }
    }

    #[test]
    fn a_stored_pack_reads_back_exactly_without_storing_its_text_twice() {
        let p = pack();
        assert_eq!(p.text, "## system\nbe brief\n\n## user\nhi\n");
        let stored = compress_pack(&p).expect("compress");
        let json = zstd::decode_all(stored.as_slice()).expect("zstd");
        assert!(!String::from_utf8(json).expect("utf-8").contains("\"text\":\"## system\\nbe brief\\n\\n## user"));
        assert_eq!(decompress_pack(&stored).expect("decompress"), p);
    }

    #[test]
    fn packs_stored_with_their_text_still_read() {
        let mut p = pack();
        p.text = "as it was stored".into();
        let old = zstd::encode_all(serde_json::to_vec(&p).expect("json").as_slice(), 1).expect("zstd");
        assert_eq!(decompress_pack(&old).expect("decompress"), p);
        assert!(decompress_pack(b"not zstd").is_err());
    }
}
