//! The interpreter that asks an OpenAI-compatible chat model (`POST {base_url}/chat/completions`,
//! as vLLM, llama.cpp's server, Ollama, LocalAI and OpenAI speak it), as the VC paper does:
//! per-turn tags and fact signals in one call, shown the lookback unless the bleed gate closes
//! it and the tags in use (§3.2); segment compression to ~15% with the paper's constraints
//! (§3.3); consolidation of the signals with the whole segment in view, and verification of
//! supersession candidates (§3.4). The date guard and relative-date resolution are applied to
//! its answers here, as to the heuristic's.
//!
//! No LLM runs on memex's build machines: `tests` drive this client against a scripted HTTP
//! server speaking the same wire format. Plain HTTP/1.1 over hyper (as the embeddings client);
//! `https://` is refused with the reason.
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, NaiveDate, Utc};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use memex_memory::dates::resolve_relative_date;
use memex_memory::summary::{SummaryConfig, target_tokens};
use memex_memory::tags::normalize_tag;
use memex_memory::{
    Fact, FactType, InterpretError, Interpreter, Lookback, SeqSpan, Summary, SummaryLine, TemporalStatus, Turn,
    TurnReading, Verdict,
};
use memex_tokens::TokenCounter;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::RecallError;
use crate::config::OpenAiConfig;
use crate::vectors::TextVectors;

/// Characters of a turn's text sent to the tagger, at most (long tool-heavy turns are cut).
const MAX_TURN_CHARS: usize = 12_000;
/// Characters of a segment sent for compression, at most.
const MAX_SEGMENT_CHARS: usize = 48_000;

pub struct OpenAiInterpreter {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: http::Uri,
    cfg: OpenAiConfig,
    summary: SummaryConfig,
    counter: Arc<dyn TokenCounter>,
    vectors: Option<Arc<dyn TextVectors>>,
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
    temperature: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct ChatMessage<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: AnswerMessage,
}

#[derive(Deserialize)]
struct AnswerMessage {
    content: Option<String>,
}

/// A fact as the model writes it.
#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct ModelFact {
    #[serde(rename = "type")]
    fact_type: String,
    subject: String,
    verb: String,
    object: String,
    what: String,
    who: String,
    when: String,
    #[serde(rename = "where")]
    place: String,
    why: String,
    status: String,
}

#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct TagAnswer {
    tags: Vec<String>,
    facts: Vec<ModelFact>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct FactsAnswer {
    facts: Vec<ModelFact>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(default)]
struct VerdictAnswer {
    verdict: String,
}

const TAGGER: &str = "You tag one turn of an agent's work session for a memory system. Answer with one JSON object: \
{\"tags\": [5 to 10 short lowercase kebab-case topic tags, most specific first; reuse a tag from the list of tags in use when it fits], \
\"facts\": [facts the turn states: {\"type\": one of file|command|test|package|error|decision|constraint|preference|correction|personal|experience|world, \
\"subject\", \"verb\", \"object\", \"what\": a full sentence, \"who\", \"when\": an ISO date if the text names one, \"where\", \"why\", \
\"status\": one of active|completed|planned|abandoned|recurring}]}. Use the context turns only to understand short replies \
(\"yes\", \"the second one\"); tag and extract facts for the current turn only.";

const COMPRESSOR: &str = "You compress a segment of an agent's work session for a memory system, to about the number of tokens given. \
Rules: keep exact numbers (never round), identifiers, file paths and error strings verbatim; keep present-tense declarations \
present; keep planning language as planning, not as done; keep the user's role phrases (\"the user asked\", \"the user prefers\") \
intact. Write plain sentences, one per line, no preamble.";

const CONSOLIDATOR: &str = "You consolidate facts for a memory system. You see a whole segment of an agent's session and per-turn \
fact signals extracted from it with narrow context. Verify each signal against the segment, merge duplicates, resolve relative \
dates, drop what does not hold. Answer with one JSON object: {\"facts\": [{\"type\", \"subject\", \"verb\", \"object\", \"what\", \
\"who\", \"when\", \"where\", \"why\", \"status\"}]} using the same types and statuses as the signals.";

