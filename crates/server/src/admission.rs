//! Admission for the expensive RPCs (BuildPack, BuildSnapshot, Search, CompileView, ImportTrace): at most
//! `limits.max_in_flight` run at once and at most `limits.max_waiting` wait for a turn; a turn is
//! waited for at most `limits.max_queue_wait_ms`. Past any of the three a request is refused with
//! `RESOURCE_EXHAUSTED` and a retry hint. Past its capacity a replica sheds load instead of
//! queueing it: a queue without a bound is latency without a bound and memory without a bound,
//! for answers the clients have stopped waiting for.
//!
//! The queue is bounded in time as well as in count because a count says nothing about latency:
//! 64 waiters are 0.3 s at 200 packs/s and 3 s at 20. A request that would wait longer than the
//! bound is refused on arrival (its wait estimated from the waiters ahead of it and the mean time
//! a turn is held, by Little's law), so refusals cost no waiting; one that waits anyway (the
//! estimate was short) is refused when the bound passes.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

pub struct Admission {
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    waiting: AtomicUsize,
    max_waiting: usize,
    /// Longest wait for a turn; zero: bounded by `max_waiting` and the caller's deadline only.
    max_wait: Duration,
    /// Mean time an admitted request holds its turn, in µs (exponentially weighted, 1/16).
    held_us: Arc<AtomicU64>,
    /// Refused (a full queue, or a wait past the bound), and given up waiting at the caller's
    /// deadline.
    pub shed: AtomicU64,
    pub expired: AtomicU64,
    /// When the last append began, in ms after `epoch` (0: never): what the model's worker, which
    /// runs only in the replica's lulls, counts as foreground beside the requests admitted here.
    last_write_ms: AtomicU64,
    epoch: Instant,
}

/// Held while an admitted RPC runs; on drop it adds its time to the mean.
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    since: Instant,
    held_us: Arc<AtomicU64>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let us = u64::try_from(self.since.elapsed().as_micros()).unwrap_or(u64::MAX).max(1);
        // Racing updates lose one sample at worst; the mean needs no lock.
        let old = self.held_us.load(Ordering::Relaxed);
        let new = if old == 0 { us } else { old - old / 16 + us / 16 };
        self.held_us.store(new, Ordering::Relaxed);
    }
}

/// How long a refused caller is told to wait before it retries, at least.
const RETRY_AFTER: Duration = Duration::from_millis(250);

