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

    /// The disk under the index is full (or over quota): the index cannot take new documents
    /// until space returns. Postgres still holds every event, so the index catches up then.
    pub fn storage_full(&self) -> bool {
        fn full(e: &std::io::Error) -> bool {
            e.kind() == std::io::ErrorKind::StorageFull
                || e.kind() == std::io::ErrorKind::QuotaExceeded
                || matches!(e.raw_os_error(), Some(28 | 122)) // ENOSPC, EDQUOT
        }
        use tantivy::TantivyError as T;
        use tantivy::directory::error::OpenWriteError as W;
        let direct = match self {
            IndexError::Io { source, .. } => full(source),
            IndexError::Tantivy(T::IoError(e)) => full(e),
            IndexError::Tantivy(T::OpenWriteError(W::IoError { io_error, .. })) => full(io_error),
            _ => false,
        };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(self);
        let mut chained = false;
        while let Some(e) = cause {
            chained |= e.downcast_ref::<std::io::Error>().is_some_and(full);
            cause = e.source();
        }
        direct || chained
    }

    /// The index could not write: its disk is full, an I/O error, or a writer thread that died
    /// of one (tantivy then reports only that the thread died). The failed catch-up was rolled
    /// back and the index is derived state, caught up from Postgres on the next try, so this is
    /// worth a retry rather than an internal error.
    pub fn write_failed(&self) -> bool {
        use tantivy::TantivyError as T;
        self.storage_full()
            || matches!(self, IndexError::Tantivy(T::ErrorInThread(_) | T::IoError(_) | T::OpenWriteError(_)))
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> IndexError {
        IndexError::Io { path: path.display().to_string(), source }
    }
}
