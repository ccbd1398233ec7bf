//! Admission for the expensive RPCs (BuildPack, BuildSnapshot, Search, CompileView, ImportTrace): at most
//! `limits.max_in_flight` run at once, at most `limits.max_waiting` wait for a turn, and the rest
//! are refused at once with `RESOURCE_EXHAUSTED` and a retry hint. Past its capacity a replica
//! sheds load instead of queueing it: a queue without a bound is latency without a bound and
//! memory without a bound, for answers the clients have stopped waiting for.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

pub struct Admission {
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    waiting: AtomicUsize,
    max_waiting: usize,
    /// Refused for a full queue, and given up waiting at the caller's deadline.
    pub shed: AtomicU64,
    pub expired: AtomicU64,
}

/// Held while an admitted RPC runs.
pub struct Admitted(#[allow(dead_code)] OwnedSemaphorePermit);

/// How long a refused caller is told to wait before it retries.
const RETRY_AFTER: Duration = Duration::from_millis(250);

impl Admission {
    pub fn new(max_in_flight: usize, max_waiting: usize) -> Admission {
        Admission {
            permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
            max_in_flight: max_in_flight.max(1),
            waiting: AtomicUsize::new(0),
            max_waiting,
            shed: AtomicU64::new(0),
            expired: AtomicU64::new(0),
        }
    }

    /// Admitted requests running now, and requests waiting for a turn (for the metrics).
    pub fn load(&self) -> (usize, usize) {
        let running = self.max_in_flight.saturating_sub(self.permits.available_permits());
        (running, self.waiting.load(Ordering::Relaxed))
    }

    /// Requests running at once from which background work steps aside.
    const BUSY_IN_FLIGHT: usize = 2;

    /// A turn for a request whose caller will wait at most `patience` (its gRPC deadline).
    pub async fn admit(&self, patience: Option<Duration>) -> Result<Admitted, Status> {
        if let Ok(p) = self.permits.clone().try_acquire_owned() {
            return Ok(Admitted(p));
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            self.shed.fetch_add(1, Ordering::Relaxed);
            return Err(retry_later(Status::resource_exhausted(
                "the server is at capacity (limits.max_in_flight, limits.max_waiting); retry with backoff",
            )));
        }
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&self.waiting);
        let turn = self.permits.clone().acquire_owned();
        let permit = match patience {
            Some(p) => match tokio::time::timeout(p, turn).await {
                Ok(r) => r,
                Err(_) => {
                    self.expired.fetch_add(1, Ordering::Relaxed);
                    return Err(Status::deadline_exceeded(
                        "the deadline passed while waiting for a turn; nothing was done",
                    ));
                }
            },
            None => turn.await,
        };
        permit.map(Admitted).map_err(|_| Status::unavailable("the server is shutting down"))
    }
}

/// Background work (the embedding workers) steps aside while requests wait for a turn or
/// several run at once.
impl memex_search::Foreground for Admission {
    fn busy(&self) -> bool {
        let in_flight = self.max_in_flight.saturating_sub(self.permits.available_permits());
        self.waiting.load(Ordering::Relaxed) > 0 || in_flight >= Self::BUSY_IN_FLIGHT
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

    #[tokio::test]
    async fn past_the_turns_and_the_queue_a_request_is_refused_at_once() {
        let a = Arc::new(Admission::new(1, 1));
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
