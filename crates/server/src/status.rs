//! The one table mapping domain errors to gRPC statuses. A caller's mistake is never `INTERNAL`;
//! internal failures are logged here, where they are handled, and answered without details.
use memex_context::ContextError;
use memex_event::FieldError;
use memex_pointer::FullViewError;
use memex_search::IndexError;
use memex_store::{StoreError, unavailable_reason};
use memex_views::ViewError;
use tonic::Status;

pub fn field_status(e: &FieldError) -> Status {
    Status::invalid_argument(e.to_string())
}

pub fn store_status(e: &StoreError) -> Status {
    match e {
        StoreError::Invalid(f) => field_status(f),
        StoreError::NamespaceNotFound(_) => Status::not_found(format!("namespace: {e}")),
        StoreError::SessionNotFound(_) => Status::not_found(format!("session_id: {e}")),
        StoreError::SessionReadOnly(_) | StoreError::SessionErased(_) => {
            Status::failed_precondition(format!("session_id: {e}"))
        }
        StoreError::EventNotFound { .. } => Status::not_found(e.to_string()),
        StoreError::ArtifactNotFound(_) => Status::not_found(format!("artifact_id: {e}")),
        StoreError::KeyNotFound(_) => Status::not_found(format!("key_id: {e}")),
        StoreError::TaskNotFound(_) | StoreError::TaskVersionNotFound { .. } => {
            Status::not_found(format!("task_id: {e}"))
        }
        StoreError::StaleTaskState { .. } => Status::failed_precondition(format!("expected_version: {e}")),
        StoreError::StaleWindow(_) => Status::aborted(e.to_string()),
        StoreError::ManifestNotFound(_) => Status::not_found(format!("manifest_id: {e}")),
        StoreError::PackNotFound(_) => Status::not_found(format!("pack_id: {e}")),
        StoreError::ReportNotFound(_) => Status::not_found(format!("report_id: {e}")),
        StoreError::AlreadyExists(_) => Status::already_exists(e.to_string()),
        StoreError::Corrupt(_) => {
            tracing::error!(error = %e, "artifact failed verification");
            Status::data_loss(e.to_string())
        }
        StoreError::Overloaded(_) => crate::admission::retry_later(Status::resource_exhausted(e.to_string())),
        StoreError::Unavailable(e) => db_unavailable(e).unwrap_or_else(|| Status::unavailable(e.to_string())),
        StoreError::Database(_)
        | StoreError::Migrate(_)
        | StoreError::Compression(_)
        | StoreError::Scan(_)
        | StoreError::TenantMismatch(_) => {
            tracing::error!(error = %e, "internal error");
            Status::internal("internal error (logged on the server)")
        }
    }
}

/// `UNAVAILABLE` with a retry hint when `e` means the database cannot serve now (down,
/// restarting, saturated, refusing the server): retryable, never `INTERNAL` and never a claim of
/// overload when the database is simply gone.
fn db_unavailable(e: &sqlx::Error) -> Option<Status> {
    let reason = unavailable_reason(e)?;
    tracing::warn!(error = %e, "database unavailable");
    Some(crate::admission::retry_later(Status::unavailable(format!("{reason}; retry with backoff"))))
}

pub fn index_status(e: &IndexError) -> Status {
    match e {
        IndexError::Invalid(f) => field_status(f),
        IndexError::Store(s) => store_status(s),
        IndexError::Embed(memex_embed::EmbedError::Unavailable(_)) => {
            tracing::warn!(error = %e, "embedding server unavailable");
            Status::unavailable("the embedding server is unavailable; retry, or search with vector_weight = 0")
        }
        IndexError::VectorsUnavailable => {
            crate::admission::retry_later(Status::unavailable(format!("{e}; or ask without vectors")))
        }
        IndexError::Database(db) if unavailable_reason(db).is_some() => {
            db_unavailable(db).unwrap_or_else(|| Status::unavailable(e.to_string()))
        }
        e if e.storage_full() => {
            tracing::warn!(error = %e, "the text index's disk is full");
            crate::admission::retry_later(Status::unavailable(
                "the text index cannot grow: the disk under search.index_dir is full; events are stored, and search catches up once space returns",
            ))
        }
        e if e.write_failed() => {
            tracing::error!(error = %e, "the text index could not write");
            crate::admission::retry_later(Status::unavailable(
                "the text index could not take new events (logged on the server); retry shortly",
            ))
        }
        e if e.writer_busy() => {
            tracing::warn!(error = %e, "search index writer still held");
            crate::admission::retry_later(Status::unavailable("the search index is busy; retry shortly"))
        }
        _ => {
            tracing::error!(error = %e, "search failed");
            Status::internal("internal error (logged on the server)")
        }
    }
}

