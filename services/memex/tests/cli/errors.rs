//! Failures read as a person expects (`memex: CODE: the server's message`) and exit with a
//! status per kind: 2 usage, 3 auth, 4 not found, 5 invalid argument, 6 conflict, 1 server.
use memex_store::Access;
use memex_tests::server_or_skip;

use crate::Cli;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_code_and_the_reason() {
    let srv = server_or_skip!();
    let a = Cli::new(&srv, "team-a", Access::Write).await;
    let b = Cli::new(&srv, "team-b", Access::Write).await;

    // Another namespace's key.
    let cross = b.with_key(a.key.as_deref());
    let r = cross.run(&["search", "anything"]).await;
    assert_eq!(
        r.fails(3),
        "memex: PERMISSION_DENIED: namespace: this API key belongs to namespace \"team-a\", not \"team-b\"\n"
    );
    assert!(!r.stderr.contains("Status {"), "not tonic's Debug form");
    // No key at all.
    let r = a.with_key(None).run(&["session", "list"]).await;
    assert!(r.fails(3).starts_with("memex: UNAUTHENTICATED: "), "{}", r.stderr);

    // Not found, by id.
    let missing = "0190f3c5-0000-7000-8000-000000000000";
    let r = a.run(&["session", "get", missing]).await;
    assert!(r.fails(4).starts_with("memex: NOT_FOUND: "), "{}", r.stderr);
    assert!(r.stderr.contains(missing), "names the id: {}", r.stderr);
    let r = a.run(&["pack", "get", missing]).await;
    assert!(r.fails(4).starts_with("memex: NOT_FOUND: "), "{}", r.stderr);

    // Invalid arguments name the field.
    let r = a.run(&["read", "not-a-pointer"]).await;
    assert!(r.fails(5).starts_with("memex: INVALID_ARGUMENT: pointer"), "{}", r.stderr);
    let r = a.run(&["view", "--session", missing, "--mode", "adaptive"]).await;
    assert!(r.fails(5).starts_with("memex: INVALID_ARGUMENT: "), "{}", r.stderr);

    // Usage: clap's status.
    let r = a.run(&["search"]).await;
    assert!(r.fails(2).contains("required"), "{}", r.stderr);
    let r = a.run(&["task", "update", "t"]).await;
    assert!(r.fails(2).contains("--expected-version"), "{}", r.stderr);

    // Nothing listening: a connection error, status 1.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = Cli { endpoint: format!("http://127.0.0.1:{port}"), ..a.clone() };
    let r = down.run(&["session", "list"]).await;
    assert!(r.fails(1).starts_with(&format!("memex: cannot connect to http://127.0.0.1:{port}")), "{}", r.stderr);

    // The exit statuses are documented where a user looks.
    let help = a.run(&["--help"]).await;
    assert!(help.ok().contains("3 not allowed (UNAUTHENTICATED, PERMISSION_DENIED); 4 not found"), "{}", help.stdout);
}
