//! `Counting(inner)`: a global allocator that passes every call on to `inner` and keeps the
//! bytes live in the heap ([`live`]). One count per process, as there is one global allocator.
//! Used by the tests that hold caches' weights to the heap they hold (`memex-vcc`'s `sizes.rs`,
//! `memex-context`'s `cache_weights.rs`, `memex-views`' `block_weights.rs`) and by `memex`'s
//! `heap-count` diagnostic build.
#![allow(unsafe_code)] // GlobalAlloc is an unsafe trait; every call goes on to the inner allocator.
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicIsize, Ordering};

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// Bytes live in the heap now, by the sizes asked of the allocator.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The most bytes live at once since the last call (or the start), and a new peak from now on:
/// what the allocator had to hold at some moment, which a sample of [`live`] misses.
pub fn take_peak() -> isize {
    PEAK.swap(live(), Ordering::Relaxed)
}

fn grew(by: isize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

/// Counts what `A` allocates: `#[global_allocator] static A: Counting<System> = Counting(System);`.
pub struct Counting<A>(pub A);

unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        unsafe { self.0.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        unsafe { self.0.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { self.0.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as isize - layout.size() as isize);
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}