impl Admission {
    pub fn new(max_in_flight: usize, max_waiting: usize, max_wait: Duration) -> Admission {
        Admission {
            permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
            max_in_flight: max_in_flight.max(1),
            waiting: AtomicUsize::new(0),
            max_waiting,
            max_wait,
            held_us: Arc::new(AtomicU64::new(0)),
            shed: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            last_write_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Admitted requests running now, and requests waiting for a turn (for the metrics).
    pub fn load(&self) -> (usize, usize) {
        let running = self.max_in_flight.saturating_sub(self.permits.available_permits());
        (running, self.waiting.load(Ordering::Relaxed))
    }

    /// The mean time an admitted request held its turn (zero before the first).
    pub fn mean_held(&self) -> Duration {
        Duration::from_micros(self.held_us.load(Ordering::Relaxed))
    }

    /// Requests running at once from which background work steps aside.
    const BUSY_IN_FLIGHT: usize = 2;

    /// How recent an append must be to count as ingest in progress: longer than the 10 ms at
    /// which background work looks, so none between two looks is missed.
    const INGEST_WINDOW: Duration = Duration::from_millis(20);

    /// An append begins (AppendEvents, each message of StreamEvents).
    pub fn wrote(&self) {
        self.last_write_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since `epoch`, plus one (0 stands for never).
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX).saturating_add(1)
    }

    fn admitted(&self, permit: OwnedSemaphorePermit) -> Admitted {
        Admitted { _permit: permit, since: Instant::now(), held_us: self.held_us.clone() }
    }

    fn refuse(&self, why: &str, wait: Duration) -> Status {
        self.shed.fetch_add(1, Ordering::Relaxed);
        retry_after(
            Status::resource_exhausted(format!("the server is at capacity ({why}); retry with backoff")),
            wait.max(RETRY_AFTER),
        )
    }

    /// A turn for a request whose caller will wait at most `patience` (its gRPC deadline).
    pub async fn admit(&self, patience: Option<Duration>) -> Result<Admitted, Status> {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Ok(self.admitted(p));
        }
        let ahead = self.waiting.fetch_add(1, Ordering::AcqRel);
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&self.waiting);
        // Little's law: the waiters ahead and this one leave at max_in_flight per mean turn.
        let expected = self.mean_held().saturating_mul(u32::try_from(ahead + 1).unwrap_or(u32::MAX))
            / u32::try_from(self.max_in_flight).unwrap_or(u32::MAX);
        if ahead >= self.max_waiting {
            return Err(self.refuse("limits.max_in_flight and limits.max_waiting", expected));
        }
        if !self.max_wait.is_zero() && expected > self.max_wait {
            return Err(self.refuse("the wait for a turn would pass limits.max_queue_wait_ms", expected));
        }
        // Wait until the bound or the caller's deadline, whichever is first.
        let bound = (!self.max_wait.is_zero()).then_some(self.max_wait);
        let limit = match (bound, patience) {
            (Some(b), Some(p)) => Some(b.min(p)),
            (b, p) => b.or(p),
        };
        let turn = self.permits.clone().acquire_owned();
        let permit = match limit {
            Some(limit) => match tokio::time::timeout(limit, turn).await {
                Ok(r) => r,
                Err(_) if patience.is_some_and(|p| p <= limit) => {
                    self.expired.fetch_add(1, Ordering::Relaxed);
                    return Err(Status::deadline_exceeded(
                        "the deadline passed while waiting for a turn; nothing was done",
                    ));
                }
                Err(_) => {
                    return Err(self.refuse("waited limits.max_queue_wait_ms for a turn", self.mean_held()));
                }
            },
            None => turn.await,
        };
        permit.map(|p| self.admitted(p)).map_err(|_| Status::unavailable("the server is shutting down"))
    }
}

/// Background work (the embedding workers) steps aside while requests wait for a turn or
/// several run at once.
impl memex_search::Foreground for Admission {
    fn busy(&self) -> bool {
        let in_flight = self.max_in_flight.saturating_sub(self.permits.available_permits());
        self.waiting.load(Ordering::Relaxed) > 0 || in_flight >= Self::BUSY_IN_FLIGHT
    }

    /// An append began within the last [`Admission::INGEST_WINDOW`].
    fn ingesting(&self) -> bool {
        let last = self.last_write_ms.load(Ordering::Relaxed);
        last != 0 && self.now_ms().saturating_sub(last) <= Self::INGEST_WINDOW.as_millis() as u64
    }
}

impl memex_recall::Foreground for Admission {
    fn busy(&self) -> bool {
        memex_search::Foreground::busy(self)
    }
}

/// `status` with the gRPC retry hint (`grpc-retry-pushback-ms`, gRFC A6).
pub fn retry_later(status: Status) -> Status {
    retry_after(status, RETRY_AFTER)
}

/// `status` with a retry hint of `wait` (at least 1 ms).
pub fn retry_after(mut status: Status, wait: Duration) -> Status {
    if let Ok(v) = wait.as_millis().max(1).to_string().parse() {
        status.metadata_mut().insert("grpc-retry-pushback-ms", v);
    }
    status
}

