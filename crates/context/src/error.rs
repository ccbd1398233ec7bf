use memex_event::FieldError;
use memex_pointer::FullViewError;
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
    /// The request is valid, but the store's state does not allow it as asked
    /// (`FAILED_PRECONDITION` naming the field): e.g. a required pack block over its budget.
    #[error("{field}: {message}")]
    Precondition { field: String, message: String },
    /// The window kept changing under concurrent compactions.
    #[error("session {0}: the window changed during compaction too many times; retry")]
    WindowContention(Uuid),
    /// The full view could not place events (its kind says whether to retry).
    #[error(transparent)]
    FullView(#[from] FullViewError),
    /// A seam (the search index, the pack writer) failed.
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
