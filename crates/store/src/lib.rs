//! The lossless event store on Postgres: namespaces, API keys, sessions, append-only events and
//! content-addressed artifacts; and the context engine's records over it: versioned task states,
//! windows and pointer manifests, stored packs, delegations and reports.
//!
//! **Architecture invariant:** events are never updated or deleted (a trigger refuses it), and an
//! append either commits every event of its batch with consecutive seqs or commits nothing.
//! **Architecture invariant:** every read and write is scoped by a namespace id; nothing here ever
//! returns a row of another namespace. Behind that, Postgres row-level security holds every
//! connection to the tenant of the task that took it (`tenant.rs`): a query that forgot its
//! namespace still sees none of another tenant's rows.
//! **Architecture invariant:** this crate decides nothing about input validity; `memex-event` does,
//! before anything reaches the database.

mod append;
mod artifacts;
mod cache_size;
mod context_reads;
mod erase;
mod error;
mod group;
mod heads;
mod import;
mod keys;
mod line_maps;
mod model;
mod namespaces;
mod news;
mod notify;
mod packs;
mod planning;
mod quotas;
mod read;
mod retention;
mod sessions;
mod standby;
mod task_state;
pub mod tenant;
mod window;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgConnection, PgPool};

pub use append::AppendRequest;
pub use artifacts::Artifact;
pub use cache_size::{CacheSize, CacheUnit};
pub use context_reads::PackContext;
pub use erase::{Erasure, ErasureCounts, ErasureEntry, ErasurePlan, PackScan, tombstone};
pub use error::{StoreError, unavailable_reason};
pub use group::GroupCommitOptions;
pub use import::ImportRequest;
pub use keys::{Access, ApiKey, Authenticated, NewApiKey, token_hash};
pub use line_maps::LineMapRow;
pub use model::{AppendOutcome, ArtifactRef, Event, Namespace, Session, SessionSource};
pub use news::{APPENDED_CHANNEL, AppendNews, IdleScan, Look};
pub use notify::Heard;
pub use packs::{PackChunk, PackRow};
pub use planning::{ChildState, DelegationRow, ReportRow};
pub use quotas::{Quota, QuotaChange};
pub use read::{EventPage, SeqRange, seq_page_token};
pub use retention::{Retention, RetentionChange};
pub use sessions::{NewSession, SessionFilter, SessionPage};
pub use standby::StandbyStats;
pub use task_state::{NewTaskState, TaskStateRow};
pub use tenant::Tenant;
pub use window::{Eviction, ManifestRow, NewCompaction, WindowRow};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// Longest a settled read waits for a standby connection before the primary answers it.
const STANDBY_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);

/// Connection-pool settings.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub max_connections: u32,
    pub min_connections: u32,
    pub acquire_timeout: Duration,
    /// Combine concurrent small appends into shared statements (None: every append on its own).
    pub group_commit: Option<GroupCommitOptions>,
    /// A hot standby of the same database for settled reads (see `standby.rs`); None: the primary
    /// serves every read.
    pub standby_url: Option<String>,
    /// The tenant of work outside any `tenant::scope`. `Deny` (the default) in the server, so a
    /// path that entered no scope finds nothing; `All` only for a tool that is the operator's own
    /// view of the database (the test harness's handle).
    pub unscoped: Tenant,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_connections: 32,
            min_connections: 2,
            acquire_timeout: Duration::from_secs(10),
            group_commit: Some(GroupCommitOptions::default()),
            standby_url: None,
            unscoped: Tenant::Deny,
        }
    }
}

/// Connections for LISTEN, made when a listener starts (one per channel listened to).
fn listener_pool(connect: PgConnectOptions, acquire_timeout: Duration) -> PgPool {
    PgPoolOptions::new()
        .max_connections(8)
        .min_connections(0)
        .acquire_timeout(acquire_timeout)
        .connect_lazy_with(connect)
}

/// Handle to the event store. Cheap to clone (a pool inside).
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    /// LISTEN connections, each held for as long as its listener runs: a pool of their own, so
    /// they never take `max_connections` from the requests (three listeners would have taken all
    /// of a pool of three; `tests/api/faults.rs`).
    listeners: PgPool,
    group: Option<std::sync::Arc<group::GroupCommitter>>,
    standby: Option<standby::Standby>,
    /// `StoreOptions::unscoped`.
    unscoped: Tenant,
    /// What it appended and heard appended (`news`).
    news: std::sync::Arc<news::News>,
}

