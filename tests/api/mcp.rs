//! memex over MCP (streamable HTTP, as `memex serve` runs it): the rmcp client lists the tools and
//! calls them against a real server; answers carry the same pointers gRPC gives, failures come back
//! as tool errors with gRPC's field-naming messages, and keys and namespaces are checked as in gRPC.
use std::collections::HashMap;

use memex_proto::v1 as pb;
use memex_store::Access;
use memex_tests::{Clients, TestServer, memory_on};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::{call, ev, fixture, result};

pub const TOOLS: [&str; 17] = [
    "build_pack",
    "compact",
    "expand_manifest",
    "expand_topic",
    "find_quote",
    "get_fact",
    "get_task_state",
    "handoff",
    "list_topics",
    "memory_status",
    "query_facts",
    "read_lines",
    "recall_all",
    "remember_when",
    "report",
    "search",
    "update_task_state",
];

type Client = RunningService<RoleClient, ()>;

/// An MCP client of `srv`'s HTTP endpoint sending `token` (a bare key) and `namespace` headers.
async fn connect(srv: &TestServer, token: Option<&str>, namespace: Option<&str>) -> Result<Client, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(srv.mcp_url());
    if let Some(t) = token {
        config = config.auth_header(t);
    }
    if let Some(ns) = namespace {
        let headers = HashMap::from([(
            http::HeaderName::from_static("x-memex-namespace"),
            http::HeaderValue::from_str(ns).map_err(|e| e.to_string())?,
        )]);
        config = config.custom_headers(headers);
    }
    ().serve(StreamableHttpClientTransport::from_config(config)).await.map_err(|e| format!("{e:?}"))
}

pub async fn tool(client: &Client, name: &'static str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else { panic!("arguments are an object") };
    client
        .call_tool(CallToolRequestParams::new(name).with_arguments(args))
        .await
        .expect("a tool answer, not a protocol error")
}

pub fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.as_str()).collect::<Vec<_>>().join("\n")
}

#[track_caller]
pub fn ok(r: &CallToolResult) -> &Value {
    assert_ne!(r.is_error, Some(true), "tool error: {}", text(r));
    r.structured_content.as_ref().expect("structured content")
}

#[track_caller]
pub fn tool_error(r: &CallToolResult, starts: &str) {
    assert_eq!(r.is_error, Some(true), "expected a tool error, got {}", text(r));
    assert!(text(r).starts_with(starts), "{:?} should start with {starts:?}", text(r));
}

