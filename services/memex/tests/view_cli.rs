//! `memex view` as a process: for every golden, run the built binary the way the reference was
//! run (inside the output directory, `-o .`) and compare stdout, exit status, the set of files
//! written and their bytes. Plus robustness: malformed inputs, `--strict`, other formats, JSON.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use memex_tests::Scratch;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/vcc/tests/fixtures")
}

fn trace(kind: &str, name: &str) -> PathBuf {
    fixtures().join("traces").join(kind).join(name)
}

fn scratch(tag: &str) -> Scratch {
    Scratch::new(&format!("memex-view-{}-{tag}", std::process::id()))
}

fn memex(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memex")).arg("view").args(args).current_dir(dir).output().unwrap()
}

fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let (g, w) = (String::from_utf8_lossy(got), String::from_utf8_lossy(want));
    let (gl, wl): (Vec<&str>, Vec<&str>) = (g.split('\n').collect(), w.split('\n').collect());
    let i = (0..gl.len().max(wl.len())).find(|&i| gl.get(i) != wl.get(i)).unwrap_or(0);
    panic!("{what}: first difference at line {}\n  got:  {:?}\n  want: {:?}", i + 1, gl.get(i), wl.get(i));
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn goldens_through_the_binary() {
    let golden = fixtures().join("golden");
    for name in listing(&golden) {
        for (mode, extra) in [("compile", None), ("grep-error", Some("error")), ("grep-ci-test", Some("(?i)test"))] {
            let dir = scratch(&format!("{name}-{mode}"));
            let input = format!("{name}.jsonl");
            std::fs::copy(trace("claude-code", &input), dir.join(&input)).unwrap();
            let mut args = vec![input.as_str(), "-o", "."];
            if let Some(p) = extra {
                args.extend(["--grep", p]);
            }
            let out = memex(&dir, &args);
            let want = golden.join(&name).join(mode);
            let code = std::fs::read_to_string(want.join("exit_code.txt")).unwrap();
            assert_eq!(out.status.code(), Some(code.trim().parse().unwrap()), "{name}/{mode}");
            assert!(out.stderr.is_empty(), "{name}/{mode}: {}", String::from_utf8_lossy(&out.stderr));
            assert_same(
                &format!("{name}/{mode}/stdout"),
                &out.stdout,
                &std::fs::read(want.join("stdout.txt")).unwrap(),
            );
            let produced = listing(&dir);
            for file in listing(&want).iter().filter(|f| *f != "stdout.txt" && *f != "exit_code.txt") {
                assert!(produced.contains(file), "{name}/{mode}: {file} not written");
                let got = std::fs::read(dir.join(file)).unwrap();
                assert_same(&format!("{name}/{mode}/{file}"), &got, &std::fs::read(want.join(file)).unwrap());
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

#[test]
fn glued_records_are_a_warning_not_a_crash() {
    let dir = scratch("malformed");
    let bad = trace("claude-code", "entire__37995ebed6e4-2.jsonl");
    let good = trace("claude-code", "spotter__short.jsonl");
    let out = memex(&dir, &[bad.to_str().unwrap(), good.to_str().unwrap(), "-o", "."]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected =
        format!("{}:128:1008: a second record on the same line (no newline before it); both kept\n", bad.display());
    assert_eq!(stderr, expected);
    let full = std::fs::read_to_string(dir.join("entire__37995ebed6e4-2.txt")).unwrap();
    assert!(full.lines().count() > 3000, "the rest of the file is compiled");
    assert!(full.contains("Done. I updated `TestLogging_IncludesContextValues`"), "both glued records are kept");
    assert!(dir.join("spotter__short.txt").exists());
}

#[test]
fn strict_fails_only_the_bad_input() {
    let dir = scratch("strict");
    let bad = trace("claude-code", "entire__37995ebed6e4-2.jsonl");
    let good = trace("claude-code", "spotter__short.jsonl");
    let out = memex(&dir, &[bad.to_str().unwrap(), good.to_str().unwrap(), "-o", ".", "--strict"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.join("entire__37995ebed6e4-2.txt").exists());
    assert!(dir.join("spotter__short.txt").exists());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("./spotter__short.txt  (52 lines, 486 words)"));
}

#[test]
fn garbage_inputs_do_not_crash() {
    let dir = scratch("garbage");
    let cases: [(&str, &[u8]); 5] = [
        ("utf8.jsonl", b"{\"type\":\"user\",\"message\":{\"content\":\"caf\xe9\"}}\n"),
        ("array.jsonl", b"[1,2]\n\"str\"\n{\"type\":\"user\",\"message\":{\"content\":\"ok\"}}\n"),
        ("b64.jsonl", b"{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"abcde\"}}]}}\n"),
        ("types.jsonl", b"{\"type\":\"assistant\",\"message\":{\"id\":1,\"content\":[7,{\"type\":\"tool_use\",\"input\":[1]}]}}\n{\"type\":\"system\",\"content\":{\"a\":1}}\n"),
        ("torn.jsonl", b"{\"type\":\"user\",\"message\":{\"content\":\"x\"}}\n{\"type\":\"us"),
    ];
    for (name, bytes) in cases {
        std::fs::write(dir.join(name), bytes).unwrap();
        let out = memex(&dir, &[name, "-o", "."]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with(&format!("{name}:")), "{name}: diagnostic expected, got {stderr:?}");
    }
}

#[test]
fn other_formats_render() {
    let dir = scratch("formats");
    let codex = trace("codex", "localpush__rollout-2026-02-23T12-40-23-019c8a4c-ed82-79a1-aa28-7738fc5ab61a.jsonl");
    let gemini = trace("gemini-cli-json", "entire__ab2b9748b105-0.json");
    let out = memex(&dir, &[codex.to_str().unwrap(), gemini.to_str().unwrap(), "-o", "."]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let codex_full = std::fs::read_to_string(
        dir.join("localpush__rollout-2026-02-23T12-40-23-019c8a4c-ed82-79a1-aa28-7738fc5ab61a.txt"),
    )
    .unwrap();
    assert!(codex_full.contains(">>>tool_call exec_command:"));
    assert!(codex_full.contains("[tool] exec_command:"));
    let gemini_ui = std::fs::read_to_string(dir.join("entire__ab2b9748b105-0.min.txt")).unwrap();
    assert!(gemini_ui.starts_with("[user]\n\nrun an agent that creates a color file"));
    assert!(gemini_ui.contains("* write_file (#b105-0.txt:"));
}

#[test]
fn json_output_has_views_and_pointers() {
    let dir = scratch("json");
    let input = trace("claude-code", "spotter__short.jsonl");
    let out = memex(&dir, &[input.to_str().unwrap(), "-o", ".", "--grep", "error", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let chain = &doc["inputs"][0]["chains"][0]["manifest"];
    assert_eq!(chain["full"]["lines"], 52);
    let pointer = &chain["ui_pointers"][0];
    assert_eq!(pointer["pointer"], "tool_call");
    assert_eq!(pointer["call"], serde_json::json!({"start": 18, "end": 21}));
    assert_eq!(pointer["result"], serde_json::json!({"start": 29, "end": 31}));
    assert_eq!(chain["adaptive"]["hits"][0]["lines"], serde_json::json!([16]));
    let again = memex(&dir, &[input.to_str().unwrap(), "-o", ".", "--grep", "error", "--format", "json"]);
    assert_eq!(out.stdout, again.stdout, "deterministic");
}

#[test]
fn bad_regex_is_a_usage_error() {
    let dir = scratch("regex");
    let out = memex(&dir, &["x.jsonl", "--grep", "(unclosed"]);
    assert_eq!(out.status.code(), Some(2));
}
