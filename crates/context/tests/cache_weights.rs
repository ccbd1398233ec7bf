//! The context engine's caches are bounded in bytes by what they weigh their entries at
//! (`event_bytes`, `event_weight`): the weights must be the heap the entries really hold, or the
//! caps do not hold the process's memory. An hour's soak found the old estimate (the text's
//! length and 256 bytes) at about half of it. Measured with a counting allocator; one test in this
//! binary, so no other test allocates meanwhile.
#![allow(clippy::unwrap_used)]

use std::alloc::System;
use std::sync::Arc;

use chrono::Utc;
use memex_context::{CACHE_ENTRY_BYTES, event_bytes, event_weight};
use memex_heap_count::{Counting, live};
use memex_store::{ArtifactRef, Event};
use uuid::Uuid;

#[global_allocator]
static ALLOC: Counting<System> = Counting(System);

/// Events as the store decodes them (strings of exact capacity): short messages and long tool
/// outputs, some with tool names, an artifact or metadata.
fn events(n: usize) -> Vec<Event> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    (0..n)
        .map(|i| {
            let len = match next(4) {
                0 => 20 + next(100),
                1 | 2 => 100 + next(600),
                _ => 1000 + next(7000),
            } as usize;
            let tool = next(2) == 0;
            Event {
                id: Uuid::from_u128(i as u128),
                session_id: Uuid::from_u128(7),
                seq: i as u64 + 1,
                kind: String::from(if tool { "tool_result" } else { "message" }),
                content: String::from(&"x".repeat(len)[..]),
                artifact: (next(10) == 0).then(|| ArtifactRef {
                    id: memex_event::ArtifactId::of(&i.to_le_bytes()),
                    size: 100_000,
                    media_type: String::from("text/plain"),
                }),
                agent_id: String::from("claude-code"),
                task_id: (next(3) == 0).then(|| String::from("task-42")),
                tool_name: tool.then(|| String::from("Bash")),
                tool_call_id: tool.then(|| String::from("toolu_01ABCDEFGHIJKLMNOPQRSTUV")),
                event_time: Utc::now(),
                ingest_time: Utc::now(),
                metadata: (next(5) == 0)
                    .then(|| serde_json::json!({"pinned": true, "tags": ["a", "bb"], "why": "kept"})),
                task_state_version: None,
            }
        })
        .collect()
}

fn check(what: &str, heap: isize, weighed: usize) -> f64 {
    let r = heap as f64 / weighed as f64;
    assert!((0.9..=1.1).contains(&r), "{what}: holds {heap} bytes, weighed at {weighed} ({r:.3}x)");
    r
}

#[test]
fn cached_events_weigh_the_heap_they_hold() {
    let source = events(20_000);

    // Held inline, as a tail's or the standing items' Vec holds them.
    let before = live();
    let inline: Vec<Event> = source.to_vec();
    let heap = live() - before;
    let weighed: usize = inline.iter().map(event_bytes).sum();
    let r_inline = check("events in a Vec", heap, weighed);
    drop(inline);

    // One by one in a moka cache, as the events cache holds them.
    let cache: moka::sync::Cache<(Uuid, Uuid), Arc<Event>> =
        moka::sync::Cache::builder().weigher(|_, e: &Arc<Event>| event_weight(e)).max_capacity(u64::MAX / 2).build();
    cache.run_pending_tasks();
    let before = live();
    for e in &source {
        cache.insert((e.session_id, e.id), Arc::new(e.clone()));
    }
    cache.run_pending_tasks();
    let heap = live() - before;
    assert_eq!(cache.entry_count(), source.len() as u64);
    let weighed = cache.weighted_size() as usize;
    let r_cache = check("events in a moka cache", heap, weighed);
    let per_entry =
        (heap as f64 - source.iter().map(|e| 16 + event_bytes(e)).sum::<usize>() as f64) / source.len() as f64;
    eprintln!(
        "heap / weight: inline {r_inline:.3}, cached {r_cache:.3}; an event's struct {} bytes, a cache entry's own \
         cost {per_entry:.0} bytes (CACHE_ENTRY_BYTES {CACHE_ENTRY_BYTES})",
        size_of::<Event>()
    );
}
