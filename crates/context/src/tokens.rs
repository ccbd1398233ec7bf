//! Token counts, cached by content: the same text (an event rendered the same way, a manifest, a
//! task card) is counted once per process and tokenizer.
use memex_tokens::{TokenCounter, Tokenizer};

/// A tokenizer with a shared cache in front of it.
#[derive(Clone)]
pub struct CachedCounter {
    tokenizer: Tokenizer,
    cache: moka::sync::Cache<(Tokenizer, [u8; 16]), u32>,
}

/// Texts shorter than this are counted directly: hashing would cost as much. (A cached count of
/// an 80-byte text took 0.33 µs against 1.34 µs to count it; 40 bytes, 0.93 µs to count.)
const MIN_CACHED: usize = 32;

impl CachedCounter {
    pub fn new(tokenizer: Tokenizer, cache: moka::sync::Cache<(Tokenizer, [u8; 16]), u32>) -> CachedCounter {
        CachedCounter { tokenizer, cache }
    }

    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }
}

impl TokenCounter for CachedCounter {
    fn count(&self, text: &str) -> usize {
        if text.len() < MIN_CACHED {
            return self.tokenizer.count(text);
        }
        let mut key = [0u8; 16];
        key.copy_from_slice(&blake3::hash(text.as_bytes()).as_bytes()[..16]);
        let t = self.tokenizer;
        self.cache.get_with((t, key), || u32::try_from(t.count(text)).unwrap_or(u32::MAX)) as usize
    }
}

/// A cache of token counts holding up to `entries` texts.
pub fn count_cache(entries: u64) -> moka::sync::Cache<(Tokenizer, [u8; 16]), u32> {
    moka::sync::Cache::builder().max_capacity(entries).build()
}
