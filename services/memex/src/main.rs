//! `memex`: the service binary and its command-line tools.
mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "memex",
    version,
    about = "Context management for fleets of LLM agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile agent traces into VCC views (full, UI, adaptive), like the reference VCC.py.
    View(cmd::view::ViewArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::View(args) => cmd::view::run(args),
    }
}
