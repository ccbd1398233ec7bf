//! The agent loop of `memex-bench pack` (and `memex-bench soak`): each turn's requests, and with
//! `--fresh-sessions` sessions of each run's own.
//!
//! With `--fresh-sessions` (agent loop only), a run creates one new session per worker in the
//! corpus namespace and seeds it, before the warm-up and unmeasured, with the first
//! `--seed-events` events of a real trajectory: worker w gets the (w mod n)-th of the n
//! trajectories at least that long, in file order (or, past the longest, a chain of consecutive
//! ones: [`seed_choice`]). Every run then starts from the same session
//! lengths and contents; without it, `--append` lengthens the corpus's own sessions run after run.
use std::time::{Duration, Instant};

use anyhow::Context;
use memex_client::Conn;
use memex_proto::v1 as pb;

use super::bench_pack::PackArgs;
use super::traces::{TraceEvent, read_trajectories, task_goal};

/// The questions of the agent turns, taken in turn.
pub(crate) const QUERIES: &[&str] = &[
    "What did the last test run print?",
    "Which files have we edited so far, and why?",
    "What error did we hit when importing the module?",
    "What was the traceback of the failing reproduction script?",
    "Which function did we decide to change?",
    "What does the issue ask us to fix?",
    "What did grep find for the function name?",
    "Did the patch apply cleanly?",
];

/// Each turn's question, made unique by a reference no event contains: an agent never asks the
/// same thing of the same state twice, so no pack may come out of a cache of whole packs' texts.
fn user_message(question: &str) -> String {
    static TURNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = TURNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // splitmix64: distinct turns, distinct references.
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("{question} (ref q{:016x})", z ^ (z >> 31))
}

/// One agent turn on `session`: the event the agent appends first (when `append`), then its
/// BuildPack request asking question `q` of [`QUERIES`]. `k` numbers the asker's turns.
pub(crate) fn turn_requests(
    namespace: &str,
    session: String,
    q: usize,
    k: u32,
    retrieval: u32,
    view: i32,
    append: bool,
) -> (Option<pb::AppendEventsRequest>, pb::BuildPackRequest) {
    let question = QUERIES[q % QUERIES.len()];
    let event = append.then(|| pb::AppendEventsRequest {
        namespace: namespace.to_owned(),
        session_id: session.clone(),
        events: vec![pb::EventInput {
            kind: "assistant_message".into(),
            content: format!("Turn {k}: next I will look into {question}"),
            ..Default::default()
        }],
        ..Default::default()
    });
    let pack = pb::BuildPackRequest {
        namespace: namespace.to_owned(),
        session_id: session,
        user_message: user_message(question),
        budgets: Some(pb::Budgets { retrieval: Some(retrieval), ..Default::default() }),
        view,
        ..Default::default()
    };
    (event, pack)
}

/// Events each fresh session is seeded with unless `--seed-events` says otherwise: a session well
/// into its task (the trajectories' median is about 110 events; 51 of the 500 reach 200).
pub(crate) const DEFAULT_SEED_EVENTS: usize = 200;

/// How long to wait for the background workers to catch up with the seeded events.
const BACKLOG_WAIT: Duration = Duration::from_secs(300);
/// A background worker at most this many events behind before seeding is keeping up, and is
/// waited for; one further behind has a backlog of its own.
const CAUGHT_UP: u64 = 1_000;

/// The agent-loop flags must fit together: `--fresh-sessions` needs `--append`, `--seed-events`
/// needs `--fresh-sessions`.
pub(crate) fn check_args(append: bool, fresh_sessions: bool, seed_events: Option<usize>) -> anyhow::Result<()> {
    anyhow::ensure!(
        !fresh_sessions || append,
        "--fresh-sessions applies to the agent loop only: add --append (each run then appends to new sessions of its own)"
    );
    anyhow::ensure!(
        seed_events.is_none() || fresh_sessions,
        "--seed-events applies with --fresh-sessions only (how many real events each new session starts with)"
    );
    Ok(())
}

/// Which trajectories (indices into `lengths`, their event counts) each of `workers` fresh
/// sessions is seeded from. Among those with at least `events` events, in order, worker w gets
/// the (w mod their number)-th. When none is that long, worker w's session chains trajectories
/// w mod n, w+1 mod n, … until it has `events` events: an agent taking task after task in one
/// long session. None when all of them together are shorter.
pub(crate) fn seed_choice(lengths: &[usize], events: usize, workers: usize) -> Option<Vec<Vec<usize>>> {
    let long_enough: Vec<usize> = lengths.iter().enumerate().filter(|(_, n)| **n >= events).map(|(i, _)| i).collect();
    if !long_enough.is_empty() {
        return Some((0..workers).map(|w| vec![long_enough[w % long_enough.len()]]).collect());
    }
    if lengths.iter().sum::<usize>() < events {
        return None;
    }
    let n = lengths.len();
    let chain = |w: usize| {
        let (mut out, mut total) = (Vec::new(), 0);
        for i in (0..n).map(|k| (w + k) % n) {
            if total >= events {
                break;
            }
            out.push(i);
            total += lengths[i];
        }
        out
    };
    Some((0..workers).map(chain).collect())
}