const VERIFIER: &str = "Two facts from a memory system, an older and a newer. Does the newer one supersede (contradict, update or \
duplicate) the older? Answer with one JSON object: {\"verdict\": \"supersedes\"} or {\"verdict\": \"distinct\"}.";

impl OpenAiInterpreter {
    pub fn new(
        cfg: OpenAiConfig,
        summary: SummaryConfig,
        counter: Arc<dyn TokenCounter>,
    ) -> Result<OpenAiInterpreter, RecallError> {
        let base = cfg.base_url.trim_end_matches('/');
        if base.starts_with("https://") {
            return Err(RecallError::invalid(
                "memory.openai.base_url",
                format!(
                    "{base}: https is not supported by the built-in client (no TLS stack in memex); use http:// on a trusted network or a TLS-terminating sidecar"
                ),
            ));
        }
        let uri: http::Uri = format!("{base}/chat/completions")
            .parse()
            .map_err(|e| RecallError::invalid("memory.openai.base_url", format!("{base:?}: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(RecallError::invalid(
                "memory.openai.base_url",
                format!("{base:?}: expected http://host[:port]/v1"),
            ));
        }
        if cfg.model.is_empty() {
            return Err(RecallError::invalid("memory.openai.model", "required"));
        }
        let client = Client::builder(TokioExecutor::new()).build_http();
        Ok(OpenAiInterpreter { client, uri, cfg, summary, counter, vectors: None })
    }

    /// Vectors for the bleed gate (without them the lookback is always shown).
    pub fn with_vectors(mut self, v: Arc<dyn TextVectors>) -> OpenAiInterpreter {
        self.vectors = Some(v);
        self
    }

    async fn chat(&self, system: &str, user: &str, json: bool) -> Result<String, InterpretError> {
        let body = ChatRequest {
            model: &self.cfg.model,
            messages: vec![
                ChatMessage { role: "system", content: system },
                ChatMessage { role: "user", content: user },
            ],
            temperature: 0.0,
            response_format: json.then(|| json!({"type": "json_object"})),
        };
        let body = serde_json::to_vec(&body).map_err(|e| InterpretError::BadAnswer(e.to_string()))?;
        let mut req = http::Request::post(self.uri.clone()).header(http::header::CONTENT_TYPE, "application/json");
        if !self.cfg.api_key.is_empty() {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {}", self.cfg.api_key));
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| InterpretError::Unavailable(e.to_string()))?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| InterpretError::Unavailable(format!("{}: {e}", self.uri)))?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| InterpretError::Unavailable(format!("{}: {e}", self.uri)))?
                .to_bytes();
            Ok::<_, InterpretError>((status, bytes))
        };
        let timeout = Duration::from_secs(self.cfg.timeout_secs.max(1));
        let (status, bytes) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| InterpretError::Unavailable(format!("{}: no answer within {timeout:?}", self.uri)))??;
        if !status.is_success() {
            let text: String = String::from_utf8_lossy(&bytes).chars().take(300).collect();
            return Err(InterpretError::Unavailable(format!("{} answered {status}: {text}", self.uri)));
        }
        let parsed: ChatResponse = serde_json::from_slice(&bytes)
            .map_err(|e| InterpretError::BadAnswer(format!("not a chat completion: {e}")))?;
        parsed
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .ok_or_else(|| InterpretError::BadAnswer("no choices[0].message.content".into()))
    }

    /// Runs a request to completion from a blocking thread (the worker calls the interpreter off
    /// its async threads).
    fn block<T>(&self, fut: impl std::future::Future<Output = Result<T, InterpretError>>) -> Result<T, InterpretError> {
        match tokio::runtime::Handle::try_current() {
            Ok(h) => h.block_on(fut),
            Err(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| InterpretError::Unavailable(e.to_string()))?
                .block_on(fut),
        }
    }

    fn json<T: for<'de> Deserialize<'de>>(answer: &str) -> Result<T, InterpretError> {
        // Some servers wrap JSON in a code fence despite response_format.
        let t = answer.trim().trim_start_matches("```json").trim_start_matches("```").trim_end_matches("```").trim();
        serde_json::from_str(t)
            .map_err(|e| InterpretError::BadAnswer(format!("not the JSON asked for: {e}: {}", clip(t, 200))))
    }

    /// Whether the lookback is shown: the bleed gate (§3.2) closes it for a turn whose text is
    /// unrelated to it.
    fn lookback_open(&self, turn: &str, lookback: &str) -> bool {
        let Some(v) = &self.vectors else { return true };
        if lookback.is_empty() {
            return false;
        }
        match v.vectors(&[turn, lookback]).as_slice() {
            [Some(a), Some(b)] => memex_rank::cosine(a, b) >= self.cfg.bleed_gate,
            _ => true,
        }
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_owned() } else { s.chars().take(n).collect::<String>() + "…" }
}

