use memex_event::{ArtifactId, FieldError};
use uuid::Uuid;

/// What can go wrong in the store, in terms a caller can act on. The server maps each variant to a
/// gRPC status in one table (`memex-server`'s `status` module).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The input broke a rule only the database can check (e.g. a result naming no known call).
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error("namespace {0:?} does not exist")]
    NamespaceNotFound(String),
    #[error("session {0} does not exist in this namespace")]
    SessionNotFound(Uuid),
    /// The session is an imported trace: its events come from the raw file and it takes no appends.
    #[error("session {0} is an imported trace and takes no appends; import a new version instead")]
    SessionReadOnly(Uuid),
    /// The session was erased (EraseSubject): its events are tombstones and it takes no appends.
    #[error("session {0} was erased and takes no appends; start a new session")]
    SessionErased(Uuid),
    #[error("{field}: event {id} does not exist in this namespace")]
    EventNotFound { field: String, id: Uuid },
    #[error("artifact {0} does not exist in this namespace")]
    ArtifactNotFound(ArtifactId),
    #[error("api key {0} does not exist in this namespace")]
    KeyNotFound(Uuid),
    #[error("task {0:?} has no task state in this namespace")]
    TaskNotFound(String),
    #[error("task {task_id:?} has no version {version}")]
    TaskVersionNotFound { task_id: String, version: u64 },
    /// A compare-and-swap on a task state lost: the caller read an older version.
    #[error("task {task_id:?} is at version {current}, not {expected}: read the current state and retry", current = current.map_or("none (no state yet)".to_owned(), |v| v.to_string()))]
    StaleTaskState { task_id: String, expected: u64, current: Option<u64> },
    /// A compaction was planned from a window that has changed since.
    #[error("the window of session {0} changed during compaction")]
    StaleWindow(Uuid),
    #[error("pointer manifest {0} does not exist in this namespace")]
    ManifestNotFound(Uuid),
    #[error("pack {0} does not exist in this namespace")]
    PackNotFound(Uuid),
    #[error("report {0} does not exist in this namespace")]
    ReportNotFound(Uuid),
    /// A create that collides with an existing object of different content.
    #[error("{0}")]
    AlreadyExists(String),
    /// Stored bytes no longer hash to their id: data loss, never the caller's fault.
    #[error("artifact {0} is corrupt: its stored bytes do not hash to its id")]
    Corrupt(ArtifactId),
    /// The database could not take the request now: no pooled connection in time, the connection
    /// broke (the database stopped or restarted), or the database refused the connection.
    /// Retrying later may work; [`unavailable_reason`] says which it was.
    #[error("the database is unavailable: {0}")]
    Unavailable(sqlx::Error),
    /// A bounded queue in front of the database is full (the group committer's): nothing was
    /// written; retrying after a pause may work.
    #[error("{0} is full; retry with backoff")]
    Overloaded(&'static str),
    /// An erasure's scan of the stored packs could not read one.
    #[error("erasure scan: {0}")]
    Scan(String),
    /// Work for one tenant named another's namespace, and was refused before it reached the
    /// database (where row-level security would refuse it too): a bug, never the caller's doing.
    #[error("the tenancy wall refused work naming namespace {0}: it is not the tenant of this call")]
    TenantMismatch(Uuid),
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("compression failed: {0}")]
    Compression(#[from] std::io::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if unavailable_reason(&e).is_some() { StoreError::Unavailable(e) } else { StoreError::Database(e) }
    }
}

/// When `err` means the database cannot serve now (rather than that the statement is wrong),
/// what to tell the caller: a retry may work, and nothing was half done (a transaction whose
/// connection broke is rolled back by the database).
pub fn unavailable_reason(err: &sqlx::Error) -> Option<&'static str> {
    match err {
        sqlx::Error::PoolTimedOut => {
            Some("no database connection came free in time: the database is overloaded or unreachable")
        }
        sqlx::Error::PoolClosed => Some("the server is shutting down its database connections"),
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::WorkerCrashed => {
            Some("the connection to the database broke: it is down or restarting")
        }
        sqlx::Error::Database(db) => match db.code().as_deref() {
            // connection_exception, admin/crash shutdown, cannot_connect_now, the database's own
            // resources (too many connections, disk full, out of memory), read-only (a standby
            // being promoted or a primary demoted).
            Some(c) if c.starts_with("08") || c.starts_with("57P") || c.starts_with("53") || c == "25006" => {
                Some("the database cannot serve now (shutting down, starting, or out of resources)")
            }
            // invalid authorization / no such database: a configuration the operator must fix.
            Some(c) if c.starts_with("28") || c == "3D000" => {
                Some("the database refused the server's connection (check database.url and its credentials)")
            }
            _ => None,
        },
        _ => None,
    }
}

/// True when `err` is a unique violation of the named constraint.
pub(crate) fn is_unique_violation(err: &sqlx::Error, constraint: &str) -> bool {
    match err {
        sqlx::Error::Database(db) => db.is_unique_violation() && db.constraint() == Some(constraint),
        _ => false,
    }
}
