//! The test: a real trace written into a watched folder in random-sized chunks (lines cut
//! anywhere), the watcher killed with SIGKILL in the middle and started again, and the session
//! compared with a one-shot import: identical, none twice, none lost.

use std::time::Duration;

use crate::{Env, Rng, after_lines, append, fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_in_the_middle_loses_nothing_and_repeats_nothing() {
    let Some(env) = Env::new("replay").await else { return };
    // 902 records: a compaction, sub-agent results, 19 tool errors, thinking.
    let mut trace = fixture("claude-code", "entire__d0161e0df1cb-0.jsonl");
    // This copy lost its last newline; an agent writing it ends the line.
    if !trace.ends_with(b"\n") {
        trace.push(b'\n');
    }
    let imported = env.import(&trace, "trace.jsonl").await;
    let want = env.session(&imported).await.unwrap().event_count;
    let file = env.dir.join("a1b2c3.jsonl");
    let session = env.session_of(&file, 1);
    let log = env.dir.join("watcher1.log");
    let mut watcher = env.spawn(&[], &log);

    let mut rng = Rng::seeded();
    let writer = {
        let (file, trace) = (file.clone(), trace.clone());
        let seed = rng.below(u64::MAX);
        std::thread::spawn(move || {
            let mut rng = Rng(seed | 1);
            let mut at = 0;
            while at < trace.len() {
                let n = (1 + rng.below(48 * 1024) as usize).min(trace.len() - at);
                append(&file, &trace[at..at + n]);
                at += n;
                std::thread::sleep(Duration::from_millis(5 + rng.below(25)));
            }
        })
    };

    // Kill the watcher once it has stored part of the trace and the writer is still going.
    let killed_at = loop {
        let stored = env.session(&session).await.map_or(0, |s| s.event_count);
        let written = std::fs::metadata(&file).map_or(0, |m| m.len());
        if stored > 0 && written as usize > trace.len() / 3 {
            watcher.kill9();
            break stored;
        }
        assert!(!writer.is_finished(), "the trace was written before the watcher stored anything");
        tokio::time::sleep(Duration::from_millis(10 + rng.below(40))).await;
    };
    assert!(killed_at < want, "killed after everything was stored");
    tokio::time::sleep(Duration::from_millis(rng.below(500))).await;
    let log2 = env.dir.join("watcher2.log");
    let _watcher = env.spawn(&[], &log2);
    tokio::task::spawn_blocking(move || writer.join()).await.unwrap().unwrap();
    env.wait_for(&session, want, Duration::from_secs(60), &log2).await;
    // Nothing more arrives later: no record was stored twice.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(env.session(&session).await.unwrap().event_count, want);
    env.assert_same(&session, &imported).await;
    let s = env.session(&session).await.unwrap();
    assert_eq!((s.source_format.as_str(), s.agent_id.as_str()), ("claude", "agent"));
    eprintln!("killed with {killed_at} of {want} events stored");
}

#[tokio::test]
async fn a_half_written_line_waits_for_its_newline() {
    let Some(env) = Env::new("half").await else { return };
    let trace = fixture("claude-code", "spotter__tool_heavy.jsonl");
    let file = env.dir.join("t.jsonl");
    let whole_lines = after_lines(&trace, 20);
    let cut = whole_lines + (after_lines(&trace, 21) - whole_lines) / 2;
    append(&file, &trace[..cut]);
    env.once(&[]).await;
    let session = env.session_of(&file, 1);
    let first = env.import(&trace[..whole_lines], "t.jsonl").await;
    env.assert_same(&session, &first).await;
    // The rest of the line, and of the file, arrives: nothing of the torn line was lost.
    append(&file, &trace[cut..]);
    env.once(&[]).await;
    let all = env.import(&trace, "t.jsonl").await;
    env.assert_same(&session, &all).await;
}
