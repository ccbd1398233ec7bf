//! `memex view` (skeleton; being built on the `vcc` branch).
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ViewArgs {
    /// Trace files to compile.
    pub inputs: Vec<std::path::PathBuf>,
}

pub fn run(_args: ViewArgs) -> ExitCode {
    eprintln!("memex view: not built yet");
    ExitCode::FAILURE
}
