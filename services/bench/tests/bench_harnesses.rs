//! The benchmark harnesses run end to end: `memex-bench longmemeval` on a small file of the real
//! format (the real data is not reachable from here), checked against hand-computed metrics.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};

fn turn(role: &str, content: &str, has_answer: bool) -> Value {
    if has_answer {
        json!({"role": role, "content": content, "has_answer": true})
    } else {
        json!({"role": role, "content": content})
    }
}

/// Four questions: a single-session one, a multi-session one, an abstention (skipped) and one whose
/// evidence is only in an assistant turn (gold empty: counted in the n=470-style average only).
fn fixture() -> Value {
    let noise = |i: usize| {
        vec![
            turn("user", &format!("tell me a recipe for soup number {i}"), false),
            turn("assistant", "here is a soup", false),
        ]
    };
    let hay = |answers: Vec<(&str, Vec<Value>)>| {
        let mut ids = Vec::new();
        let mut sessions = Vec::new();
        let mut dates = Vec::new();
        for i in 0..4 {
            ids.push(json!(format!("sess_{i}")));
            sessions.push(json!(noise(i)));
            dates.push(json!(format!("2023/05/{:02} (Tue) 10:00", 10 + i)));
        }
        for (id, turns) in answers {
            ids.push(json!(id));
            sessions.push(json!(turns));
            dates.push(json!("2023/05/20 (Sat) 09:30"));
        }
        (ids, sessions, dates)
    };
    let (i1, s1, d1) = hay(vec![(
        "answer_a1",
        vec![turn("user", "I parked my bicycle next to the old library", true), turn("assistant", "noted", false)],
    )]);
    let (i2, s2, d2) = hay(vec![
        ("answer_b1", vec![turn("user", "my sister Alice adopted a kitten", true)]),
        ("answer_b2", vec![turn("assistant", "ok", false), turn("user", "Alice named the kitten Miso", true)]),
    ]);
    let (i4, s4, d4) = hay(vec![(
        "answer_c1",
        vec![
            turn("user", "what is the capital of Peru?", false),
            turn("assistant", "Lima is the capital of Peru", true),
        ],
    )]);
    let q = |id: &str, ty: &str, text: &str, ids: &Vec<Value>, s: &Vec<Value>, d: &Vec<Value>, ans: Vec<&str>| {
        json!({"question_id": id, "question_type": ty, "question": text, "answer": "x", "question_date": "2023/06/01 (Thu) 12:00",
               "haystack_session_ids": ids, "haystack_dates": d, "haystack_sessions": s, "answer_session_ids": ans})
    };
    json!([
        q("q1", "single-session-user", "where did I park my bicycle?", &i1, &s1, &d1, vec!["answer_a1"]),
        q("q2", "multi-session", "what did Alice name her kitten?", &i2, &s2, &d2, vec!["answer_b1", "answer_b2"]),
        q("q3_abs", "single-session-user", "where did I park my car?", &i1, &s1, &d1, vec![]),
        q("q4", "single-session-assistant", "what is the capital of Peru?", &i4, &s4, &d4, vec!["answer_c1"]),
    ])
}

#[tokio::test]
async fn longmemeval_harness_scores_a_small_file_like_the_official_code() {
    let Some(db) = memex_tests::test_db().await else { return };
    let dir = std::env::temp_dir().join(format!("memex-lme-{}", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lme.json");
    std::fs::write(&file, fixture().to_string()).unwrap();
    // The benchmark is its own process, as a user runs it.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memex-bench"))
        .args(["longmemeval", "--embedding", "none", "--database-url", &db.url, "--data"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stdout {stdout}\nstderr {}", String::from_utf8_lossy(&out.stderr));
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["abstention_skipped"], 1);
    assert_eq!(last["questions"], 3);
    assert_eq!(last["file"], Value::Null, "not a published file");
    let all = &last["all"]["session"];
    let strict = &last["strict"]["session"];
    assert_eq!(strict["n"], 2, "q4's gold is empty (evidence only in an assistant turn)");
    // q1: its session first. q2: both gold sessions at ranks 1-2. q4: empty gold → all = 1, any = 0.
    assert_eq!(all["recall_all@1"].as_f64().unwrap(), 2.0 / 3.0);
    assert_eq!(all["recall_all@5"].as_f64().unwrap(), 1.0);
    assert_eq!(all["recall_any@5"].as_f64().unwrap(), 2.0 / 3.0);
    assert_eq!(strict["recall_all@5"].as_f64().unwrap(), 1.0);
    assert_eq!(strict["ndcg_any@5"].as_f64().unwrap(), 1.0);
    let turn = &last["strict"]["turn"];
    assert_eq!(turn["n"], 2);
    assert_eq!(turn["recall_all@3"].as_f64().unwrap(), 1.0);
    let _ = std::fs::remove_dir_all(dir);
}