pub fn context_status(e: &ContextError) -> Status {
    match e {
        ContextError::Invalid(f) => field_status(f),
        ContextError::Store(s) => store_status(s),
        ContextError::NotFound { field, message } => Status::not_found(format!("{field}: {message}")),
        ContextError::Precondition { .. } => Status::failed_precondition(e.to_string()),
        ContextError::WindowContention(_) => Status::aborted(e.to_string()),
        ContextError::FullView(f) => full_view_status(f),
        ContextError::Seam { .. } => {
            tracing::warn!(error = %e, "a context seam failed");
            Status::unavailable(e.to_string())
        }
        ContextError::Corrupt { .. } => {
            tracing::error!(error = %e, "internal error");
            Status::internal("internal error (logged on the server)")
        }
    }
}

pub fn view_status(e: &ViewError) -> Status {
    match e {
        ViewError::Invalid(f) => field_status(f),
        ViewError::Store(s) => store_status(s),
        ViewError::Uncompilable { .. } | ViewError::Task(_) => {
            tracing::error!(error = %e, "internal error");
            Status::internal("internal error (logged on the server)")
        }
    }
}

fn full_view_status(e: &FullViewError) -> Status {
    match e {
        FullViewError::SessionNotFound(_) => Status::not_found(format!("session_id: {e}")),
        FullViewError::Unavailable(_) => {
            tracing::warn!(error = %e, "full view unavailable");
            Status::unavailable(e.to_string())
        }
        FullViewError::Internal(_) => {
            tracing::error!(error = %e, "internal error");
            Status::internal("internal error (logged on the server)")
        }
    }
}

pub fn recall_status(e: &memex_recall::RecallError) -> Status {
    use memex_recall::RecallError as R;
    match e {
        R::Invalid { field, message } => Status::invalid_argument(format!("{field}: {message}")),
        R::NotFound(what) => Status::not_found(format!("{what} not found")),
        R::Disabled => Status::failed_precondition(e.to_string()),
        R::Store(s) => store_status(s),
        R::View(v) => full_view_status(v),
        R::Db(db) if unavailable_reason(db).is_some() => {
            db_unavailable(db).unwrap_or_else(|| Status::unavailable(e.to_string()))
        }
        R::Search(_) | R::Interpret(_) => {
            tracing::warn!(error = %e, "memory: a dependency failed");
            crate::admission::retry_later(Status::unavailable(e.to_string()))
        }
        R::Db(_) | R::Corrupt(_) => {
            tracing::error!(error = %e, "internal error");
            Status::internal("internal error (logged on the server)")
        }
    }
}

/// A required UUID field.
pub fn parse_uuid(field: &str, value: &str) -> Result<uuid::Uuid, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field}: is required")));
    }
    uuid::Uuid::try_parse(value).map_err(|_| Status::invalid_argument(format!("{field}: {value:?} is not a UUID")))
}

/// The request's own `session_id`, required; recorded on the RPC's span (`memex.session_id`).
pub fn session_id(value: &str) -> Result<uuid::Uuid, Status> {
    let id = parse_uuid("session_id", value)?;
    crate::rpc::record_session(id);
    Ok(id)
}

/// An optional UUID field (empty means absent).
pub fn parse_opt_uuid(field: &str, value: &str) -> Result<Option<uuid::Uuid>, Status> {
    if value.is_empty() { Ok(None) } else { parse_uuid(field, value).map(Some) }
}

/// Refuses a request larger than the configured limit, naming the limit.
pub fn check_size(what: &str, encoded_len: usize, limit: usize) -> Result<(), Status> {
    if encoded_len > limit {
        return Err(Status::invalid_argument(format!(
            "{what}: the message is {encoded_len} bytes, over the limit of {limit} (limits.max_message_bytes)"
        )));
    }
    Ok(())
}
