//! `memex hook claude-code|codex|gemini`: a coding agent's hook. It reads the hook's event JSON
//! on stdin, makes sure memex holds the transcript (a one-shot catch-up of the file, the
//! `memex watch` machinery), and, where the event lets a hook add to the new window, prints the
//! session's handoff snapshot in the form that event injects.
//!
//! | agent | event (source) | what the hook does |
//! |---|---|---|
//! | Claude Code, Codex | `SessionStart` (`compact`, `resume`, `startup`, `fork`) | catch up, print the snapshot as `hookSpecificOutput.additionalContext` |
//! | Claude Code, Codex | `PreCompact` | catch up (their PreCompact output is not injected) |
//! | Gemini CLI | `SessionStart` (`resume`, `startup`) | catch up, print the snapshot |
//! | Gemini CLI | `PreCompress` | catch up (no Gemini hook runs after compression: the `handoff` MCP tool is the way back) |
//! | any | `SessionStart` (`clear`), anything else | nothing |
//!
//! It never holds the agent up for long and never breaks its session: everything runs under a
//! deadline (`--deadline-ms`, 5 s), and on any failure it prints nothing on stdout, one line on
//! stderr, and exits 0.
use std::io::Read as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use memex_client::Conn;
use memex_proto::v1 as pb;
use memex_vcc::InputFormat;

/// Claude Code keeps at most 10,000 characters of a hook's output in the context (the rest goes
/// to a file); the snapshot stays under it.
const DEFAULT_MAX_CHARS: usize = 9_500;
/// Longest hook input read (the event JSON is small).
const MAX_INPUT: u64 = 1 << 20;

#[derive(clap::Args, Debug)]
pub struct HookArgs {
    #[command(flatten)]
    pub conn: Conn,
    /// claude-code, codex or gemini.
    #[arg(value_parser = ["claude-code", "codex", "gemini"])]
    pub agent: String,
    /// Token budget of the snapshot.
    #[arg(long, default_value_t = 2_000)]
    pub budget: u32,
    /// Most characters printed (Claude Code keeps 10,000 in the context); the budget shrinks
    /// until the snapshot fits.
    #[arg(long, default_value_t = DEFAULT_MAX_CHARS)]
    pub max_chars: usize,
    /// Everything (catch-up and snapshot) within this many milliseconds, or nothing is printed.
    #[arg(long, default_value_t = 5_000)]
    pub deadline_ms: u64,
    /// xml (`<state_snapshot>`) or markdown.
    #[arg(long, value_parser = ["xml", "markdown"], default_value = "xml")]
    pub layout: String,
}

/// The fields of a hook event memex reads (Claude Code's, Codex's and Gemini CLI's share them).
#[derive(Debug, Default, serde::Deserialize)]
struct HookEvent {
    #[serde(default)]
    hook_event_name: String,
    #[serde(default)]
    transcript_path: Option<String>,
    /// SessionStart: startup, resume, clear, compact (fork in Claude Code).
    #[serde(default)]
    source: Option<String>,
}

/// What the event asks of memex.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Nothing,
    CatchUp,
    Inject,
}

fn action(agent: &str, e: &HookEvent) -> Action {
    match (e.hook_event_name.as_str(), e.source.as_deref().unwrap_or("")) {
        ("SessionStart", "clear") => Action::Nothing,
        ("SessionStart", "compact") if agent == "gemini" => Action::Nothing,
        ("SessionStart", "compact" | "resume" | "startup" | "fork" | "") => Action::Inject,
        ("PreCompact", _) if agent != "gemini" => Action::CatchUp,
        ("PreCompress", _) if agent == "gemini" => Action::CatchUp,
        _ => Action::Nothing,
    }
}

fn format(agent: &str) -> InputFormat {
    match agent {
        "codex" => InputFormat::Codex,
        "gemini" => InputFormat::Gemini,
        _ => InputFormat::Claude,
    }
}

