//! What can go wrong in the memory's shell, in kinds the server maps to statuses.
use memex_memory::InterpretError;

#[derive(Debug, thiserror::Error)]
pub enum RecallError {
    /// A caller's mistake, naming the field.
    #[error("{field}: {message}")]
    Invalid { field: &'static str, message: String },
    #[error("{0} not found")]
    NotFound(String),
    /// Memory is switched off (`[memory] enabled = false`).
    #[error("memory is disabled on this server ([memory] enabled = false)")]
    Disabled,
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("event store: {0}")]
    Store(#[from] memex_store::StoreError),
    #[error("full view: {0}")]
    View(#[from] memex_pointer::FullViewError),
    #[error("search: {0}")]
    Search(String),
    #[error("interpreter: {0}")]
    Interpret(#[from] InterpretError),
    #[error("stored memory is corrupt: {0}")]
    Corrupt(String),
}

impl RecallError {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> RecallError {
        RecallError::Invalid { field, message: message.into() }
    }
}

impl From<serde_json::Error> for RecallError {
    fn from(e: serde_json::Error) -> Self {
        RecallError::Corrupt(e.to_string())
    }
}
