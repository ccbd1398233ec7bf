//! `memex`: the service binary and its command-line tools.
mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// mimalloc rather than glibc's malloc: a pack allocates and frees thousands of strings (event
/// texts, view lines) across worker threads, and glibc's arenas spent a quarter of the server's
/// CPU on it (`memex-bench pack`, see CHANGELOG).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "memex", version, about = "Context management for fleets of LLM agents")]
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
    /// Sessions of a running server.
    #[command(subcommand)]
    Session(cmd::client::SessionCommand),
    /// Append events (JSON lines on stdin) to a session of a running server.
    Append(cmd::client::AppendArgs),
    /// Print a session's events as JSON lines (the format `memex view` reads).
    Events(cmd::client::EventsArgs),
    /// Write an artifact's bytes to stdout.
    Artifact(cmd::client::ArtifactArgs),
    /// Import a raw agent trace into a new session of a running server; prints the session id.
    Import(cmd::client::ImportArgs),
    /// Serve memex's tools to an MCP client over stdio (for a local agent: Claude Code, Codex CLI,
    /// Gemini CLI), as a client of the running server named by --endpoint / --api-key / --namespace.
    Mcp(memex_client::Conn),
    /// Rebuild this replica's text indexes from Postgres.
    Reindex(cmd::reindex::ReindexArgs),
    /// Compile agent traces into VCC views (full, UI, adaptive), like the reference VCC.py.
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
    let cli = Cli::parse();
    let result = match cli.command {
        Command::View(args) => return cmd::view::run(args),
        // Blocking tasks still running once the server has returned (an inference in hand) are
        // abandoned: dropping the runtime would wait for every one of them.
        Command::Serve(args) => cmd::runtime().and_then(|rt| {
            let served = rt.block_on(cmd::serve::serve(args));
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            served
        }),
        Command::Migrate(args) => cmd::runtime().and_then(|rt| rt.block_on(cmd::serve::migrate(args))),
        Command::Config(args) => cmd::serve::print_config(args),
        Command::Admin(c) => cmd::runtime().and_then(|rt| rt.block_on(cmd::admin::run(c))),
        Command::Session(c) => cmd::runtime().and_then(|rt| rt.block_on(cmd::client::session(c))),
        Command::Append(a) => cmd::runtime().and_then(|rt| rt.block_on(cmd::client::append(a))),
        Command::Events(a) => cmd::runtime().and_then(|rt| rt.block_on(cmd::client::events(a))),
        Command::Artifact(a) => cmd::runtime().and_then(|rt| rt.block_on(cmd::client::artifact(a))),
        Command::Import(a) => cmd::runtime().and_then(|rt| rt.block_on(cmd::client::import(a))),
        // stdout carries the protocol: nothing else may be printed there.
        Command::Mcp(conn) => cmd::runtime().and_then(|rt| Ok(rt.block_on(memex_mcp::serve_stdio(&conn))?)),
        Command::Reindex(a) => cmd::runtime().and_then(|rt| rt.block_on(cmd::reindex::run(a))),
        Command::Model(ModelCommand::Distill(a)) => distill(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memex: {e:#}");
            ExitCode::FAILURE
        }
    }
}
