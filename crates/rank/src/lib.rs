//! The pure core of memex search: how ranked lists are fused (reciprocal-rank fusion), how a result
//! list is diversified (maximal marginal relevance), how texts are scored by BM25 or by embedding
//! similarity, how text becomes terms (the one analyzer), how event text is cut into index chunks, and the
//! adaptive view's ranked predicates (BM25 over a chain's blocks, externally scored blocks).
//!
//! Everything here is a plain function over plain data, so the adapters (tantivy, pgvector, candle,
//! gRPC) stay thin and this is where the tests are — including property tests.
//!
//! **Architecture invariant:** pure. No I/O, no clock, no async, no threads; it knows nothing about
//! tantivy, Postgres, candle or gRPC. Same input, same output, in the same order (ties are broken
//! by a total order on keys), which is what lets a rebuilt index answer exactly like the live one.

pub mod bm25;
pub mod chunk;
pub mod eval;
pub mod fusion;
pub mod mmr;
pub mod predicate;
pub mod semantic;
pub mod text;

pub use bm25::{Bm25, Bm25Params, bm25_scores};
pub use chunk::{Chunk, ChunkOptions, chunk_text};
pub use fusion::{FusedHit, Part, RankedList, RrfOptions, rrf};
pub use mmr::mmr;
pub use predicate::{Bm25Blocks, ScoredBlocks};
pub use semantic::{cosine, semantic_scores};
pub use text::{query_terms, tokenize};
