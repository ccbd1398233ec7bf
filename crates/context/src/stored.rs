//! Packs as they are stored. A pack's bulk — its blocks' texts, its items and its decisions — is
//! cut into content-defined chunks, each kept once per namespace under its hash (`pack_chunks`);
//! the pack's row holds a small manifest that names them. A session's consecutive packs share
//! most of their bulk (the same tail, items and often whole blocks), so most of a pack's chunks
//! are already stored and a pack writes about a tenth of what it did as one compressed document:
//! less WAL to flush before BuildPack can answer.
//!
//! Chunks are cut at line ends chosen by the line's own bytes, so a block that gains lines at its
//! end and loses them at its start (a tail sliding by a turn) keeps most of its chunks. Items and
//! decisions are stored as JSON lines for the same reason. Reading concatenates the chunks: the
//! pack comes back byte for byte. Packs stored whole, before chunking (and before that with their
//! text), still read.
use memex_pack::{BlockKind, Budgets, Decision, Omission, PackBlock, PackItem, RetrievalPack};

use crate::{ContextError, Result};

/// zstd level for stored packs and chunks: fast, and packs (repetitive JSON) shrink about 4×.
const PACK_ZSTD_LEVEL: i32 = 1;

/// A chunk ends at a line end once it holds this many bytes and the line's hash says so …
const MIN_CHUNK: usize = 2 * 1024;
/// … (one line end in this many) …
const CUT_ONE_IN: u64 = 32;
/// … or at the first line end past this many bytes.
const MAX_CHUNK: usize = 16 * 1024;

/// A chunk's id: the first 16 bytes of the BLAKE3 hash of its bytes.
pub(crate) type ChunkId = [u8; 16];

/// A pack as stored: the manifest for its row and the chunks it names.
pub(crate) struct StoredPack {
    /// The manifest, zstd-compressed.
    pub manifest: Vec<u8>,
    /// Every chunk the manifest names, once each, in first-use order.
    pub ids: Vec<ChunkId>,
    /// The named chunks not known to be stored: (id, zstd of the chunk's bytes).
    pub new: Vec<(ChunkId, Vec<u8>)>,
}

/// What a pack's row holds. `v` first: it tells the format apart from whole packs.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Manifest {
    v: u32,
    tokens: usize,
    blocks: Vec<BlockHead>,
    budgets: Budgets,
    /// The blocks' texts, concatenated in block order.
    texts: Vec<String>,
    /// The items, one JSON object per line.
    items: Vec<String>,
    /// The decisions, one JSON object per line.
    decisions: Vec<String>,
    /// Blocks cut or left out (absent when none was, as in packs stored before it was recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    omitted: Vec<Omission>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct BlockHead {
    kind: BlockKind,
    tokens: usize,
    budget: usize,
    /// Bytes of the block's text in `texts`.
    len: usize,
}

const MANIFEST_VERSION: u32 = 2;

fn corrupt(message: impl Into<String>) -> ContextError {
    ContextError::Corrupt { what: "pack", message: message.into() }
}

fn compress(bytes: &[u8]) -> Result<Vec<u8>> {
    thread_local! {
        // A compression context per thread: creating one per pack (zeroed tables) cost as much
        // as the compression itself.
        static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let failed = |e: std::io::Error| corrupt(format!("compression: {e}"));
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        let compressor = match c.as_mut() {
            Some(z) => z,
            None => c.insert(zstd::bulk::Compressor::new(PACK_ZSTD_LEVEL).map_err(failed)?),
        };
        compressor.compress(bytes).map_err(failed)
    })
}

/// A chunk's bytes from its stored form, checked against its id.
pub(crate) fn decompress_chunk(id: &ChunkId, body: &[u8]) -> Result<Vec<u8>> {
    let bytes = zstd::decode_all(body).map_err(|e| corrupt(format!("chunk {}: {e}", hex(id))))?;
    if chunk_id(&bytes) != *id {
        return Err(corrupt(format!("chunk {} does not match its hash", hex(id))));
    }
    Ok(bytes)
}

fn chunk_id(bytes: &[u8]) -> ChunkId {
    let mut id = [0u8; 16];
    id.copy_from_slice(&blake3::hash(bytes).as_bytes()[..16]);
    id
}

