//! Pointer-manifest compaction (TRACE §6, A.4): the context window is a cache over the lossless
//! store, and compaction is cache eviction with pointers. [`plan_compaction`] picks victims in the
//! paper's order — oldest tool results, then tool calls, then dialogue; never system events,
//! never the protected tail — until the window is back under `budget - headroom`, and builds the
//! [`PointerManifest`] that takes their place: evicted seq ranges with full-view line ranges,
//! anchors (decisions, constraints, errors, user corrections), artifacts, hints (files,
//! identifiers, exact error strings, tools) and the task-state version, rendered in ~200 tokens.
//! Nothing is summarized and nothing is lost: the manifest names every evicted event, and the
//! store still has them (`ExpandManifest`).
//!
//! **Architecture invariant:** pure — plain data in, a plan out; no I/O, no clock, no async.
//! Checking that victims are persisted and indexed, and writing the manifest, is the adapter's
//! job (`memex-context`).
//! **Architecture invariant:** deterministic — the same window and parameters give the same
//! victims and the same manifest bytes.

mod hints;
mod manifest;
mod plan;

pub use hints::{AnchorKind, Hints, anchor_kind, derive_hints, error_line};
pub use manifest::{Anchor, EvictedSpan, PointerManifest};
pub use plan::{
    Compaction, CompactionParams, CompactionPlan, Window, WindowEvent, WindowManifest, plan_compaction, protected_from,
};

#[cfg(test)]
mod tests;
