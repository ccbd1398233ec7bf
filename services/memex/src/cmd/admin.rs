//! `memex admin`: bootstrap a deployment directly on the database (namespaces, API keys).
use std::path::PathBuf;

use anyhow::Context;
use memex_store::{Access, StoreError};

use memex_server::flags::ConfigArgs;

use super::serve::load;

#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// Create a namespace (a tenant / memory space).
    CreateNamespace {
        name: String,
        /// Succeed if it already exists.
        #[arg(long)]
        if_not_exists: bool,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// List namespaces.
    ListNamespaces {
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Create an API key; prints the token (shown once, stored only as a hash).
    CreateKey {
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        name: String,
        /// read, write or admin (each includes the ones before it).
        #[arg(long, default_value = "write")]
        right: Access,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// List a namespace's API keys (never their tokens).
    ListKeys {
        #[arg(long)]
        namespace: String,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Revoke an API key.
    RevokeKey {
        #[arg(long)]
        namespace: String,
        key_id: uuid::Uuid,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Show or change a namespace's retention: stored packs older than --packs-days are dropped,
    /// sessions whose last event is older than --events-days are erased (audited); the job runs
    /// every `retention.interval_secs` on `all` and `worker` processes. Default: forever.
    Retention {
        #[arg(long)]
        namespace: String,
        #[arg(long, conflicts_with = "packs_forever")]
        packs_days: Option<u32>,
        #[arg(long)]
        packs_forever: bool,
        #[arg(long, conflicts_with = "events_forever")]
        events_days: Option<u32>,
        #[arg(long)]
        events_forever: bool,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Show or change a namespace's quotas: events appended per second (on each replica) and
    /// bytes stored (event contents and artifacts). Past either, appends are refused with
    /// RESOURCE_EXHAUSTED. Unset: `[limits] namespace_events_per_sec` / `namespace_stored_bytes`
    /// of the servers' configuration (0 there: no limit). `--recount` counts the bytes stored
    /// from the rows (reads every event of the namespace).
    Quota {
        #[arg(long)]
        namespace: String,
        #[arg(long, conflicts_with = "events_per_sec_default")]
        events_per_sec: Option<u32>,
        /// Back to the servers' default rate.
        #[arg(long)]
        events_per_sec_default: bool,
        #[arg(long, conflicts_with = "stored_bytes_default")]
        stored_bytes: Option<u64>,
        /// Back to the servers' default storage quota.
        #[arg(long)]
        stored_bytes_default: bool,
        #[arg(long)]
        recount: bool,
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Make sure a namespace exists and `key_file` holds a live admin key for it, creating either
    /// when missing. Idempotent; `make run` uses it for the local `default` namespace.
    Bootstrap {
        #[arg(long, default_value = "default")]
        namespace: String,
        #[arg(long, default_value = ".memex/dev.key")]
        key_file: PathBuf,
        #[command(flatten)]
        config: ConfigArgs,
    },
}

async fn store(config: &ConfigArgs) -> anyhow::Result<memex_store::Store> {
    let config = load(config, None)?;
    let store = memex_server::connect_store(&config)
        .await
        .with_context(|| format!("cannot connect to {}", memex_server::config::redact_url(&config.database.url)))?;
    store.migrate().await?;
    Ok(store)
}

/// Runs an admin command against the database, as `Tenant::All`: the operator's commands create
/// namespaces and act on any of them (row-level security, ADR 008).
pub async fn run(cmd: AdminCommand) -> anyhow::Result<()> {
    memex_store::tenant::scope(memex_store::Tenant::All, run_command(cmd)).await
}

async fn run_command(cmd: AdminCommand) -> anyhow::Result<()> {
    match cmd {
        AdminCommand::CreateNamespace { name, if_not_exists, config } => {
            let store = store(&config).await?;
            match store.create_namespace(&name).await {
                Ok(ns) => println!("{}", ns.name),
                Err(StoreError::AlreadyExists(_)) if if_not_exists => println!("{name}"),
                Err(e) => return Err(e.into()),
            }
        }
        AdminCommand::ListNamespaces { config } => {
            for ns in store(&config).await?.list_namespaces().await? {
                println!("{}\t{}\t{}", ns.name, ns.id, ns.created_at.to_rfc3339());
            }
        }
        AdminCommand::CreateKey { namespace, name, right, config } => {
            let store = store(&config).await?;
            let ns = store.namespace(&namespace).await?;
            let created = store.create_api_key(&ns, &name, right).await?;
            eprintln!("key {} ({} access to namespace {})", created.key.id, right.as_str(), ns.name);
            println!("{}", created.token);
        }
        AdminCommand::ListKeys { namespace, config } => {
            let store = store(&config).await?;
            let ns = store.namespace(&namespace).await?;
            for k in store.list_api_keys(&ns).await? {
                let revoked = k.revoked_at.map(|t| format!("revoked {}", t.to_rfc3339())).unwrap_or_default();
                println!("{}\t{}\t{}\t{}\t{revoked}", k.id, k.name, k.access.as_str(), k.created_at.to_rfc3339());
            }
        }
        AdminCommand::RevokeKey { namespace, key_id, config } => {
            let store = store(&config).await?;
            let ns = store.namespace(&namespace).await?;
            let k = store.revoke_api_key(&ns, key_id).await?;
            println!("{} revoked", k.id);
        }
        AdminCommand::Retention { namespace, packs_days, packs_forever, events_days, events_forever, config } => {
            let change = |days: Option<u32>, forever: bool| if forever { Some(None) } else { days.map(Some) };
            let policy = store(&config)
                .await?
                .set_retention(
                    &namespace,
                    memex_store::RetentionChange {
                        packs_days: change(packs_days, packs_forever),
                        events_days: change(events_days, events_forever),
                    },
                )
                .await?;
            let show = |d: Option<u32>| d.map_or("forever".to_owned(), |d| format!("{d} days"));
            println!("{namespace}	packs {}	events {}", show(policy.packs_days), show(policy.events_days));
        }
        AdminCommand::Quota {
            namespace,
            events_per_sec,
            events_per_sec_default,
            stored_bytes,
            stored_bytes_default,
            recount,
            config,
        } => {
            let change = |v: Option<u64>, default: bool| if default { Some(None) } else { v.map(Some) };
            let store = store(&config).await?;
            let quota = store
                .set_quota(
                    &namespace,
                    memex_store::QuotaChange {
                        events_per_sec: change(events_per_sec.map(u64::from), events_per_sec_default)
                            .map(|v| v.map(|r| r as u32)),
                        stored_bytes: change(stored_bytes, stored_bytes_default),
                    },
                )
                .await?;
            let ns = store.namespace(&namespace).await?;
            let used = match recount {
                true => store.recount_usage(ns.id).await?,
                false => store.quota_and_usage(ns.id).await?.1,
            };
            let show = |v: Option<u64>| v.map_or("default".to_owned(), |v| v.to_string());
            println!(
                "{namespace}	events/s {}	stored-bytes {}	stored {used} bytes",
                show(quota.events_per_sec.map(u64::from)),
                show(quota.stored_bytes)
            );
        }
        AdminCommand::Bootstrap { namespace, key_file, config } => {
            let store = store(&config).await?;
            let ns = match store.namespace(&namespace).await {
                Ok(ns) => ns,
                Err(StoreError::NamespaceNotFound(_)) => store.create_namespace(&namespace).await?,
                Err(e) => return Err(e.into()),
            };
            let existing = std::fs::read_to_string(&key_file).ok().map(|t| t.trim().to_owned());
            let live = match &existing {
                Some(token) => store
                    .authenticate(token)
                    .await?
                    .is_some_and(|k| k.key.namespace.id == ns.id && k.key.access == Access::Admin),
                None => false,
            };
            if live {
                eprintln!("namespace {} ready; admin key in {}", ns.name, key_file.display());
            } else {
                let created = store.create_api_key(&ns, "bootstrap", Access::Admin).await?;
                if let Some(dir) = key_file.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                write_secret(&key_file, &created.token)?;
                eprintln!(
                    "namespace {} ready; new admin key {} written to {}",
                    ns.name,
                    created.key.id,
                    key_file.display()
                );
            }
        }
    }
    Ok(())
}

/// Writes a token readable by its owner only.
fn write_secret(path: &std::path::Path, token: &str) -> anyhow::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path).with_context(|| format!("cannot write {}", path.display()))?;
    writeln!(f, "{token}")?;
    Ok(())
}
