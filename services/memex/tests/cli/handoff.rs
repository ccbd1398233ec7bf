//! `memex handoff` and `memex hook`: the hook fed the documented hook JSON of each agent's events
//! (Claude Code, Codex, Gemini CLI), the transcript caught up, the snapshot printed in the form
//! the event injects; and a hook that fails (server down, deadline, bad input) prints nothing,
//! one line on stderr, and exits 0.
use memex_store::Access;
use memex_tests::TestServer;
use serde_json::{Value, json};

use crate::{Cli, fixtures};

/// A copy of a fixture trace in the scratch directory (a transcript the agent is writing).
fn transcript(cli: &Cli, kind: &str, name: &str, as_name: &str) -> std::path::PathBuf {
    let to = cli.dir.join(as_name);
    std::fs::copy(fixtures().join("traces").join(kind).join(name), &to).unwrap();
    to
}

fn event(name: &str, source: Option<&str>, path: &std::path::Path) -> Vec<u8> {
    let mut v = json!({
        "session_id": "abc123",
        "transcript_path": path.display().to_string(),
        "cwd": "/work/project",
        "hook_event_name": name,
        "permission_mode": "default",
    });
    match (name, source) {
        ("SessionStart", Some(s)) => v["source"] = json!(s),
        ("PreCompact" | "PreCompress", _) => v["trigger"] = json!("auto"),
        _ => {}
    }
    if name == "PreCompact" {
        v["custom_instructions"] = json!("");
    }
    v.to_string().into_bytes()
}