#[tokio::test]
async fn the_tools_answer_over_http_with_the_pointers_grpc_gives() {
    let Some(srv) = TestServer::start_mcp(|_| {}).await else { return };
    let mut f = fixture(&srv, "mcp1").await;
    let token = f.token.trim_start_matches("Bearer ").to_owned();
    let appended = f
        .append(vec![
            ev("user_message", "why does test_parse_header fail?"),
            call("c1"),
            result("c1", "test test_parse_header ... FAILED\nthread panicked at 'index out of bounds: len 3'"),
        ])
        .await
        .unwrap();
    let client = connect(&srv, Some(&token), Some("mcp1")).await.expect("connect");
    let mut names: Vec<String> =
        client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(names, TOOLS);

    // search: the hit's pointer is the one gRPC's hit names.
    let grpc =
        f.c.search
            .search(pb::SearchRequest {
                namespace: "mcp1".into(),
                query: "index out of bounds".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    let top = &grpc.hits[0];
    let pointer = format!("{}:{}-{}", top.session_id, top.first_line, top.last_line);
    let r = tool(&client, "search", json!({"query": "index out of bounds", "limit": 3})).await;
    let hits = &ok(&r)["hits"];
    assert_eq!(hits[0]["pointer"], pointer.as_str());
    assert_eq!(hits[0]["event_id"], appended.event_ids[2].as_str());
    assert_eq!(hits[0]["evidence"], format!("event:{}", appended.event_ids[2]));
    assert!(text(&r).contains(&format!("1. {pointer} [tool_result]")), "{}", text(&r));
    assert!(text(&r).contains("index out of bounds"), "{}", text(&r));

    // read_lines dereferences it: the hit's own lines.
    let r = tool(&client, "read_lines", json!({"pointer": pointer})).await;
    let read = ok(&r);
    assert_eq!(read["pointer"], pointer.as_str());
    let shown: Vec<&str> = read["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap()).collect();
    assert!(shown.iter().any(|l| l.contains("index out of bounds")), "{shown:?}");
    assert_eq!(read["lines"][0]["number"].as_u64(), Some(top.first_line));

    // Task state: create, read back, and a stale write is FAILED_PRECONDITION naming the version.
    let r = tool(
        &client,
        "update_task_state",
        json!({"task_id": "fix", "expected_version": 0,
        "goals": ["make test_parse_header pass"], "key_pointers": [appended.event_ids[2]], "phase": "execution"}),
    )
    .await;
    assert_eq!(ok(&r)["version"], 1);
    let r = tool(&client, "get_task_state", json!({"task_id": "fix"})).await;
    let state = ok(&r);
    assert_eq!(state["state"]["goals"][0], "make test_parse_header pass");
    assert_eq!(state["state"]["key_pointers"][0], format!("event:{}", appended.event_ids[2]));
    assert_eq!(state["state"]["phase"], "execution");
    let r = tool(&client, "update_task_state", json!({"task_id": "fix", "expected_version": 0})).await;
    tool_error(&r, "FAILED_PRECONDITION: expected_version");

    // build_pack: stored, and every item carries a pointer into the session.
    let r = tool(&client, "build_pack", json!({"session_id": f.session, "user_message": "why does it panic?"})).await;
    let pack = ok(&r);
    let pack_id = pack["pack_id"].as_str().unwrap();
    let stored =
        f.c.context
            .get_pack(pb::GetPackRequest { namespace: "mcp1".into(), pack_id: pack_id.into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
    assert_eq!(pack["text"], stored.text.as_str());
    assert!(!stored.items.is_empty());
    for item in pack["items"].as_array().unwrap() {
        assert!(item["pointer"].as_str().unwrap().starts_with(&format!("{}:", f.session)), "{item}");
    }

    // report, with an event id and a seq span as evidence.
    let r = tool(
        &client,
        "report",
        json!({"task_id": "fix", "session_id": f.session, "status": "partial",
        "summary": "found the off-by-one", "pointers": [appended.event_ids[2], format!("span:{}:1-2", f.session)]}),
    )
    .await;
    let rep = ok(&r);
    assert_eq!(rep["status"], "partial");
    assert_eq!(rep["pointers"][0], format!("event:{}", appended.event_ids[2]));
    assert_eq!(rep["pointers"][1], format!("span:{}:1-2", f.session));
}

#[tokio::test]
async fn compaction_over_mcp_loses_nothing() {
    let Some(srv) = TestServer::start_mcp(|_| {}).await else { return };
    let mut f = fixture(&srv, "mcp2").await;
    let token = f.token.trim_start_matches("Bearer ").to_owned();
    let mut events = vec![ev("user_message", "list the logs")];
    for i in 0..6 {
        events.push(call(&format!("c{i}")));
        events.push(result(&format!("c{i}"), &format!("log {i}: {}\n", "ok ".repeat(400)).repeat(3)));
    }
    f.append(events).await.unwrap();
    let client = connect(&srv, Some(&token), Some("mcp2")).await.expect("connect");
    let r = tool(&client, "compact", json!({"session_id": f.session, "window_budget": 3000, "headroom": 500})).await;
    let c = ok(&r);
    assert_eq!(c["compacted"], true, "{}", text(&r));
    let manifest = c["manifest"]["id"].as_str().unwrap().to_owned();
    let evicted: Vec<String> =
        c["evicted_event_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    assert!(!evicted.is_empty());
    assert!(text(&r).contains(&format!("manifest {manifest}")), "{}", text(&r));
    let span = c["manifest"]["spans"][0]["pointer"].as_str().unwrap();
    assert!(span.starts_with(&format!("{}:", f.session)), "{span}");

    // The manifest expands to exactly the evicted events, byte for byte.
    let r = tool(&client, "expand_manifest", json!({"manifest_id": manifest})).await;
    let expanded = ok(&r);
    let ids: Vec<&str> =
        expanded["events"].as_array().unwrap().iter().map(|e| e["event_id"].as_str().unwrap()).collect();
    assert_eq!(ids, evicted);
    let all = f.all_events().await;
    for e in expanded["events"].as_array().unwrap() {
        let stored = all.iter().find(|s| s.id == e["event_id"].as_str().unwrap()).unwrap();
        assert_eq!(e["content"], stored.content.as_str());
    }
}

#[tokio::test]
async fn bad_arguments_are_tool_errors_naming_the_field() {
    let Some(srv) = TestServer::start_mcp(|_| {}).await else { return };
    let f = fixture(&srv, "mcp3").await;
    let client = connect(&srv, Some(f.token.trim_start_matches("Bearer ")), Some("mcp3")).await.expect("connect");
    // The server's own validation, word for word.
    tool_error(&tool(&client, "search", json!({"query": "x", "limit": 5000})).await, "INVALID_ARGUMENT: limit");
    tool_error(&tool(&client, "read_lines", json!({"pointer": "nope"})).await, "INVALID_ARGUMENT: pointer");
    tool_error(
        &tool(
            &client,
            "report",
            json!({"task_id": "t", "session_id": f.session, "status": "done",
        "summary": "s", "pointers": [format!("{}:1-2", f.session)]}),
        )
        .await,
        "INVALID_ARGUMENT: pointers[0]",
    );
    // Arguments that do not fit the schema.
    tool_error(
        &tool(&client, "search", json!({"limit": 3})).await,
        "INVALID_ARGUMENT: arguments: missing field `query`",
    );
    tool_error(
        &tool(&client, "search", json!({"query": "x", "limt": 3})).await,
        "INVALID_ARGUMENT: arguments: unknown field `limt`",
    );
    // Another namespace than the key's: refused as gRPC refuses it.
    tool_error(
        &tool(&client, "search", json!({"query": "x", "namespace": "elsewhere"})).await,
        "PERMISSION_DENIED: namespace",
    );
    // After all that, the connection still serves.
    ok(&tool(&client, "search", json!({"query": "x"})).await);
}

#[tokio::test]
async fn requests_without_a_good_key_are_refused() {
    let Some(srv) = TestServer::start_mcp(|_| {}).await else { return };
    let (_, token) = srv.namespace_with_key("mcp4", Access::Read).await;
    srv.namespace_with_key("other", Access::Read).await;
    let missing = connect(&srv, None, Some("mcp4")).await.expect_err("no key");
    // rmcp reports a 401 as "auth required", with the server's WWW-Authenticate challenge.
    assert!(missing.contains("AuthRequired") && missing.contains("Bearer"), "{missing}");
    let wrong = connect(&srv, Some("not-a-key"), Some("mcp4")).await.expect_err("wrong key");
    assert!(wrong.contains("AuthRequired"), "{wrong}");
    let elsewhere = connect(&srv, Some(&token), Some("other")).await.expect_err("another namespace");
    assert!(elsewhere.contains("403 Forbidden: PERMISSION_DENIED: namespace: this API key belongs"), "{elsewhere}");
    let client = connect(&srv, Some(&token), Some("mcp4")).await.expect("the right key");
    ok(&tool(&client, "search", json!({"query": "anything"})).await);
    // A read key cannot write, over MCP as over gRPC.
    tool_error(
        &tool(&client, "update_task_state", json!({"task_id": "t", "expected_version": 0})).await,
        "PERMISSION_DENIED",
    );
}

#[tokio::test]
async fn with_auth_off_no_key_is_needed_and_the_default_namespace_applies() {
    let Some(srv) = TestServer::start_mcp(|c| {
        c.auth.enabled = false;
        c.mcp.namespace = "mcp5".into();
    })
    .await
    else {
        return;
    };
    srv.namespace_with_key("mcp5", Access::Read).await;
    let client = connect(&srv, None, None).await.expect("no key needed");
    let r = tool(&client, "search", json!({"query": "anything"})).await;
    assert_eq!(ok(&r)["hits"], json!([]));
    tool_error(&tool(&client, "search", json!({"query": "x", "namespace": "absent"})).await, "NOT_FOUND: namespace");
}

#[tokio::test]
async fn the_mcp_listener_stops_with_the_server() {
    let Some(mut srv) = TestServer::start_mcp(|c| c.auth.enabled = false).await else { return };
    srv.namespace_with_key("mcp6", Access::Read).await;
    let mcp = srv.mcp_addr.expect("MCP served");
    let client = connect(&srv, None, Some("mcp6")).await.expect("connect");
    ok(&tool(&client, "search", json!({"query": "x"})).await);
    srv.trigger_shutdown();
    let started = std::time::Instant::now();
    srv.join().await.expect("a clean stop");
    // Well within the 3 s `run` would wait for an MCP server that was never told to stop.
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
    // `run` has returned: nothing listens on the MCP port any more.
    assert!(tokio::net::TcpStream::connect(mcp).await.is_err(), "the MCP port still accepts connections");
}

/// A coding session for memory: an edit of src/parser.rs, `cargo test parser` failing with a
/// compiler error, then passing.
fn memory_session() -> Vec<pb::EventInput> {
    let tool = |id: &str, name: &str, input: &str| pb::EventInput {
        tool_name: name.into(),
        tool_call_id: id.into(),
        ..ev("tool_call", input)
    };
    vec![
        ev("user_message", "The parser in src/parser.rs rejects valid headers. Fix it."),
        tool("c1", "Edit", r#"{"file_path":"src/parser.rs","old_string":"a","new_string":"b"}"#),
        result("c1", "The file src/parser.rs has been updated."),
        tool("c2", "Bash", r#"{"command":"cargo test parser"}"#),
        result("c2", "error[E0308]: mismatched types\ntest result: FAILED. 1 passed; 1 failed"),
        ev("assistant_message", "Fixing the return type of the parser."),
        tool("c3", "Edit", r#"{"file_path":"src/parser.rs","old_string":"b","new_string":"c"}"#),
        result("c3", "The file src/parser.rs has been updated."),
        tool("c4", "Bash", r#"{"command":"cargo test parser"}"#),
        result("c4", "test result: ok. 2 passed; 0 failed"),
    ]
}

/// Waits until the memory worker has read everything and the topics are current (twice alike:
/// the last turn closes after its events are read).
async fn memory_settled(c: &Clients, ns: &str) -> pb::GetMemoryStatusResponse {
    let mut last = None;
    for _ in 0..1_500 {
        let s = c
            .memory
            .clone()
            .get_memory_status(pb::GetMemoryStatusRequest { namespace: ns.into() })
            .await
            .unwrap()
            .into_inner();
        let done = s.lag_events == 0 && s.topics_current && s.segments > 0 && s.topics > 0;
        if done && last.as_ref() == Some(&s) {
            return s;
        }
        last = done.then_some(s);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the memory worker did not settle");
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.as_array().unwrap().iter().map(|x| x[key].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn the_memory_tools_answer_with_the_pointers_grpc_gives() {
    let Some(srv) = TestServer::start_mcp(memory_on).await else { return };
    let mut f = fixture(&srv, "mcpmem").await;
    f.append(memory_session()).await.unwrap();
    let status = memory_settled(&f.c, "mcpmem").await;
    let client = connect(&srv, Some(f.token.trim_start_matches("Bearer ")), Some("mcpmem")).await.expect("connect");
    let tools = client.list_all_tools().await.unwrap();
    for name in [
        "find_quote",
        "query_facts",
        "expand_topic",
        "remember_when",
        "recall_all",
        "list_topics",
        "get_fact",
        "memory_status",
    ] {
        let t = tools.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name} is not listed"));
        let cites = t.description.as_deref().is_some_and(|d| d.contains("SESSION_ID:FIRST-LAST"));
        assert!(cites || name == "memory_status", "{name}: {:?}", t.description);
    }
    let mut m = f.c.memory.clone();

    // memory_status: what gRPC says.
    let r = tool(&client, "memory_status", json!({})).await;
    let s = ok(&r);
    assert_eq!((s["lag_events"].as_u64(), s["facts"].as_u64()), (Some(0), Some(status.facts)));
    assert_eq!((s["interpreter"].as_str(), s["topics_current"].as_bool()), (Some("heuristic"), Some(true)));

    // find_quote: the quotes, their segments and facts, cited as gRPC cites them.
    let grpc = m
        .find_quote(pb::FindQuoteRequest {
            namespace: "mcpmem".into(),
            query: "mismatched types".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let r = tool(&client, "find_quote", json!({"query": "mismatched types"})).await;
    let quotes = &ok(&r)["quotes"];
    assert_eq!(quotes.as_array().unwrap().len(), grpc.quotes.len());
    assert!(!grpc.quotes.is_empty());
    for (q, g) in quotes.as_array().unwrap().iter().zip(&grpc.quotes) {
        assert!(g.hit_pointer.starts_with(&format!("{}:", f.session)), "{g:?}");
        assert_eq!(q["pointer"], g.hit_pointer.as_str());
        let seg = g.segment.as_ref().unwrap();
        assert_eq!(q["segment"]["pointer"], seg.pointer.as_str());
        let lines: Vec<String> = seg.summary.iter().map(|l| l.pointer.clone()).collect();
        assert_eq!(strings(&q["segment"]["summary"], "pointer"), lines);
        assert_eq!(strings(&q["facts"], "pointer"), g.facts.iter().map(|x| x.pointer.clone()).collect::<Vec<_>>());
        assert!(text(&r).contains(&format!(". {} [{}]", g.hit_pointer, g.match_type)), "{}", text(&r));
    }
    assert!(text(&r).contains("error[E0308]: mismatched types"), "{}", text(&r));

    // query_facts: the test's current status, then its history; the chain by get_fact.
    let r = tool(&client, "query_facts", json!({"fact_type": "test"})).await;
    let facts = &ok(&r)["facts"];
    let grpc = m
        .query_facts(pb::QueryFactsRequest {
            namespace: "mcpmem".into(),
            fact_type: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .facts;
    assert_eq!(strings(facts, "id"), grpc.iter().map(|x| x.id.clone()).collect::<Vec<_>>());
    assert_eq!(strings(facts, "pointer"), grpc.iter().map(|x| x.pointer.clone()).collect::<Vec<_>>());
    assert_eq!(strings(facts, "verb"), ["passed"]);
    let passed = facts[0]["id"].as_str().unwrap().to_owned();
    let r = tool(&client, "query_facts", json!({"fact_type": "test", "include_superseded": true})).await;
    let all = ok(&r)["facts"].as_array().unwrap().clone();
    let failed = all.iter().find(|x| x["verb"] == "failed").expect("the failure, superseded");
    assert_eq!((&failed["superseded_by"], &failed["current"]), (&json!(passed), &json!(false)));
    let r = tool(&client, "get_fact", json!({"fact_id": failed["id"]})).await;
    let chain = &ok(&r)["chain"];
    assert_eq!(strings(chain, "verb"), ["failed", "passed"]);
    assert_eq!(chain[0]["pointer"], failed["pointer"]);

    // expand_topic: the same segments and text as gRPC, the text citing them.
    let grpc = m
        .expand_topic(pb::ExpandTopicRequest {
            namespace: "mcpmem".into(),
            tag: "parser.rs".into(),
            depth: "segments".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let r = tool(&client, "expand_topic", json!({"tag": "parser.rs", "depth": "segments"})).await;
    let x = ok(&r);
    assert_eq!(x["text"], grpc.text.as_str());
    assert_eq!(strings(&x["segments"], "pointer"), grpc.segments.iter().map(|s| s.pointer.clone()).collect::<Vec<_>>());
    assert!(x["text"].as_str().unwrap().contains(&format!("{}:", f.session)), "{x}");
    assert!(text(&r).contains(&format!("segment {}", grpc.segments[0].pointer)), "{}", text(&r));
    // Paged into a reader's working set.
    let r = tool(&client, "expand_topic", json!({"tag": "parser.rs", "depth": "segments", "reader": "agent-m"})).await;
    assert_eq!(ok(&r)["working_set_tokens"], ok(&r)["tokens"]);

    // The overview tools, and time-scoped recall.
    let r = tool(&client, "recall_all", json!({"max_tokens": 4000})).await;
    assert!(ok(&r)["text"].as_str().unwrap().contains(&format!("{}:", f.session)), "{}", text(&r));
    let r = tool(&client, "list_topics", json!({"contains": "parser"})).await;
    assert!(strings(&ok(&r)["topics"], "tag").contains(&"parser.rs".to_owned()), "{}", text(&r));
    let r = tool(&client, "remember_when", json!({"query": "cargo test", "preset": "last_7_days"})).await;
    let w = ok(&r);
    assert!(!w["quotes"].as_array().unwrap().is_empty() && !w["facts_in_window"].as_array().unwrap().is_empty(), "{w}");

    // Failures are tool errors naming the field.
    tool_error(
        &tool(&client, "query_facts", json!({"fact_type": "test", "as_of": "yesterday"})).await,
        "INVALID_ARGUMENT: as_of",
    );
    tool_error(&tool(&client, "query_facts", json!({"fact_type": "gossip"})).await, "INVALID_ARGUMENT: fact_type");
    tool_error(
        &tool(&client, "expand_topic", json!({"tag": "parser.rs", "depth": "deep"})).await,
        "INVALID_ARGUMENT: arguments: unknown variant `deep`",
    );
    tool_error(&tool(&client, "expand_topic", json!({"tag": "nope"})).await, "NOT_FOUND: ");
    tool_error(
        &tool(&client, "get_fact", json!({"fact_id": "0190f3c5-0000-7000-8000-000000000000"})).await,
        "NOT_FOUND: fact_id",
    );
    tool_error(
        &tool(&client, "remember_when", json!({"query": "x", "from": "last week"})).await,
        "INVALID_ARGUMENT: from",
    );
}

#[tokio::test]
async fn the_handoff_tool_gives_the_snapshot_grpc_gives() {
    let Some(srv) = TestServer::start_mcp(|_| {}).await else { return };
    let mut f = fixture(&srv, "mcphandoff").await;
    f.append(memory_session()).await.unwrap();
    let client = connect(&srv, Some(f.token.trim_start_matches("Bearer ")), Some("mcphandoff")).await.expect("connect");
    let grpc =
        f.c.context
            .clone()
            .build_snapshot(pb::BuildSnapshotRequest {
                namespace: "mcphandoff".into(),
                session_id: f.session.clone(),
                budget_tokens: 1_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    let r = tool(&client, "handoff", json!({"session_id": f.session, "budget_tokens": 1000})).await;
    let s = ok(&r);
    assert_eq!(s["text"], grpc.text.as_str());
    assert_eq!(strings(&s["items"], "pointer"), grpc.items.iter().map(|i| i.pointer.clone()).collect::<Vec<_>>());
    assert!(text(&r).contains("<state_snapshot>"), "{}", text(&r));
    // A bad budget is the server's field error, as a tool error.
    let r = tool(&client, "handoff", json!({"session_id": f.session, "budget_tokens": 5})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).starts_with("INVALID_ARGUMENT: budget_tokens"), "{}", text(&r));
}
