//! The memory worker's CPU work without the database: `advance` over whole real sessions (what a
//! worker does with a backlog, one job per session), and the topics of the segments it gives.
//! Per-event cost here bounds the worker's throughput from above (the shell adds Postgres and,
//! by default, MiniLM vectors for the turns).
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memex_memory::session::{Prior, Progress, Tools, advance};
use memex_memory::topics::{SegmentTags, build_topics};
use memex_memory::{Heuristic, SegmentConfig, SummaryConfig, TopicConfig};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{Counter, events_of};

const TRACES: [&str; 3] = [
    "claude-code/spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "claude-code/entire__51a265047d72-3.jsonl",
    "codex/localpush__rollout-2026-02-23T13-19-38-019c8a70-dda7-7f33-98ea-f30553347322.jsonl",
];

fn benches(c: &mut Criterion) {
    let heuristic = Heuristic { summary: SummaryConfig::default(), counter: Box::new(Counter) };
    let segment = SegmentConfig::default();
    let tools = Tools { interpreter: &heuristic, counter: &Counter, vectors: None, segment: &segment };
    let mut group = c.benchmark_group("memory");
    group.sample_size(10);
    let mut all_segments = Vec::new();
    for file in TRACES {
        let events = events_of(file);
        let name = file.rsplit('/').next().unwrap_or(file).chars().take(24).collect::<String>();
        let one = advance(&Progress::default(), &Prior::default(), &events, true, &tools).unwrap();
        let session = all_segments.len() as u128;
        all_segments.extend(one.segments.iter().map(|s| SegmentTags {
            session,
            turns: s.segment.turns.len(),
            tags: s.segment.tags.clone(),
            primary: s.segment.primary_tag.clone(),
        }));
        group.throughput(Throughput::Elements(events.len() as u64));
        group.bench_function(format!("advance/{name}"), |b| {
            b.iter(|| advance(&Progress::default(), &Prior::default(), black_box(&events), true, &tools).unwrap())
        });
    }
    group.throughput(Throughput::Elements(all_segments.len() as u64));
    group.bench_function("build_topics", |b| {
        b.iter(|| build_topics(black_box(&all_segments), None, &TopicConfig::default()))
    });
    group.finish();
}

criterion_group!(memory, benches);
criterion_main!(memory);
