//! memex through an MCP client no one here wrote: the official MCP Inspector's CLI mode
//! (`@modelcontextprotocol/inspector`, installed from npm by scripts/install-mcp-inspector.sh)
//! lists the tools (checking their schemas' portability), calls `search` and `read_lines` over
//! streamable HTTP with an API key, and sees a tool error and a refused key as such.
//! Skipped, saying so, only where Node is absent.
use std::path::{Path, PathBuf};
use std::process::Command;

use memex_tests::TestServer;
use serde_json::Value;

use crate::mcp::TOOLS;
use crate::{call, ev, fixture, result};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_owned()
}

/// The inspector, installed if need be; None (with a message) where Node is absent.
fn inspector() -> Option<PathBuf> {
    if Command::new("node").arg("--version").output().is_err() {
        eprintln!("SKIP mcp_inspector: node is not installed, so the MCP Inspector CLI cannot run");
        return None;
    }
    let root = repo_root();
    let status = Command::new("bash")
        .arg(root.join("scripts/install-mcp-inspector.sh"))
        .status()
        .expect("run the install script");
    assert!(status.success(), "scripts/install-mcp-inspector.sh failed");
    let bin = root.join("tools/mcp-inspector/node_modules/.bin/mcp-inspector");
    assert!(bin.exists(), "{} missing after the install script", bin.display());
    Some(bin)
}

/// Runs the inspector CLI against `url` with `args`; returns (exit success, stdout as JSON).
async fn run(bin: &Path, url: &str, headers: &[String], args: &[&str]) -> (bool, Value, String) {
    let mut cmd = Command::new(bin);
    cmd.args(["--cli", url, "--transport", "http"]);
    for h in headers {
        cmd.args(["--header", h]);
    }
    cmd.args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.expect("join").expect("run the inspector");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status.success(), json, format!("stdout: {stdout}\nstderr: {stderr}"))
}

#[tokio::test]
async fn the_mcp_inspector_lists_and_calls_the_tools() {
    let Some(bin) = inspector() else { return };
    let Some(srv) = TestServer::start_mcp(|_| {}).await else { return };
    let mut f = fixture(&srv, "insp").await;
    f.append(vec![
        ev("user_message", "why does the build fail?"),
        call("c1"),
        result("c1", "error[E0308]: mismatched types in src/parse.rs"),
    ])
    .await
    .unwrap();
    let url = srv.mcp_url();
    let headers = [format!("Authorization: {}", f.token), "X-Memex-Namespace: insp".to_owned()];

    // --strict: the inspector also checks every tool schema for portability across model providers.
    let (ok, tools, shown) = run(&bin, &url, &headers, &["--method", "tools/list", "--strict"]).await;
    assert!(ok, "{shown}");
    assert!(!shown.contains("Warning:") && !shown.contains("Error:"), "{shown}");
    let mut names: Vec<&str> =
        tools["tools"].as_array().expect(&shown).iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, TOOLS);

    let (ok, found, shown) = run(
        &bin,
        &url,
        &headers,
        &["--method", "tools/call", "--tool-name", "search", "--tool-arg", "query=mismatched types", "limit=3"],
    )
    .await;
    assert!(ok, "{shown}");
    assert_eq!(found["isError"], false, "{shown}");
    let pointer = found["structuredContent"]["hits"][0]["pointer"].as_str().expect(&shown).to_owned();
    assert!(pointer.starts_with(&format!("{}:", f.session)), "{pointer}");

    let (ok, read, shown) = run(
        &bin,
        &url,
        &headers,
        &["--method", "tools/call", "--tool-name", "read_lines", "--tool-arg", &format!("pointer={pointer}")],
    )
    .await;
    assert!(ok, "{shown}");
    assert_eq!(read["structuredContent"]["pointer"], pointer.as_str(), "{shown}");
    assert!(read["content"][0]["text"].as_str().expect(&shown).contains("mismatched types"), "{shown}");

    let (ok, bad, shown) = run(
        &bin,
        &url,
        &headers,
        &["--method", "tools/call", "--tool-name", "search", "--tool-arg", "query=x", "limit=5000"],
    )
    .await;
    // A tool error reaches the inspector as one (it exits non-zero for it), with the field named.
    assert!(!ok, "{shown}");
    assert_eq!(bad["isError"], true, "{shown}");
    assert_eq!(bad["content"][0]["text"], "INVALID_ARGUMENT: limit: must be 1..=1000, got 5000", "{shown}");

    // A wrong key is refused before any tool is listed (the inspector then asks for OAuth).
    let wrong = ["Authorization: Bearer wrong".to_owned(), "X-Memex-Namespace: insp".to_owned()];
    let (ok, listed, shown) = run(&bin, &url, &wrong, &["--method", "tools/list"]).await;
    assert!(!ok && listed["tools"].is_null(), "{shown}");
    assert!(shown.contains("auth_required"), "{shown}");
}
