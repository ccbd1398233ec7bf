pub mod admin;
pub mod baselines;
pub mod bench;
pub mod bench_needle;
pub mod bench_pack;
pub mod client;
pub mod serve;
pub mod traces;
pub mod view;

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
