//! The peak keeps what a sample of the live count misses: memory held for a moment between two
//! samples. One test in this binary, so no other thread allocates beside it.
use memex_heap_count::{Counting, live, take_peak};
use std::alloc::System;

#[global_allocator]
static A: Counting<System> = Counting(System);

#[test]
fn the_peak_holds_a_moment_the_live_count_has_forgotten() {
    take_peak();
    let before = live();
    let buffer = vec![1u8; 8 << 20];
    std::hint::black_box(&buffer);
    drop(buffer);
    assert!(live() < before + (1 << 20), "the buffer is freed");
    let peak = take_peak();
    assert!(peak >= before + (8 << 20), "peak {peak} misses the 8 MiB held from {before}");
    // A new period starts from what is live now.
    assert!(take_peak() < before + (1 << 20));
}