impl Store {
    /// Connects a pool to `url` (a `postgres://` URL).
    pub async fn connect(url: &str, opts: &StoreOptions) -> Result<Store> {
        let connect: PgConnectOptions = url.parse()?;
        let pool = tenant_hooks(PgPoolOptions::new(), opts.unscoped)
            .max_connections(opts.max_connections)
            .min_connections(opts.min_connections)
            .acquire_timeout(opts.acquire_timeout)
            .connect_with(connect.clone().application_name("memex"))
            .await?;
        let listeners = listener_pool(connect.application_name("memex-listen"), opts.acquire_timeout);
        let group = opts
            .group_commit
            .as_ref()
            .map(|g| std::sync::Arc::new(group::GroupCommitter::start(&pool, g, opts.unscoped)));
        let standby = match &opts.standby_url {
            Some(url) => {
                let connect: PgConnectOptions = url.parse()?;
                // Lazy, and quick to give up: a standby that is down or saturated costs a read
                // a short wait before the primary answers, and never stops the server starting.
                let pool = tenant_hooks(PgPoolOptions::new(), opts.unscoped)
                    .max_connections(opts.max_connections)
                    .min_connections(0)
                    .acquire_timeout(opts.acquire_timeout.min(STANDBY_ACQUIRE_TIMEOUT))
                    .connect_lazy_with(connect.application_name("memex-standby"));
                Some(standby::Standby { pool, stats: Default::default() })
            }
            None => None,
        };
        Ok(Store { pool, listeners, group, standby, unscoped: opts.unscoped, news: Default::default() })
    }

    /// A store over an existing pool, writing every append on its own (no group commit). The
    /// pool should be one of a `Store`'s: a pool without its hooks does not set the tenant.
    pub fn from_pool(pool: PgPool) -> Store {
        let listeners = listener_pool((*pool.connect_options()).clone(), pool.options().get_acquire_timeout());
        Store { pool, listeners, group: None, standby: None, unscoped: Tenant::Deny, news: Default::default() }
    }

    /// Closes the pools (primary, listeners and standby).
    pub async fn close(&self) {
        self.pool.close().await;
        self.listeners.close().await;
        if let Some(s) = &self.standby {
            s.pool.close().await;
        }
    }

    /// The tenant this store's connections are held to for the current task: its scope's, else
    /// `StoreOptions::unscoped`. Work that leaves the task's connection (a shared statement of a
    /// committer) checks it in Rust, as the policies would in Postgres.
    pub fn tenant(&self) -> Tenant {
        tenant::current().unwrap_or(self.unscoped)
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn listener_pool(&self) -> &PgPool {
        &self.listeners
    }

    /// Applies pending migrations. Safe to run concurrently from several replicas: sqlx takes an
    /// advisory lock. As `Tenant::All`: a migration may rewrite the rows of every namespace.
    pub async fn migrate(&self) -> Result<()> {
        tenant::scope(Tenant::All, MIGRATOR.run(&self.pool)).await?;
        Ok(())
    }

    /// Why row-level security does not hold this store's connections, if it does not: the role
    /// it connects as is a superuser or has BYPASSRLS, which skip every policy (the wall is down;
    /// only the queries' own namespace filters keep tenants apart).
    pub async fn tenancy_wall_down(&self) -> Result<Option<String>> {
        let (role, superuser, bypass): (String, bool, bool) =
            sqlx::query_as("SELECT rolname::text, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
                .fetch_one(&self.pool)
                .await?;
        Ok(match (superuser, bypass) {
            (true, _) => Some(format!("the database role {role:?} is a superuser")),
            (false, true) => Some(format!("the database role {role:?} has BYPASSRLS")),
            (false, false) => None,
        })
    }

    /// The versions of the embedded migrations the database has not applied (all of them when it
    /// has none). A replica that leaves migrating to someone else (`migrate_on_start = false`,
    /// a migration Job) waits for this to be empty before it serves.
    pub async fn pending_migrations(&self) -> Result<Vec<i64>> {
        let applied: Vec<i64> = match sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&self.pool)
            .await
        {
            Ok(v) => v,
            // undefined_table: nothing was ever migrated here.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        Ok(MIGRATOR
            .iter()
            .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
            .map(|m| m.version)
            .collect())
    }

    /// Round trip to the database, for readiness checks.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }
}

/// Sets `memex.tenant` on every connection a pool hands out, from the tenant of the task taking
/// it (`unscoped` outside any scope): on a fresh connection (`after_connect`, which sqlx runs in
/// the acquiring task) and on every reuse of an idle one (`before_acquire`). The statement is
/// also the liveness test sqlx would otherwise make with a ping of its own, so it replaces it:
/// an acquire costs one round trip, as before. A connection that fails it is closed and another
/// one taken, as a failed ping's would be.
fn tenant_hooks(options: PgPoolOptions, unscoped: Tenant) -> PgPoolOptions {
    options
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            let setting = tenant::setting_for_current(unscoped);
            Box::pin(async move { set_tenant(conn, &setting).await })
        })
        .before_acquire(move |conn, _| {
            let setting = tenant::setting_for_current(unscoped);
            Box::pin(async move { set_tenant(conn, &setting).await.map(|()| true) })
        })
}

async fn set_tenant(conn: &mut PgConnection, setting: &str) -> std::result::Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('memex.tenant', $1, false)").bind(setting).execute(conn).await?;
    Ok(())
}
