//! Task state, delegation, reports and the live report stream, through the CLI.
use std::io::BufRead as _;

use memex_store::Access;
use memex_tests::server_or_skip;
use serde_json::json;

use crate::Cli;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_state_delegation_reports_and_watching() {
    let srv = server_or_skip!();
    let cli = Cli::new(&srv, "tasks", Access::Write).await;

    // Create (expected version 0), then read it back as text and JSON.
    let v1 = cli
        .run(&[
            "task",
            "update",
            "root",
            "--expected-version",
            "0",
            "--goal",
            "ship the separability fix",
            "--constraint",
            "no new dependencies",
            "--phase",
            "planning",
            "--author",
            "planner",
        ])
        .await;
    assert!(v1.ok().starts_with("task root version 1  "), "{}", v1.stdout);
    assert!(v1.stdout.contains("phase planning  by planner"), "{}", v1.stdout);
    let get = cli.run(&["task", "get", "root"]).await;
    assert!(get.ok().contains("ship the separability fix"), "the card is shown: {}", get.stdout);
    let j = cli.run(&["task", "get", "root", "--format", "json"]).await.json();
    assert_eq!(j["version"], 1);
    assert_eq!(j["state"]["goals"], json!(["ship the separability fix"]));
    assert_eq!(j["state"]["phase"], "PHASE_PLANNING");

    // The next version from the JSON state (stdin) plus a flag; a stale version is a conflict.
    let state =
        json!({"goals": ["ship the separability fix"], "open_loops": ["nested models"], "phase": "PHASE_PLANNING"});
    let v2 = cli
        .run_stdin(
            &[
                "task",
                "update",
                "root",
                "--expected-version",
                "1",
                "--state",
                "-",
                "--premise",
                "python 3.9",
                "--format",
                "json",
            ],
            state.to_string().into(),
        )
        .await
        .json();
    assert_eq!((v2["version"].as_u64(), v2["state"]["open_loops"][0].as_str()), (Some(2), Some("nested models")));
    assert_eq!(v2["state"]["premises"], json!(["python 3.9"]));
    let stale = cli.run(&["task", "update", "root", "--expected-version", "1", "--goal", "late"]).await;
    let msg = stale.fails(6);
    assert!(msg.starts_with("memex: FAILED_PRECONDITION: "), "{msg}");
    assert!(msg.contains('2'), "names the current version: {msg}");
    let history = cli.run(&["task", "history", "root"]).await;
    let versions: Vec<&str> = history.ok().lines().collect();
    assert_eq!(versions.len(), 2, "{}", history.stdout);
    assert!(versions[0].starts_with("task root version 2") && versions[1].starts_with("task root version 1"));

    // The planner decides, and delegates with a pointer to the decision.
    let planner = cli.session("planner", Some("root")).await;
    let decided = cli.append(&planner, &[json!({"kind": "decision", "content": "executor fixes _cstack"})]).await;
    let decision = decided["event_ids"][0].as_str().unwrap().to_owned();
    let d = cli
        .run(&[
            "delegate",
            "--parent",
            "root",
            "--task",
            "child-1",
            "--objective",
            "fix _cstack",
            "--accept",
            "tests pass",
            "--pointer",
            &format!("event:{decision}"),
            "--session",
            &planner,
        ])
        .await;
    assert_eq!(d.ok(), format!("delegated child-1 (parent root): fix _cstack\n  pointer event:{decision}\n"));

    // The planner watches (JSON lines) while the executor reports.
    let mut watcher = cli.spawn(&["watch-reports", "--parent", "root", "--format", "json"]);
    let exec = cli.session("executor", Some("child-1")).await;
    let work = cli
        .append(&exec, &[json!({"kind": "tool_call", "tool_name": "Bash", "tool_call_id": "t1", "content": "{\"command\":\"pytest\"}"}), json!({"kind": "tool_result", "tool_call_id": "t1", "content": "12 passed"})])
        .await;
    let first_seq = work["first_seq"].as_u64().unwrap();
    let span = format!("span:{exec}:{first_seq}-{}", first_seq + 1);
    let r = cli
        .run_stdin(
            &[
                "report",
                "--task",
                "child-1",
                "--session",
                &exec,
                "--status",
                "succeeded",
                "--summary",
                "-",
                "--pointer",
                &span,
            ],
            b"Fixed _cstack; 12 tests pass.".to_vec(),
        )
        .await;
    assert!(r.ok().starts_with("report #1 succeeded  task child-1 (parent root)  "), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("pointers: {span}")), "{}", r.stdout);
    // A pointer that resolves to nothing is refused before anything is recorded.
    let bad = cli
        .run(&[
            "report",
            "--task",
            "child-1",
            "--session",
            &exec,
            "--status",
            "failed",
            "--summary",
            "x",
            "--pointer",
            "event:0190",
        ])
        .await;
    assert!(bad.fails(5).starts_with("memex: INVALID_ARGUMENT: pointers[0]"), "{}", bad.stderr);
    let malformed = cli
        .run(&[
            "report",
            "--task",
            "child-1",
            "--session",
            &exec,
            "--status",
            "failed",
            "--summary",
            "x",
            "--pointer",
            "s1:3-4",
        ])
        .await;
    assert!(
        malformed.fails(5).contains("expected event:ID, blake3:HEX or span:SESSION:FIRST-LAST"),
        "{}",
        malformed.stderr
    );

    let stdout = watcher.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    });
    let line = tokio::time::timeout(std::time::Duration::from_secs(20), line).await.expect("a report line").unwrap();
    let _ = watcher.kill();
    let _ = watcher.wait();
    let seen: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (seen["task_id"].as_str(), seen["status"].as_str(), seen["seq"].as_u64()),
        (Some("child-1"), Some("succeeded"), Some(1))
    );
    assert_eq!(seen["summary"], "Fixed _cstack; 12 tests pass.");
    assert_eq!(seen["pointers"][0]["span"]["session_id"], exec.as_str());
}