/// The first `events` events of the trajectories `chain`, in turn. In a chain of more than one,
/// each trajectory's call ids get its index as a prefix, so that a result names its own call.
pub(crate) fn seed_events(
    trajectories: &[super::traces::Trajectory],
    chain: &[usize],
    events: usize,
) -> Vec<TraceEvent> {
    let mut out = Vec::with_capacity(events);
    for &i in chain {
        for e in &trajectories[i].events {
            if out.len() == events {
                return out;
            }
            let mut e = e.clone();
            if chain.len() > 1 {
                e.tool_call_id = e.tool_call_id.map(|id| format!("t{i}-{id}"));
            }
            out.push(e);
        }
    }
    out
}

/// Events a seeding append carries at most: long seeds go in several batches.
const SEED_BATCH: usize = 2_000;

/// Background work behind the appends, which a run may wait for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Backlog<'a> {
    /// Events without a vector of this model.
    Vectors(&'a memex_embed::ModelInfo),
    /// Events the memory worker has not read.
    Memory,
}

/// The backlogs of this configuration, named: the model's, the fast tier's, the memory worker's.
pub(crate) fn backlogs<'a>(
    model: Option<&'a memex_embed::ModelInfo>,
    fast: Option<&'a memex_embed::ModelInfo>,
    memory: bool,
) -> Vec<(&'static str, Backlog<'a>)> {
    let mut out = Vec::new();
    out.extend(model.map(|m| ("the model", Backlog::Vectors(m))));
    out.extend(fast.map(|m| ("the fast tier", Backlog::Vectors(m))));
    out.extend(memory.then_some(("the memory worker", Backlog::Memory)));
    out
}

async fn backlog(store: &memex_store::Store, namespace: &str, b: Backlog<'_>) -> anyhow::Result<u64> {
    Ok(match b {
        Backlog::Vectors(m) => super::bench_pack::embedding_lag(store, namespace, Some(m)).await?.unwrap_or(0),
        Backlog::Memory => memory_lag(store, namespace).await?,
    })
}

/// Events of the namespace the memory worker has not read yet (through its fact extractor).
pub(crate) async fn memory_lag(store: &memex_store::Store, namespace: &str) -> anyhow::Result<u64> {
    let ns = store.namespace(namespace).await?;
    let (lag,): (i64,) = sqlx::query_as(
        "SELECT COALESCE(sum(GREATEST(s.next_seq - 1 - COALESCE(p.fact_seq, 0), 0)), 0)::int8
         FROM sessions s LEFT JOIN memory_progress p ON p.namespace_id = s.namespace_id AND p.session_id = s.id
         WHERE s.namespace_id = $1",
    )
    .bind(ns.id)
    .fetch_one(store.pool())
    .await?;
    Ok(lag.max(0) as u64)
}

