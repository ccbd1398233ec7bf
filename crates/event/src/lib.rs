//! The event model of memex: what an event is, which inputs are acceptable, and how a large tool
//! output becomes an artifact plus an excerpt.
//!
//! This crate is the pure core of ingestion. It does no I/O, reads no clock and knows nothing about
//! Postgres or gRPC: the store and the server call it to decide, then do the writing themselves.
//! Everything a client sends is checked here first, so a rejected batch is rejected before anything
//! is written, with a [`FieldError`] that names the offending field (`events[3].kind`).

mod artifact;
mod batch;
mod ids;
mod kind;
mod record;
mod role;

pub use artifact::{ArtifactId, ArtifactIdError, ArtifactPolicy, DEFAULT_MEDIA_TYPE, excerpt};
pub use batch::{
    BatchLimits, EventInput, FieldError, NewArtifact, NewEvent, PreparedBatch, batch_fingerprint, prepare_batch,
};
pub use ids::{EventId, NamespaceId, Seq, SessionId};
pub use kind::{EventKind, KindError};
pub use record::{ArtifactRecord, EventRecord};
pub use role::{Role, role_of_kind};
