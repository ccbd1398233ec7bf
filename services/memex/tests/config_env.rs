//! `MEMEX_<SECTION>__<KEY>` environment variables override the defaults and the file.
use std::process::Command;

#[test]
fn environment_variables_set_nested_keys() {
    let out = Command::new(env!("CARGO_BIN_EXE_memex"))
        .arg("config")
        .env("MEMEX_EMBEDDING__PROVIDER", "none")
        .env("MEMEX_VIEWS__CACHE_BYTES", "12345")
        .env("MEMEX_SHUTDOWN_GRACE_SECS", "7")
        .env("MEMEX_API_KEY", "not configuration")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run memex config");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[embedding]\nprovider = \"none\""), "{text}");
    assert!(text.contains("cache_bytes = 12345"), "{text}");
    assert!(text.contains("shutdown_grace_secs = 7"), "{text}");
}

/// The `[mcp]` section layers like the rest: the environment, then `serve`'s flag on top.
#[test]
fn mcp_over_http_is_configured_by_environment_and_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_memex"))
        .args(["config", "--mcp-http-addr", "127.0.0.1:6001"])
        .env("MEMEX_MCP__NAMESPACE", "team")
        .env("MEMEX_MCP__HTTP_ADDR", "127.0.0.1:6000")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("run memex config");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mcp = &text[text.find("[mcp]").expect("an [mcp] section")..];
    assert!(mcp.contains("http = true\n"), "{mcp}");
    assert!(mcp.contains("http_addr = \"127.0.0.1:6001\""), "{mcp}");
    assert!(mcp.contains("namespace = \"team\""), "{mcp}");
}