fn hex(id: &ChunkId) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(32);
    for b in id {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

fn unhex(s: &str) -> Result<ChunkId> {
    let bad = || corrupt(format!("bad chunk id {s:?}"));
    if s.len() != 32 || !s.is_ascii() {
        return Err(bad());
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(id)
}

/// Where a line's end may end a chunk: FNV-1a over the line's last bytes (enough to vary, and
/// cheap on long lines).
fn cuts_here(line: &[u8]) -> bool {
    let tail = &line[line.len().saturating_sub(24)..];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in tail {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= line.len() as u64;
    h.wrapping_mul(0x0100_0000_01b3).is_multiple_of(CUT_ONE_IN)
}

/// `bytes` cut into content-defined chunks at line ends.
fn cut(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let (mut start, mut end) = (0usize, 0usize);
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        end += line.len();
        let len = end - start;
        if line.ends_with(b"\n") && (len >= MAX_CHUNK || (len >= MIN_CHUNK && cuts_here(line))) {
            out.push(&bytes[start..end]);
            start = end;
        }
    }
    if start < bytes.len() {
        out.push(&bytes[start..]);
    }
    out
}

/// Chunks of one pack as they are cut.
struct Chunker<'a, F: Fn(&ChunkId) -> bool> {
    is_stored: &'a F,
    ids: Vec<ChunkId>,
    new: Vec<(ChunkId, Vec<u8>)>,
}

impl<F: Fn(&ChunkId) -> bool> Chunker<'_, F> {
    /// Cuts `bytes` into chunks and returns their ids in order; compresses the ones not stored.
    fn add(&mut self, bytes: &[u8]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for c in cut(bytes) {
            let id = chunk_id(c);
            if !self.ids.contains(&id) {
                self.ids.push(id);
                if !(self.is_stored)(&id) {
                    self.new.push((id, compress(c)?));
                }
            }
            out.push(hex(&id));
        }
        Ok(out)
    }
}

fn json_lines<T: serde::Serialize>(values: &[T]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for v in values {
        serde_json::to_writer(&mut out, v).map_err(|e| corrupt(e.to_string()))?;
        out.push(b'\n');
    }
    Ok(out)
}

/// The pack as it is stored; `is_stored` tells the chunks already in the store.
pub(crate) fn store_pack(pack: &RetrievalPack, is_stored: &impl Fn(&ChunkId) -> bool) -> Result<StoredPack> {
    let mut chunker = Chunker { is_stored, ids: Vec::new(), new: Vec::new() };
    // Each block's text is cut on its own (no copy of them all); read back, they concatenate.
    let mut texts = Vec::new();
    for b in &pack.blocks {
        texts.extend(chunker.add(b.text.as_bytes())?);
    }
    let manifest = Manifest {
        v: MANIFEST_VERSION,
        tokens: pack.tokens,
        blocks: pack
            .blocks
            .iter()
            .map(|b| BlockHead { kind: b.kind, tokens: b.tokens, budget: b.budget, len: b.text.len() })
            .collect(),
        budgets: pack.budgets,
        texts,
        items: chunker.add(&json_lines(&pack.items)?)?,
        decisions: chunker.add(&json_lines(&pack.decisions)?)?,
        omitted: pack.omitted.clone(),
    };
    let json = serde_json::to_vec(&manifest).map_err(|e| corrupt(e.to_string()))?;
    Ok(StoredPack { manifest: compress(&json)?, ids: chunker.ids, new: chunker.new })
}

/// A pack's row as read: the pack itself when it was stored whole, else its manifest.
pub(crate) enum Stored {
    Whole(RetrievalPack),
    Chunked(Manifest),
}

impl Stored {
    /// Reads a row's stored bytes. Packs stored whole (before chunking, and before that with
    /// their text as well) come back at once, their text rebuilt when it was left out.
    pub(crate) fn read(stored: &[u8]) -> Result<Stored> {
        Self::parse(&zstd::decode_all(stored).map_err(|e| corrupt(e.to_string()))?)
    }

    /// [`Stored::read`] of bytes already decompressed.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Stored> {
        if !bytes.starts_with(b"{\"v\":") {
            let mut pack: RetrievalPack = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
            if pack.text.is_empty() {
                pack.text = RetrievalPack::joined(&pack.blocks);
            }
            return Ok(Stored::Whole(pack));
        }
        let m: Manifest = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if m.v != MANIFEST_VERSION {
            return Err(corrupt(format!("unknown stored-pack version {}", m.v)));
        }
        Ok(Stored::Chunked(m))
    }

    /// The chunk ids the pack needs (none for a pack stored whole).
    pub(crate) fn chunk_ids(&self) -> Result<Vec<ChunkId>> {
        match self {
            Stored::Whole(_) => Ok(Vec::new()),
            Stored::Chunked(m) => m.texts.iter().chain(&m.items).chain(&m.decisions).map(|s| unhex(s)).collect(),
        }
    }

    /// The pack, rebuilt exactly; `chunk` gives a named chunk's bytes.
    pub(crate) fn into_pack(self, chunk: impl Fn(&ChunkId) -> Result<Vec<u8>>) -> Result<RetrievalPack> {
        let m = match self {
            Stored::Whole(pack) => return Ok(pack),
            Stored::Chunked(m) => m,
        };
        let stream = |ids: &[String]| -> Result<Vec<u8>> {
            let mut out = Vec::new();
            for s in ids {
                out.extend(chunk(&unhex(s)?)?);
            }
            Ok(out)
        };
        let texts = String::from_utf8(stream(&m.texts)?).map_err(|e| corrupt(e.to_string()))?;
        let mut blocks = Vec::with_capacity(m.blocks.len());
        let mut at = 0usize;
        for b in m.blocks {
            let text = texts.get(at..at + b.len).ok_or_else(|| corrupt("block lengths do not match the texts"))?;
            at += b.len;
            blocks.push(PackBlock { kind: b.kind, text: text.to_owned(), tokens: b.tokens, budget: b.budget });
        }
        let items = json_lines_of::<PackItem>(&stream(&m.items)?)?;
        let decisions = json_lines_of::<Decision>(&stream(&m.decisions)?)?;
        Ok(RetrievalPack {
            text: RetrievalPack::joined(&blocks),
            tokens: m.tokens,
            blocks,
            items,
            decisions,
            budgets: m.budgets,
            omitted: m.omitted,
            layout: None,
        })
    }
}

