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
