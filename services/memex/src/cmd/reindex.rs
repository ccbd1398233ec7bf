//! `memex reindex`: rebuild this replica's text indexes from Postgres (the source of truth).
//! Stop the server first, or give another `--index-dir`: a running server keeps writing to the
//! directory it opened.
use std::sync::Arc;

use anyhow::Context;
use memex_search::SearchIndex;
use memex_server::flags::SearchArgs;

#[derive(clap::Args, Debug)]
pub struct ReindexArgs {
    #[command(flatten)]
    pub search: SearchArgs,
    /// Namespaces to rebuild (default: all).
    #[arg(long = "namespace", short = 'n')]
    pub namespaces: Vec<String>,
}

/// Rebuilds the text indexes from the database, as `Tenant::All` (the operator's command, over
/// any namespace).
pub async fn run(args: ReindexArgs) -> anyhow::Result<()> {
    memex_store::tenant::scope(memex_store::Tenant::All, reindex(args)).await
}

async fn reindex(args: ReindexArgs) -> anyhow::Result<()> {
    // The text index needs no model: `--embedding` is accepted (the search flags are shared) and
    // ignored, and the index is opened without an embedder.
    let mut config = args.search.config.load()?;
    if let Some(d) = &args.search.index_dir {
        config.search.index_dir = d.display().to_string();
    }
    let store =
        memex_server::connect_store(&config).await.context("connecting to the database (make run sets it up)")?;
    store.migrate().await?;
    let index = SearchIndex::open(store.clone(), config.search.clone(), None, Arc::new(memex_pointer::NoFullView))?;
    let namespaces = if args.namespaces.is_empty() {
        store.list_namespaces().await?
    } else {
        let mut v = Vec::new();
        for n in &args.namespaces {
            v.push(store.namespace(n).await?);
        }
        v
    };
    let start = std::time::Instant::now();
    let mut total = 0;
    let progress = super::progress::Progress::items("reindex", namespaces.len() as u64);
    for (i, ns) in namespaces.iter().enumerate() {
        let t0 = std::time::Instant::now();
        progress.message(&format!("namespace {}", ns.name));
        let n = index.rebuild(ns.id).await;
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                progress.finish();
                return Err(e.into());
            }
        };
        total += n;
        progress.line(&format!("{}: {n} events indexed in {:.2} s", ns.name, t0.elapsed().as_secs_f64()));
        progress.set(i as u64 + 1);
    }
    progress.finish();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "reindexed {total} events into {} in {secs:.2} s ({:.0} events/s)",
        config.search.index_dir,
        total as f64 / secs.max(1e-9)
    );
    Ok(())
}