/// A model's fact as memex's: type and status checked, the date resolved (an ISO date it gave, or
/// a relative one in its sentence anchored at the turn), provenance from the turn.
fn to_fact(m: ModelFact, span: SeqSpan, anchor: DateTime<Utc>, who: &str) -> Option<Fact> {
    let fact_type = FactType::parse(m.fact_type.trim())?;
    let status = TemporalStatus::parse(m.status.trim()).unwrap_or(TemporalStatus::Active);
    if m.what.trim().is_empty() && m.subject.trim().is_empty() {
        return None;
    }
    let when = NaiveDate::parse_from_str(m.when.trim(), "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc())
        .or_else(|| resolve_relative_date(&m.when, anchor))
        .or_else(|| resolve_relative_date(&m.what, anchor))
        .unwrap_or(anchor);
    Some(Fact {
        fact_type,
        subject: if m.subject.trim().is_empty() { who.to_owned() } else { m.subject.trim().to_owned() },
        verb: m.verb.trim().to_lowercase(),
        object: m.object.trim().to_owned(),
        what: if m.what.trim().is_empty() {
            format!("{} {} {}", m.subject, m.verb, m.object)
        } else {
            m.what.trim().to_owned()
        },
        who: if m.who.trim().is_empty() { who.to_owned() } else { m.who.trim().to_owned() },
        when,
        place: m.place.trim().to_owned(),
        why: m.why.trim().to_owned(),
        status,
        span,
    })
}

impl Interpreter for OpenAiInterpreter {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn read_turns(
        &self,
        turns: &[Turn],
        lookback: &[Lookback],
        vocabulary: &[String],
    ) -> Result<Vec<TurnReading>, InterpretError> {
        let mut context: Vec<String> = lookback
            .iter()
            .rev()
            .take(self.cfg.lookback)
            .rev()
            .filter_map(|l| l.turn.as_ref().map(|t| clip(&t.text(), 2_000)))
            .collect();
        let mut tags_in_use: Vec<String> = vocabulary.iter().take(self.cfg.vocabulary).cloned().collect();
        for l in lookback {
            for t in &l.tags {
                if !tags_in_use.contains(t) && tags_in_use.len() < self.cfg.vocabulary {
                    tags_in_use.push(t.clone());
                }
            }
        }
        let mut out = Vec::with_capacity(turns.len());
        for t in turns {
            let text = clip(&t.text(), MAX_TURN_CHARS);
            let joined = context.join("\n---\n");
            let show = self.lookback_open(&text, &joined);
            let user = format!(
                "Tags in use: {}\n\n{}Current turn:\n{}",
                if tags_in_use.is_empty() { "(none)".into() } else { tags_in_use.join(", ") },
                if show && !joined.is_empty() {
                    format!("Context turns (oldest first):\n{joined}\n\n")
                } else {
                    String::new()
                },
                text
            );
            let answer: TagAnswer = Self::json(&self.block(self.chat(TAGGER, &user, true))?)?;
            let mut tags: Vec<String> = Vec::new();
            for raw in answer.tags {
                if let Some(n) = normalize_tag(&raw)
                    && !tags.contains(&n)
                {
                    tags.push(n);
                }
            }
            let who = if t.from_user { "user" } else { "agent" };
            let signals = answer.facts.into_iter().filter_map(|f| to_fact(f, t.span, t.start, who)).collect();
            for tag in &tags {
                if !tags_in_use.contains(tag) && tags_in_use.len() < self.cfg.vocabulary {
                    tags_in_use.push(tag.clone());
                }
            }
            context.push(clip(&text, 2_000));
            if context.len() > self.cfg.lookback {
                context.remove(0);
            }
            out.push(TurnReading { tags, signals });
        }
        Ok(out)
    }

    fn summarize(&self, turns: &[Turn], segment_tokens: usize) -> Result<Summary, InterpretError> {
        let Some(first) = turns.first() else { return Ok(Summary::default()) };
        let target = target_tokens(segment_tokens, &self.summary).max(1);
        let text: String = clip(&turns.iter().map(Turn::text).collect::<Vec<_>>().join("\n\n"), MAX_SEGMENT_CHARS);
        let answer =
            self.block(self.chat(COMPRESSOR, &format!("Target: about {target} tokens.\n\nSegment:\n{text}"), false))?;
        let mut lines: Vec<SummaryLine> = answer
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| SummaryLine { seq: first.span.first, text: l.to_owned() })
            .collect();
        let mut s = Summary { lines: Vec::new(), tokens: 0 };
        // Held to the aim like the heuristic's: whole lines, never over.
        lines.reverse();
        while let Some(l) = lines.pop() {
            s.lines.push(l);
            let n = self.counter.count(&s.render());
            if n > target {
                s.lines.pop();
                break;
            }
            s.tokens = n;
        }
        Ok(s)
    }

    fn consolidate(&self, turns: &[Turn], signals: Vec<Fact>) -> Result<Vec<Fact>, InterpretError> {
        let (Some(first), Some(last)) = (turns.first(), turns.last()) else { return Ok(Vec::new()) };
        let span = SeqSpan::new(first.span.first, last.span.last);
        let text = clip(&turns.iter().map(Turn::text).collect::<Vec<_>>().join("\n\n"), MAX_SEGMENT_CHARS);
        let hints: Vec<String> =
            signals.iter().map(|f| format!("[{}] {} ({})", f.fact_type.name(), f.what, f.status.name())).collect();
        let user = format!(
            "Segment:\n{text}\n\nPer-turn fact signals (verify and consolidate with full context):\n{}",
            hints.join("\n")
        );
        let answer: FactsAnswer = Self::json(&self.block(self.chat(CONSOLIDATOR, &user, true))?)?;
        Ok(answer.facts.into_iter().filter_map(|f| to_fact(f, span, first.start, "user")).collect())
    }

    fn verify(&self, older: &Fact, newer: &Fact) -> Result<Verdict, InterpretError> {
        let user = format!(
            "Older ({}): [{}] {}\nNewer ({}): [{}] {}",
            older.when.format("%Y-%m-%d"),
            older.fact_type.name(),
            older.what,
            newer.when.format("%Y-%m-%d"),
            newer.fact_type.name(),
            newer.what
        );
        let answer: VerdictAnswer = Self::json(&self.block(self.chat(VERIFIER, &user, true))?)?;
        match answer.verdict.trim() {
            "supersedes" => Ok(Verdict::Supersedes),
            "distinct" => Ok(Verdict::Distinct),
            other => Err(InterpretError::BadAnswer(format!("verdict {other:?}; expected supersedes or distinct"))),
        }
    }
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
