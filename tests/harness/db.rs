//! Test databases: `CREATE DATABASE … TEMPLATE` from a template migrated once per migration set.
//!
//! The databases and their tables belong to `APP_ROLE`, a role without SUPERUSER or BYPASSRLS,
//! and `TestDb::url` connects as it, as production's `memex` role does: so every test's server
//! is held by row-level security (ADR 008), and a path that sets no tenant fails its test. The
//! role of `TEST_DATABASE_URL` (a superuser) only creates roles, databases and extensions.
use std::time::{Duration, SystemTime};

use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::OnceCell;

/// The role the servers under test connect as: owner of the test databases and their tables,
/// neither superuser nor BYPASSRLS. `scripts/setup-postgres.sh` creates it too.
pub const APP_ROLE: &str = "memex_app_test";

/// A database for one test.
#[derive(Debug, Clone)]
pub struct TestDb {
    /// As `APP_ROLE`: what servers and the tests' own stores connect with.
    pub url: String,
    /// As the role of `TEST_DATABASE_URL` (a superuser, beyond row-level security).
    pub admin_url: String,
    pub name: String,
}

impl TestDb {
    /// A store over this database for the test's own set-up and checks: as `APP_ROLE`, seeing
    /// every namespace (`Tenant::All`) outside a tenant scope, an operator's view.
    pub async fn store(&self) -> memex_store::Store {
        let opts = memex_store::StoreOptions { unscoped: memex_store::Tenant::All, ..Default::default() };
        memex_store::Store::connect(&self.url, &opts).await.expect("connect the test store")
    }
}

struct Server {
    base_url: String,
    #[cfg(feature = "testcontainers")]
    _container: Option<testcontainers::ContainerAsync<testcontainers_modules::postgres::Postgres>>,
}

static SERVER: OnceCell<Option<Server>> = OnceCell::const_new();
static STALE_DROPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Serializes template creation across test binaries and nextest processes.
const LOCK_KEY: i64 = 0x6d656d6578; // "memex"

fn docker_reachable() -> bool {
    std::env::var_os("DOCKER_HOST").is_some() || std::path::Path::new("/var/run/docker.sock").exists()
}

async fn start_server() -> Option<Server> {
    if let Ok(url) = std::env::var("TEST_DATABASE_URL").or_else(|_| std::env::var("DATABASE_URL")) {
        return Some(Server {
            base_url: url,
            #[cfg(feature = "testcontainers")]
            _container: None,
        });
    }
    if docker_reachable() {
        #[cfg(feature = "testcontainers")]
        {
            use testcontainers::ImageExt;
            use testcontainers::runners::AsyncRunner;
            let c = testcontainers_modules::postgres::Postgres::default()
                .with_name("pgvector/pgvector")
                .with_tag("pg15")
                .start()
                .await
                .expect("start the pgvector container");
            let port = c.get_host_port_ipv4(5432).await.expect("container port");
            return Some(Server {
                base_url: format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres"),
                _container: Some(c),
            });
        }
        #[cfg(not(feature = "testcontainers"))]
        eprintln!(
            "hint: a Docker engine is reachable; `cargo test --features memex-tests/testcontainers` would use it"
        );
    }
    None
}

fn with_db(base: &str, db: &str) -> String {
    let mut u = url::Url::parse(base).expect("TEST_DATABASE_URL is a URL");
    u.set_path(db);
    u.to_string()
}

/// `base` (a server's URL) for database `db`, as `APP_ROLE`.
fn as_app(base: &str, db: &str) -> String {
    let mut u = url::Url::parse(&with_db(base, db)).expect("TEST_DATABASE_URL is a URL");
    u.set_username(APP_ROLE).expect("a URL with a host");
    u.set_password(Some(APP_ROLE)).expect("a URL with a host");
    u.to_string()
}

/// Names the template after the migrations it holds and the role that owns it, so a new
/// migration (or owner) makes a new template.
fn template_name() -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    let owner = APP_ROLE.as_bytes().iter();
    for b in memex_store::MIGRATOR.iter().flat_map(|m| m.checksum.iter()).chain(owner) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100000001b3);
    }
    format!("memex_tmpl_{h:016x}")
}

/// Creates `APP_ROLE` unless it exists (also resetting its attributes: the wall needs them).
async fn ensure_app_role(admin: &mut PgConnection) {
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
        .bind(APP_ROLE)
        .fetch_one(&mut *admin)
        .await
        .unwrap();
    if !exists {
        let create = format!("CREATE ROLE {APP_ROLE} LOGIN PASSWORD '{APP_ROLE}'");
        // Another test process may have created it meanwhile (the lock covers only templates).
        if let Err(e) = admin.execute(sqlx::AssertSqlSafe(create)).await {
            assert!(e.to_string().contains("already exists"), "create role {APP_ROLE}: {e}");
        }
    }
    let attrs = format!("ALTER ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '{APP_ROLE}'");
    admin.execute(sqlx::AssertSqlSafe(attrs)).await.unwrap();
}

