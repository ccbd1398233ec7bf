//! What an in-process cache over the store holds, for the metrics. The caches live in the crates
//! that read through them (views, context, search); this is the one shape they report in.

/// One cache's fill: entries, and its weight against its capacity in `unit`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSize {
    pub name: &'static str,
    pub entries: u64,
    pub weight: u64,
    pub capacity: u64,
    pub unit: CacheUnit,
}

/// What a cache's weight counts: estimated bytes (a weigher) or entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUnit {
    Bytes,
    Entries,
}

impl CacheUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheUnit::Bytes => "bytes",
            CacheUnit::Entries => "entries",
        }
    }
}
