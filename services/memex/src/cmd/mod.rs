pub mod admin;
pub mod baselines;
pub mod bench;
pub mod bench_locomo;
pub mod bench_longmemeval;
pub mod bench_needle;
pub mod bench_pack;
pub mod bench_search;
mod bench_view;
pub mod client;
pub mod reindex;
pub mod searchkit;
pub mod serve;
pub mod traces;
pub mod view;

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
