//! Packs, windows, compaction and expansion, through the CLI.
use memex_store::Access;
use memex_tests::server_or_skip;
use serde_json::json;

use crate::Cli;

/// An agent loop with bulky tool outputs; step 1 fails with an exact error.
fn agent_loop(steps: usize) -> Vec<serde_json::Value> {
    let mut v = vec![
        json!({"kind": "system", "content": "You are a coding agent."}),
        json!({"kind": "user_message", "content": "Fix separability_matrix for nested models."}),
    ];
    for i in 0..steps {
        let id = format!("c{i}");
        v.push(json!({"kind": "assistant_message", "content": format!("Step {i}: let me look at file_{i}.py")}));
        v.push(json!({"kind": "tool_call", "tool_name": "Bash", "tool_call_id": id, "content": format!("grep -rn separability file_{i}.py")}));
        let out = if i == 1 {
            "ModuleNotFoundError: No module named 'erfa'\n".to_owned()
        } else {
            (0..120)
                .map(|l| format!("astropy/modeling/file_{i}.py:{l}: matrix[{l}] = _cstack(left, right)\n"))
                .collect()
        };
        v.push(json!({"kind": "tool_result", "tool_call_id": id, "content": out}));
    }
    v.push(json!({"kind": "user_message", "content": "Good. Now run the tests."}));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packs_windows_compaction_and_expansion() {
    let srv = server_or_skip!();
    let cli = Cli::new(&srv, "ctx", Access::Write).await;
    cli.run(&["task", "update", "fix", "--expected-version", "0", "--goal", "fix separability_matrix"]).await.ok();
    let s = cli.session("exec", Some("fix")).await;
    let events = agent_loop(8);
    cli.append(&s, &events).await;

    // A pack: the summary (blocks, items with pointers), then the text.
    let built =
        cli.run(&["pack", "build", "--session", &s, "-m", "why did erfa fail?", "--retrieval-budget", "2000"]).await;
    let text = built.ok();
    assert!(text.starts_with("pack "), "{text}");
    assert!(text.contains("blocks: "), "{text}");
    assert!(text.contains(&format!("  tail      {s}:")), "tail items cite session:first-last: {text}");
    let (_, pack_text) = text.split_once("──── text ────\n").expect("the text follows the summary");
    assert!(pack_text.contains("why did erfa fail?"), "{pack_text}");
    let only = cli.run(&["pack", "build", "--session", &s, "-m", "why did erfa fail?", "--text-only"]).await;
    assert!(!only.ok().contains("──── text ────") && only.stdout.contains("why did erfa fail?"));

    // JSON, then the stored pack read back exactly.
    let j = cli.run(&["pack", "build", "--session", &s, "-m", "erfa", "--full", "--format", "json"]).await.json();
    let id = j["pack_id"].as_str().unwrap().to_owned();
    assert!(j["tokens"].as_u64().unwrap() > 0 && !j["decisions"].as_array().unwrap().is_empty(), "{j}");
    let got = cli.run(&["pack", "get", &id, "--format", "json"]).await.json();
    assert_eq!((&got["pack_id"], &got["text"], &got["tokens"]), (&j["pack_id"], &j["text"], &j["tokens"]));
    let got_text = cli.run(&["pack", "get", &id]).await;
    assert!(got_text.ok().contains("decisions: ") && got_text.stdout.contains(" included\n"), "{}", got_text.stdout);

    // The window holds every event; compaction evicts tool output and leaves a manifest.
    let w = cli.run(&["window", "--session", &s, "--format", "json"]).await.json();
    assert_eq!(w["events"].as_array().unwrap().len(), events.len());
    let window = cli.run(&["window", "--session", &s]).await;
    assert!(window.ok().contains(&format!("{} events resident  0 manifests", events.len())), "{}", window.stdout);
    let c = cli
        .run(&["compact", "--session", &s, "--budget", "6000", "--headroom", "1000", "--format", "json"])
        .await
        .json();
    assert_eq!((c["compacted"].as_bool(), c["fits"].as_bool()), (Some(true), Some(true)), "{c}");
    let manifest = c["manifest"]["id"].as_str().unwrap().to_owned();
    let evicted = c["evicted_event_ids"].as_array().unwrap().len();
    assert!(evicted > 0);
    let again = cli.run(&["compact", "--session", &s, "--budget", "6000", "--headroom", "1000"]).await;
    assert!(again.ok().starts_with("not compacted: "), "{}", again.stdout);
    let window = cli.run(&["window", "--session", &s]).await;
    assert!(window.ok().contains(&format!("manifest {manifest}  {evicted} events")), "{}", window.stdout);

    // Expansion gives the originals back: JSON lines after the manifest (text), or one document.
    let x = cli.run(&["expand", &manifest]).await;
    let lines: Vec<&str> = x.ok().lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(lines.len(), evicted, "{}", x.stdout);
    assert!(lines.iter().all(|l| l.contains("\"kind\":\"tool_result\"")));
    let xj = cli.run(&["expand", &manifest, "--format", "json"]).await.json();
    assert_eq!(xj["manifest"]["id"], manifest.as_str());
    assert_eq!(xj["events"].as_array().unwrap().len(), evicted);
}
