//! The integration-test harness: a fresh Postgres database per test, cloned from a migrated
//! template, and a real memex server on 127.0.0.1:0 in the test's own runtime.
//!
//! Where the database comes from, in order:
//! 1. `TEST_DATABASE_URL` (or `DATABASE_URL`): a server where we may `CREATE DATABASE` (CI, `make test`);
//! 2. with the `testcontainers` feature and a reachable Docker engine: one pgvector container per
//!    test binary;
//! 3. otherwise the test is skipped with a message — or fails when `REQUIRE_DB=1`, so CI can never
//!    pass without a real database.
#![allow(clippy::unwrap_used)]

mod db;
mod scratch;
mod server;

pub use db::{TestDb, standby_of, test_db, wait_replayed};
pub use scratch::Scratch;
pub use server::{Clients, TestServer, memory_on};

/// Skips the test (returns) when no database is available; see the crate docs.
#[macro_export]
macro_rules! server_or_skip {
    () => {
        match $crate::TestServer::start().await {
            Some(s) => s,
            None => return,
        }
    };
    ($tweak:expr) => {
        match $crate::TestServer::start_with($tweak).await {
            Some(s) => s,
            None => return,
        }
    };
}
