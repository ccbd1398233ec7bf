//! `memex watch DIR...`: live capture of agents' trace files (`memex-watch` does the work; this
//! parses flags and draws progress and log lines).
use std::path::PathBuf;
use std::time::Duration;

use memex_client::Conn;
use memex_vcc::InputFormat;
use memex_watch::{Observer, Summary, WatchOptions};

use super::progress::Progress;

#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// Directories to follow, recursively: ~/.claude/projects (Claude Code), ~/.codex/sessions
    /// (Codex CLI), ~/.gemini/tmp (Gemini CLI).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// auto (by file: *.jsonl lines, *.json Gemini CLI documents), claude, codex or gemini.
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// Catch up with every file as it is now, then exit (for tests and cron).
    #[arg(long)]
    pub once: bool,
    /// The sessions' agent id (default: claude-code, codex or gemini-cli, by format).
    #[arg(long)]
    pub agent: Option<String>,
    /// Milliseconds between two looks at the files.
    #[arg(long, default_value_t = 200)]
    pub poll_ms: u64,
    /// Seconds a Gemini CLI session must stay unchanged before its last message is taken.
    #[arg(long, default_value_t = 5)]
    pub settle_secs: u64,
}

/// Progress of the catch-up on a terminal, log lines on stderr after (and instead, elsewhere).
struct Report {
    progress: Option<Progress>,
}

impl Observer for Report {
    fn catching_up(&mut self, bytes: u64) {
        self.progress = Some(Progress::bytes("catch-up", bytes));
    }

    fn progress(&mut self, bytes: u64) {
        if let Some(p) = &self.progress {
            p.set(bytes);
        }
    }

    fn caught_up(&mut self, s: &Summary) {
        if let Some(p) = self.progress.take() {
            p.finish();
        }
        eprintln!("caught up: {} files, {} events appended, {} sessions created", s.files, s.events, s.sessions);
    }

    fn note(&mut self, line: &str) {
        match &self.progress {
            Some(p) => p.line(line),
            None => eprintln!("{line}"),
        }
    }
}

pub async fn watch(args: WatchArgs) -> anyhow::Result<()> {
    let format: InputFormat = args.format.parse()?;
    if format == InputFormat::Memex {
        anyhow::bail!("--format: memex watch follows agents' traces: auto, claude, codex or gemini");
    }
    let client = args.conn.client().await?;
    let opts = WatchOptions {
        roots: args.dirs,
        format,
        once: args.once,
        poll: Duration::from_millis(args.poll_ms.max(10)),
        rescan: Duration::from_secs(2),
        settle: Duration::from_secs(args.settle_secs),
        agent: args.agent,
    };
    let mut report = Report { progress: None };
    let summary = memex_watch::run(&client, &opts, &mut report, shutdown()).await?;
    if !args.once {
        eprintln!("stopped: {} events appended, {} sessions created", summary.events, summary.sessions);
    }
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown() {
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
