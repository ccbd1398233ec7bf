use memex_event::{FieldError, SessionId};
use memex_pointer::FullViewError;
use memex_store::StoreError;

/// What can go wrong with a compiled session, in terms a caller can act on. The server maps each
/// variant to a status in its one table.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The request broke a rule (`INVALID_ARGUMENT` naming the field).
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored trace (or a session's stored events) no longer compiles: a bug, never the caller's.
    #[error("session {session}: the stored trace no longer compiles: {message}")]
    Uncompilable { session: SessionId, message: String },
    /// A compile ran on a thread that failed (it panicked or the runtime is shutting down).
    #[error("compile task failed: {0}")]
    Task(String),
}

impl ViewError {
    /// A copy of an error that several waiters of one compile share. The kinds callers act on
    /// (missing session, overload) survive; other store errors keep their message.
    pub(crate) fn shared(&self) -> ViewError {
        match self {
            ViewError::Invalid(f) => ViewError::Invalid(f.clone()),
            ViewError::Store(StoreError::SessionNotFound(id)) => ViewError::Store(StoreError::SessionNotFound(*id)),
            // The store reports only a pool timeout as unavailable.
            ViewError::Store(StoreError::Unavailable(_)) => {
                ViewError::Store(StoreError::Unavailable(sqlx::Error::PoolTimedOut))
            }
            ViewError::Uncompilable { session, message } => {
                ViewError::Uncompilable { session: *session, message: message.clone() }
            }
            other => ViewError::Task(other.to_string()),
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> ViewError {
        ViewError::Invalid(FieldError::new(field, message))
    }
}

/// What the full-view seam reports: the kind survives (a missing session is not an outage).
impl From<ViewError> for FullViewError {
    fn from(e: ViewError) -> FullViewError {
        match e {
            ViewError::Store(StoreError::SessionNotFound(id)) => FullViewError::SessionNotFound(SessionId(id)),
            // A database that cannot answer now may answer on a retry.
            ViewError::Store(StoreError::Unavailable(e) | StoreError::Database(e)) => {
                FullViewError::Unavailable(e.to_string())
            }
            other => FullViewError::Internal(other.to_string()),
        }
    }
}
