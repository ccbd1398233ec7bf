//! `memex mcp`: the built binary, spawned as an agent would spawn it, serves the tools over stdio
//! to the rmcp client, as a client of a real server with the connection's key and namespace. A
//! wrong key, no key, or no server are tool errors the agent can read, never a dead process.
#![allow(clippy::unwrap_used)]

use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::TestServer;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

/// `memex mcp` with these flags (and no MEMEX_* from the environment), as an MCP client's child.
async fn spawn(args: &[&str]) -> Client {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_memex"));
    cmd.arg("mcp").args(args).args(["--api-key-file", "/nonexistent/memex.key"]);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("MEMEX_")) {
        cmd.env_remove(k);
    }
    ().serve(TokioChildProcess::new(cmd).unwrap()).await.expect("the MCP handshake over stdio")
}

async fn tool(client: &Client, name: &'static str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else { panic!("an object") };
    client.call_tool(CallToolRequestParams::new(name).with_arguments(args)).await.expect("a tool answer")
}

fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn memex_mcp_serves_the_tools_over_stdio() {
    let Some(srv) = TestServer::start().await else { return };
    let (_, token) = srv.namespace_with_key("stdio", Access::Write).await;
    let mut c = srv.clients(Some(&token)).await;
    let session = c
        .sessions
        .create_session(pb::CreateSessionRequest {
            namespace: "stdio".into(),
            agent_id: "a".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .id;
    let input =
        |kind: &str, content: &str| pb::EventInput { kind: kind.into(), content: content.into(), ..Default::default() };
    c.events
        .append_events(pb::AppendEventsRequest {
            namespace: "stdio".into(),
            session_id: session.clone(),
            events: vec![
                input("user_message", "where is the config parsed?"),
                input("decision", "parse the config with figment"),
            ],
            idempotency_key: String::new(),
        })
        .await
        .unwrap();
    let endpoint = srv.endpoint();
    let client = spawn(&["--endpoint", &endpoint, "--namespace", "stdio", "--api-key", &token]).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().map(|i| i.name.as_str()), Some("memex"));
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 17);
    for name in ["read_lines", "query_facts", "handoff"] {
        assert!(tools.iter().any(|t| t.name == name), "{name}");
    }

    let r = tool(&client, "search", json!({"query": "figment"})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let hit = &r.structured_content.as_ref().unwrap()["hits"][0];
    assert_eq!(hit["kind"], "decision");
    let pointer = hit["pointer"].as_str().unwrap().to_owned();
    assert!(pointer.starts_with(&format!("{session}:")), "{pointer}");
    let r = tool(&client, "read_lines", json!({"pointer": pointer, "context": 1})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert!(text(&r).contains("parse the config with figment"), "{}", text(&r));
    // A field the server refuses, named as gRPC names it.
    let r = tool(&client, "read_lines", json!({"pointer": format!("{session}:9-3")})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).starts_with("INVALID_ARGUMENT: "), "{}", text(&r));
    client.cancel().await.unwrap();

    // A wrong key, no key, no server: each call is a tool error; the process serves on.
    let wrong = spawn(&["--endpoint", &endpoint, "--namespace", "stdio", "--api-key", "wrong"]).await;
    let r = tool(&wrong, "search", json!({"query": "figment"})).await;
    assert!(text(&r).starts_with("UNAUTHENTICATED: the API key is not valid"), "{}", text(&r));
    let none = spawn(&["--endpoint", &endpoint, "--namespace", "stdio"]).await;
    let r = tool(&none, "search", json!({"query": "figment"})).await;
    assert!(text(&r).starts_with("UNAUTHENTICATED: missing API key"), "{}", text(&r));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = spawn(&["--endpoint", &format!("http://127.0.0.1:{port}"), "--api-key", &token]).await;
    for _ in 0..2 {
        let r = tool(&down, "get_task_state", json!({"task_id": "t"})).await;
        assert!(text(&r).starts_with("UNAVAILABLE: "), "{}", text(&r));
    }
}
