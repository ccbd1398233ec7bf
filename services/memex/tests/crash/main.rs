//! Crash suites: the server killed with SIGKILL, and Postgres stopped with `-m immediate`, under
//! load; afterwards every acknowledged write is there, once.
#![allow(clippy::unwrap_used)]

mod common;
mod postgres_kill;
mod server_kill;
