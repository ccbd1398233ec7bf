//! Compiler throughput on real traces: lexing+parsing (`compile_trace`), and the whole
//! `memex view` pipeline minus file I/O (compile + full/UI views + word counts). And a live
//! session's next version (the trace's last record appended): compiled from scratch, or by
//! resuming a clone of the previous version's compiler, as `memex-views` does.
#![allow(clippy::unwrap_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memex_vcc::{CompileOptions, Compiler, Lines, PyRegex, UiOptions, ViewOptions, compile, compile_trace};
use std::hint::black_box;
use std::path::Path;

const TRACES: [&str; 3] = [
    "spotter__4d5611e5-241a-462a-8d15-5122611a9569",
    "entire__51a265047d72-3",
    "ccl__deep-manifest__a7da6a22-facc-4fcd-8bab-f83c87862004",
];

fn load(name: &str) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces/claude-code");
    std::fs::read(dir.join(format!("{name}.jsonl"))).unwrap()
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("vcc");
    group.sample_size(20);
    let grep = Lines(PyRegex::new("(?i)test").unwrap());
    for name in TRACES {
        let input = load(name);
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_function(format!("compile_trace/{name}"), |b| {
            b.iter(|| compile_trace(black_box(&input), name, CompileOptions::default()).unwrap())
        });
        let views = ViewOptions { ui: UiOptions::default(), predicate: None };
        group.bench_function(format!("compile+views/{name}"), |b| {
            b.iter(|| compile(black_box(&input), name, CompileOptions::default(), &views).unwrap())
        });
        let search = ViewOptions { ui: UiOptions::default(), predicate: Some(&grep) };
        group.bench_function(format!("compile+views+grep/{name}"), |b| {
            b.iter(|| compile(black_box(&input), name, CompileOptions::default(), &search).unwrap())
        });
        // The last record is the new version's event.
        let body = input.strip_suffix(b"\n").unwrap_or(&input);
        let cut = body.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let mut kept = Compiler::new(name, CompileOptions::default());
        kept.push(&input[..cut]);
        group.bench_function(format!("next_version/scratch/{name}"), |b| {
            b.iter(|| compile_trace(black_box(&input), name, CompileOptions::default()).unwrap())
        });
        group.bench_function(format!("next_version/resumed/{name}"), |b| {
            b.iter(|| {
                let mut next = kept.clone();
                next.push(black_box(&input[cut..]));
                let again = next.clone();
                (again, next.finish().unwrap())
            })
        });
    }
    group.finish();
}

criterion_group!(vcc, benches);
criterion_main!(vcc);
