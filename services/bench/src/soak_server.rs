//! The soak bench's server under test: `memex serve` started as a child process (or one at
//! `--endpoint`), waited for until gRPC health says SERVING, read from `/proc`, and stopped.
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use memex_client::Conn;

use super::bench_soak::SoakArgs;
use super::soak_stats::ProcSample;

/// The server under test: a child process this bench started, or one at `--endpoint`.
pub(crate) struct Server {
    pub endpoint: String,
    pub pid: Option<u32>,
    child: Option<std::process::Child>,
    log: Option<PathBuf>,
}

impl Server {
    pub(crate) fn external(endpoint: &str, pid: Option<u32>) -> Server {
        Server { endpoint: endpoint.to_owned(), pid, child: None, log: None }
    }

    /// `memex serve` with the configuration of `args.config` (the defaults, unless -c or MEMEX_*
    /// say otherwise) on a free port of 127.0.0.1.
    pub(crate) fn spawn(args: &SoakArgs) -> anyhow::Result<Server> {
        let bin = match &args.memex_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe()?.with_file_name("memex"),
        };
        anyhow::ensure!(
            bin.is_file(),
            "no memex binary at {} (cargo build --release -p memex, or give --memex-bin)",
            bin.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = std::fs::File::create(&args.server_log)
            .with_context(|| format!("--server-log {}", args.server_log.display()))?;
        let mut cmd = std::process::Command::new(&bin);
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
        if let Some(c) = &args.config.config {
            cmd.arg("--config").arg(c);
        }
        if let Some(url) = &args.config.database_url {
            cmd.args(["--database-url", url]);
        }
        // The server logs its caches' sizes once a minute at debug level; JSON lines so that
        // `caches` below can read them back.
        let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
        cmd.env("RUST_LOG", format!("{filter},memex_server::caches=debug")).env("MEMEX_LOG__FORMAT", "json");
        let child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        Ok(Server {
            endpoint: format!("http://127.0.0.1:{port}"),
            pid: Some(child.id()),
            child: Some(child),
            log: Some(args.server_log.clone()),
        })
    }

    /// Waits until gRPC health says SERVING (migrated, the text index caught up). A server that
    /// exits, or an --endpoint that does not answer, is an error at once.
    pub(crate) async fn wait_ready(&mut self, conn: &Conn, timeout: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                anyhow::bail!("the server exited ({status}) before it was ready:\n{}", self.log_tail());
            }
            match conn.channel().await {
                Ok(channel) => {
                    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
                    let check = health.check(tonic_health::pb::HealthCheckRequest { service: String::new() }).await;
                    if check.is_ok_and(|r| {
                        r.get_ref().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
                    }) {
                        return Ok(started.elapsed());
                    }
                }
                Err(e) if self.child.is_none() => anyhow::bail!("cannot reach the server at --endpoint: {e}"),
                Err(_) => {}
            }
            anyhow::ensure!(
                started.elapsed() < timeout,
                "the server was not ready (gRPC health SERVING) after {} s (--ready-timeout)",
                timeout.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = self.log.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The caches' sizes the server logged (name → [entries, weight, capacity, unit]), oldest
    /// first; empty for a server this bench did not start.
    pub(crate) fn caches(&self) -> Vec<serde_json::Map<String, serde_json::Value>> {
        let text = self.log.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
        text.lines().filter(|l| l.contains("memex_server::caches")).filter_map(cache_line).collect()
    }

    pub(crate) fn sample(&self) -> Option<ProcSample> {
        read_proc(self.pid?)
    }

    /// SIGTERM (the server drains within shutdown_grace_secs), then SIGKILL if it lingers.
    pub(crate) async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        for _ in 0..400 {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The process `pid` as its /proc files say now; None once it is gone.
pub(crate) fn read_proc(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    ProcSample::parse(&status, &stat)
}

/// The caches of one `cache sizes` log line (`fields.caches`, itself a JSON object).
fn cache_line(line: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let caches = v.get("fields")?.get("caches")?.as_str()?;
    match serde_json::from_str(caches).ok()? {
        serde_json::Value::Object(m) => Some(m),
        _ => None,
    }
}

/// One line per cache: its weight against its capacity (MiB for the caches weighed in bytes).
pub(crate) fn describe_caches(caches: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    caches
        .iter()
        .filter_map(|(name, v)| {
            let (entries, weight, capacity) = (v.get(0)?.as_u64()?, v.get(1)?.as_u64()?, v.get(2)?.as_u64()?);
            Some(match v.get(3)?.as_str()? {
                "bytes" => format!(
                    "{name}: {:.1} of {:.0} MiB ({entries} entries)",
                    weight as f64 / 1048576.0,
                    capacity as f64 / 1048576.0
                ),
                _ => format!("{name}: {entries} of {capacity} entries"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_lines_read_back_from_the_json_log() {
        let line = r#"{"timestamp":"2026-11-27T05:00:00Z","level":"DEBUG","fields":{"message":"cache sizes","caches":"{\"views.compiled\":[3,2097152,268435456,\"bytes\"],\"context.stored_chunks\":[7,7,1000000,\"entries\"]}"},"target":"memex_server::caches"}"#;
        let caches = cache_line(line).expect("a cache line");
        assert_eq!(
            describe_caches(&caches),
            ["context.stored_chunks: 7 of 1000000 entries", "views.compiled: 2.0 of 256 MiB (3 entries)"]
        );
        assert!(cache_line(r#"{"fields":{"message":"starting memex"}}"#).is_none());
        assert!(cache_line("not json").is_none());
    }
}
