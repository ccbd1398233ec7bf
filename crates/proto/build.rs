//! Compiles proto/memex/v1/*.proto with protox (pure Rust: no protoc on the machine) into OUT_DIR.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let dir = root.join("memex/v1");
    let mut files: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".proto"))
        .map(|n| format!("memex/v1/{n}"))
        .collect();
    files.sort();
    let fds = protox::compile(&files, [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("memex_descriptor.bin"), prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure()
        .codec_path("crate::codec::ValidatingCodec")
        .bytes(".memex.v1.ArtifactChunk.data")
        .bytes(".memex.v1.ViewChunk.text")
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed={}", root.display());
    Ok(())
}
