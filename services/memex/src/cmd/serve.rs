//! `memex serve`, `memex migrate`, `memex config`.
use anyhow::Context;
use memex_server::Config;
use memex_server::flags::{ConfigArgs, Overrides};

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Address to listen on (overrides `listen`).
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// What this process does (overrides `role`): all (default), api (the RPCs, no embedding
    /// worker) or worker (the embedding worker and gRPC health only).
    #[arg(long, value_parser = ["all", "api", "worker"])]
    pub role: Option<String>,
    /// Log format (overrides log.format).
    #[arg(long, value_parser = ["text", "json"])]
    pub log_format: Option<String>,
    /// Also serve MCP over streamable HTTP at http://ADDR/mcp (sets mcp.http and mcp.http_addr).
    #[arg(long, value_name = "ADDR")]
    pub mcp_http_addr: Option<std::net::SocketAddr>,
    /// Serve without authentication: anyone who can reach the port can read and write every
    /// namespace. For local development only.
    #[arg(long)]
    pub insecure_disable_auth: bool,
}

/// The configuration `args` name, with `serve`'s flags (if any) layered on top.
pub fn load(args: &ConfigArgs, serve: Option<&ServeArgs>) -> anyhow::Result<Config> {
    let mut o = Overrides::default();
    if let Some(s) = serve {
        o.listen = s.listen.map(|a| a.to_string());
        o.role = s.role.clone();
        if s.insecure_disable_auth {
            o.auth.insert("enabled".into(), false.into());
        }
        if let Some(addr) = s.mcp_http_addr {
            o.mcp.insert("http".into(), true.into());
            o.mcp.insert("http_addr".into(), addr.to_string().into());
        }
        if let Some(f) = &s.log_format {
            o.log.insert("format".into(), f.clone().into());
        }
    }
    Ok(args.load_with(o)?)
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = load(&args.config, Some(&args))?;
    let _telemetry = memex_server::telemetry::init(&config.log)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    memex_server::run(listener, config, shutdown_signal()).await?;
    Ok(())
}

pub async fn migrate(args: ConfigArgs) -> anyhow::Result<()> {
    let config = load(&args, None)?;
    let store = memex_server::connect_store(&config).await?;
    store.migrate().await?;
    eprintln!("migrations applied to {}", memex_server::config::redact_url(&config.database.url));
    Ok(())
}

pub fn print_config(args: ServeArgs) -> anyhow::Result<()> {
    let config = load(&args.config, Some(&args))?;
    print!("{}", config.redacted());
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
