//! Fuzz the server configuration loader: the bytes are a `memex.toml`, loaded the way `memex serve`
//! loads it (`Config::load`: defaults < file < `MEMEX_*` environment < flags, then `validate`).
//! Any error is fine; a panic is a bug. A configuration that loads must also print (`redacted`,
//! logged at start-up) and, printed as TOML, load back to the same configuration.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use memex_server::config::{Config, redact_url};

/// One file per fuzzing process (`-fork`/`-jobs` run several), rewritten for every input.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| std::env::temp_dir().join(format!("memex-fuzz-config-{}.toml", std::process::id())))
}

fn load(text: &[u8]) -> Option<Config> {
    std::fs::write(scratch(), text).expect("write the scratch config file");
    Config::load(Some(scratch()), serde_json::json!({})).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some(config) = load(data) else { return };
    config.validate().expect("a loaded configuration validates");
    let _ = config.redacted();
    let _ = redact_url(&config.database.url);
    let _ = config.shutdown_grace();
    // Printed (unredacted) and loaded again, it is the same configuration. Compared as text:
    // a float field the validation lets through as NaN would not equal itself.
    let Ok(printed) = toml::to_string(&config) else { return };
    let again = load(printed.as_bytes()).unwrap_or_else(|| panic!("the printed configuration does not load:\n{printed}"));
    assert_eq!(toml::to_string(&again).ok().as_deref(), Some(printed.as_str()), "the configuration changed on reload");
});
