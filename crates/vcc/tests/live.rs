//! The live mapping over every fixture trace: line by line (JSON lines) or message by message
//! (Gemini CLI documents), it yields exactly what `trace_events` yields for the whole file.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use memex_vcc::{EventRecord, InputFormat, LineEvents, document_events, trace_events};

fn fixtures(kind: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces").join(kind);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no {kind} fixtures");
    out
}

#[test]
fn json_lines_fixtures_line_by_line() {
    for kind in ["claude-code", "codex"] {
        for (name, bytes) in fixtures(kind) {
            let mut live = LineEvents::new(InputFormat::Auto);
            let mut got: Vec<EventRecord> = Vec::new();
            for line in bytes.split_inclusive(|b| *b == b'\n') {
                // An unterminated last line is complete once the file is: a newline ends it.
                let line = if line.ends_with(b"\n") { line.to_vec() } else { [line, b"\n"].concat() };
                got.extend(live.push_line(&line));
            }
            let (want, diags) = trace_events(&bytes, InputFormat::Auto, false).unwrap();
            assert!(!want.is_empty() || name.starts_with("sniffly__ff71"), "{name}: no events at all");
            assert_eq!(got.len(), want.len(), "{name}");
            assert!(got == want, "{name}: the live events differ from the import's");
            assert_eq!(live.take_diagnostics(), diags, "{name}");
        }
    }
}

#[test]
fn gemini_fixtures_message_by_message() {
    for (name, bytes) in fixtures("gemini-cli-json") {
        let messages = document_events(&bytes, InputFormat::Auto).unwrap();
        let got: Vec<EventRecord> = messages.iter().flat_map(|m| m.events.clone()).collect();
        let (want, _) = trace_events(&bytes, InputFormat::Auto, false).unwrap();
        assert!(!want.is_empty(), "{name}");
        assert_eq!(got, want, "{name}");
    }
}
