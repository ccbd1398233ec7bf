//! The ranking core of memex, shared by the index, packs and views: how text becomes terms (the
//! one analyzer, which the tantivy index registers too), BM25 over texts at hand, how ranked lists
//! are fused (reciprocal-rank or score fusion), how a result list is diversified (maximal marginal
//! relevance), cosine similarity, how event text is cut into index chunks, and retrieval metrics.
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
pub mod semantic;
pub mod text;

pub use bm25::{Bm25Doc, Bm25Params, TermCounts, bm25, bm25_scores, term_hash};
pub use chunk::{Chunk, ChunkOptions, chunk_text};
pub use fusion::{FusedHit, Part, RankedList, RrfOptions, max_scaled, rrf, score_sum};
pub use mmr::{Sketch, mmr, mmr_after};
pub use semantic::cosine;
pub use text::{for_each_term, query_terms, tokenize};
