pub mod admin;
pub mod bench;
mod bench_view;
pub mod client;
pub mod serve;
pub mod view;

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
