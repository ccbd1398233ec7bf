//! Where BuildPack's time goes: cumulative wall time per phase, for `memex-bench pack` and
//! profiling. Process-wide counters (relaxed atomics: a few nanoseconds per phase).
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The phases of BuildPack, in order.
pub const PHASES: [&str; 8] = [
    "task (session, task state, delegations, scope)",
    "window (evictions, manifests, tail events)",
    "key pointers, standing items, anchors, search (concurrent)",
    "gather candidates",
    "enrich (supersession, premises, full view)",
    "score, select and pack (pure)",
    "store the pack",
    "total",
];

static NANOS: [AtomicU64; PHASES.len()] = [const { AtomicU64::new(0) }; PHASES.len()];
static PACKS: AtomicU64 = AtomicU64::new(0);

/// Times consecutive phases of one pack.
pub(crate) struct PhaseClock {
    start: Instant,
    last: Instant,
}

impl PhaseClock {
    pub(crate) fn start() -> PhaseClock {
        let now = Instant::now();
        PhaseClock { start: now, last: now }
    }

    /// Ends phase `i` (an index into [`PHASES`]).
    pub(crate) fn lap(&mut self, i: usize) {
        let now = Instant::now();
        NANOS[i].fetch_add((now - self.last).as_nanos() as u64, Ordering::Relaxed);
        self.last = now;
    }

    pub(crate) fn finish(self) {
        NANOS[PHASES.len() - 1].fetch_add(self.start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        PACKS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Packs built so far in this process and the total time of each phase.
pub fn pack_phase_totals() -> (u64, Vec<(&'static str, Duration)>) {
    let packs = PACKS.load(Ordering::Relaxed);
    let phases = PHASES
        .iter()
        .zip(NANOS.iter())
        .map(|(name, n)| (*name, Duration::from_nanos(n.load(Ordering::Relaxed))))
        .collect();
    (packs, phases)
}
