pub mod admin;
pub mod client;
pub mod reindex;
pub mod serve;
pub mod view;

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
