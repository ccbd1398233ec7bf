//! Sessions, appends (AppendEvents with and without a key, StreamEvents), events, API keys.
use memex_store::Access;
use memex_tests::server_or_skip;
use serde_json::json;

use crate::Cli;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_appends_and_events() {
    let srv = server_or_skip!();
    let cli = Cli::new(&srv, "ev", Access::Write).await;
    let s = cli.session("planner", Some("t1")).await;
    assert_eq!(s.len(), 36, "a UUID: {s}");

    let text = cli.run(&["session", "get", &s]).await;
    assert!(text.ok().starts_with(&format!("{s}  agent planner  0 events  ")), "{}", text.stdout);
    assert!(text.stdout.contains("  task t1"), "{}", text.stdout);
    let j = cli.run(&["session", "get", &s, "--format", "json"]).await.json();
    assert_eq!(
        (j["id"].as_str(), j["agent_id"].as_str(), j["event_count"].as_u64()),
        (Some(&*s), Some("planner"), Some(0))
    );

    // AppendEvents, one batch per call.
    let lines = "{\"kind\":\"user_message\",\"content\":\"fix the flaky test\"}\n{\"kind\":\"assistant_message\",\"content\":\"on it\"}\n";
    let r = cli.run_stdin(&["append", "--session", &s], lines.into()).await;
    assert_eq!(r.ok(), "appended seqs 1..=2\n");
    // With an idempotency key, a retry is answered with the first result.
    let one = "{\"kind\":\"note\",\"content\":\"once\"}\n";
    let keyed = ["append", "--session", &s, "--idempotency-key", "k1", "--format", "json"];
    let first = cli.run_stdin(&keyed, one.into()).await.json();
    let again = cli.run_stdin(&keyed, one.into()).await.json();
    assert_eq!((first["first_seq"].as_u64(), first["replayed"].as_bool()), (Some(3), Some(false)));
    assert_eq!((again["first_seq"].as_u64(), again["replayed"].as_bool()), (Some(3), Some(true)));
    // StreamEvents: three batches of two on one stream.
    let six: String = (0..6).map(|i| format!("{}\n", json!({"kind": "note", "content": format!("n{i}")}))).collect();
    let r = cli.run_stdin(&["append", "--session", &s, "--stream", "--batch", "2"], six.into()).await;
    assert_eq!(r.ok(), "appended 6 events in 3 batches\n");

    // Every event, as JSON lines `memex view` reads.
    let out = cli.run(&["events", "--session", &s]).await;
    let events: Vec<serde_json::Value> = out.ok().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), 9);
    assert_eq!(events[0]["content"], "fix the flaky test");
    assert_eq!(events[8]["seq"], 9);

    // A tool output over 8 KiB becomes an artifact; `memex artifact` gives its bytes back.
    let big: String = (0..400).map(|i| format!("line {i} of a long test log\n")).collect();
    let call = json!({"kind": "tool_call", "tool_name": "Bash", "tool_call_id": "c1", "content": "{}"});
    let r = cli.append(&s, &[call, json!({"kind": "tool_result", "tool_call_id": "c1", "content": big})]).await;
    let id = r["artifacts"][0]["id"].as_str().expect("an artifact").to_owned();
    assert!(id.starts_with("blake3:"), "{id}");
    assert!(cli.run(&["artifact", &id]).await.ok() == big, "the artifact's bytes, whole");

    let list = cli.run(&["session", "list", "--format", "json"]).await;
    let sessions: Vec<serde_json::Value> = list.ok().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["event_count"], 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_over_the_api() {
    let srv = server_or_skip!();
    let admin = Cli::new(&srv, "keys", Access::Admin).await;
    let created = admin.run(&["key", "create", "--name", "reader", "--right", "read"]).await;
    let token = created.ok().trim().to_owned();
    assert!(token.starts_with("mx_"), "{token}");
    assert!(created.stderr.contains("  reader  read  "), "{}", created.stderr);

    let list = admin.run(&["key", "list", "--format", "json"]).await;
    let keys: Vec<serde_json::Value> = list.ok().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let reader = keys.iter().find(|k| k["name"] == "reader").expect("the new key is listed");
    assert_eq!(reader["right"], "RIGHT_READ");
    let id = reader["id"].as_str().unwrap().to_owned();

    // The read key reads, and may not write: exit 3 and the server's reason.
    let ro = admin.with_key(Some(&token));
    ro.run(&["session", "list"]).await.ok();
    let denied = ro.run(&["session", "create", "--agent", "a"]).await;
    assert_eq!(denied.fails(3), "memex: PERMISSION_DENIED: this API key has read access; this call needs write\n");

    // Rotation: a new token at once; the old key expires after the overlap (0: at once).
    let rotated = admin.run(&["key", "rotate", &id, "--overlap-secs", "0"]).await;
    let new_token = rotated.ok().trim().to_owned();
    assert!(new_token.starts_with("mx_") && new_token != token, "{}", rotated.stdout);
    assert!(rotated.stderr.contains("expires"), "{}", rotated.stderr);
    admin.with_key(Some(&new_token)).run(&["session", "list"]).await.ok();
    ro.run(&["session", "list"]).await.fails(3);

    let revoked = admin.run(&["key", "revoke", &id]).await;
    assert!(revoked.ok().contains("  revoked "), "{}", revoked.stdout);
    let text = admin.run(&["key", "list"]).await;
    assert!(text.ok().lines().any(|l| l.starts_with(&id) && l.contains("revoked")), "{}", text.stdout);
}
