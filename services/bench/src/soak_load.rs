//! The soak's fleet: an open-loop load of turns (an append, then a pack) over the sessions of a
//! corpus, gathered in windows with the server's /proc beside them, and the sessions that end and
//! are replaced under `--session-turns`.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use memex_client::{Authed, Conn};
use memex_proto::v1 as pb;
use memex_proto::v1::context_service_client::ContextServiceClient;
use memex_proto::v1::event_service_client::EventServiceClient;
use memex_proto::v1::session_service_client::SessionServiceClient;

use super::bench_soak::SoakArgs;
use super::soak_server::{Server, read_proc};
use super::soak_stats::{IntervalStats, ProcSample};

/// The fleet: connections shared by all turns, and the sessions they go to.
pub(crate) struct Load {
    clients: Vec<(ContextServiceClient<Authed>, EventServiceClient<Authed>, SessionServiceClient<Authed>)>,
    namespace: String,
    sessions: Arc<Vec<String>>,
    /// With --session-turns: that number, this run's mark in the new sessions' ids, and the
    /// turns each place has sent so far.
    turnover: Option<(u32, u64, Mutex<Vec<u32>>)>,
    retrieval: u32,
    append: bool,
    timeout: Duration,
}

/// What one window of a run gathered.
struct Window {
    offered: u64,
    ok: Histogram<u64>,
    refused: Histogram<u64>,
    errors: u64,
    /// The server at the window's start (the previous window's last sample) and at its end.
    first: Option<ProcSample>,
    last: Option<ProcSample>,
    max_rss_kb: u64,
}

impl Window {
    fn new() -> anyhow::Result<Window> {
        Ok(Window {
            offered: 0,
            ok: Histogram::new_with_bounds(1, 600_000_000, 3)?,
            refused: Histogram::new_with_bounds(1, 600_000_000, 3)?,
            errors: 0,
            first: None,
            last: None,
            max_rss_kb: 0,
        })
    }

    fn stats(&self, end_secs: f64, seconds: f64) -> IntervalStats {
        IntervalStats::of(end_secs, seconds, self.offered, &self.ok, &self.refused, self.errors).with_server(
            self.first.as_ref(),
            self.last.as_ref(),
            self.max_rss_kb,
        )
    }
}

pub(crate) struct LoadRun {
    pub intervals: Vec<IntervalStats>,
    pub total: IntervalStats,
    /// (seconds since the start, the server) every second.
    pub samples: Vec<(f64, ProcSample)>,
    pub error_codes: BTreeMap<String, u64>,
}

type Windows = Arc<Mutex<Vec<Window>>>;

/// Every second: reads the server's /proc (when its pid is known) into the current window, and
/// prints each window once it is over (all but the last, which takes the stragglers and is printed by the run).
struct Reporter {
    pid: Option<u32>,
    windows: Windows,
    start: Instant,
    every: f64,
}

impl Reporter {
    async fn run(self, mut stop: tokio::sync::oneshot::Receiver<()>) -> Vec<(f64, ProcSample)> {
        let mut samples = Vec::new();
        let mut previous = self.pid.and_then(read_proc);
        let mut printed = 0;
        for tick in 1u64.. {
            tokio::select! {
                _ = tokio::time::sleep_until((self.start + Duration::from_secs(tick)).into()) => {}
                _ = &mut stop => break,
            }
            let t = tick as f64;
            let now = self.pid.and_then(read_proc);
            let Ok(mut windows) = self.windows.lock() else { break };
            let n = windows.len();
            if let Some(now) = now {
                samples.push((t, now));
                // The sample at a window's end belongs to it.
                let w = &mut windows[(((t / self.every).ceil() as usize).max(1) - 1).min(n - 1)];
                if w.first.is_none() {
                    w.first = previous;
                }
                w.last = Some(now);
                w.max_rss_kb = w.max_rss_kb.max(now.rss_kb);
                previous = Some(now);
            }
            while printed + 1 < n && t >= (printed + 1) as f64 * self.every - 1e-9 {
                println!("{}", windows[printed].stats((printed + 1) as f64 * self.every, self.every).row());
                printed += 1;
            }
        }
        samples
    }
}

fn with_deadline<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

impl Load {
    /// The session a turn at place `i` goes to: the corpus's, or with --session-turns the one
    /// that has taken its place by now; and whether this turn is that session's first (it
    /// creates the session).
    fn session_at(&self, i: usize) -> (String, bool) {
        let base = &self.sessions[i];
        let Some((n, run, turns)) = &self.turnover else {
            return (base.clone(), false);
        };
        let sent = match turns.lock() {
            Ok(mut t) => {
                let sent = t[i];
                t[i] += 1;
                sent
            }
            Err(_) => 0,
        };
        (session_of_generation(base, *run, sent / n), sent >= *n && sent % n == 0)
    }

