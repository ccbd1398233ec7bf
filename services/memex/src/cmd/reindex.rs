//! `memex reindex`: rebuild this replica's text indexes from Postgres (the source of truth).
//! Stop the server first, or give another `--index-dir`: a running server keeps writing to the
//! directory it opened.
use super::searchkit::{Kit, SearchArgs};

#[derive(clap::Args, Debug)]
pub struct ReindexArgs {
    #[command(flatten)]
    pub search: SearchArgs,
    /// Namespaces to rebuild (default: all).
    #[arg(long = "namespace", short = 'n')]
    pub namespaces: Vec<String>,
}

pub async fn run(args: ReindexArgs) -> anyhow::Result<()> {
    let mut search = args.search.clone();
    search.embedding = Some("none".into()); // the text index needs no model
    let kit = Kit::open(&search, false).await?;
    let namespaces = if args.namespaces.is_empty() {
        kit.store.list_namespaces().await?
    } else {
        let mut v = Vec::new();
        for n in &args.namespaces {
            v.push(kit.store.namespace(n).await?);
        }
        v
    };
    let start = std::time::Instant::now();
    let mut total = 0;
    for ns in namespaces {
        let t0 = std::time::Instant::now();
        let n = kit.index.rebuild(ns.id).await?;
        total += n;
        eprintln!("{}: {n} events indexed in {:.2} s", ns.name, t0.elapsed().as_secs_f64());
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "reindexed {total} events into {} in {secs:.2} s ({:.0} events/s)",
        kit.config.search.index_dir,
        total as f64 / secs.max(1e-9)
    );
    Ok(())
}
