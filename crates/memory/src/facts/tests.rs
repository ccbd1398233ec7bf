use super::*;
use crate::testkit::ev;

fn run(events: &[MemEvent]) -> Vec<Fact> {
    let mut x = FactExtractor::default();
    events.iter().flat_map(|e| x.push(e)).collect()
}

fn brief(f: &[Fact]) -> Vec<(FactType, String, String)> {
    f.iter().map(|f| (f.fact_type, f.subject.clone(), f.verb.clone())).collect()
}

fn t(ft: FactType, s: &str, v: &str) -> (FactType, String, String) {
    (ft, s.to_owned(), v.to_owned())
}

/// A SWE-bench style trajectory: bare commands, `<returncode>` outputs.
#[test]
fn a_trajectory_gives_files_tests_errors_and_their_resolution() {
    let events = vec![
        ev(1, "user_message", "Fix separability for nested models. Do not modify the tests."),
        ev(2, "assistant_message", "THOUGHT: I will reproduce the issue first."),
        ev(3, "tool_call", "cat <<'EOF' > reproduce.py\nprint(1)\nEOF").tool("Bash", "c1"),
        ev(4, "tool_result", "<returncode>0</returncode>\n<output>\n</output>").call_id("c1"),
        ev(5, "tool_call", "python reproduce.py").tool("Bash", "c2"),
        ev(6, "tool_result", "<returncode>1</returncode>\n<output>\nTraceback (most recent call last):\n  File \"reproduce.py\", line 1\nValueError: matrix 4 is wrong\n</output>").call_id("c2"),
        ev(7, "tool_call", "sed -i 's/cright\\[-right.shape\\[0\\]:, -right.shape\\[1\\]:\\] = 1/= right/' astropy/modeling/separable.py").tool("Bash", "c3"),
        ev(8, "tool_result", "<returncode>0</returncode>\n<output>\n</output>").call_id("c3"),
        ev(9, "tool_call", "python reproduce.py").tool("Bash", "c4"),
        ev(10, "tool_result", "<returncode>0</returncode>\n<output>\nok\n</output>").call_id("c4"),
        ev(11, "tool_call", "python -m pytest astropy/modeling/tests/test_separable.py -q").tool("Bash", "c5"),
        ev(12, "tool_result", "<returncode>0</returncode>\n<output>\n15 passed in 0.40s\n</output>").call_id("c5"),
        ev(13, "tool_call", "ls -la").tool("Bash", "c6"),
        ev(14, "tool_result", "<returncode>0</returncode>\n<output>\nx\n</output>").call_id("c6"),
        ev(15, "tool_call", "rm reproduce.py").tool("Bash", "c7"),
        ev(16, "tool_result", "<returncode>0</returncode>").call_id("c7"),
    ];
    let facts = run(&events);
    assert_eq!(
        brief(&facts),
        vec![
            t(FactType::Constraint, "user", "requires"),
            t(FactType::File, "reproduce.py", "created"),
            t(FactType::Command, "python reproduce.py", "failed"),
            t(FactType::Error, "ValueError: matrix N is wrong", "seen"),
            t(FactType::File, "astropy/modeling/separable.py", "edited"),
            t(FactType::Command, "python reproduce.py", "succeeded"),
            t(FactType::Error, "ValueError: matrix N is wrong", "resolved"),
            t(FactType::Test, "pytest astropy/modeling/tests/test_separable.py", "passed"),
            t(FactType::File, "reproduce.py", "deleted"),
        ]
    );
    let err = &facts[3];
    assert_eq!(err.object, "ValueError: matrix 4 is wrong");
    assert_eq!(err.span, SeqSpan::new(5, 6));
    assert_eq!(err.why, "THOUGHT: I will reproduce the issue first.");
    assert_eq!(facts[0].object, "Do not modify the tests.");
}