fn json_lines_of<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<Vec<T>> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).map_err(|e| corrupt(e.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use memex_pack::{BlockKind, PackBlock};

    use super::*;

    fn pack(tail: &str) -> RetrievalPack {
        let block = |kind, text: &str| PackBlock { kind, text: text.into(), tokens: 3, budget: 10 };
        let blocks = vec![
            block(BlockKind::System, "## system\nbe brief\n"),
            block(BlockKind::TaskState, ""),
            block(BlockKind::Tail, tail),
            block(BlockKind::User, "## user\nhi\n"),
        ];
        RetrievalPack {
            text: RetrievalPack::joined(&blocks),
            tokens: 9,
            blocks,
            items: Vec::new(),
            decisions: Vec::new(),
            budgets: Budgets::default(),
            omitted: vec![Omission { block: BlockKind::TaskState, dropped: true, tokens: 40, budget: 10 }],
            layout: None,
        }
    }

    fn turns(from: usize, to: usize) -> String {
        (from..to)
            .map(|i| format!("(s1:{i}-{i}) [assistant_message]\nstep {i}: ran the tests, {} passed\n\n", i * 7))
            .collect()
    }

    fn store(p: &RetrievalPack) -> StoredPack {
        store_pack(p, &|_| false).expect("store")
    }

    fn load_pack(stored: &[u8], chunk: impl Fn(&ChunkId) -> Result<Vec<u8>>) -> Result<RetrievalPack> {
        Stored::read(stored)?.into_pack(chunk)
    }

    fn load(s: &StoredPack) -> Result<RetrievalPack> {
        let by_id: HashMap<ChunkId, Vec<u8>> = s.new.iter().cloned().collect();
        load_pack(&s.manifest, |id| decompress_chunk(id, by_id.get(id).ok_or_else(|| corrupt("missing"))?))
    }

    #[test]
    fn a_stored_pack_reads_back_exactly() {
        let p = pack(&turns(0, 400));
        let s = store(&p);
        assert!(s.ids.len() > 3, "{} chunks", s.ids.len());
        assert_eq!(s.new.len(), s.ids.len());
        assert_eq!(load(&s).expect("load"), p);
        // The manifest names its chunks; a missing chunk is an error, not a different pack.
        assert_eq!(Stored::read(&s.manifest).and_then(|m| m.chunk_ids()).expect("ids"), s.ids);
        assert!(load_pack(&s.manifest, |_| Err(corrupt("missing"))).is_err());
        // Same pack, same bytes; chunks known to be stored are not sent again.
        let again = store_pack(&p, &|id| s.ids[1..].contains(id)).expect("store");
        assert_eq!((&again.manifest, &again.ids), (&s.manifest, &s.ids));
        assert_eq!(again.new, s.new[..1]);
    }

    #[test]
    fn a_tail_that_slides_by_a_turn_keeps_most_of_its_chunks() {
        let a = store(&pack(&turns(0, 400)));
        let b = store_pack(&pack(&turns(3, 405)), &|id| a.ids.contains(id)).expect("store");
        let all = store(&pack(&turns(3, 405)));
        let bytes = |c: &[(ChunkId, Vec<u8>)]| c.iter().map(|(_, z)| z.len()).sum::<usize>();
        assert!(!b.new.is_empty());
        assert!(bytes(&b.new) * 4 < bytes(&all.new), "{} of {} bytes are new", bytes(&b.new), bytes(&all.new));
    }

    #[test]
    fn chunks_are_checked_against_their_ids() {
        let s = store(&pack(&turns(0, 50)));
        let (id, body) = &s.new[0];
        assert!(decompress_chunk(id, body).is_ok());
        let other = compress(b"something else\n").expect("zstd");
        assert!(decompress_chunk(id, &other).is_err());
    }

    #[test]
    fn packs_stored_whole_still_read() {
        let mut p = pack("## recent turns\nx\n");
        let whole =
            |p: &RetrievalPack| zstd::encode_all(serde_json::to_vec(p).expect("json").as_slice(), 1).expect("zstd");
        // Without the text (it is rebuilt from the blocks) …
        p.text = String::new();
        let mut want = p.clone();
        want.text = RetrievalPack::joined(&want.blocks);
        assert_eq!(load_pack(&whole(&p), |_| Err(corrupt("none"))).expect("load"), want);
        // … and with it.
        p.text = "as it was stored".into();
        assert_eq!(load_pack(&whole(&p), |_| Err(corrupt("none"))).expect("load"), p);
        assert!(load_pack(b"not zstd", |_| Err(corrupt("none"))).is_err());
    }
}
