use memex_event::FieldError;
use memex_store::StoreError;
use uuid::Uuid;

/// What can go wrong in the context engine, in terms a caller can act on. The server maps each
/// variant to a status in its one table.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The request broke a rule (`INVALID_ARGUMENT` naming the field).
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something the request names does not exist (`NOT_FOUND` naming the field and the id).
    #[error("{field}: {message}")]
    NotFound { field: String, message: String },
    /// Events that compaction would evict are not in the search index yet (retry shortly).
    #[error("{count} event(s) to evict are not indexed yet (first: {first}); retry when the index has caught up")]
    NotIndexed { count: usize, first: Uuid },
    /// The window kept changing under concurrent compactions.
    #[error("session {0}: the window changed during compaction too many times; retry")]
    WindowContention(Uuid),
    /// A seam (search, full view) failed.
    #[error("{seam}: {message}")]
    Seam { seam: &'static str, message: String },
    /// Stored JSON that does not parse: a bug or a schema change, never the caller's fault.
    #[error("stored {what} does not parse: {message}")]
    Corrupt { what: &'static str, message: String },
}

impl ContextError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ContextError {
        ContextError::Invalid(FieldError::new(field, message))
    }
}
