//! `memex-bench`: the memex benchmarks, a binary of their own so the product binary carries none
//! of them. Each subcommand prints its figures, then one JSON line.
mod baselines;
mod bench;
mod bench_events;
mod bench_handoff;
mod bench_locomo;
mod bench_longmemeval;
mod bench_mcp;
mod bench_memory;
mod bench_needle;
mod bench_pack;
mod bench_pack_loop;
mod bench_search;
mod bench_soak;
mod bench_view;
mod disk_probe;
mod pack_prefix;
mod searchkit;
mod soak_load;
mod soak_server;
mod soak_stats;
mod traces;

use clap::Parser;
use std::process::ExitCode;

/// The product's allocator, so that figures taken here (the pack bench runs the server
/// in-process) are the figures `memex serve` would give.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "memex-bench",
    version,
    about = "Benchmarks of memex: ingest, views, search, retrieval, packs, MCP, soak"
)]
struct Cli {
    #[command(subcommand)]
    command: bench::BenchCommand,
}

fn main() -> ExitCode {
    // Before any thread starts: see memex_server::allocator.
    memex_server::allocator::configure();
    let cli = Cli::parse();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(bench::run(cli.command)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memex-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Flags of the subcommands must not clash (clap checks this only when a command is built).
    #[test]
    fn cli_definition_is_valid() {
        super::Cli::command().debug_assert();
    }
}
