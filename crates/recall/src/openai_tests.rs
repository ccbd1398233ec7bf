//! The OpenAI-compatible interpreter against a scripted HTTP/1.1 server (hyper) that speaks the
//! chat-completions wire format: it checks each request as a real server would read it and
//! answers what a model would (a protocol peer; no LLM runs on these machines).
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::TimeZone;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use memex_memory::{PartRole, TurnPart};

use super::*;

struct Counter;
impl TokenCounter for Counter {
    fn count(&self, text: &str) -> usize {
        memex_tokens::Tokenizer::O200kBase.count(text)
    }
}

type Seen = Arc<Mutex<Vec<serde_json::Value>>>;

/// Serves `/v1/chat/completions` on 127.0.0.1:0. `mode`: "ok", "500", "garbage".
async fn serve(mode: &'static str) -> (std::net::SocketAddr, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let log = log.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        assert_eq!(req.uri().path(), "/v1/chat/completions");
                        assert_eq!(req.method(), hyper::Method::POST);
                        assert_eq!(req.headers().get("authorization").unwrap(), "Bearer sk-test");
                        assert_eq!(req.headers().get("content-type").unwrap(), "application/json");
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        log.lock().unwrap().push(v.clone());
                        assert_eq!(v["model"], "test-model");
                        assert_eq!(v["messages"][0]["role"], "system");
                        assert_eq!(v["messages"][1]["role"], "user");
                        let system = v["messages"][0]["content"].as_str().unwrap();
                        let content = if system.starts_with("You tag") {
                            json!({"tags": ["Build Pipeline", "CI_cache", "build-pipeline"],
                                   "facts": [{"type": "decision", "subject": "team", "verb": "decided",
                                              "object": "cache the cargo registry", "what": "The team decided yesterday to cache the cargo registry.",
                                              "when": "yesterday", "status": "active"},
                                             {"type": "nonsense", "what": "dropped"}]})
                            .to_string()
                        } else if system.starts_with("You compress") {
                            "The user asked to speed up CI.\nThe build took 412 seconds.\nThe registry cache cut it to 97 seconds.\n".repeat(40)
                        } else if system.starts_with("You consolidate") {
                            assert!(
                                v["messages"][1]["content"]
                                    .as_str()
                                    .unwrap()
                                    .contains("Per-turn fact signals (verify and consolidate with full context)")
                            );
                            json!({"facts": [{"type": "decision", "subject": "team", "verb": "decided", "object": "registry cache",
                                              "what": "Cache the cargo registry in CI.", "when": "2026-03-04", "status": "completed"}]})
                            .to_string()
                        } else {
                            json!({"verdict": "supersedes"}).to_string()
                        };
                        let (status, body) = match mode {
                            "500" => (500, json!({"error": {"message": "overloaded"}}).to_string()),
                            "garbage" => (200, json!({"choices": [{"message": {"role": "assistant", "content": "sure! here you go"}}]}).to_string()),
                            _ => (200, json!({"id": "x", "object": "chat.completion", "model": "test-model",
                                              "choices": [{"index": 0, "finish_reason": "stop",
                                                           "message": {"role": "assistant", "content": content}}]}).to_string()),
                        };
                        let resp = hyper::Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(body)))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    (addr, seen)
}

fn interp(addr: std::net::SocketAddr) -> Arc<OpenAiInterpreter> {
    let cfg = OpenAiConfig {
        base_url: format!("http://{addr}/v1"),
        model: "test-model".into(),
        api_key: "sk-test".into(),
        timeout_secs: 10,
        ..OpenAiConfig::default()
    };
    Arc::new(OpenAiInterpreter::new(cfg, SummaryConfig::default(), Arc::new(Counter)).unwrap())
}

