//! Word that events were appended, so that idle background workers need not look for work.
//!
//! A worker finds its work by reading every session (which ones have events it has not read);
//! at 8,500 sessions that is 5-20 ms of Postgres per look, and idle workers looked twice a
//! second each, so an idle replica kept a Postgres backend busy and set the tail of the requests
//! beside it. Now a store that commits an append says so (`NOTIFY memex_appended`, at most every
//! `ANNOUNCE_EVERY`, sent after the commit, never inside the append's statement), every store
//! whose workers asked for the news listens, and [`IdleScan`] tells an idle worker when a look is
//! worth it: after news, while work was recent, and every so often regardless (for what no
//! append announces: a lease left by a crashed replica, a quiet turn to close, a missed
//! notification, rows written by hand). A memory rebuild (`memex memory rebuild`) announces on
//! the same channel.
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::watch;

use crate::Store;

/// The channel appends are announced on.
pub const APPENDED_CHANNEL: &str = "memex_appended";
/// Least time between two announcements of one store: a fleet's appends cost a few
/// notifications a second, not one each.
const ANNOUNCE_EVERY: Duration = Duration::from_millis(100);

/// What a store's listener has heard: announcements of appends, and reconnections (after which
/// it may have missed some).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppendNews {
    pub appends: u64,
    pub reconnects: u64,
}

/// A store's news: what it appended (for its announcer) and what it heard (for its workers).
#[derive(Debug)]
pub(crate) struct News {
    appended: watch::Sender<u64>,
    heard: watch::Sender<AppendNews>,
    /// The announcer task, started by the first append (and again if its runtime ended).
    announcer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    listening: OnceLock<()>,
}

impl Default for News {
    fn default() -> Self {
        News {
            appended: watch::Sender::new(0),
            heard: watch::Sender::new(AppendNews::default()),
            announcer: Mutex::new(None),
            listening: OnceLock::new(),
        }
    }
}

