//! Every fixture trace (28: Claude Code from 1.0.17 to 2.1.114, Codex CLI, Gemini CLI; images,
//! compactions, a line holding two records, malformed lines) in one watched folder, caught up in
//! one run: each session equals its file's import, but for the one documented difference.

use crate::{Env, comparable};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_trace_watched_is_its_import() {
    let Some(env) = Env::new("corpus").await else { return };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/vcc/tests/fixtures/traces");
    let mut files = Vec::new();
    for kind in ["claude-code", "codex", "gemini-cli-json"] {
        for entry in std::fs::read_dir(root.join(kind)).unwrap() {
            let path = entry.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            // A few copies lost their last newline; the agents that wrote them ended the line.
            if kind != "gemini-cli-json" && !bytes.ends_with(b"\n") {
                bytes.push(b'\n');
            }
            // Not sub-agents here: each file is its own trace.
            let name = path.file_name().unwrap().to_string_lossy().replace("agent-", "agent_");
            let dst = env.dir.join(kind).join(name);
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::write(&dst, &bytes).unwrap();
            files.push((dst, bytes));
        }
    }
    assert_eq!(files.len(), 28);
    let started = std::time::Instant::now();
    env.once(&[]).await;
    // The catch-up figure (debug build, server in this process): `-- --nocapture` prints it.
    let (secs, bytes) = (started.elapsed().as_secs_f64(), files.iter().map(|(_, b)| b.len()).sum::<usize>());
    eprintln!("catch-up: {} files, {bytes} bytes in {secs:.2} s ({:.1} MB/s)", files.len(), bytes as f64 / secs / 1e6);
    let mut orphans = 0;
    for (file, bytes) in &files {
        let imported = env.import(bytes, "t.jsonl").await;
        let want = env.events(&imported).await;
        let watched = env.session_of(file, 1);
        let got = match env.session(&watched).await {
            Some(_) => env.events(&watched).await,
            None => Vec::new(), // no events, no session (a lone `summary` record)
        };
        assert_eq!(got.len(), want.len(), "{}", file.display());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let (mut g, w) = (comparable(g), comparable(w));
            // A result whose call the trace never made: an extension kind (an append must
            // answer a call of its session), the rest as imported.
            if g.contains(r#""memex_orphan_result":true"#) {
                orphans += 1;
                g = g.replace(r#""kind":"x-tool_"#, r#""kind":"tool_"#).replace(r#""memex_orphan_result":true,"#, "");
            }
            assert_eq!(g, w, "{} event {}", file.display(), k + 1);
        }
    }
    assert_eq!(orphans, 1, "the synthetic Codex rollout holds one result without its call");
}