/// The caller's deadline from its `grpc-timeout` header, as the time left from now.
pub fn patience(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let v = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (n, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An append counts as ingest in progress for a few milliseconds, for the model's worker only
    /// (it is not request load for the others).
    #[test]
    fn an_append_is_ingest_for_a_moment() {
        use memex_search::Foreground;
        let a = Admission::new(4, 4, Duration::ZERO);
        assert!(!a.ingesting(), "nothing appended yet");
        a.wrote();
        assert!(a.ingesting());
        assert!(!Foreground::busy(&a), "appends are not request load");
        std::thread::sleep(Admission::INGEST_WINDOW + Duration::from_millis(10));
        assert!(!a.ingesting(), "the window has passed");
    }

    #[tokio::test]
    async fn past_the_turns_and_the_queue_a_request_is_refused_at_once() {
        let a = Arc::new(Admission::new(1, 1, Duration::ZERO));
        let first = a.admit(None).await.expect("a free turn");
        // The second waits for the first; its caller gives up at its deadline.
        let waiting = {
            let a = a.clone();
            tokio::spawn(async move { a.admit(Some(Duration::from_millis(200))).await.map(|_| ()) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The third finds the queue full: refused now, with a retry hint.
        let started = std::time::Instant::now();
        let refused = a.admit(None).await.err().expect("refused");
        assert!(started.elapsed() < Duration::from_millis(50));
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert_eq!(refused.metadata().get("grpc-retry-pushback-ms").and_then(|v| v.to_str().ok()), Some("250"));
        let expired = waiting.await.expect("task").expect_err("deadline");
        assert_eq!(expired.code(), tonic::Code::DeadlineExceeded);
        assert_eq!((a.shed.load(Ordering::Relaxed), a.expired.load(Ordering::Relaxed)), (1, 1));
        // A turn given back is taken by the next.
        drop(first);
        a.admit(Some(Duration::from_millis(10))).await.expect("free again");
    }

    #[tokio::test]
    async fn a_wait_past_the_time_bound_is_refused_not_run() {
        let a = Arc::new(Admission::new(1, 64, Duration::from_millis(60)));
        // Before any turn was held the estimate is zero: the request waits, up to the bound.
        let first = a.admit(None).await.expect("a free turn");
        let started = Instant::now();
        let refused = a.admit(Some(Duration::from_secs(10))).await.err().expect("refused at the bound");
        assert!(started.elapsed() >= Duration::from_millis(60), "{:?}", started.elapsed());
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().contains("limits.max_queue_wait_ms"), "{}", refused.message());
        // A caller whose deadline comes first is told so, and is not counted as shed.
        let expired = a.admit(Some(Duration::from_millis(5))).await.err().expect("deadline");
        assert_eq!(expired.code(), tonic::Code::DeadlineExceeded);
        assert_eq!((a.shed.load(Ordering::Relaxed), a.expired.load(Ordering::Relaxed)), (1, 1));
        // The first turn held ~150 ms: now one waiter's expected wait (150 ms) passes the 60 ms
        // bound, so the next request is refused on arrival, with that wait as its hint.
        tokio::time::sleep(Duration::from_millis(150).saturating_sub(started.elapsed())).await;
        drop(first);
        assert!(a.mean_held() >= Duration::from_millis(150), "{:?}", a.mean_held());
        let _held = a.admit(None).await.expect("free again");
        let started = Instant::now();
        let refused = a.admit(None).await.err().expect("refused on arrival");
        assert!(started.elapsed() < Duration::from_millis(30), "{:?}", started.elapsed());
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        let hint: u64 = refused
            .metadata()
            .get("grpc-retry-pushback-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .expect("a retry hint");
        assert!(hint >= 250, "{hint}");
        assert_eq!(a.load(), (1, 0), "a refused request leaves the queue");
    }

    #[test]
    fn deadlines_parse_from_grpc_timeout() {
        let mut m = tonic::metadata::MetadataMap::new();
        assert_eq!(patience(&m), None);
        for (v, d) in
            [("2S", Duration::from_secs(2)), ("150m", Duration::from_millis(150)), ("1H", Duration::from_secs(3600))]
        {
            m.insert("grpc-timeout", v.parse().expect("ascii"));
            assert_eq!(patience(&m), Some(d), "{v}");
        }
        m.insert("grpc-timeout", "soon".parse().expect("ascii"));
        assert_eq!(patience(&m), None);
    }
}
