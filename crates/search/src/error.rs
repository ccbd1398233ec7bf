use memex_event::FieldError;

/// What can go wrong in search and indexing.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// A request field is invalid; the message names it.
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error(transparent)]
    Store(#[from] memex_store::StoreError),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("text index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("index directory {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(transparent)]
    Embed(#[from] memex_embed::EmbedError),
    /// Another process holds this replica's index directory.
    #[error(
        "the index directory {dir} is in use by another memex process; give each process its own search.index_dir (MEMEX_SEARCH__INDEX_DIR)"
    )]
    DirInUse { dir: String },
    /// A vector search was asked of a replica with no embedding provider.
    #[error("needs an embedding provider ([embedding] provider)")]
    NoEmbedder,
    /// The query's vector could not be had in time: the model is saturated (retry).
    #[error("the embedding model is saturated; retry shortly")]
    VectorsUnavailable,
    /// A background task died (panic or cancellation).
    #[error("index task failed: {0}")]
    Task(String),
}

impl IndexError {
    /// The index's writer lock is held. Another process never holds it (the directory's own lock
    /// is taken at open), so it is this process's previous owner of the index still letting go
    /// (a server restarted in-process): worth a retry, not an internal error.
    pub fn writer_busy(&self) -> bool {
        matches!(
            self,
            IndexError::Tantivy(tantivy::TantivyError::LockFailure(tantivy::directory::error::LockError::LockBusy, _))
        )
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> IndexError {
        IndexError::Io { path: path.display().to_string(), source }
    }
}