async fn sessions(cli: &Cli) -> Vec<Value> {
    let out = cli.run(&["session", "list", "--format", "json"]).await;
    out.ok().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn claude_codes_hooks_catch_up_and_inject_the_snapshot_after_compaction() {
    let Some(srv) = TestServer::start().await else { return };
    let cli = Cli::new(&srv, "hook-claude", Access::Write).await;
    let path = transcript(&cli, "claude-code", "spotter__tool_heavy.jsonl", "0b7c.jsonl");

    // PreCompact: the transcript is caught up; its output is not injected, so nothing is printed.
    let pre = cli.run_stdin(&["hook", "claude-code"], event("PreCompact", None, &path)).await;
    assert_eq!(pre.ok(), "");
    assert_eq!(pre.stderr, "");
    let listed = sessions(&cli).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let events = listed[0]["event_count"].as_u64().unwrap();
    assert!(events > 20, "{listed:?}");

    // SessionStart after compaction: the snapshot, as Claude Code's SessionStart JSON output.
    let start = cli.run_stdin(&["hook", "claude-code"], event("SessionStart", Some("compact"), &path)).await;
    let v: Value = serde_json::from_str(start.ok()).unwrap_or_else(|e| panic!("{e}: {}", start.stdout));
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
    let context = v["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(context.starts_with("memex handoff: "), "{context}");
    assert!(context.contains("<state_snapshot>\nsessions: s1=") && context.contains("</state_snapshot>"), "{context}");
    assert!(context.chars().count() <= 9_500, "{}", context.chars().count());
    assert_eq!(start.stderr, "");
    // Nothing was appended twice: the catch-up is exactly once.
    assert_eq!(sessions(&cli).await[0]["event_count"].as_u64().unwrap(), events);

    // The same snapshot through `memex handoff` (same store state, same bytes).
    let session = listed[0]["id"].as_str().unwrap();
    let text = cli.run(&["handoff", "--session", session, "--budget", "2000", "--text-only"]).await.ok().to_owned();
    assert!(context.ends_with(&text), "{text}");
    let j = cli.run(&["handoff", "--session", session, "--format", "json"]).await.json();
    assert_eq!(j["session_id"], session);
    assert!(j["items"].as_array().unwrap().iter().all(|i| i["pointer"].as_str().is_some()));

    // A smaller character cap shrinks the budget until the snapshot fits.
    let small = cli
        .run_stdin(&["hook", "claude-code", "--max-chars", "3000"], event("SessionStart", Some("resume"), &path))
        .await;
    let v: Value = serde_json::from_str(small.ok()).unwrap();
    assert!(v["hookSpecificOutput"]["additionalContext"].as_str().unwrap().chars().count() <= 3_000);

    // `clear` asks for a clean window: nothing.
    let clear = cli.run_stdin(&["hook", "claude-code"], event("SessionStart", Some("clear"), &path)).await;
    assert_eq!((clear.ok(), clear.stderr.as_str()), ("", ""));
}

#[tokio::test]
async fn codex_and_gemini_hooks_do_what_their_events_allow() {
    let Some(srv) = TestServer::start().await else { return };
    let cli = Cli::new(&srv, "hook-others", Access::Write).await;
    let rollout = transcript(&cli, "codex", "synthetic__agent-sessions__codex-small.jsonl", "rollout-1.jsonl");
    let codex = cli.run_stdin(&["hook", "codex"], event("SessionStart", Some("compact"), &rollout)).await;
    let v: Value = serde_json::from_str(codex.ok()).unwrap_or_else(|e| panic!("{e}: {}", codex.stdout));
    assert!(v["hookSpecificOutput"]["additionalContext"].as_str().unwrap().contains("<state_snapshot>"));

    let doc = transcript(&cli, "gemini-cli-json", "entire__9c53780d06b7-0.json", "session-1.json");
    // PreCompress: caught up, nothing printed (Gemini CLI runs no hook after compressing).
    let pre = cli.run_stdin(&["hook", "gemini"], event("PreCompress", None, &doc)).await;
    assert_eq!((pre.ok(), pre.stderr.as_str()), ("", ""));
    assert_eq!(sessions(&cli).await.len(), 2);
    let resume = cli.run_stdin(&["hook", "gemini"], event("SessionStart", Some("resume"), &doc)).await;
    let v: Value = serde_json::from_str(resume.ok()).unwrap_or_else(|e| panic!("{e}: {}", resume.stdout));
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
    // A transcript not written yet (a fresh startup): nothing.
    let none = cli
        .run_stdin(&["hook", "claude-code"], event("SessionStart", Some("startup"), &cli.dir.join("new.jsonl")))
        .await;
    assert_eq!((none.ok(), none.stderr.as_str()), ("", ""));
}

#[tokio::test]
async fn a_failing_hook_prints_nothing_says_why_on_one_line_and_exits_zero() {
    let Some(srv) = TestServer::start().await else { return };
    // (A Cli starts with an empty scratch directory: both before the transcript is written.)
    let reader = Cli::new(&srv, "hook-fail", Access::Read).await;
    let cli = Cli::new(&srv, "hook-fail", Access::Write).await;
    let path = transcript(&cli, "claude-code", "spotter__short.jsonl", "s.jsonl");
    let compact = event("SessionStart", Some("compact"), &path);

    // The server is down.
    let down = Cli { endpoint: "http://127.0.0.1:1".into(), ..cli.clone() };
    let r = down.run_stdin(&["hook", "claude-code"], compact.clone()).await;
    assert_eq!(r.ok(), "");
    assert!(
        r.stderr.starts_with("memex hook claude-code: ") && r.stderr.trim_end().lines().count() == 1,
        "{}",
        r.stderr
    );

    // Past the deadline.
    let r = cli.run_stdin(&["hook", "claude-code", "--deadline-ms", "0"], compact.clone()).await;
    assert_eq!(r.ok(), "");
    assert!(r.stderr.contains("gave up after 0 ms"), "{}", r.stderr);

    // Stdin never closed: the deadline still holds.
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_memex"));
    c.args(["hook", "claude-code", "--deadline-ms", "300"])
        .env("MEMEX_ENDPOINT", &cli.endpoint)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let _open_stdin = child.stdin.take();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    assert_eq!((out.status.code(), out.stdout.len()), (Some(0), 0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gave up after 300 ms"));

    // Not the JSON a hook gets.
    let r = cli.run_stdin(&["hook", "claude-code"], b"not json".to_vec()).await;
    assert_eq!(r.ok(), "");
    assert!(r.stderr.contains("not the JSON expected"), "{}", r.stderr);

    // A key that may not write (the catch-up appends): refused, said on stderr.
    let r = reader.run_stdin(&["hook", "claude-code"], compact).await;
    assert_eq!(r.ok(), "");
    assert!(r.stderr.starts_with("memex hook claude-code: "), "{}", r.stderr);
}
