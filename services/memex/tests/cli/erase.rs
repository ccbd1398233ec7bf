//! `memex erase`: a dry run counts, the erasure answers what went, and the session is then a
//! run of tombstones that takes no appends; a write key may not erase (exit 3).
use memex_store::Access;
use memex_tests::TestServer;
use serde_json::json;

use crate::Cli;

#[tokio::test]
async fn erase_counts_then_erases_a_subjects_sessions() {
    let Some(srv) = TestServer::start().await else { return };
    let cli = Cli::new(&srv, "erase-cli", Access::Admin).await;
    let s = cli.session("subject", None).await;
    cli.append(&s, &[json!({"kind": "user_message", "content": "my phone is 555-0199"})]).await;

    let dry = cli.run(&["erase", "--agent", "subject", "--reason", "ticket 7", "--dry-run"]).await;
    assert!(dry.ok().starts_with("would erase 1 session(s)"), "{}", dry.stdout);
    assert!(dry.ok().contains("events 1 "), "{}", dry.stdout);

    let writer = Cli::new(&srv, "erase-cli", Access::Write).await;
    writer.run(&["erase", "--session", &s, "--reason", "ticket 7"]).await.fails(3);
    cli.run(&["erase", "--session", &s]).await.fails(2);

    let done = cli.run(&["erase", "--session", &s, "--reason", "ticket 7", "--format", "json"]).await;
    let v = done.json();
    assert_eq!(v["session_ids"], json!([s]));
    assert_eq!(v["events"], 1);
    assert!(v["seq"].as_u64().unwrap() > 0);
    let events = cli.run(&["events", "--session", &s]).await;
    assert!(events.ok().contains("[erased: erasure") && !events.ok().contains("555-0199"), "{}", events.stdout);
    let again = cli.run_stdin(&["append", "--session", &s], b"{\"kind\":\"note\",\"content\":\"x\"}\n".to_vec()).await;
    assert!(again.fails(6).contains("erased"));
}
