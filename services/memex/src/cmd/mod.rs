//! The `memex` subcommands. Client commands call the server through `memex-client` and only
//! parse flags and render answers here (`out.rs`: text or JSON; `exit.rs`: exit statuses).
pub mod admin;
pub mod client;
pub mod context;
pub mod exit;
pub mod input;
pub mod keys;
pub mod out;
pub mod progress;
pub mod reindex;
pub mod search;
pub mod serve;
pub mod task;
pub mod view;

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
