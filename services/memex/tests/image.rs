//! The container image without a Docker engine: the Dockerfile's builder stage runs
//! `scripts/build-image-rootfs.sh`; this test runs the same script (on this test build's binary,
//! so CI does no extra release build) and checks what it lays out, and that the Dockerfile really
//! calls it and runs the result as a non-root user.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The debug-info sections of an ELF file, by `readelf` (`.debug_gdb_scripts` is not debug info
/// but a loaded section naming gdb's pretty-printers: it stays).
fn debug_sections(file: &Path) -> Vec<String> {
    let out = Command::new("readelf").args(["-S", "-W"]).arg(file).output().expect("readelf (binutils)");
    assert!(out.status.success(), "readelf {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with(".debug_") && *w != ".debug_gdb_scripts")
        .map(str::to_owned)
        .collect()
}

/// Removes the laid-out root (a quarter of a gigabyte) whether the test passes or not.
struct TempRoot(PathBuf);

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_image_script_lays_out_a_stripped_binary_the_model_and_the_config() {
    let Some(model_dir) = memex_embed::test_model_dir() else { return };
    let built = PathBuf::from(env!("CARGO_BIN_EXE_memex"));
    let dest = std::env::temp_dir().join(format!("memex-image-rootfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dest);
    let _cleanup = TempRoot(dest.clone());
    let out = Command::new("bash")
        .arg(repo().join("scripts/build-image-rootfs.sh"))
        .arg(&dest)
        .arg("--binary")
        .arg(&built)
        .arg("--model-from")
        .arg(&model_dir)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "build-image-rootfs.sh failed:\n{log}");

    // The binary: as built it has line tables; the image's copy has no debug info and still runs.
    let bin = dest.join("usr/local/bin/memex");
    assert!(debug_sections(&built).iter().any(|s| s == ".debug_line"), "the test binary should carry line tables");
    assert_eq!(debug_sections(&bin), Vec::<String>::new(), "the image's binary carries debug info");
    let (before, after) = (built.metadata().unwrap().len(), bin.metadata().unwrap().len());
    assert!(after < before, "stripping saved nothing: {before} -> {after} bytes");
    assert!(log.contains(&format!("{before} bytes as built, {after} bytes stripped")), "{log}");
    let version = run(Command::new(&bin).arg("--version"));
    assert_eq!(version.trim(), format!("memex {}", env!("CARGO_PKG_VERSION")));

    // The configuration the image starts with, and the paths it names, laid out.
    let config_file = dest.join("etc/memex/memex.toml");
    let effective = run(Command::new(&bin).arg("config").arg("--config").arg(&config_file));
    for line in [
        "listen = \"0.0.0.0:50051\"",
        "index_dir = \"/var/lib/memex/index\"",
        "model_dir = \"/opt/memex/models/all-MiniLM-L6-v2\"",
        "provider = \"minilm\"",
        "static_tier = true",
    ] {
        assert!(effective.lines().any(|l| l.trim() == line), "{line} not in the image's configuration:\n{effective}");
    }
    let model = dest.join("opt/memex/models/all-MiniLM-L6-v2");
    for file in [
        model.join("model.safetensors"),
        model.join("tokenizer.json"),
        model.join("config.json"),
        model.with_file_name("all-MiniLM-L6-v2-static").join("model.safetensors"),
        config_file.clone(),
    ] {
        let mode = file.metadata().unwrap_or_else(|e| panic!("{}: {e}", file.display())).permissions().mode();
        assert_eq!(mode & 0o004, 0o004, "{} is not readable by the image's non-root user", file.display());
    }
    assert!(dest.join("var/lib/memex").is_dir());
    assert!(!dest.join("opt/memex/models/all-MiniLM-L6-v2-static.lock").exists(), "a stray lock file");
}

#[test]
fn the_dockerfile_runs_the_script_and_serves_as_a_non_root_user() {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    // Instructions, with continuation lines joined.
    let joined = dockerfile.replace("\\\n", " ");
    let instructions: Vec<&str> =
        joined.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let froms: Vec<&&str> = instructions.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a builder and a runtime stage: {froms:?}");
    assert!(froms[0].ends_with(" AS builder") && froms[1].contains("debian:bookworm-slim"), "{froms:?}");
    let builder_runs_script =
        instructions.iter().any(|l| l.starts_with("RUN ") && l.contains("bash scripts/build-image-rootfs.sh /rootfs"));
    assert!(builder_runs_script, "the builder stage must lay the root out with scripts/build-image-rootfs.sh");
    let runtime: Vec<&&str> = instructions.iter().skip_while(|l| !l.contains("debian:bookworm-slim")).collect();
    assert!(runtime.contains(&&"COPY --from=builder /rootfs/ /"), "the runtime stage copies the laid-out root");
    let user = runtime.iter().rev().find(|l| l.starts_with("USER ")).expect("a USER line");
    let uid = user.trim_start_matches("USER ").split(':').next().unwrap();
    assert!(uid.parse::<u32>().is_ok_and(|u| u >= 1000), "USER must be a numeric non-root uid: {user}");
    assert!(runtime.iter().any(|l| l.contains(&format!("--uid {uid}"))), "the user {uid} is created");
    assert!(runtime.contains(&&"ENV MEMEX_CONFIG=/etc/memex/memex.toml"));
    assert!(runtime.contains(&&"ENTRYPOINT [\"/usr/local/bin/memex\"]") && runtime.contains(&&"CMD [\"serve\"]"));
    let ignored = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    for path in ["target", "models", ".git"] {
        assert!(ignored.lines().any(|l| l.trim() == path), ".dockerignore must leave out {path}");
    }
}
