//! A live session compiles each new version by resuming the previous version's compiler (a
//! clone of it, fed the bytes the version adds). The invariant: that is byte for byte a compile
//! of the whole input from scratch, at any split point, and the earlier version's own result is
//! unchanged by the resume.
#![allow(clippy::unwrap_used)]

use memex_vcc::{CompileOptions, CompiledTrace, Compiler, InputFormat, compile_trace};
use proptest::prelude::*;
use std::path::Path;

mod common;
use common::memex_event;

/// Everything a compile gives (chains with their blocks and lines, diagnostics, names), as text.
fn dump(t: &CompiledTrace) -> String {
    let views: Vec<String> = t.chains().iter().map(|c| c.full_view()).collect();
    format!("{t:?}\n{views:?}")
}

/// Compiles `bytes` as versions ending at each of `cuts` (increasing) and at the end, each by
/// resuming the previous version's compiler, and checks every version against a compile from
/// scratch of the same prefix. The same versions as snapshots of one compiler that reads on
/// (what a live session does) must be the same too, and so must its finish after them.
fn check_versions(bytes: &[u8], cuts: &[usize], format: InputFormat) {
    let opts = CompileOptions { format, strict: false };
    let mut kept = Compiler::new("s", opts);
    let mut live = Compiler::new("s", opts);
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let cut = cut.clamp(from, bytes.len());
        let mut next = kept.clone();
        next.push(&bytes[from..cut]);
        let resumed = next.clone().finish().unwrap();
        let scratch = dump(&compile_trace(&bytes[..cut], "s", opts).unwrap());
        assert_eq!(dump(&resumed), scratch, "version ending at byte {cut} of {}", bytes.len());
        live.push(&bytes[from..cut]);
        assert_eq!(dump(&live.snapshot().unwrap()), scratch, "snapshot at byte {cut} of {}", bytes.len());
        // A second snapshot of the same version takes all it can from the first.
        assert_eq!(dump(&live.snapshot().unwrap()), scratch, "second snapshot at byte {cut}");
        // The version it resumed from still finishes as it did.
        let earlier = kept.finish().unwrap();
        assert_eq!(dump(&earlier), dump(&compile_trace(&bytes[..from], "s", opts).unwrap()));
        kept = next;
        from = cut;
    }
    assert_eq!(
        dump(&live.finish().unwrap()),
        dump(&compile_trace(bytes, "s", opts).unwrap()),
        "finish after snapshots"
    );
}

/// Split points of `len` bytes: some on line starts (how a live session grows), some anywhere.
fn cuts(bytes: &[u8], seed: u64) -> Vec<usize> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) as usize
    };
    let len = bytes.len().max(1);
    let mut cuts: Vec<usize> = (0..3)
        .map(|_| {
            let at = next() % len;
            // The start of the line after `at`.
            bytes[at..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| at + p + 1)
        })
        .collect();
    cuts.extend((0..2).map(|_| next() % len));
    cuts.sort_unstable();
    cuts
}

#[test]
fn resuming_a_compile_of_every_real_trace_gives_the_compile_from_scratch() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces");
    let mut checked = 0;
    for dir in ["claude-code", "codex", "gemini-cli-json"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for (i, path) in files.iter().enumerate() {
            let bytes = std::fs::read(path).unwrap();
            check_versions(&bytes, &cuts(&bytes, i as u64 + 1), InputFormat::Auto);
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} traces");
}

/// The reference names a tool result after the chain's last call with its id, wherever that call
/// is: a call that comes after the result renames it (and `Read` strips its line numbers). A
/// version made before that call must not have finished the result for good.
#[test]
fn a_call_after_its_result_renames_it_in_later_versions() {
    let trace = concat!(
        r#"{"type":"assistant","uuid":"a1","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}"#,
        "\n",
        r#"{"type":"user","uuid":"u1","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"     1\u2192fn main() {}"}]}}"#,
        "\n",
        r#"{"type":"user","uuid":"u2","message":{"role":"user","content":"and now?"}}"#,
        "\n",
        r#"{"type":"assistant","uuid":"a2","message":{"id":"m2","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"a.rs"}}]}}"#,
        "\n",
    );
    let bytes = trace.as_bytes();
    let starts: Vec<usize> = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
    check_versions(bytes, &starts, InputFormat::Claude);
    let full = compile_trace(bytes, "s", CompileOptions { format: InputFormat::Claude, strict: false }).unwrap();
    let view = full.chains()[0].full_view();
    assert!(view.contains("[tool] Read:") && view.contains("\nfn main() {}"), "{view}");
}

#[test]
fn a_compiler_can_be_kept_in_a_shared_cache() {
    fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<Compiler>();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A live session's events, in versions of any sizes (malformed lines among them).
    #[test]
    fn resuming_over_memex_events_gives_the_compile_from_scratch(
        lines in prop::collection::vec(prop_oneof![9 => memex_event(), 1 => Just("{not json".to_string())], 0..30),
        splits in prop::collection::vec(0usize..2000, 0..5),
    ) {
        let mut bytes = lines.join("\n").into_bytes();
        bytes.push(b'\n');
        let mut cuts: Vec<usize> = splits.into_iter().map(|s| s % bytes.len()).collect();
        cuts.sort_unstable();
        check_versions(&bytes, &cuts, InputFormat::Memex);
    }
}
