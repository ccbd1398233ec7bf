//! Virtual Context memory (VC paper §3), the pure core. From a session's events it derives
//! **turns** (`turns.rs`), their **topic tags** (`tags.rs`), **segments** of related turns
//! (`segment.rs`) with **extractive summaries** (`summary.rs`), and **facts** (`facts/`) with
//! **supersession** chains (`supersede.rs`); across a namespace, **topics** (`topics.rs`:
//! canonical tags, splits of over-broad ones, the greedy set cover); for readers, **verb
//! expansion** (`verbs.rs`), **dates** (`dates.rs`) and **paging** (`paging.rs`).
//! `interpreter.rs` is the seam between the heuristic reading here and an LLM's.
//!
//! **Architecture invariant:** pure — no I/O, no clock, no async. Same events in, same memory
//! out, byte for byte; nothing depends on the order sessions are processed in.
//! **Architecture invariant:** everything derived names the seqs it came from, so the shell can
//! cite it by pointer into the full view.

pub mod dates;
pub mod facts;
pub mod interpreter;
pub mod lines;
pub mod model;
pub mod paging;
pub mod segment;
pub mod session;
pub mod summary;
pub mod supersede;
pub mod tags;
pub mod topics;
pub mod turns;
pub mod verbs;

#[cfg(test)]
mod testkit;

pub use facts::FactExtractor;
pub use interpreter::{Heuristic, InterpretError, Interpreter, Lookback, TurnReading, Verdict};
pub use model::{
    Fact, FactType, MemEvent, PartRole, Segment, SeqSpan, Summary, SummaryLine, TaggedTurn, TemporalStatus, Turn,
    TurnPart,
};
pub use paging::{Depth, WorkingSet};
pub use segment::SegmentConfig;
pub use summary::SummaryConfig;
pub use topics::{Topic, TopicConfig};
