//! Process-level fault suites: the server killed with SIGKILL and Postgres stopped with `-m
//! immediate` under load (afterwards every acknowledged write is there, once), and replicas whose
//! wall clocks disagree.
#![allow(clippy::unwrap_used)]

mod clock_skew;
mod common;
mod postgres_kill;
mod server_kill;