impl News {
    /// Called after an append committed: the announcer (started on the first, and again should
    /// the runtime it ran on have ended, as a test's does) tells the others.
    pub(crate) fn appended(&self, pool: &PgPool) {
        // The announcer subscribes before the change it is to announce (a receiver made after
        // it would take it as seen, and the store's first append would go unannounced).
        if let Ok(mut task) = self.announcer.lock()
            && task.as_ref().is_none_or(|t| t.is_finished())
            && tokio::runtime::Handle::try_current().is_ok()
        {
            *task = Some(tokio::spawn(announce(pool.clone(), self.appended.subscribe())));
        }
        self.appended.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Sends a notification after each change of `appended`, at most every `ANNOUNCE_EVERY` (a
/// change during the pause is announced right after it). Ends with the store.
async fn announce(pool: PgPool, mut appended: watch::Receiver<u64>) {
    while appended.changed().await.is_ok() {
        if pool.is_closed() {
            return;
        }
        if let Err(e) = sqlx::query("SELECT pg_notify($1, '')").bind(APPENDED_CHANNEL).execute(&pool).await {
            tracing::debug!(error = %e, "could not announce appends");
        }
        tokio::time::sleep(ANNOUNCE_EVERY).await;
    }
}

impl Store {
    /// Counters that move whenever any store (this one, another replica, a CLI import) has
    /// announced appends, or the listener behind them has (re)connected. The first call starts
    /// the listener.
    pub fn append_news(&self) -> watch::Receiver<AppendNews> {
        let rx = self.news.heard.subscribe();
        self.news.listening.get_or_init(|| {
            if tokio::runtime::Handle::try_current().is_ok() {
                let store = self.clone();
                tokio::spawn(async move {
                    let news = store.news.clone();
                    store
                        .listen(APPENDED_CHANNEL, |h| {
                            news.heard.send_modify(|n| match h {
                                crate::Heard::Payload(_) => n.appends = n.appends.wrapping_add(1),
                                crate::Heard::Connected => n.reconnects = n.reconnects.wrapping_add(1),
                            })
                        })
                        .await;
                });
            }
        });
        rx
    }

    pub(crate) fn note_appended(&self) {
        self.news.appended(&self.pool);
    }
}

/// What an idle worker's next look is to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Nothing: no news, no recent work, the periodic look not due.
    No,
    /// Everything: register new sessions, claim, measure the backlog (news, recent work, the
    /// first look, a wake).
    Full,
    /// The periodic look registers and claims (a session no one announced, an expired lease, a
    /// quiet turn) and leaves a lag of zero as measured: without news it has not grown.
    Claim,
}

impl Look {
    pub fn any(self) -> bool {
        self != Look::No
    }
}

/// When an idle worker should read every session again. Pure: it sees the news counter and the
/// clock it is given.
#[derive(Debug)]
pub struct IdleScan {
    news: watch::Receiver<AppendNews>,
    seen: AppendNews,
    /// How long looks go on after news or work: what came may not be due yet (a settle time).
    hot: Duration,
    /// Time between two looks, give or take a quarter (drawn once per look).
    every: Duration,
    /// When the periodic look is due; None: look now (the first look, a wake).
    next: Option<Instant>,
    hot_until: Option<Instant>,
}

impl IdleScan {
    pub fn new(news: watch::Receiver<AppendNews>, hot: Duration, every: Duration) -> IdleScan {
        IdleScan { news, seen: AppendNews::default(), hot, every, next: None, hot_until: None }
    }

    /// Whether to look now, and how. Takes the news: what arrived before a look is that look's.
    pub fn due(&mut self, now: Instant) -> Look {
        // A closed channel (the store gone) gives no news: look every time, as without it.
        let news = self.news.has_changed().unwrap_or(true);
        if news {
            let heard = *self.news.borrow_and_update();
            // Appends may bring work that is not due yet; a reconnection needs one look only.
            if heard.appends != self.seen.appends {
                self.hot_until = Some(now + self.hot);
            }
            self.seen = heard;
        }
        if news || self.next.is_none() || self.hot_until.is_some_and(|h| now < h) {
            Look::Full
        } else if self.next.is_some_and(|t| now >= t) {
            Look::Claim
        } else {
            Look::No
        }
    }

    /// A look was made at `now`; `worked`: it found work, so the next look is at once (a
    /// backlog is read round after round, however long a round's other duties took), and looks
    /// go on for `hot` after it (more may become due).
    pub fn looked(&mut self, now: Instant, worked: bool) {
        if worked {
            self.next = None;
            self.hot_until = Some(now + self.hot);
        } else {
            self.next = Some(now + jittered(self.every));
        }
    }

    /// The next call to [`IdleScan::due`] says yes (an explicit wake).
    pub fn force(&mut self) {
        self.next = None;
    }
}

/// `every` give or take a quarter, so that a replica's workers (and the replicas) do not all read
/// every session at the same moment.
fn jittered(every: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let r = std::collections::hash_map::RandomState::new().build_hasher().finish();
    every.mul_f64(0.75 + (r % 1_000) as f64 / 2_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOT: Duration = Duration::from_secs(2);
    const EVERY: Duration = Duration::from_secs(10);

    fn scan() -> (watch::Sender<AppendNews>, IdleScan) {
        let tx = watch::Sender::new(AppendNews::default());
        let scan = IdleScan::new(tx.subscribe(), HOT, EVERY);
        (tx, scan)
    }

    #[test]
    fn an_idle_worker_looks_first_then_only_every_so_often() {
        let (_tx, mut s) = scan();
        let t0 = Instant::now();
        assert_eq!(s.due(t0), Look::Full, "the first look");
        s.looked(t0, false);
        for ms in [1, 500, 1_999, 5_000, 7_499] {
            assert_eq!(s.due(t0 + Duration::from_millis(ms)), Look::No, "no news, no work: no look at {ms} ms");
        }
        assert_eq!(s.due(t0 + EVERY + EVERY / 4), Look::Claim, "the periodic look");
    }

    #[test]
    fn news_brings_a_look_and_keeps_looking_for_a_while() {
        let (tx, mut s) = scan();
        let t0 = Instant::now();
        assert_eq!(s.due(t0), Look::Full);
        s.looked(t0, false);
        tx.send_modify(|n| n.appends += 1);
        let t1 = t0 + Duration::from_secs(3);
        assert_eq!(s.due(t1), Look::Full, "news");
        s.looked(t1, false);
        assert_eq!(s.due(t1 + Duration::from_secs(1)), Look::Full, "what the news brought may not be due yet");
        s.looked(t1 + Duration::from_secs(1), false);
        assert_eq!(s.due(t1 + HOT), Look::No, "the hot spell is over");
    }

    #[test]
    fn a_reconnection_brings_one_look() {
        let (tx, mut s) = scan();
        let t0 = Instant::now();
        assert_eq!(s.due(t0), Look::Full);
        s.looked(t0, false);
        tx.send_modify(|n| n.reconnects += 1);
        let t1 = t0 + Duration::from_secs(3);
        assert_eq!(s.due(t1), Look::Full, "something may have been missed");
        s.looked(t1, false);
        assert_eq!(s.due(t1 + Duration::from_millis(500)), Look::No, "but nothing waits to become due");
    }

    #[test]
    fn work_found_keeps_looking_and_a_wake_forces_a_look() {
        let (_tx, mut s) = scan();
        let t0 = Instant::now();
        assert_eq!(s.due(t0), Look::Full);
        s.looked(t0, true);
        assert_eq!(s.due(t0 + Duration::from_secs(1)), Look::Full);
        s.looked(t0 + Duration::from_secs(1), false);
        assert_eq!(s.due(t0 + Duration::from_secs(4)), Look::No);
        s.force();
        assert_eq!(s.due(t0 + Duration::from_secs(4)), Look::Full);
    }

    #[test]
    fn a_round_that_found_work_is_followed_by_a_look_however_long_it_took() {
        // The memory worker rebuilds topics after a round's jobs; when that outlasted the hot
        // spell, the backlog waited for the periodic look, 10 s later.
        let (_tx, mut s) = scan();
        let t0 = Instant::now();
        assert_eq!(s.due(t0), Look::Full);
        let t1 = t0 + HOT * 3;
        s.looked(t1, true);
        let t2 = t1 + HOT * 3;
        assert_eq!(s.due(t2), Look::Full, "work found: look again at once");
        s.looked(t2, false);
        assert_eq!(s.due(t2 + HOT), Look::No, "nothing found since: back to the periodic look");
    }

    #[test]
    fn without_a_store_every_poll_looks() {
        let (tx, mut s) = scan();
        drop(tx);
        let t0 = Instant::now();
        s.looked(t0, false);
        assert_eq!(s.due(t0 + Duration::from_millis(1)), Look::Full);
    }
}