/// A fresh, migrated database, or None (skip) when no Postgres is available.
pub async fn test_db() -> Option<TestDb> {
    let Some(server) = SERVER.get_or_init(start_server).await.as_ref() else {
        assert!(
            std::env::var("REQUIRE_DB").is_err(),
            "REQUIRE_DB is set but no Postgres is available: set TEST_DATABASE_URL (make test does)"
        );
        eprintln!("SKIP: no TEST_DATABASE_URL and no Docker engine; run `make test`");
        return None;
    };
    let mut admin = PgConnection::connect(&server.base_url).await.expect("connect to TEST_DATABASE_URL");
    let template = template_name();
    admin.execute(sqlx::AssertSqlSafe(format!("SELECT pg_advisory_lock({LOCK_KEY})"))).await.unwrap();
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(&template)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    // Once per test process, so finished runs' databases do not pile up on the disk.
    if !STALE_DROPPED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        drop_stale(&mut admin).await;
    }
    if !exists {
        ensure_app_role(&mut admin).await;
        admin.execute(sqlx::AssertSqlSafe(format!(r#"CREATE DATABASE "{template}" OWNER {APP_ROLE}"#))).await.unwrap();
        // Extensions need a superuser (the service role is not one, in production either).
        let mut t = PgConnection::connect(&with_db(&server.base_url, &template)).await.unwrap();
        for ext in ["vector", "pg_trgm"] {
            t.execute(sqlx::AssertSqlSafe(format!("CREATE EXTENSION IF NOT EXISTS {ext}"))).await.unwrap();
        }
        t.close().await.unwrap();
        // The tables are the service role's own, as in production: hence FORCE ROW LEVEL SECURITY.
        let mut t = PgConnection::connect(&as_app(&server.base_url, &template)).await.unwrap();
        memex_store::MIGRATOR.run(&mut t).await.expect("migrate the template database");
        t.close().await.unwrap();
    }
    admin.execute(sqlx::AssertSqlSafe(format!("SELECT pg_advisory_unlock({LOCK_KEY})"))).await.unwrap();
    let name = format!("memex_t_{}", ulid::Ulid::generate().to_string().to_lowercase());
    admin
        .execute(sqlx::AssertSqlSafe(format!(r#"CREATE DATABASE "{name}" TEMPLATE "{template}" OWNER {APP_ROLE}"#)))
        .await
        .unwrap();
    admin.close().await.ok();
    Some(TestDb { url: as_app(&server.base_url, &name), admin_url: with_db(&server.base_url, &name), name })
}

/// Drops test databases older than an hour. Templates are kept: another checkout with other
/// migrations may be using its own right now (`make clean-test-dbs` removes them all).
async fn drop_stale(admin: &mut PgConnection) {
    let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'memex\\_t\\_%'")
        .fetch_all(&mut *admin)
        .await
        .unwrap_or_default();
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    for name in names {
        let stale = name
            .strip_prefix("memex_t_")
            .and_then(|id| ulid::Ulid::from_string(&id.to_uppercase()).ok())
            .is_none_or(|u| u.datetime() < hour_ago);
        if stale {
            let _ =
                admin.execute(sqlx::AssertSqlSafe(format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#))).await;
        }
    }
}

/// The hot standby's URL for `db` (`TEST_STANDBY_URL` with `db`'s name, as `APP_ROLE`), once the
/// standby has replayed the primary up to now, so `db` exists there. None (skip) without `TEST_STANDBY_URL`,
/// unless `REQUIRE_DB=1`, which makes it fail (`make test` sets both).
pub async fn standby_of(db: &TestDb) -> Option<String> {
    let Ok(base) = std::env::var("TEST_STANDBY_URL") else {
        assert!(
            std::env::var("REQUIRE_DB").is_err(),
            "REQUIRE_DB is set but TEST_STANDBY_URL is not: set it to the hot standby (make test does)"
        );
        eprintln!("SKIP: no TEST_STANDBY_URL (a hot standby of TEST_DATABASE_URL); run `make test`");
        return None;
    };
    let url = as_app(&base, &db.name);
    wait_replayed(&db.admin_url, &with_db(&base, &db.name)).await;
    Some(url)
}

/// Waits until the standby at `standby_url` has replayed everything the primary at `primary_url`
/// had written when this was called.
pub async fn wait_replayed(primary_url: &str, standby_url: &str) {
    let mut primary = PgConnection::connect(primary_url).await.expect("connect to the primary");
    let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(&mut primary).await.unwrap();
    primary.close().await.ok();
    // The standby's `postgres` database: the one asked about may not be replayed yet.
    let mut standby =
        PgConnection::connect(&with_db(standby_url, "postgres")).await.expect("connect to TEST_STANDBY_URL");
    let started = std::time::Instant::now();
    loop {
        let done: Option<bool> = sqlx::query_scalar("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn")
            .bind(&lsn)
            .fetch_one(&mut standby)
            .await
            .expect("TEST_STANDBY_URL is a standby");
        if done == Some(true) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the standby did not replay {lsn} within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    standby.close().await.ok();
}
