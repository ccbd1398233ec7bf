//! Conformance: every golden produced by the reference VCC.py must be reproduced byte for byte
//! by the library (views, media, and the stdout the CLI composes from them).
#![allow(clippy::unwrap_used)]

use memex_vcc::{CompileOptions, Lines, PyRegex, TransposedEntry, UiOptions, ViewOptions, compile, transposed_view};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn golden_traces() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join("golden"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 20, "expected the 20 golden traces");
    names
}

/// Panics with the first differing line (numbered) of two texts.
fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let g = String::from_utf8_lossy(got);
    let w = String::from_utf8_lossy(want);
    let (gl, wl): (Vec<&str>, Vec<&str>) = (g.split('\n').collect(), w.split('\n').collect());
    for i in 0..gl.len().max(wl.len()) {
        let (a, b) = (gl.get(i), wl.get(i));
        if a != b {
            panic!(
                "{what}: first difference at line {}\n  got:  {:?}\n  want: {:?}\n(got {} lines / {} bytes, want {} lines / {} bytes)",
                i + 1,
                a,
                b,
                gl.len(),
                got.len(),
                wl.len(),
                want.len()
            );
        }
    }
    panic!("{what}: bytes differ but lines are equal (encoding?)");
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn check_trace(name: &str, mode: &str, pattern: Option<&str>) {
    let input = read(&fixtures().join("traces/claude-code").join(format!("{name}.jsonl")));
    let dir = fixtures().join("golden").join(name).join(mode);
    let regex = pattern.map(|p| Lines(PyRegex::new(p).unwrap()));
    let views =
        ViewOptions { ui: UiOptions::default(), predicate: regex.as_ref().map(|r| r as &dyn memex_vcc::Predicate) };
    let out = compile(&input, name, CompileOptions::default(), &views).unwrap();
    assert!(out.trace.diagnostics().is_empty(), "{name}: {:?}", out.trace.diagnostics());
    let mut expected_files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "stdout.txt" && n != "exit_code.txt")
        .collect();
    expected_files.sort();
    let mut produced = Vec::new();
    let mut stdout = String::new();
    for (chain, v) in out.trace.chains().iter().zip(&out.views) {
        let files = chain.files();
        if pattern.is_none() {
            assert_same(&format!("{name}/{}", files.full), v.full.as_bytes(), &read(&dir.join(&files.full)));
            assert_same(&format!("{name}/{}", files.ui), v.ui.text.as_bytes(), &read(&dir.join(&files.ui)));
            produced.push(files.full.clone());
            produced.push(files.ui.clone());
            for m in chain.media() {
                assert_same(&format!("{name}/{}", m.name), &m.bytes, &read(&dir.join(&m.name)));
                produced.push(m.name.clone());
            }
        } else {
            let a = v.adaptive.as_ref().unwrap();
            assert_same(
                &format!("{name}/{mode}/{}", files.adaptive),
                a.text.as_bytes(),
                &read(&dir.join(&files.adaptive)),
            );
            produced.push(files.adaptive.clone());
        }
    }
    if pattern.is_none() {
        for (chain, v) in out.trace.chains().iter().zip(&out.views) {
            stdout += &format!("  ./{}  ({} lines, {} words)\n", chain.files().full, v.full_lines, v.full_words);
        }
        for (chain, v) in out.trace.chains().iter().zip(&out.views) {
            stdout += &format!("  ./{}  ({} lines, {} words)\n", chain.files().ui, v.ui.lines, v.ui_words);
        }
    } else {
        let entries: Vec<TransposedEntry<'_>> = out
            .trace
            .chains()
            .iter()
            .zip(&out.views)
            .map(|(c, v)| TransposedEntry {
                reference: c.files().full.clone(),
                chain: c,
                hits: &v.adaptive.as_ref().unwrap().hits,
            })
            .collect();
        stdout = transposed_view(&entries);
    }
    produced.sort();
    assert_eq!(produced, expected_files, "{name}/{mode}: set of output files");
    assert_same(&format!("{name}/{mode}/stdout.txt"), stdout.as_bytes(), &read(&dir.join("stdout.txt")));
}

#[test]
fn compile_mode_matches_reference() {
    for name in golden_traces() {
        check_trace(&name, "compile", None);
    }
}

#[test]
fn grep_error_matches_reference() {
    for name in golden_traces() {
        check_trace(&name, "grep-error", Some("error"));
    }
}

#[test]
fn grep_case_insensitive_matches_reference() {
    for name in golden_traces() {
        check_trace(&name, "grep-ci-test", Some("(?i)test"));
    }
}

/// Streaming in odd-sized chunks, and the two-stage Lexer → Compiler path, give the same bytes.
#[test]
fn chunked_and_two_stage_compiles_are_identical() {
    use memex_vcc::{Compiler, InputFormat, Lexer, compile_trace};
    for name in ["spotter__short", "ccl__debug_image_message", "entire__d0161e0df1cb-0"] {
        let input = read(&fixtures().join("traces/claude-code").join(format!("{name}.jsonl")));
        let whole = compile_trace(&input, name, CompileOptions::default()).unwrap();
        let mut streamed = Compiler::new(name, CompileOptions::default());
        for chunk in input.chunks(7919) {
            streamed.push(chunk);
        }
        let streamed = streamed.finish().unwrap();
        let mut lexer = Lexer::new(InputFormat::Auto);
        let mut two = Compiler::new(name, CompileOptions::default());
        for chunk in input.chunks(65_537) {
            two.push_records(lexer.push(chunk));
        }
        two.push_records(lexer.finish());
        let two = two.finish().unwrap();
        let mut early = Compiler::new(name, CompileOptions::default());
        let mut taken = Vec::new();
        for chunk in input.chunks(100_003) {
            early.push(chunk);
            taken.extend(early.take_ready_chains().into_iter().map(|(i, c)| (i, c.finish())));
        }
        let rest = early.finish().unwrap();
        assert_eq!(rest.first_index(), taken.len());
        let all: Vec<&memex_vcc::Chain> = taken.iter().map(|(_, c)| c).chain(rest.chains()).collect();
        assert_eq!(all.len(), whole.chains().len());
        for (a, b) in whole.chains().iter().zip(all) {
            assert_eq!(a.files(), b.files());
            assert_same(name, a.full_view().as_bytes(), b.full_view().as_bytes());
        }
        for other in [&streamed, &two] {
            assert_eq!(other.chains().len(), whole.chains().len());
            for (a, b) in whole.chains().iter().zip(other.chains()) {
                assert_same(name, a.full_view().as_bytes(), b.full_view().as_bytes());
                assert_eq!(a.media(), b.media());
            }
        }
    }
}
