//! `memex key create|list|revoke`: a namespace's API keys through AdminService, as a client of a
//! running server with an admin key (`memex admin … -key` does the same on the database, for the
//! first key).
use memex_proto::v1 as pb;

use super::out::{self, ClientArgs};

#[derive(clap::Subcommand, Debug)]
pub enum KeyCommand {
    /// Create a key; prints its token (shown once: only its hash is stored).
    Create {
        #[command(flatten)]
        args: ClientArgs,
        #[arg(long)]
        name: String,
        /// read, write or admin (each includes the ones before it).
        #[arg(long, default_value = "write", value_parser = ["read", "write", "admin"])]
        right: String,
    },
    /// List the namespace's keys (never their tokens).
    List {
        #[command(flatten)]
        args: ClientArgs,
    },
    /// Rotate a key: prints the new key's token; the old key works for --overlap-secs more.
    Rotate {
        #[command(flatten)]
        args: ClientArgs,
        key_id: String,
        /// How long the old key keeps working (0: it stops at once).
        #[arg(long, default_value_t = 3600)]
        overlap_secs: u32,
    },
    /// Revoke a key (it stops working at once, on every replica).
    Revoke {
        #[command(flatten)]
        args: ClientArgs,
        key_id: String,
    },
}

fn key_line(k: &pb::ApiKey) -> String {
    let right = out::enum_name(k.right().as_str_name(), "RIGHT_");
    let revoked =
        if k.revoked_at.is_some() { format!("  revoked {}", out::time(&k.revoked_at)) } else { String::new() };
    let expires =
        if k.expires_at.is_some() { format!("  expires {}", out::time(&k.expires_at)) } else { String::new() };
    format!("{}  {}  {right}  {}{revoked}{expires}", k.id, k.name, out::time(&k.created_at))
}

pub async fn key(cmd: KeyCommand) -> anyhow::Result<()> {
    match cmd {
        KeyCommand::Create { args, name, right } => {
            let right = match right.as_str() {
                "read" => pb::Right::Read,
                "admin" => pb::Right::Admin,
                _ => pb::Right::Write,
            };
            let r = args.client().await?.create_api_key(&name, right).await?;
            if args.json() {
                return out::print_json(&out::to_json(&r, "CreateApiKeyResponse")?);
            }
            if let Some(k) = &r.key {
                eprintln!("key {}", key_line(k));
            }
            outln!("{}", r.token);
        }
        KeyCommand::List { args } => {
            for k in args.client().await?.list_api_keys().await? {
                if args.json() {
                    out::print_json(&out::to_json(&k, "ApiKey")?)?;
                } else {
                    outln!("{}", key_line(&k));
                }
            }
        }
        KeyCommand::Rotate { args, key_id, overlap_secs } => {
            let r = args.client().await?.rotate_api_key(&key_id, overlap_secs).await?;
            if args.json() {
                return out::print_json(&out::to_json(&r, "RotateApiKeyResponse")?);
            }
            if let Some(old) = &r.rotated {
                eprintln!("old {}", key_line(old));
            }
            if let Some(k) = &r.key {
                eprintln!("new {}", key_line(k));
            }
            outln!("{}", r.token);
        }
        KeyCommand::Revoke { args, key_id } => {
            let k = args.client().await?.revoke_api_key(&key_id).await?;
            if args.json() {
                return out::print_json(&out::to_json(&k, "ApiKey")?);
            }
            outln!("{}", key_line(&k));
        }
    }
    Ok(())
}
