//! `size_bytes` is what the views' caches weigh compiles and kept compilers by, so that their
//! byte caps hold the process's memory: it must not undercount the heap they really hold.
//! Measured with a counting allocator; one test in this binary, so no other test allocates
//! meanwhile.
#![allow(clippy::unwrap_used)]

use std::alloc::System;
use std::path::Path;

use memex_heap_count::{Counting, live};
use memex_vcc::{CompileOptions, Compiler, InputFormat, compile_trace};

#[global_allocator]
static ALLOC: Counting<System> = Counting(System);

/// Heap held / estimate, for a heap of at least 4 KB (below that a fixed overhead is most of it).
fn ratio(what: &str, heap: isize, estimate: usize) -> Option<f64> {
    (heap >= 4096).then(|| {
        let r = heap as f64 / estimate.max(1) as f64;
        assert!((0.85..=1.15).contains(&r), "{what}: holds {heap} bytes, size_bytes says {estimate} ({r:.2}x)");
        r
    })
}

#[test]
fn size_bytes_is_the_heap_a_compile_and_a_kept_compiler_hold() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces");
    let opts = CompileOptions { format: InputFormat::Auto, strict: false };
    let mut checked = 0;
    for dir in ["claude-code", "codex", "gemini-cli-json"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for path in files {
            let bytes = std::fs::read(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // A kept compiler (what a live session resumes from) after reading the whole trace
            // and making a version of it, which shares its text with the compiler.
            let before = live();
            let mut compiler = Compiler::new("s", opts);
            compiler.push(&bytes);
            let version = compiler.snapshot().unwrap();
            let both = live() - before;
            let version_bytes = version.size_bytes();
            // Kept together (a live session's cached version), counted once.
            let together = version_bytes + compiler.size_bytes() - compiler.text_bytes();
            ratio(&format!("{name}: compiler and version"), both, together);
            drop(version);
            let kept = ratio(&format!("{name}: compiler"), live() - before, compiler.size_bytes());
            let own = both - (live() - before);
            assert!(
                own as f64 <= version_bytes as f64 * 1.15,
                "{name}: a version holds {own} bytes of its own, more than its size_bytes {version_bytes}"
            );
            // A compile from scratch: the IR a cached view holds.
            let before = live();
            let trace = compile_trace(&bytes, "s", opts).unwrap();
            let compiled = ratio(&format!("{name}: compile"), live() - before, trace.size_bytes());
            checked += usize::from(kept.is_some() && compiled.is_some());
        }
    }
    assert!(checked >= 20, "{checked} traces measured");
}
