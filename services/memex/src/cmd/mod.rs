//! The `memex` subcommands. Client commands call the server through `memex-client` and only
//! parse flags and render answers here (`out.rs`: text or JSON; `exit.rs`: exit statuses).
/// `println!` / `print!` that return the write error instead of panicking, so that
/// `memex … | head` ends quietly (`main` treats a broken pipe as done).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)?
    }};
}
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout(), $($arg)*)?
    }};
}

pub mod admin;
pub mod client;
pub mod context;
pub mod erase;
pub mod exit;
pub mod handoff;
pub mod hook;
pub mod input;
pub mod keys;
pub mod memory;
pub mod out;
pub mod progress;
pub mod reindex;
pub mod search;
pub mod serve;
pub mod task;
pub mod view;
pub mod watch;

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
