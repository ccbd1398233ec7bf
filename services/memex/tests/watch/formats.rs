//! Codex CLI rollouts, Gemini CLI session documents (rewritten whole), and Claude Code
//! sub-agents linked to their parent's session.

use std::time::Duration;

use crate::{Env, after_lines, append, fixture};

#[tokio::test]
async fn a_codex_rollout_in_two_runs_is_its_import() {
    let Some(env) = Env::new("codex").await else { return };
    let rollout = fixture("codex", "localpush__rollout-2026-02-23T12-40-23-019c8a4c-ed82-79a1-aa28-7738fc5ab61a.jsonl");
    let file = env.dir.join("2026/02/23/rollout-1.jsonl");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    // Cut in the middle of a line: the first run stops before it.
    let cut = after_lines(&rollout, 300) + 17;
    append(&file, &rollout[..cut]);
    env.once(&["--format", "codex"]).await;
    let session = env.session_of(&file, 1);
    env.assert_same(&session, &env.import(&rollout[..after_lines(&rollout, 300)], "r.jsonl").await).await;
    append(&file, &rollout[cut..]);
    env.once(&[]).await;
    env.assert_same(&session, &env.import(&rollout, "r.jsonl").await).await;
    let s = env.session(&session).await.unwrap();
    assert_eq!((s.source_format.as_str(), s.event_count > 100), ("codex", true));
}

/// The session document with its first `n` messages, as Gemini CLI would have written it then.
fn gemini_doc(doc: &serde_json::Value, n: usize) -> Vec<u8> {
    let mut d = doc.clone();
    let messages = d["messages"].as_array().unwrap()[..n].to_vec();
    d["messages"] = serde_json::Value::Array(messages);
    serde_json::to_vec_pretty(&d).unwrap()
}

#[tokio::test]
async fn a_gemini_session_rewritten_whole_gains_only_its_new_messages() {
    let Some(env) = Env::new("gemini").await else { return };
    let doc: serde_json::Value =
        serde_json::from_slice(&fixture("gemini-cli-json", "entire__ab2b9748b105-0.json")).unwrap();
    let n = doc["messages"].as_array().unwrap().len();
    let file = env.dir.join("tmp/abc/chats/session-1.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let session = env.session_of(&file, 1);
    std::fs::write(&file, gemini_doc(&doc, 6)).unwrap();
    let log = env.dir.join("watcher.log");
    // Never quiet long enough: the last message is held back while the agent may still write it.
    let mut watcher = env.spawn(&["--settle-secs", "3600"], &log);
    let five = env.import(&gemini_doc(&doc, 5), "s.json").await;
    let want = env.session(&five).await.unwrap().event_count;
    env.wait_for(&session, want, Duration::from_secs(30), &log).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.assert_same(&session, &five).await;
    // Rewritten whole with every message: only those beyond the stored ones are appended.
    std::fs::write(&file, gemini_doc(&doc, n)).unwrap();
    let all_but_last = env.import(&gemini_doc(&doc, n - 1), "s.json").await;
    let want = env.session(&all_but_last).await.unwrap().event_count;
    env.wait_for(&session, want, Duration::from_secs(30), &log).await;
    env.assert_same(&session, &all_but_last).await;
    watcher.kill9();
    // A catch-up takes the document as it is, the last message included.
    env.once(&[]).await;
    env.assert_same(&session, &env.import(&gemini_doc(&doc, n), "s.json").await).await;
    assert_eq!(env.session(&session).await.unwrap().source_format, "gemini");
}

#[tokio::test]
async fn sub_agents_are_linked_to_their_parent_session() {
    let Some(env) = Env::new("subagents").await else { return };
    // Claude Code 2.1: <project>/<session>.jsonl and <project>/<session>/subagents/agent-<id>.jsonl.
    let sid = "4d5611e5-241a-462a-8d15-5122611a9569";
    let parent_trace = fixture("claude-code", "spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl");
    let parent = env.dir.join(format!("proj/{sid}.jsonl"));
    let child = env.dir.join(format!("proj/{sid}/subagents/agent-a2898e3.jsonl"));
    std::fs::create_dir_all(child.parent().unwrap()).unwrap();
    append(&parent, &parent_trace[..after_lines(&parent_trace, 40)]);
    append(&child, &fixture("claude-code", "spotter__4d5611e5__subagent-a2898e3.jsonl"));
    // Before 2.1: a flat <project>/agent-<id>.jsonl whose records name the parent's session.
    let flat_parent = env.dir.join("old/741790a4-4fe2-4644-9a51-fb4482074060.jsonl");
    let flat_child = env.dir.join("old/agent-668b5ac2.jsonl");
    std::fs::create_dir_all(flat_child.parent().unwrap()).unwrap();
    append(&flat_parent, &fixture("claude-code", "spotter__short.jsonl"));
    append(&flat_child, &fixture("claude-code", "ccl__coderabbit__agent-668b5ac2.jsonl"));
    env.once(&[]).await;
    for (parent, child) in [(&parent, &child), (&flat_parent, &flat_child)] {
        let c = env.session(&env.session_of(child, 1)).await.expect("the sub-agent's session");
        assert_eq!(c.parent_session_id, env.session_of(parent, 1), "{}", child.display());
        assert!(c.event_count > 0);
        let meta: serde_json::Value = serde_json::from_str(&c.metadata_json).unwrap();
        assert_eq!(meta["memex_watch"]["parent_file"], parent.display().to_string());
    }
}
