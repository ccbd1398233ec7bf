//! Sending a call again when the server shed it. `RESOURCE_EXHAUSTED` with a
//! `grpc-retry-pushback-ms` hint (gRFC A6) is how a memex server refuses work it has not started
//! (admission past its turns or its queue, a full group-commit queue, a namespace's rate
//! quota), so the same request can be sent again after the hint, whatever the RPC. Anything else
//! (a storage quota has no hint) is the caller's to handle.
use std::future::Future;
use std::time::{Duration, Instant};

use tonic::{Code, Status};

/// Retries after a shed call, by default.
pub const SHED_RETRIES: u32 = 3;

/// The longest wait a hint is honoured for; a longer hint is the caller's to decide on.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// How long the server asked to wait before sending `status`'s call again, if it was shed.
pub fn pushback(status: &Status) -> Option<Duration> {
    if status.code() != Code::ResourceExhausted {
        return None;
    }
    let ms: u64 = status.metadata().get("grpc-retry-pushback-ms")?.to_str().ok()?.parse().ok()?;
    (Duration::from_millis(ms) <= MAX_WAIT).then(|| Duration::from_millis(ms))
}

/// `call`, sent again up to `retries` times while the server sheds it, each time after its hint
/// stretched by 0-50% (so that many shed clients do not come back at once). The last answer is
/// returned either way.
pub async fn shed_retry<T, F, Fut>(retries: u32, mut call: F) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Err(status) if attempt < retries => match pushback(&status) {
                Some(wait) => {
                    attempt += 1;
                    tokio::time::sleep(spread(wait)).await;
                }
                None => return Err(status),
            },
            answer => return answer,
        }
    }
}

/// `wait` stretched by 0-50%, from the clock's low bits: no generator needed for spreading.
fn spread(wait: Duration) -> Duration {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let nanos = START.get_or_init(Instant::now).elapsed().subsec_nanos();
    wait + wait.mul_f64(f64::from(nanos % 1000) / 2000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn shed(ms: &str) -> Status {
        let mut s = Status::resource_exhausted("the server is at capacity");
        s.metadata_mut().insert("grpc-retry-pushback-ms", ms.parse().expect("ascii"));
        s
    }

    #[test]
    fn only_a_shed_call_with_a_usable_hint_is_sent_again() {
        assert_eq!(pushback(&shed("250")), Some(Duration::from_millis(250)));
        assert_eq!(pushback(&shed("60000")), None, "longer than the client waits");
        assert_eq!(pushback(&shed("soon")), None);
        assert_eq!(pushback(&Status::resource_exhausted("namespace: storage quota reached")), None);
        let mut unavailable = Status::unavailable("restarting");
        unavailable.metadata_mut().insert("grpc-retry-pushback-ms", "10".parse().expect("ascii"));
        assert_eq!(pushback(&unavailable), None, "not known to be undone");
    }

    #[tokio::test]
    async fn a_shed_call_is_retried_after_its_hint_and_then_answers() {
        let calls = AtomicU32::new(0);
        let started = Instant::now();
        let answer = shed_retry(3, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(shed("20")),
                _ => Ok("built"),
            }
        })
        .await;
        assert_eq!(answer.expect("answered on the third call"), "built");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert!(started.elapsed() >= Duration::from_millis(40), "{:?}", started.elapsed());
        // Past the retries the last refusal is the answer; other errors are not retried.
        let calls = AtomicU32::new(0);
        let answer: Result<(), Status> = shed_retry(2, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(shed("1"))
        })
        .await;
        assert_eq!(answer.expect_err("still shed").code(), Code::ResourceExhausted);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let calls = AtomicU32::new(0);
        let answer: Result<(), Status> = shed_retry(2, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Status::not_found("session_id: no such session"))
        })
        .await;
        assert_eq!(answer.expect_err("not found").code(), Code::NotFound);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
