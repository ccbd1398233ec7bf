//! `memex`: the service binary and its command-line tools.
mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: a pack allocates and frees thousands of strings (event
/// texts, view lines) across worker threads, and glibc's arenas spent a quarter of the server's
/// CPU on it (`memex-bench pack`, see CHANGELOG).
#[cfg(not(feature = "heap-count"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A diagnostic build (`--features heap-count`): mimalloc behind a count of the bytes live in the
/// heap, printed to stderr every 10 s with the most live at once since the last line, to tell the
/// heap the process holds from what the allocator keeps beside it (RSS). With
/// `MEMEX_HEAP_STATS_DIR` set, mimalloc's own statistics (JSON; per size class when mimalloc is
/// built with `CFLAGS=-DMI_STAT=2`) are written there every 5 minutes. An atomic add per
/// allocation: never in a default build.
#[cfg(feature = "heap-count")]
mod heap_count {
    use memex_heap_count::{Counting, live, take_peak};

    #[global_allocator]
    static GLOBAL: Counting<mimalloc::MiMalloc> = Counting(mimalloc::MiMalloc);

    #[allow(unsafe_code)]
    unsafe extern "C" {
        /// mimalloc v3: its statistics as JSON in a buffer it allocates (`buf` null).
        fn mi_stats_get_json(buf_size: usize, buf: *mut std::ffi::c_char) -> *mut std::ffi::c_char;
    }

    /// Prints the live heap, its peak since the last line and the process's RSS (from `/proc`)
    /// every 10 s; with `MEMEX_HEAP_STATS_DIR`, mimalloc's statistics every 30th line.
    pub fn report() {
        let stats_dir = std::env::var_os("MEMEX_HEAP_STATS_DIR").map(std::path::PathBuf::from);
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            for tick in 1u64.. {
                std::thread::sleep(std::time::Duration::from_secs(10));
                let rss_kb = std::fs::read_to_string("/proc/self/status")
                    .ok()
                    .and_then(|s| {
                        let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
                        line.split_whitespace().nth(1)?.parse::<u64>().ok()
                    })
                    .unwrap_or(0);
                eprintln!(
                    "heap-count: live {} MiB, peak {} MiB, rss {} MiB",
                    live() / (1 << 20),
                    take_peak() / (1 << 20),
                    rss_kb / 1024
                );
                if let Some(dir) = &stats_dir
                    && tick % 30 == 0
                {
                    let path =
                        dir.join(format!("mimalloc-{}-{:05}.json", std::process::id(), start.elapsed().as_secs()));
                    if let Err(e) = std::fs::write(&path, mimalloc_stats()) {
                        eprintln!("heap-count: {}: {e}", path.display());
                    }
                }
            }
        });
    }

    #[allow(unsafe_code)]
    fn mimalloc_stats() -> Vec<u8> {
        // SAFETY: with a null buffer mimalloc allocates one (mi_malloc) and returns it
        // NUL-terminated, or null; it is copied out and given back with mi_free.
        unsafe {
            let json = mi_stats_get_json(0, std::ptr::null_mut());
            if json.is_null() {
                return b"null".to_vec();
            }
            let bytes = std::ffi::CStr::from_ptr(json).to_bytes().to_vec();
            libmimalloc_sys::mi_free(json.cast());
            bytes
        }
    }
}

#[derive(Parser)]
#[command(name = "memex", version, about = "Context management for fleets of LLM agents", after_help = cmd::exit::HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gRPC server.
    Serve(cmd::serve::ServeArgs),
    /// Apply database migrations and exit.
    Migrate(memex_server::flags::ConfigArgs),
    /// Print the effective configuration (defaults < memex.toml < MEMEX_* < flags), secrets redacted.
    Config(cmd::serve::ServeArgs),
    /// Administration on the database: namespaces and API keys.
    #[command(subcommand)]
    Admin(cmd::admin::AdminCommand),
    /// API keys of a namespace, through a running server (needs an admin key).
    #[command(subcommand)]
    Key(cmd::keys::KeyCommand),
    /// Erase a data subject's sessions (GDPR art. 17) through a running server (needs an admin
    /// key): events become tombstones, everything derived from them goes; audited.
    Erase(cmd::erase::EraseArgs),
    /// Sessions of a running server.
    #[command(subcommand)]
    Session(cmd::client::SessionCommand),
    /// Append events (JSON lines on stdin) to a session of a running server.
    Append(cmd::client::AppendArgs),
    /// Print a session's events as JSON lines (the format `memex view` reads).
    Events(cmd::client::EventsArgs),
    /// Write an artifact's bytes to stdout.
    Artifact(cmd::client::ArtifactArgs),
    /// Import a raw agent trace (gzip'd or not; `-` for stdin) into a new session; prints its id.
    Import(cmd::client::ImportArgs),
    /// Hybrid search (BM25 + vectors) over a namespace's events; hits cite `session:first-last`.
    Search(cmd::search::SearchArgs),
    /// Read the full-view lines a pointer `SESSION:FIRST-LAST` names.
    Read(cmd::search::ReadArgs),
    /// Memory: quotes, facts, topics and the worker's status, every item cited by its pointer.
    #[command(subcommand)]
    Memory(cmd::memory::MemoryCommand),
    /// Context packs: build one for a turn, or get a stored one.
    #[command(subcommand)]
    Pack(cmd::context::PackCommand),
    /// The handoff snapshot of a session after compaction (BuildSnapshot): goal, constraints,
    /// knowledge, files, errors, recent actions and plan, every line cited, within a token budget.
    Handoff(cmd::handoff::HandoffArgs),
    /// A coding agent's hook (reads the hook event JSON on stdin): catches the transcript up and,
    /// after a compaction or on resume, prints the handoff snapshot for the new window. Always
    /// exits 0; on failure prints nothing and one line on stderr. See README, "Handoff".
    Hook(cmd::hook::HookArgs),
    /// What is resident in a session's window.
    Window(cmd::context::WindowArgs),
    /// Pointer-manifest compaction of a session's window.
    Compact(cmd::context::CompactArgs),
    /// A manifest and the original events it evicted.
    Expand(cmd::context::ExpandArgs),
    /// Task state: get, update (compare-and-swap), history.
    #[command(subcommand)]
    Task(cmd::task::TaskCommand),
    /// Delegate a child task from a planner's task.
    Delegate(cmd::task::DelegateArgs),
    /// Record an executor's report (with provenance pointers).
    Report(cmd::task::ReportArgs),
    /// Follow the reports of a task's children (until Ctrl-C).
    WatchReports(cmd::task::WatchArgs),
    /// Serve memex's tools to an MCP client over stdio (for a local agent: Claude Code, Codex CLI,
    /// Gemini CLI), as a client of the running server named by --endpoint / --api-key / --namespace.
    Mcp(memex_client::Conn),
    /// Follow agents' trace files (Claude Code, Codex CLI, Gemini CLI) as they are written and
    /// append each new record to its session, exactly once across restarts.
    Watch(cmd::watch::WatchArgs),
    /// Rebuild this replica's text indexes from Postgres.
    Reindex(cmd::reindex::ReindexArgs),
    /// VCC views of agent trace files (full, UI, adaptive), like the reference VCC.py; or, with
    /// `--session ID --mode ui|full|adaptive`, of a session stored on a running server.
    View(cmd::view::ViewArgs),
    /// Embedding models: `memex model distill` writes the static table (`embedding.static_dir`)
    /// distilled from MiniLM, so that no server start has to (make run and make test do it).
    #[command(subcommand)]
    Model(ModelCommand),
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Distil the static embedding table from the configured MiniLM (once; about half a minute).
    Distill(memex_server::flags::ConfigArgs),
}

