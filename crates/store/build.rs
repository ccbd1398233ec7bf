//! `sqlx::migrate!` embeds `migrations/` when this crate compiles; without this, a migration added
//! later would not be seen by an incremental build (cargo does not watch the directory itself).
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
