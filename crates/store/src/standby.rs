//! Reads from a hot standby (`[database] read_url`), and the rule that keeps them exact.
//!
//! A streaming replica is behind the primary by its replay lag, so only reads whose answer is
//! *settled* may go there: rows that never change once written (events, artifacts, stored packs
//! and their chunks, pointer manifests, task-state versions), asked for by key or by a seq range
//! below a head the caller read on the primary. Such a read is either complete on the standby —
//! and then byte for byte what the primary holds — or visibly incomplete (a row missing, a seq
//! range short), and then it is asked again of the primary. So a caller always sees its own
//! writes, however far the standby lags, without tracking LSNs.
//!
//! Everything that says what is newest stays on the primary: session heads and rows (a view's
//! version, the index's catch-up target), the current task state (compare-and-swap), windows,
//! session lists, API keys, reports and delegations; and, of course, every write.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;

use crate::{Result, Store, StoreError};

/// How settled reads fared: answered by the standby, asked again of the primary because the
/// standby had not replayed the rows yet (or had no such rows), or failed on the standby
/// (connection, recovery conflict) and answered by the primary.
#[derive(Debug, Default)]
pub struct StandbyStats {
    served: AtomicU64,
    behind: AtomicU64,
    failed: AtomicU64,
}

impl StandbyStats {
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
    pub fn behind(&self) -> u64 {
        self.behind.load(Ordering::Relaxed)
    }
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

/// The standby's pool and its counters.
#[derive(Debug, Clone)]
pub(crate) struct Standby {
    pub(crate) pool: PgPool,
    pub(crate) stats: Arc<StandbyStats>,
}

/// Whether an answer read on the standby is the whole answer, or it must be asked of the primary.
pub(crate) enum Settled<T> {
    Complete(T),
    Incomplete,
}

impl Store {
    /// Runs `read` on the standby when there is one and it has the whole answer (`check`), else on
    /// the primary. `check` sees only successful answers; a not-found error from the standby
    /// counts as "not replayed yet", any other error as a failed standby.
    pub(crate) async fn settled<T, R, F, C>(&self, read: R, check: C) -> Result<T>
    where
        R: Fn(PgPool) -> F,
        F: Future<Output = Result<T>>,
        C: Fn(T) -> Settled<T>,
    {
        let Some(standby) = &self.standby else { return read(self.pool.clone()).await };
        match read(standby.pool.clone()).await {
            Ok(answer) => match check(answer) {
                Settled::Complete(answer) => {
                    standby.stats.served.fetch_add(1, Ordering::Relaxed);
                    return Ok(answer);
                }
                Settled::Incomplete => standby.stats.behind.fetch_add(1, Ordering::Relaxed),
            },
            Err(e) if e.is_not_found() => standby.stats.behind.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                tracing::debug!(error = %e, "standby read failed; reading on the primary");
                standby.stats.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
        read(self.pool.clone()).await
    }

    /// How settled reads fared on the standby (None: no standby configured).
    pub fn standby_stats(&self) -> Option<Arc<StandbyStats>> {
        self.standby.as_ref().map(|s| s.stats.clone())
    }
}

impl StoreError {
    /// A row asked for by key is not there (on a standby: perhaps not replayed yet).
    fn is_not_found(&self) -> bool {
        matches!(
            self,
            StoreError::EventNotFound { .. }
                | StoreError::ArtifactNotFound(_)
                | StoreError::SessionNotFound(_)
                | StoreError::TaskNotFound(_)
                | StoreError::TaskVersionNotFound { .. }
                | StoreError::ManifestNotFound(_)
                | StoreError::PackNotFound(_)
        )
    }
}

/// `answer`, complete when `whole`.
pub(crate) fn settled_if<T>(whole: bool, answer: T) -> Settled<T> {
    if whole { Settled::Complete(answer) } else { Settled::Incomplete }
}

/// The number of rows a read of seqs `from..=to`, at most `limit`, returns from a complete log
/// (seqs start at 1 and have no gaps).
pub(crate) fn expected_rows(from: u64, to: u64, limit: u64) -> u64 {
    let from = from.max(1);
    if to < from { 0 } else { (to - from + 1).min(limit) }
}

#[cfg(test)]
mod tests {
    use super::expected_rows;

    #[test]
    fn a_seq_range_expects_its_length_up_to_the_limit() {
        assert_eq!(expected_rows(1, 10, 100), 10);
        assert_eq!(expected_rows(0, 10, 100), 10, "seqs start at 1");
        assert_eq!(expected_rows(5, 10, 3), 3);
        assert_eq!(expected_rows(11, 10, 3), 0);
        assert_eq!(expected_rows(10, 10, 3), 1);
    }
}