/// Runs the hook; always exits 0 (a hook that fails must not break the agent's session).
pub fn run(args: HookArgs) -> std::process::ExitCode {
    let deadline = Duration::from_millis(args.deadline_ms);
    let outcome = super::runtime().and_then(|rt| {
        let out = rt.block_on(async {
            tokio::time::timeout(deadline, hook(&args))
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("gave up after {} ms (--deadline-ms)", args.deadline_ms)))
        });
        // A stdin read still blocked past the deadline is abandoned, not waited for.
        rt.shutdown_background();
        out
    });
    match outcome {
        Ok(Some(text)) => {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes()).and_then(|_| out.write_all(b"\n")).and_then(|_| out.flush());
        }
        Ok(None) => {}
        Err(e) => eprintln!("memex hook {}: {}", args.agent, one_line(&format!("{e:#}"))),
    }
    std::process::ExitCode::SUCCESS
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What to print on stdout, if anything.
async fn hook(args: &HookArgs) -> anyhow::Result<Option<String>> {
    // On a blocking thread, so that the deadline holds even when stdin is never closed.
    let input = tokio::task::spawn_blocking(|| {
        let mut input = String::new();
        std::io::stdin().take(MAX_INPUT).read_to_string(&mut input).map(|_| input)
    })
    .await
    .context("reading the hook event on stdin")?
    .context("reading the hook event on stdin")?;
    let event: HookEvent = serde_json::from_str(&input).context("the hook event on stdin is not the JSON expected")?;
    let act = action(&args.agent, &event);
    if act == Action::Nothing {
        return Ok(None);
    }
    let Some(path) = event.transcript_path.as_deref().filter(|p| !p.is_empty()).map(expand_home) else {
        return Ok(None);
    };
    if !path.exists() {
        // A session that has written nothing yet (a fresh startup).
        return Ok(None);
    }
    let client = args.conn.client().await?;
    let mut quiet = Quiet;
    let session = memex_watch::catch_up_file(&client, &path, format(&args.agent), None, &mut quiet)
        .await
        .with_context(|| format!("catching up {}", path.display()))?;
    let Some(session) = session else { return Ok(None) };
    if act == Action::CatchUp {
        return Ok(None);
    }
    let mut budget = args.budget;
    for _ in 0..4 {
        let s = client
            .build_snapshot(pb::BuildSnapshotRequest {
                session_id: session.clone(),
                budget_tokens: budget,
                format: super::handoff::layout(&args.layout) as i32,
                ..Default::default()
            })
            .await?;
        if s.head_seq == 0 {
            return Ok(None);
        }
        let text = format!(
            "memex handoff: the state of this session before its context was compacted, every line cited by \
             (sN:first-last), lines of the session's full view; read the originals with `memex read \
             SESSION:FIRST-LAST` or the read_lines MCP tool.\n{}",
            s.text
        );
        let chars = text.chars().count();
        if chars <= args.max_chars {
            let json = serde_json::json!({
                "hookSpecificOutput": {
                    "hookEventName": event.hook_event_name,
                    "additionalContext": text,
                }
            });
            return Ok(Some(json.to_string()));
        }
        let scaled = (u64::from(budget) * args.max_chars as u64 * 9 / 10 / chars as u64) as u32;
        if (scaled as usize) < memex_handoff::MIN_BUDGET {
            break;
        }
        budget = scaled;
    }
    anyhow::bail!("the snapshot does not fit in {} characters (--max-chars)", args.max_chars)
}

fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(p),
    }
}

/// The catch-up's notes are not the agent's business.
struct Quiet;

impl memex_watch::Observer for Quiet {
    fn note(&mut self, _line: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, source: Option<&str>) -> HookEvent {
        HookEvent { hook_event_name: name.into(), transcript_path: None, source: source.map(str::to_owned) }
    }

    #[test]
    fn each_agents_events_map_to_what_their_hooks_allow() {
        assert_eq!(action("claude-code", &ev("SessionStart", Some("compact"))), Action::Inject);
        assert_eq!(action("claude-code", &ev("SessionStart", Some("resume"))), Action::Inject);
        assert_eq!(action("claude-code", &ev("SessionStart", Some("clear"))), Action::Nothing);
        assert_eq!(action("claude-code", &ev("PreCompact", None)), Action::CatchUp);
        assert_eq!(action("codex", &ev("SessionStart", Some("compact"))), Action::Inject);
        assert_eq!(action("codex", &ev("PreCompact", None)), Action::CatchUp);
        assert_eq!(action("gemini", &ev("PreCompress", None)), Action::CatchUp);
        assert_eq!(action("gemini", &ev("SessionStart", Some("resume"))), Action::Inject);
        assert_eq!(action("gemini", &ev("PreCompact", None)), Action::Nothing);
        assert_eq!(action("claude-code", &ev("Stop", None)), Action::Nothing);
    }
}
