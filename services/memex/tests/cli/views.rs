//! Imports (a file, a gzip'd file, gzip'd stdin), `memex view --session`, `memex read`, local
//! `memex view` of gzip'd and piped traces, and a line holding two records.
use std::io::Write as _;
use std::sync::Arc;

use memex_store::Access;
use memex_tests::{Scratch, server_or_skip};

use crate::{Cli, golden, trace};

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_of_every_form_view_like_the_reference() {
    let srv = server_or_skip!();
    let cli = Cli::new(&srv, "views", Access::Write).await;
    let name = "spotter__short";
    let raw = std::fs::read(trace(&format!("{name}.jsonl"))).unwrap();

    // A plain file; not on a terminal, progress is plain lines on stderr.
    let plain = cli.run(&["import", trace(&format!("{name}.jsonl")).to_str().unwrap(), "--agent", "claude-code"]).await;
    let s1 = plain.ok().trim().to_owned();
    let kib = format!("{:.1} KiB", raw.len() as f64 / 1024.0);
    assert!(plain.stderr.contains(&format!("import: {kib} of {kib}\n")), "{}", plain.stderr);
    assert!(plain.stderr.contains("imported 8 events (claude format, 1 chain(s))"), "{}", plain.stderr);
    // gzip'd, with the .gz name: the session keeps the trace's own name.
    let gz_path = cli.dir.join(format!("{name}.jsonl.gz"));
    std::fs::write(&gz_path, gzip(&raw)).unwrap();
    let gz = cli.run(&["import", gz_path.to_str().unwrap(), "--format", "json"]).await.json();
    assert_eq!(gz["events"], 8);
    assert_eq!(gz["session"]["source_file_name"], format!("{name}.jsonl"));
    let s2 = gz["session"]["id"].as_str().unwrap().to_owned();
    // gzip'd on stdin, named on the command line.
    let piped = cli.run_stdin(&["import", "-", "--name", &format!("{name}.jsonl")], gzip(&raw)).await;
    let s3 = piped.ok().trim().to_owned();

    // Every one of them compiles to the reference's bytes.
    for s in [&s1, &s2, &s3] {
        let full = cli.run(&["view", "--session", s, "--mode", "full"]).await;
        assert!(full.ok() == golden(name, "compile", &format!("{name}.txt")), "{s}: full view differs");
        let ui = cli.run(&["view", "--session", s, "--mode", "ui"]).await;
        assert!(ui.ok() == golden(name, "compile", &format!("{name}.min.txt")), "{s}: UI view differs");
    }
    let adaptive = cli.run(&["view", "--session", &s1, "--mode", "adaptive", "--grep", "error"]).await;
    assert!(adaptive.ok() == golden(name, "grep-error", &format!("{name}.view.txt")), "adaptive view differs");
    let j = cli.run(&["view", "--session", &s1, "--format", "json"]).await.json();
    assert_eq!(
        (j["info"]["file_name"].as_str(), j["info"]["full_lines"].as_u64()),
        (Some("spotter__short.txt"), Some(52))
    );

    // A pointer dereferenced: numbered lines, or their roles and kinds as JSON.
    let read = cli.run(&["read", &format!("{s1}:18-21")]).await;
    assert_eq!(
        read.ok(),
        "18  >>>tool_call Bash:8qV1Sc\n19  command: mix phx.server 2>&1 | head -80\n20  timeout: 30000\n21  <<<tool_call\n"
    );
    let j = cli.run(&["read", &format!("{s1}:18-21"), "-C", "1", "--format", "json"]).await.json();
    let numbers: Vec<u64> = j["lines"].as_array().unwrap().iter().map(|l| l["number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [17, 18, 19, 20, 21, 22]);
    assert_eq!(j["full_lines"], 52);
}

#[tokio::test]
async fn local_view_reads_gzip_and_stdin() {
    let name = "spotter__short";
    let raw = std::fs::read(trace(&format!("{name}.jsonl"))).unwrap();
    let dir = Arc::new(Scratch::new(&format!("memex-cli-localview-{}", std::process::id())));
    let cli = Cli { endpoint: String::new(), namespace: String::new(), key: None, dir: dir.clone() };
    // gzip'd, and gzip'd under a name that does not say so: found by the magic bytes.
    std::fs::write(dir.join(format!("{name}.jsonl.gz")), gzip(&raw)).unwrap();
    std::fs::write(dir.join("disguised.jsonl"), gzip(&raw)).unwrap();
    let out = cli.run(&["view", &format!("{name}.jsonl.gz"), "disguised.jsonl", "-o", "."]).await;
    out.ok();
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    for stem in [name, "disguised"] {
        let full = std::fs::read_to_string(dir.join(format!("{stem}.txt"))).unwrap();
        assert!(full == golden(name, "compile", &format!("{name}.txt")), "{stem}.txt differs");
    }
    for stem in [name, "disguised"] {
        assert!(out.stdout.contains(&format!("  ./{stem}.txt  (52 lines, 486 words)\n")), "{}", out.stdout);
    }
    // stdin: `-`, plain, views named stdin.*.
    let piped = cli.run_stdin(&["view", "-", "-o", "."], raw).await;
    assert!(piped.ok().contains("./stdin.txt  (52 lines, 486 words)"), "{}", piped.stdout);
    let full = std::fs::read_to_string(dir.join("stdin.txt")).unwrap();
    assert!(full == golden(name, "compile", &format!("{name}.txt")), "stdin.txt differs");
    // Before: a gzip'd trace was "invalid UTF-8" and "No conversation chains found", exit 0.
    assert!(!piped.stdout.contains("No conversation chains found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_with_two_records_keeps_both() {
    let srv = server_or_skip!();
    let cli = Cli::new(&srv, "glued", Access::Write).await;
    let user = r#"{"type":"user","message":{"role":"user","content":"where is the bug?"},"uuid":"u1"}"#;
    let assistant = r#"{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"In the lexer: glued records."}]},"uuid":"a1"}"#;
    let trace_text = format!("{user}{assistant}\n");
    let r = cli.run_stdin(&["import", "-", "--name", "glued.jsonl"], trace_text.into_bytes()).await;
    let s = r.ok().trim().to_owned();
    assert!(r.stderr.contains("glued.jsonl:1:"), "the repair is reported with its line: {}", r.stderr);
    assert!(r.stderr.contains("both kept"), "{}", r.stderr);
    let events = cli.run(&["events", "--session", &s]).await;
    let kinds: Vec<String> = events
        .ok()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["user_message", "assistant_message"]);
    let view = cli.run(&["view", "--session", &s]).await;
    assert!(view.ok().contains("where is the bug?") && view.stdout.contains("In the lexer: glued records."));

    // The real trace with such a line: its assistant text survives the import.
    let real = cli.run(&["import", trace("entire__37995ebed6e4-2.jsonl").to_str().unwrap()]).await;
    let s = real.ok().trim().to_owned();
    assert!(real.stderr.contains("entire__37995ebed6e4-2.jsonl:128:1008: a second record"), "{}", real.stderr);
    let hits =
        cli.run(&["search", "TestLogging_IncludesContextValues", "--session", &s, "--kind", "assistant_message"]).await;
    assert!(hits.ok().starts_with(&format!("1. {s}:")), "{}", hits.stdout);
    assert!(hits.stdout.contains("Done. I updated"), "{}", hits.stdout);
}