fn turn(seq: u64, text: &str) -> Turn {
    let at = Utc.with_ymd_and_hms(2026, 3, 10, 12, 0, 0).unwrap();
    Turn {
        span: SeqSpan::new(seq, seq + 1),
        start: at,
        end: at,
        parts: vec![TurnPart { seq, role: PartRole::User, text: text.into() }],
        from_user: true,
        calls: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_are_tagged_and_signal_facts_with_dates_resolved() {
    let (addr, seen) = serve("ok").await;
    let i = interp(addr);
    let lookback = vec![Lookback { turn: Some(turn(1, "CI is slow")), tags: vec!["ci".into()] }];
    let turns = vec![turn(3, "we cached the registry yesterday")];
    let r =
        tokio::task::spawn_blocking(move || i.read_turns(&turns, &lookback, &["rust".into()])).await.unwrap().unwrap();
    // Tags normalised and deduplicated; the unknown fact type dropped; "yesterday" resolved
    // against the turn (2026-03-10).
    assert_eq!(r[0].tags, vec!["build-pipeline", "ci-cache"]);
    assert_eq!(r[0].signals.len(), 1);
    let f = &r[0].signals[0];
    assert_eq!((f.fact_type, f.verb.as_str()), (FactType::Decision, "decided"));
    assert_eq!(f.when.format("%Y-%m-%d").to_string(), "2026-03-09");
    assert_eq!(f.span, SeqSpan::new(3, 4));
    let req = &seen.lock().unwrap()[0];
    assert_eq!(req["response_format"]["type"], "json_object");
    assert_eq!(req["temperature"], 0.0);
    let user = req["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains("Tags in use: rust, ci"), "{user}");
    assert!(user.contains("Context turns (oldest first):\nCI is slow"), "{user}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_compress_within_the_aim_and_signals_consolidate() {
    let (addr, seen) = serve("ok").await;
    let i = interp(addr);
    let turns = vec![turn(5, &"the build is slow because the registry is fetched every time. ".repeat(200))];
    let tokens = Counter.count(&turns[0].text());
    let (i2, t2) = (i.clone(), turns.clone());
    let s = tokio::task::spawn_blocking(move || i2.summarize(&t2, tokens)).await.unwrap().unwrap();
    let aim = target_tokens(tokens, &SummaryConfig::default());
    assert!(s.tokens <= aim && s.tokens > 0, "{} of {aim}", s.tokens);
    assert_eq!(s.tokens, Counter.count(&s.render()));
    assert_eq!(s.lines[1].text, "The build took 412 seconds.");
    assert!(
        seen.lock().unwrap()[0]["messages"][1]["content"].as_str().unwrap().contains(&format!("about {aim} tokens"))
    );
    let signal = to_fact(
        ModelFact {
            fact_type: "decision".into(),
            what: "cache it".into(),
            status: "planned".into(),
            ..Default::default()
        },
        SeqSpan::one(5),
        turns[0].start,
        "user",
    )
    .unwrap();
    let (i3, t3) = (i.clone(), turns.clone());
    let facts = tokio::task::spawn_blocking(move || i3.consolidate(&t3, vec![signal])).await.unwrap().unwrap();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].status, TemporalStatus::Completed);
    assert_eq!(facts[0].when.format("%Y-%m-%d").to_string(), "2026-03-04");
    let (a, b) = (facts[0].clone(), facts[0].clone());
    let v = tokio::task::spawn_blocking(move || i.verify(&a, &b)).await.unwrap().unwrap();
    assert_eq!(v, Verdict::Supersedes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_errors_the_worker_retries() {
    let (addr, _) = serve("500").await;
    let i = interp(addr);
    let e = tokio::task::spawn_blocking(move || i.read_turns(&[turn(1, "x")], &[], &[])).await.unwrap().unwrap_err();
    assert!(matches!(e, InterpretError::Unavailable(ref m) if m.contains("500")), "{e}");
    let (addr, _) = serve("garbage").await;
    let i = interp(addr);
    let e = tokio::task::spawn_blocking(move || i.read_turns(&[turn(1, "x")], &[], &[])).await.unwrap().unwrap_err();
    assert!(matches!(e, InterpretError::BadAnswer(_)), "{e}");
    // Nothing listens: unavailable, not a panic.
    let i = interp("127.0.0.1:9".parse().unwrap());
    let e = tokio::task::spawn_blocking(move || i.summarize(&[turn(1, "x")], 10)).await.unwrap().unwrap_err();
    assert!(matches!(e, InterpretError::Unavailable(_)), "{e}");
    let bad =
        OpenAiConfig { base_url: "https://api.example.com/v1".into(), model: "m".into(), ..OpenAiConfig::default() };
    let e = OpenAiInterpreter::new(bad, SummaryConfig::default(), Arc::new(Counter)).err().unwrap();
    assert!(
        e.to_string().starts_with("memory.openai.base_url: https://api.example.com/v1: https is not supported"),
        "{e}"
    );
}