    pub(crate) async fn new(args: &SoakArgs, conn: &Conn, sessions: Vec<String>) -> anyhow::Result<Load> {
        // A few HTTP/2 connections shared by the fleet, as agents behind a few gateways.
        let mut clients = Vec::new();
        for _ in 0..8 {
            let (context, _) = super::bench::context_clients(conn).await?;
            // Sessions (only --session-turns creates any) share the events' connection.
            let channel = conn.channel().await?;
            let events = EventServiceClient::with_interceptor(channel.clone(), conn.bearer()?);
            let sessions = SessionServiceClient::with_interceptor(channel, conn.bearer()?);
            clients.push((context, events, sessions));
        }
        // A soak's new sessions are its own: a later run's do not continue them.
        let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // Each place starts part-way through its first session, so sessions end at different
        // times rather than all at once every n turns.
        let turnover = args.session_turns.map(|n| (n, run, Mutex::new(first_turns(sessions.len(), n))));
        Ok(Load {
            clients,
            namespace: conn.namespace.clone(),
            turnover,
            sessions: Arc::new(sessions),
            retrieval: args.retrieval,
            append: !args.no_append,
            timeout: Duration::from_secs_f64(args.timeout),
        })
    }

    /// `rate` turns a second for `seconds`, open loop, gathered in windows of `every` seconds (a
    /// turn counts as offered in the window it was sent in, as answered in the one it was
    /// answered in; the last window takes the stragglers). With `server`, its /proc is read every
    /// second and each window printed as a row when it ends.
    pub(crate) async fn run(
        &self,
        rate: f64,
        seconds: f64,
        every: f64,
        server: Option<&Server>,
    ) -> anyhow::Result<LoadRun> {
        let n = ((seconds / every).ceil() as usize).max(1);
        let windows: Windows = Arc::new(Mutex::new((0..n).map(|_| Window::new()).collect::<anyhow::Result<_>>()?));
        let codes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let in_flight = Arc::new(AtomicU64::new(0));
        let start = Instant::now() + Duration::from_millis(50);
        let end = start + Duration::from_secs_f64(seconds);
        let window_of =
            move |t: Instant| ((t.saturating_duration_since(start).as_secs_f64() / every) as usize).min(n - 1);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let reporter =
            server.map(|s| tokio::spawn(Reporter { pid: s.pid, windows: windows.clone(), start, every }.run(stopped)));

        let period = Duration::from_secs_f64(1.0 / rate);
        // xorshift64: the same sessions in the same order for every run.
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for k in 0u32.. {
            let due = start + period * k;
            if due >= end {
                break;
            }
            tokio::time::sleep_until(due.into()).await;
            let scheduled = super::bench_pack::sent_at(due);
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let (session, first) = self.session_at((rng % self.sessions.len() as u64) as usize);
            let create = first.then(|| pb::CreateSessionRequest {
                namespace: self.namespace.clone(),
                agent_id: "memex-bench-soak".into(),
                session_id: session.clone(),
                ..Default::default()
            });
            let (append, pack) = super::bench_pack_loop::turn_requests(
                &self.namespace,
                session,
                k as usize,
                k,
                self.retrieval,
                pb::PackView::Basic as i32,
                self.append,
            );
            if let Ok(mut w) = windows.lock() {
                w[window_of(due)].offered += 1;
            }
            let (mut context, mut events, mut sessions) = self.clients[k as usize % self.clients.len()].clone();
            let (windows, codes, in_flight, timeout) =
                (windows.clone(), codes.clone(), in_flight.clone(), self.timeout);
            in_flight.fetch_add(1, Ordering::AcqRel);
            tokio::spawn(async move {
                // When the pack was sent: a refusal's latency is the pack call's own, how fast the
                // server sheds (the append before it is never shed).
                let mut pack_sent = scheduled;
                let turn = async {
                    if let Some(c) = create {
                        sessions.create_session(with_deadline(c, timeout)).await?;
                    }
                    if let Some(a) = append {
                        events.append_events(with_deadline(a, timeout)).await?;
                    }
                    pack_sent = Instant::now();
                    context.build_pack(with_deadline(pack, timeout)).await
                };
                let answer = tokio::time::timeout(timeout + Duration::from_secs(1), turn).await;
                let us = scheduled.elapsed().as_micros().max(1) as u64;
                let refusal_us = pack_sent.elapsed().as_micros().max(1) as u64;
                let code = match answer {
                    Ok(Ok(_)) => None,
                    Ok(Err(status)) => Some(status.code()),
                    Err(_) => Some(tonic::Code::DeadlineExceeded),
                };
                if let Ok(mut w) = windows.lock() {
                    let w = &mut w[window_of(Instant::now())];
                    match code {
                        None => w.ok.saturating_record(us),
                        Some(tonic::Code::ResourceExhausted) => w.refused.saturating_record(refusal_us),
                        Some(c) => {
                            w.errors += 1;
                            if let Ok(mut codes) = codes.lock() {
                                let seen = codes.entry(format!("{c:?}")).or_default();
                                if *seen == 0 {
                                    eprintln!("soak: a turn failed with {c:?}");
                                }
                                *seen += 1;
                            }
                        }
                    }
                }
                in_flight.fetch_sub(1, Ordering::AcqRel);
            });
        }
        // The stragglers: every turn ends by its deadline.
        let drain = Instant::now() + self.timeout + Duration::from_secs(2);
        while in_flight.load(Ordering::Acquire) > 0 && Instant::now() < drain {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop.send(());
        let samples = match reporter {
            Some(r) => r.await?,
            None => Vec::new(),
        };
        let windows = windows.lock().map_err(|_| anyhow::anyhow!("a turn panicked holding the soak's windows"))?;
        let mut intervals = Vec::with_capacity(n);
        let mut total = Window::new()?;
        for (i, w) in windows.iter().enumerate() {
            let secs = (seconds - i as f64 * every).min(every);
            intervals.push(w.stats(i as f64 * every + secs, secs));
            total.offered += w.offered;
            total.errors += w.errors;
            total.ok.add(&w.ok)?;
            total.refused.add(&w.refused)?;
        }
        if server.is_some()
            && let Some(last) = intervals.last()
        {
            println!("{}", last.row());
        }
        let error_codes = codes.lock().map(|c| c.clone()).unwrap_or_default();
        Ok(LoadRun { intervals, total: total.stats(seconds, seconds), samples, error_codes })
    }
}

/// Turns each of `places` counts as sent when a soak starts: spread over 0..n (a multiplicative
/// hash of the place), so the first sessions end at different times.
fn first_turns(places: usize, n: u32) -> Vec<u32> {
    (0..places as u64).map(|i| (i.wrapping_mul(2_654_435_761) % u64::from(n)) as u32).collect()
}

/// The session in place of `base` after `generation` have ended: `base` itself first (the corpus's
/// session, with its history), then new ones whose ids (memex's session ids are UUIDs) are
/// `base`'s mixed with the run and the generation, so no other run or place shares them.
fn session_of_generation(base: &str, run: u64, generation: u32) -> String {
    match (generation, uuid::Uuid::parse_str(base)) {
        (0, _) | (_, Err(_)) => base.to_owned(),
        (g, Ok(id)) => {
            let (hi, lo) = id.as_u64_pair();
            uuid::Uuid::from_u64_pair(hi ^ run.rotate_left(29), lo ^ u64::from(g).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{first_turns, session_of_generation};

    #[test]
    fn sessions_end_after_their_turns_and_new_ones_take_their_place() {
        let base = "0190f3c2-7a1b-7c3d-8e4f-5a6b7c8d9e0f";
        let names: Vec<String> = (0..7u32).map(|sent| session_of_generation(base, 42, sent / 3)).collect();
        assert_eq!(names[..3], [base, base, base]);
        assert!(names[3] == names[4] && names[4] == names[5] && names[3] != base && names[6] != names[3]);
        // New sessions have ids the server takes (UUIDs), distinct per run and per place.
        assert!(names[3..].iter().all(|n| uuid::Uuid::parse_str(n).is_ok()));
        assert_ne!(session_of_generation(base, 43, 1), names[3]);
        assert_ne!(session_of_generation("0190f3c2-7a1b-7c3d-8e4f-5a6b7c8d9e1f", 42, 1), names[3]);
        // The first sessions end at different times: every offset of 0..n is taken about
        // equally often.
        let firsts = first_turns(1000, 200);
        assert!(firsts.iter().all(|&t| t < 200));
        let mut per_quarter = [0; 4];
        firsts.iter().for_each(|&t| per_quarter[(t / 50) as usize] += 1);
        assert!(per_quarter.iter().all(|&q| (200..300).contains(&q)), "{per_quarter:?}");
    }
}
