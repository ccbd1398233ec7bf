//! The placed-blocks cache (`[views] cache_bytes`' share for blocks) is bounded by what it weighs
//! its blocks at (`block_weight`): the weight must be the heap a session's map of blocks really
//! holds, or the cap does not hold the process's memory (the context engine's events cache was
//! found at about half). Measured with a counting allocator over the blocks of real traces; one
//! test in this binary, so no other test allocates meanwhile.
#![allow(clippy::unwrap_used)]

use std::alloc::System;
use std::collections::HashMap;
use std::path::Path;

use memex_event::Seq;
use memex_heap_count::{Counting, live};
use memex_pointer::ViewBlock;
use memex_vcc::{CompileOptions, InputFormat, compile_trace};
use memex_views::block_weight;

#[global_allocator]
static ALLOC: Counting<System> = Counting(System);

#[test]
fn placed_blocks_weigh_the_heap_they_hold() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../vcc/tests/fixtures/traces");
    let opts = CompileOptions { format: InputFormat::Auto, strict: false };
    let (mut held, mut weighed, mut blocks) = (0isize, 0u64, 0usize);
    for dir in ["claude-code", "codex", "gemini-cli-json"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for path in files {
            let trace = compile_trace(&std::fs::read(&path).unwrap(), "s", opts).unwrap();
            let Some(chain) = trace.chains().first() else { continue };
            // A session's blocks as placing leaves them: one per placed event, keyed by seq, read
            // from the first chain (an event outside it is kept as None).
            let before = live();
            let mut by_seq: HashMap<Seq, Option<ViewBlock>> = HashMap::new();
            for (i, section) in chain.sections().iter().enumerate() {
                let range = section.range();
                by_seq.insert(
                    Seq(2 * i as u64 + 1),
                    Some(ViewBlock { range, lines: chain.read_line_texts(range).into() }),
                );
                by_seq.insert(Seq(2 * i as u64 + 2), None);
            }
            held += live() - before;
            weighed += by_seq.values().map(block_weight).sum::<u64>();
            blocks += by_seq.len();
            drop(by_seq);
        }
    }
    assert!(blocks > 2_000, "{blocks} blocks placed");
    let r = held as f64 / weighed as f64;
    println!("{blocks} blocks: hold {held} bytes, weighed at {weighed} ({r:.3}x)");
    assert!((0.9..=1.1).contains(&r), "blocks hold {held} bytes, weighed at {weighed} ({r:.3}x)");
}