/// Claude Code style: JSON inputs, tool_use errors, a Write over a file read before.
#[test]
fn tool_calls_with_json_inputs() {
    let events = vec![
        ev(1, "tool_call", r#"{"file_path":"/p/src/lib.rs"}"#).tool("Read", "a"),
        ev(2, "tool_result", "     1\tfn main() {}").call_id("a"),
        ev(3, "tool_call", r#"{"file_path":"/p/src/lib.rs","content":"x"}"#).tool("Write", "b"),
        ev(4, "tool_result", "File written").call_id("b"),
        ev(5, "tool_call", r#"{"file_path":"/p/src/new.rs","old_string":"a","new_string":"b"}"#).tool("Edit", "c"),
        ev(6, "tool_error", "<tool_use_error>File has not been read yet.</tool_use_error>").call_id("c"),
        ev(7, "tool_call", r#"{"file_path":"/p/src/new.rs","content":"y"}"#).tool("Write", "d"),
        ev(8, "tool_result", "File created successfully").call_id("d"),
        ev(9, "tool_call", r#"{"command":"cargo test","description":"run tests"}"#).tool("Bash", "e"),
        ev(10, "tool_result", "test parse::t ... FAILED\ntest result: FAILED. 3 passed; 1 failed; 0 ignored")
            .call_id("e"),
        ev(11, "tool_call", r#"{"command":"npm install left-pad@1.3.0"}"#).tool("Bash", "f"),
        ev(12, "tool_result", "added 1 package").call_id("f"),
        ev(13, "tool_call", r#"{"command":"cargo test"}"#).tool("Bash", "g"),
        ev(14, "tool_result", "test parse::t ... ok\ntest result: ok. 4 passed; 0 failed").call_id("g"),
    ];
    assert_eq!(
        brief(&run(&events)),
        vec![
            t(FactType::File, "/p/src/lib.rs", "read"),
            t(FactType::File, "/p/src/lib.rs", "edited"),
            t(FactType::File, "/p/src/new.rs", "created"),
            t(FactType::Test, "cargo test", "failed"),
            t(FactType::Test, "parse::t", "failed"),
            t(FactType::Package, "left-pad", "installed"),
            t(FactType::Test, "cargo test", "passed"),
            t(FactType::Test, "parse::t", "passed"),
        ]
    );
}

/// Stopping after any event and resuming from the saved state gives the facts of one pass.
#[test]
fn the_state_survives_a_stop_anywhere() {
    let events = vec![
        ev(1, "user_message", "Never push to main."),
        ev(2, "tool_call", "python a.py").tool("Bash", "c1"),
        ev(3, "tool_result", "<returncode>2</returncode>\nKeyError: 'x'").call_id("c1"),
        ev(4, "tool_call", "python a.py").tool("Bash", "c2"),
        ev(5, "tool_result", "<returncode>0</returncode>").call_id("c2"),
    ];
    let whole = run(&events);
    for cut in 0..=events.len() {
        let mut x = FactExtractor::default();
        let mut got: Vec<Fact> = events[..cut].iter().flat_map(|e| x.push(e)).collect();
        let saved = serde_json::to_string(&x).expect("state serializes");
        let mut y: FactExtractor = serde_json::from_str(&saved).expect("state deserializes");
        got.extend(events[cut..].iter().flat_map(|e| y.push(e)));
        assert_eq!(got, whole, "cut at {cut}");
    }
}

#[test]
fn codex_shell_arrays_and_patches() {
    assert_eq!(call_kind("shell", r#"{"command":["bash","-lc","pytest -q"]}"#), CallKind::Shell("pytest -q".into()));
    let patch = "*** Begin Patch\n*** Add File: a.py\n+x\n*** Update File: b.py\n*** Delete File: c.py\n*** End Patch";
    assert_eq!(
        call_kind("apply_patch", patch),
        CallKind::Patch { added: vec!["a.py".into()], updated: vec!["b.py".into()], deleted: vec!["c.py".into()] }
    );
    assert_eq!(error_signature("KeyError: 'abc' at 0x7f3a"), "KeyError: '…' at NxNfNa");
    assert_eq!(
        error_signature("ERROR a.py::T::t - NameError: name 'x' is not defined"),
        "NameError: name '…' is not defined"
    );
    assert_eq!(error_signature("E       KeyError: 'x'"), "KeyError: '…'");
    assert_eq!(error_signature("Error getting embedding"), "Error getting embedding");
}

/// A script the agent wrote and ran edits the files its code writes; an `rm` that failed on a
/// missing file removed the others.
#[test]
fn scripts_edit_what_they_write_and_rm_removes_what_was_there() {
    let script = "cat <<'EOF' > update_card.py\nfile_path = 'astropy/io/fits/card.py'\nwith open(file_path, 'r') as f:\n    lines = f.readlines()\nwith open(file_path, 'w') as f:\n    f.writelines(lines)\nEOF";
    let events = vec![
        ev(1, "tool_call", r#"{"file_path":"astropy/io/fits/card.py"}"#).tool("Read", "r"),
        ev(2, "tool_result", "x").call_id("r"),
        ev(3, "tool_call", script).tool("Bash", "a"),
        ev(4, "tool_result", "<returncode>0</returncode>").call_id("a"),
        ev(5, "tool_call", "python update_card.py").tool("Bash", "b"),
        ev(6, "tool_result", "<returncode>0</returncode>\nFile updated successfully.").call_id("b"),
        ev(7, "tool_call", "rm update_card.py gone.py").tool("Bash", "c"),
        ev(8, "tool_result", "<returncode>1</returncode>\nrm: cannot remove 'gone.py': No such file or directory")
            .call_id("c"),
    ];
    let facts = run(&events);
    let files: Vec<(String, String)> =
        facts.iter().filter(|f| f.fact_type == FactType::File).map(|f| (f.subject.clone(), f.verb.clone())).collect();
    assert_eq!(
        files,
        vec![
            ("astropy/io/fits/card.py".to_owned(), "read".to_owned()),
            ("update_card.py".to_owned(), "created".to_owned()),
            ("astropy/io/fits/card.py".to_owned(), "edited".to_owned()),
            ("update_card.py".to_owned(), "deleted".to_owned()),
        ]
    );
    assert_eq!(script_targets("Path('a/b.txt').write_text(x)\nfs.writeFileSync(\"c.js\", s)"), vec!["a/b.txt", "c.js"]);
}
