//! The command-line layer of the configuration (defaults < file < environment < flags): the flags
//! that `memex` and `memex-bench` share, so both read the configuration the same way.
use std::path::PathBuf;

use serde::Serialize;

use crate::config::{Config, ConfigError};

/// Where the configuration comes from; shared by every subcommand that reads it.
#[derive(clap::Args, Debug, Clone)]
pub struct ConfigArgs {
    /// Configuration file (default: ./memex.toml if it exists).
    #[arg(long, short = 'c', env = "MEMEX_CONFIG")]
    pub config: Option<PathBuf>,
    /// Database URL (overrides database.url).
    #[arg(long)]
    pub database_url: Option<String>,
}

/// A command's other flags, as a partial configuration layered over file and environment.
#[derive(Serialize, Default)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub database: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub auth: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub log: serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub mcp: serde_json::Map<String, serde_json::Value>,
}

impl ConfigArgs {
    /// The configuration these flags name.
    pub fn load(&self) -> Result<Config, ConfigError> {
        self.load_with(Overrides::default())
    }

    /// The configuration these flags name, with the command's other flags (`overrides`) on top.
    pub fn load_with(&self, mut overrides: Overrides) -> Result<Config, ConfigError> {
        if let Some(url) = &self.database_url {
            overrides.database.insert("url".into(), url.clone().into());
        }
        Config::load_from(self.config.as_deref(), overrides)
    }
}

/// Flags every command that opens the search index itself takes besides the configuration
/// (`memex reindex`, the search benchmarks).
#[derive(clap::Args, Debug, Clone)]
pub struct SearchArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Embedding provider (overrides embedding.provider): minilm, openai or none.
    #[arg(long, value_parser = ["minilm", "openai", "none"])]
    pub embedding: Option<String>,
    /// Text index directory (overrides search.index_dir; benchmarks default to a fresh temporary one).
    #[arg(long)]
    pub index_dir: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(config: Option<&str>, database_url: Option<&str>) -> ConfigArgs {
        ConfigArgs { config: config.map(PathBuf::from), database_url: database_url.map(str::to_owned) }
    }

    #[test]
    fn a_named_file_must_exist() {
        let err = args(Some("/nonexistent/memex.toml"), None).load().expect_err("a missing named file is refused");
        assert_eq!(err.to_string(), "configuration file /nonexistent/memex.toml does not exist");
    }

    #[test]
    fn the_flags_beat_the_file() {
        let dir = std::env::temp_dir().join(format!("memex-flags-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let file = dir.join("memex.toml");
        std::fs::write(&file, "shutdown_grace_secs = 5\n[database]\nurl = \"postgres://file@127.0.0.1/f\"\n")
            .expect("write");
        let path = file.display().to_string();
        let o = Overrides { listen: Some("127.0.0.1:7".into()), ..Overrides::default() };
        let c = args(Some(&path), Some("postgres://flag@127.0.0.1/g")).load_with(o).expect("load");
        assert_eq!(c.database.url, "postgres://flag@127.0.0.1/g");
        assert_eq!(c.listen.to_string(), "127.0.0.1:7");
        assert_eq!(c.shutdown_grace_secs, 5, "the named file is read");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
