//! The allocator gives memory back only once it has stayed free for a while.
//!
//! mimalloc returns freed memory to the OS once it has been idle for `purge_delay` (1,000 ms in
//! mimalloc v3), and takes it back through page faults when it is needed again. Under load that
//! cycle never ends (a pack, a model batch and a view compile each free megabytes), and it
//! stalled the whole server. The likely mechanism (not traced in the kernel): purges and faults
//! take the process's memory-map lock, and a background thread at idle priority that held it was
//! not run again for hundreds of milliseconds, while every request thread that faulted waited.
//! What was measured: the stalls came with the model's worker and went with purging. Packs at
//! 150/s over 1,000 sessions (`memex-bench soak --no-append --rate 150`): p99 91-113 ms with
//! stalls up to 450 ms and refusals; with purging off, p99 34 ms, max 84 ms, none refused, and
//! RSS flat at its peak instead of rising and falling. But kept for good, freed memory made RSS
//! climb under a long soak (+4.8 MiB/min over the second half of 30 minutes at 2x saturation)
//! while the live heap stayed flat. Memory idle for [`PURGE_DELAY_MS`] (10 s) goes back: the same
//! soak had RSS flat (+2.3 MiB/min), p99 198 ms and max 443 ms, against 222 and 404 ms with
//! purging off (docs/performance.md, "Soak: half an hour on this stop's build"). A delay that
//! long purges what a load spike left behind, not what the next request will ask for again.
//! `MIMALLOC_PURGE_DELAY` in the environment (ms, or -1 for never) still decides when it is set.

/// mimalloc's `mi_option_purge_delay`.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// mimalloc's `mi_option_allow_thp` (v3).
const ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// How long freed memory stays with the process before it goes back to the system (ms).
pub const PURGE_DELAY_MS: i64 = 10_000;

/// The process's allocator settings: the purge delay ([`PURGE_DELAY_MS`]) and transparent huge
/// pages off. Every binary calls this first thing in `main`, before any thread starts; one call,
/// so a binary cannot take one setting and miss the other.
pub fn configure() {
    set_purge_delay();
    disable_transparent_huge_pages();
}

/// Sets the purge delay to [`PURGE_DELAY_MS`] unless `MIMALLOC_PURGE_DELAY` is set.
#[allow(unsafe_code)]
fn set_purge_delay() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: mi_option_set stores an option's value (an atomic write inside mimalloc); any
    // thread may call it at any time.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS as std::ffi::c_long) };
}

/// Turns transparent huge pages off for this process, unless `MIMALLOC_ALLOW_THP` is set (then
/// mimalloc has done what it says).
///
/// mimalloc asks the kernel for huge pages on its arenas (`MADV_HUGEPAGE`), and a purge then
/// frees 64 KiB inside a 2 MiB page. khugepaged later collapses such a range back into a huge
/// page, filling what was purged with zeroes (Linux's default `max_ptes_none` lets it fill 511
/// of 512 pages): memory the heap had given back became resident again, and RSS climbed under a
/// long soak while the live heap stayed flat (docs/performance.md, "Soak: huge pages").
/// `PR_SET_THP_DISABLE` stops both the huge page faults and khugepaged for this process.
#[allow(unsafe_code)]
fn disable_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: an option's value, as in set_purge_delay; with it 0, arenas reserved from now on
    // are not advised as huge.
    unsafe { libmimalloc_sys::mi_option_set(ALLOW_THP, 0) };
    // SAFETY: prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) sets a flag of this process's memory map;
    // no pointer is passed. An error (a kernel without the option) leaves huge pages as they were.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The purge delay in force (ms; -1: never).
    #[allow(unsafe_code, clippy::useless_conversion)] // c_long is i32 on some targets
    fn purge_delay_ms() -> i64 {
        // SAFETY: reads an option's value.
        i64::from(unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) })
    }

    #[test]
    fn the_purge_delay_is_the_option_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // mimalloc's default (v3: 1,000 ms; v2: 10 ms): the index names the purge delay, not
        // another option.
        assert!([1000, 10].contains(&purge_delay_ms()), "{}", purge_delay_ms());
        set_purge_delay();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }

    /// Whether transparent huge pages are off for this process (`THP_enabled: 0` in
    /// `/proc/self/status`); `None` where the kernel does not say.
    fn transparent_huge_pages_disabled() -> Option<bool> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("THP_enabled:"))?;
        Some(line.trim() == "0")
    }

    #[test]
    fn huge_pages_are_off_for_the_process() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        #[allow(unsafe_code)]
        // SAFETY: reads an option's value.
        let allow = || unsafe { libmimalloc_sys::mi_option_get(ALLOW_THP) };
        // allow_thp's default: the index names it, not another option.
        assert_eq!(allow(), 1);
        disable_transparent_huge_pages();
        assert_eq!(allow(), 0);
        // Linux says whether THP is on for a process since 5.0.
        if let Some(disabled) = transparent_huge_pages_disabled() {
            assert!(disabled, "THP_enabled is still 1 after PR_SET_THP_DISABLE");
        }
    }
}
