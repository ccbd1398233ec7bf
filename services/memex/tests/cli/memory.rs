//! Memory through the CLI: a coding session read by the worker, then every `memex memory`
//! subcommand against it, each item cited by its pointer.
use std::time::Duration;

use memex_store::Access;
use memex_tests::{memory_on, server_or_skip};
use serde_json::{Value, json};

use crate::Cli;

/// A request, an edit of src/parser.rs, a failing `cargo test parser` with a compiler error, a
/// fix, and the same run passing.
fn coding_session() -> Vec<Value> {
    let call = |id: &str, tool: &str, input: &str| json!({"kind": "tool_call", "tool_name": tool, "tool_call_id": id, "content": input});
    let result = |id: &str, output: &str| json!({"kind": "tool_result", "tool_call_id": id, "content": output});
    vec![
        json!({"kind": "user_message", "content": "The parser in src/parser.rs rejects valid headers. Fix it."}),
        json!({"kind": "assistant_message", "content": "Editing the header check in the parser."}),
        call("c1", "Edit", r#"{"file_path":"src/parser.rs","old_string":"a","new_string":"b"}"#),
        result("c1", "The file src/parser.rs has been updated."),
        call("c2", "Bash", r#"{"command":"cargo test parser"}"#),
        result(
            "c2",
            "error[E0308]: mismatched types\n --> src/parser.rs:12:5\ntest result: FAILED. 1 passed; 1 failed",
        ),
        json!({"kind": "assistant_message", "content": "A type mismatch in the parser; fixing the return type."}),
        call("c3", "Edit", r#"{"file_path":"src/parser.rs","old_string":"b","new_string":"c"}"#),
        result("c3", "The file src/parser.rs has been updated."),
        call("c4", "Bash", r#"{"command":"cargo test parser"}"#),
        result("c4", "test result: ok. 2 passed; 0 failed"),
    ]
}

/// Polls `memex memory status` until the worker has read everything and the topics are current
/// (and stay so for one more round: the last turn closes after its events are read).
async fn settled(cli: &Cli) -> Value {
    let mut last = Value::Null;
    for _ in 0..750 {
        let s = cli.run(&["memory", "status", "--format", "json"]).await.json();
        let done = s["lag_events"] == 0
            && s["topics_current"] == true
            && s["segments"].as_u64() > Some(0)
            && s["topics"].as_u64() > Some(0);
        if done && s == last {
            return s;
        }
        last = if done { s } else { Value::Null };
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the memory worker did not settle: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_commands_answer_with_pointers() {
    let srv = server_or_skip!(memory_on);
    let cli = Cli::new(&srv, "mem", Access::Write).await;
    let s = cli.session("coder", None).await;
    cli.append(&s, &coding_session()).await;
    let status = settled(&cli).await;
    assert_eq!(status["interpreter"], "heuristic", "{status}");
    let text = cli.run(&["memory", "status"]).await;
    assert!(text.ok().starts_with("interpreter heuristic  lag 0 events  1 sessions  "), "{}", text.stdout);
    assert!(text.stdout.contains("(current)"), "{}", text.stdout);
    let cited = format!("{s}:");

    // Facts: the test's current status is "passed"; with superseded facts, the failure too.
    let facts = cli.run(&["memory", "facts", "--type", "test"]).await;
    let shown = facts.ok();
    assert!(shown.contains("test cargo test parser passed"), "{shown}");
    assert!(!shown.contains(" failed "), "the failure is superseded: {shown}");
    assert!(shown.lines().next().is_some_and(|l| l.starts_with(&cited)), "a fact cites its lines: {shown}");
    let all = cli.run(&["memory", "facts", "--type", "test", "--include-superseded"]).await;
    let shown = all.ok();
    assert!(shown.contains("cargo test parser passed") && shown.contains("cargo test parser failed"), "{shown}");
    assert!(shown.contains("superseded by "), "{shown}");
    let j = cli.run(&["memory", "facts", "--type", "test", "--include-superseded", "--format", "json"]).await.json();
    let list = j["facts"].as_array().unwrap();
    let failed = list.iter().find(|f| f["verb"] == "failed" && f["subject"] == "cargo test parser").unwrap();
    let passed = list.iter().find(|f| f["verb"] == "passed" && f["subject"] == "cargo test parser").unwrap();
    assert_eq!(failed["superseded_by"], passed["id"]);
    assert!(failed["pointer"].as_str().unwrap().starts_with(&cited), "{failed}");
    assert!(j["expanded_verbs"].is_array(), "every field is present: {j}");

    // The chain of the failure, oldest first, with its pointers.
    let chain = cli.run(&["memory", "fact", failed["id"].as_str().unwrap()]).await;
    let shown = chain.ok();
    let (head, rest) = shown.split_once("chain, oldest first:\n").expect(shown);
    assert!(head.starts_with(failed["pointer"].as_str().unwrap()), "{shown}");
    let links: Vec<&str> = rest.lines().collect();
    assert!(links[0].starts_with(&format!("  1. {}", failed["pointer"].as_str().unwrap())), "{shown}");
    assert!(links[0].contains(" failed ") && links[0].ends_with("← this fact"), "{shown}");
    assert!(links[1].starts_with(&format!("  2. {}", passed["pointer"].as_str().unwrap())), "{shown}");
    let r = cli.run(&["memory", "fact", "0190f3c5-0000-7000-8000-000000000000"]).await;
    assert!(r.fails(4).starts_with("memex: NOT_FOUND: fact_id"), "{}", r.stderr);

    // A quote: the compiler error, at the hit's own lines, inside its segment.
    let q = cli.run(&["memory", "quote", "mismatched", "types"]).await;
    let shown = q.ok();
    assert!(shown.starts_with(&format!("1. {cited}")), "{shown}");
    assert!(shown.contains("error[E0308]: mismatched types"), "{shown}");
    assert!(shown.contains(&format!("    segment {cited}")), "{shown}");
    let qj = cli.run(&["memory", "quote", "mismatched", "types", "--format", "json"]).await.json();
    let output =
        qj["quotes"].as_array().unwrap().iter().find(|q| q["match_type"] == "tool_output").expect("a tool output");
    let hit = output["hit_pointer"].as_str().unwrap();
    assert!(shown.contains(&format!(". {hit}  tool_output  score ")), "{shown}");
    let read = cli.run(&["read", hit]).await;
    assert!(read.ok().contains("error[E0308]: mismatched types"), "{hit}: {}", read.stdout);

    // A reader is shown a segment once.
    cli.run(&["memory", "quote", "mismatched", "types", "--reader", "agent-r"]).await.ok();
    let again = cli.run(&["memory", "quote", "mismatched", "types", "--reader", "agent-r", "--format", "json"]).await;
    assert!(again.json()["already_presented"].as_u64() >= Some(1), "{}", again.stdout);
    let reset = cli
        .run(&[
            "memory",
            "quote",
            "mismatched",
            "types",
            "--reader",
            "agent-r",
            "--reset-presented",
            "--format",
            "json",
        ])
        .await;
    assert_eq!(reset.json()["already_presented"], 0, "{}", reset.stdout);

    // Topics: all of them, then one at a time; the parser's summary lines cite the session.
    let topics = cli.run(&["memory", "topics", "--format", "json"]).await.json();
    let tags: Vec<&str> = topics["topics"].as_array().unwrap().iter().map(|t| t["tag"].as_str().unwrap()).collect();
    assert!(tags.contains(&"parser.rs"), "{tags:?}");
    assert_eq!(tags.len() as u64, topics["total"].as_u64().unwrap());
    let listed = cli.run(&["memory", "topics", "--contains", "parser"]).await;
    let shown = listed.ok();
    assert!(shown.starts_with("parser.rs"), "{shown}");
    assert!(shown.contains(&format!("    {cited}")), "summary lines cite pointers: {shown}");
    if tags.len() > 1 {
        let one = cli.run(&["memory", "topics", "--limit", "1", "--format", "json"]).await.json();
        assert_eq!(one["topics"].as_array().unwrap().len(), 1);
        assert!(!one["next_page_token"].as_str().unwrap().is_empty(), "{one}");
    }

    // Expansion at the segments depth: the text cites the segments' pointers.
    let x = cli.run(&["memory", "expand", "parser.rs", "--depth", "segments"]).await;
    let shown = x.ok();
    assert!(shown.starts_with("topic parser.rs  depth segments  "), "{shown}");
    let (_, text) = shown.split_once("──── text ────\n").expect(shown);
    assert!(text.contains(&cited), "{text}");
    let xj = cli.run(&["memory", "expand", "parser.rs", "--depth", "segments", "--format", "json"]).await.json();
    assert!(xj["text"].as_str().unwrap().contains(xj["segments"][0]["pointer"].as_str().unwrap()), "{xj}");
    let r = cli.run(&["memory", "expand", "parser.rs", "--depth", "deep"]).await;
    assert!(r.fails(5).starts_with("memex: INVALID_ARGUMENT: depth"), "{}", r.stderr);
    let r = cli.run(&["memory", "expand", "no-such-topic"]).await;
    assert!(r.fails(4).starts_with("memex: NOT_FOUND: "), "{}", r.stderr);

    // Time-scoped: the last week holds the session; a range needs a preset or a start.
    let w = cli.run(&["memory", "when", "mismatched", "types", "--preset", "last_7_days"]).await;
    let shown = w.ok();
    assert!(shown.starts_with("from ") && shown.contains(&format!("1. {cited}")), "{shown}");
    let from = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
    let wj = cli.run(&["memory", "when", "cargo", "test", "--from", &from, "--format", "json"]).await.json();
    assert!(!wj["quotes"].as_array().unwrap().is_empty(), "{wj}");
    let r = cli.run(&["memory", "when", "x", "--preset", "last_week"]).await;
    assert!(r.fails(5).starts_with("memex: INVALID_ARGUMENT: preset"), "{}", r.stderr);
    assert!(cli.run(&["memory", "when", "x"]).await.fails(2).contains("--preset"));

    // The bird's-eye view: every cover topic within the budget, then the text.
    let all = cli.run(&["memory", "recall", "--max-tokens", "4000"]).await;
    let shown = all.ok();
    assert!(shown.contains("[cover") && shown.contains("──── text ────"), "{shown}");
    let aj = cli.run(&["memory", "recall", "--max-tokens", "4000", "--format", "json"]).await.json();
    assert!(aj["tokens"].as_u64().unwrap() <= 4000 && !aj["topics"].as_array().unwrap().is_empty(), "{aj}");

    // A read key reads, but cannot keep a reader's state.
    let (_, read_key) = srv.namespace_with_key("mem", Access::Read).await;
    let ro = cli.with_key(Some(&read_key));
    ro.run(&["memory", "quote", "parser"]).await.ok();
    let r = ro.run(&["memory", "expand", "parser.rs", "--reader", "agent-r"]).await;
    assert!(r.fails(3).starts_with("memex: PERMISSION_DENIED: "), "{}", r.stderr);

    // Rebuilt on the database, memory comes back the same.
    let before = cli.run(&["memory", "facts", "--include-superseded", "--format", "json"]).await.json();
    let url = srv.config.database.url.clone();
    let r = cli.run(&["memory", "rebuild", "-n", "mem", "--database-url", &url]).await;
    assert!(r.ok().is_empty() && r.stderr.contains("mem: memory forgotten"), "{}", r.stderr);
    settled(&cli).await;
    let after = cli.run(&["memory", "facts", "--include-superseded", "--format", "json"]).await.json();
    assert_eq!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_off_is_a_conflict_naming_the_setting() {
    let srv = server_or_skip!();
    let cli = Cli::new(&srv, "nomem", Access::Write).await;
    let r = cli.run(&["memory", "status"]).await;
    assert!(r.fails(6).starts_with("memex: FAILED_PRECONDITION: memory is disabled"), "{}", r.stderr);
}