/// Creates one session per worker in the namespace of `conn`, each with a task and its goal, and
/// seeds it with the first `--seed-events` events of its trajectory ([`seed_choice`]); then waits
/// until the background workers that had caught up before (`backlogs`) have caught up with those
/// events too, so that the run does not measure their backlog. Returns the session ids, worker by
/// worker.
pub(crate) async fn fresh_sessions(
    args: &PackArgs,
    conn: &Conn,
    store: &memex_store::Store,
    backlogs: &[(&str, Backlog<'_>)],
) -> anyhow::Result<Vec<String>> {
    let events = args.seed_events.unwrap_or(DEFAULT_SEED_EVENTS);
    let started = Instant::now();
    let trajectories = read_trajectories(&args.traces, 0, usize::MAX)?;
    let lengths: Vec<usize> = trajectories.iter().map(|t| t.events.len()).collect();
    let choice = seed_choice(&lengths, events, args.workers).with_context(|| {
        format!(
            "--seed-events {events}: the trajectories in {} hold only {} events in all",
            args.traces.display(),
            lengths.iter().sum::<usize>()
        )
    })?;
    let mut before = Vec::new();
    for (_, b) in backlogs {
        before.push(backlog(store, &conn.namespace, *b).await?);
    }
    let run = ulid::Ulid::generate().to_string().to_lowercase();
    let clients = conn.connect().await?;
    let (mut sessions, mut appends) = (clients.sessions, clients.events);
    let (_, mut tasks) = super::bench::context_clients(conn).await?;
    let mut out = Vec::with_capacity(choice.len());
    for (w, chain) in choice.iter().enumerate() {
        let t = &trajectories[chain[0]];
        // Not `packbench-…`: the corpus's sessions (`corpus_sessions`) must not include these.
        let id = format!("packloop-{run}-{w}");
        let session = sessions
            .create_session(pb::CreateSessionRequest {
                namespace: conn.namespace.clone(),
                agent_id: id.clone(),
                task_id: id.clone(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .id;
        tasks
            .update_task_state(pb::UpdateTaskStateRequest {
                namespace: conn.namespace.clone(),
                task_id: id,
                state: Some(pb::TaskState {
                    goals: vec![task_goal(&t.events)],
                    phase: pb::Phase::Execution as i32,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await?;
        for batch in seed_events(&trajectories, chain, events).chunks(SEED_BATCH) {
            appends
                .append_events(pb::AppendEventsRequest {
                    namespace: conn.namespace.clone(),
                    session_id: session.clone(),
                    events: batch.iter().map(TraceEvent::input).collect(),
                    idempotency_key: String::new(),
                })
                .await
                .context("seeding a fresh session")?;
        }
        out.push(session);
    }
    let mut distinct: Vec<usize> = choice.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    println!(
        "pack: {} fresh sessions (run {run}), each seeded with the first {events} events of a trajectory or a chain ({} distinct trajectories) in {:.1} s",
        out.len(),
        distinct.len(),
        started.elapsed().as_secs_f64()
    );
    // The seeded events' vectors and memory are built in the background: wait for the workers
    // that had caught up before, or the measured phase would share the machine with their work on
    // the seeded events. A worker with a backlog of its own (behind a corpus loaded faster than it
    // works) goes on with it in every run: waiting for it could take hours.
    let waits: Vec<(&str, Backlog<'_>, u64)> =
        backlogs.iter().zip(before).map(|((name, b), before)| (*name, *b, before)).collect();
    wait_for_backlogs("pack", store, &conn.namespace, &waits, BACKLOG_WAIT).await?;
    Ok(out)
}

/// Waits until each worker's backlog is back to what it was (`(name, backlog, before)`), at most
/// `limit` in all; a worker that was more than [`CAUGHT_UP`] behind is not waited for. Says
/// what it waited for, and how long, after `tag: `.
pub(crate) async fn wait_for_backlogs(
    tag: &str,
    store: &memex_store::Store,
    namespace: &str,
    waits: &[(&str, Backlog<'_>, u64)],
    limit: Duration,
) -> anyhow::Result<()> {
    let waited = Instant::now();
    for (name, b, before) in waits {
        if *before > CAUGHT_UP {
            println!("{tag}: {name} has a backlog of {before} events; not waiting for it");
            continue;
        }
        loop {
            let lag = backlog(store, namespace, *b).await?;
            if lag <= *before {
                println!("{tag}: {name} caught up after {:.0} s", waited.elapsed().as_secs_f64());
                break;
            }
            if waited.elapsed() > limit {
                println!(
                    "{tag}: {name} is still {} events behind after {:.0} s; measuring anyway",
                    lag - before,
                    waited.elapsed().as_secs_f64()
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_sessions_get_long_enough_trajectories_deterministically() {
        let lengths = [50, 250, 10, 300, 200];
        let one = |v: &[usize]| v.iter().map(|&i| vec![i]).collect::<Vec<_>>();
        assert_eq!(seed_choice(&lengths, 200, 5), Some(one(&[1, 3, 4, 1, 3])));
        assert_eq!(seed_choice(&lengths, 200, 5), seed_choice(&lengths, 200, 5));
        assert_eq!(seed_choice(&lengths, 0, 3), Some(one(&[0, 1, 2])));
        // Longer than any: chained from the worker's own, wrapping round.
        assert_eq!(seed_choice(&lengths, 301, 2), Some(vec![vec![0, 1, 2], vec![1, 2, 3]]));
        assert_eq!(seed_choice(&lengths, 800, 1), Some(vec![vec![0, 1, 2, 3, 4]]));
        assert_eq!(seed_choice(&lengths, 811, 1), None);
    }

    #[test]
    fn chained_seeds_keep_each_result_with_its_own_call() {
        use super::super::traces::Trajectory;
        let t = |name: &str| Trajectory {
            instance_id: name.into(),
            events: vec![TraceEvent::call("call_1", "ls"), TraceEvent::result("call_1", "a.py")],
        };
        let ts = [t("a"), t("b")];
        let one = seed_events(&ts, &[1], 2);
        assert_eq!(one[0].tool_call_id.as_deref(), Some("call_1"), "a single trajectory keeps its ids");
        let chained = seed_events(&ts, &[1, 0], 3);
        let ids: Vec<_> = chained.iter().map(|e| e.tool_call_id.as_deref().unwrap_or("")).collect();
        assert_eq!(ids, ["t1-call_1", "t1-call_1", "t0-call_1"]);
    }

    #[test]
    fn the_agent_loop_flags_must_fit_together() {
        assert!(check_args(true, true, Some(50)).is_ok());
        assert!(check_args(false, false, None).is_ok());
        let e = check_args(false, true, None).expect_err("needs --append").to_string();
        assert!(e.contains("--fresh-sessions") && e.contains("--append"), "{e}");
        let e = check_args(true, false, Some(10)).expect_err("needs --fresh-sessions").to_string();
        assert!(e.contains("--seed-events") && e.contains("--fresh-sessions"), "{e}");
    }
}