fn distill(args: memex_server::flags::ConfigArgs) -> anyhow::Result<()> {
    let config = args.load()?;
    match memex_server::search::fast_tier(&config.embedding)? {
        Some(t) => eprintln!("static embedding table ready: {} ({} dimensions)", t.info().name, t.info().dim),
        None => eprintln!("nothing to distil: embedding.provider is not minilm, or embedding.static_tier is off"),
    }
    Ok(())
}

fn main() -> ExitCode {
    // Before any thread starts: see memex_server::allocator.
    memex_server::allocator::configure();
    let cli = Cli::parse();
    #[cfg(feature = "heap-count")]
    if matches!(cli.command, Command::Serve(_)) {
        heap_count::report();
    }
    let run = |f: std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>>>>| {
        cmd::runtime().and_then(|rt| rt.block_on(f))
    };
    let result = match cli.command {
        Command::View(args) => return cmd::view::run(args),
        // Blocking tasks still running once the server has returned (an inference in hand) are
        // abandoned: dropping the runtime would wait for every one of them.
        Command::Serve(args) => cmd::runtime().and_then(|rt| {
            let served = rt.block_on(cmd::serve::serve(args));
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            served
        }),
        Command::Migrate(args) => run(Box::pin(cmd::serve::migrate(args))),
        Command::Config(args) => cmd::serve::print_config(args),
        Command::Admin(c) => run(Box::pin(cmd::admin::run(c))),
        Command::Key(c) => run(Box::pin(cmd::keys::key(c))),
        Command::Erase(a) => run(Box::pin(cmd::erase::erase(a))),
        Command::Session(c) => run(Box::pin(cmd::client::session(c))),
        Command::Append(a) => run(Box::pin(cmd::client::append(a))),
        Command::Events(a) => run(Box::pin(cmd::client::events(a))),
        Command::Artifact(a) => run(Box::pin(cmd::client::artifact(a))),
        Command::Import(a) => run(Box::pin(cmd::client::import(a))),
        Command::Search(a) => run(Box::pin(cmd::search::search(a))),
        Command::Read(a) => run(Box::pin(cmd::search::read(a))),
        Command::Memory(c) => run(Box::pin(cmd::memory::memory(c))),
        Command::Pack(c) => run(Box::pin(cmd::context::pack(c))),
        Command::Handoff(a) => run(Box::pin(cmd::handoff::handoff(a))),
        Command::Hook(a) => return cmd::hook::run(a),
        Command::Window(a) => run(Box::pin(cmd::context::window(a))),
        Command::Compact(a) => run(Box::pin(cmd::context::compact(a))),
        Command::Expand(a) => run(Box::pin(cmd::context::expand(a))),
        Command::Task(c) => run(Box::pin(cmd::task::task(c))),
        Command::Delegate(a) => run(Box::pin(cmd::task::delegate(a))),
        Command::Report(a) => run(Box::pin(cmd::task::report(a))),
        Command::WatchReports(a) => run(Box::pin(cmd::task::watch_reports(a))),
        // stdout carries the protocol: nothing else may be printed there.
        Command::Mcp(conn) => run(Box::pin(async move { Ok(memex_mcp::serve_stdio(&conn).await?) })),
        Command::Watch(a) => run(Box::pin(cmd::watch::watch(a))),
        Command::Reindex(a) => run(Box::pin(cmd::reindex::run(a))),
        Command::Model(ModelCommand::Distill(a)) => distill(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`memex search … | head`): what it wanted was written.
        Err(e) if cmd::exit::broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", cmd::exit::message(&e));
            ExitCode::from(cmd::exit::status(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_valid() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
