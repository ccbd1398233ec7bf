//! Gemini CLI session JSON (`~/.gemini/tmp/<hash>/chats/session-*.json`): one document
//! `{sessionId, projectHash, startTime, lastUpdated, messages: [...]}`.
//!
//! `user` messages become user records; a `gemini` message becomes an assistant record (its
//! `thoughts` as thinking blocks, `content` as text, `toolCalls` as tool calls) followed by a
//! user record with one tool result per call that has a result; `info`, `error` and `warning`
//! messages become system sections.

use super::{RecConsumer, text_block, thinking_block, tool_result_block, tool_use_block};
use crate::diag::{Diags, Severity, column};
use crate::json::{Schema, Value, parse_document};
use crate::pyfmt::to_py_str;
use crate::record::{Rec, RecBody, RecMeta};

/// Lexes a buffered document whose first line is input line `start_line`.
pub(crate) fn lex_document(buf: &[u8], start_line: u32, c: &mut dyn RecConsumer, d: &mut Diags) {
    let text = String::from_utf8_lossy(buf);
    if let std::borrow::Cow::Owned(_) = text {
        d.at(start_line, 1, Severity::Warning, "invalid UTF-8; bytes replaced with U+FFFD");
    }
    let doc = match parse_document(&text, Schema::Full) {
        Ok((doc, _)) => doc,
        Err(e) => {
            let (line, col) = line_col(&text, e.offset, start_line);
            d.at(line, col, Severity::Error, format!("invalid JSON: {}; document skipped", e.message));
            return;
        }
    };
    let Some(messages) = doc.get("messages").and_then(Value::as_array) else {
        d.at(start_line, 1, Severity::Error, "not a Gemini CLI session: no `messages` list");
        return;
    };
    for (i, m) in messages.iter().enumerate() {
        d.line = start_line;
        for rec in message_recs(m, i, start_line) {
            c.rec(rec, d);
        }
    }
}

/// The records of message `index` of a session document that starts at input line
/// `start_line` (the live tailer maps a rewritten document one message at a time).
pub(crate) fn message_recs<'a>(m: &Value<'a>, index: usize, start_line: u32) -> Vec<Rec<'a>> {
    message(m, index)
        .into_iter()
        .map(|body| {
            let mut rec = Rec::new(start_line, body);
            rec.explicit_tool_names = true;
            rec.meta = RecMeta {
                timestamp: m.get("timestamp").and_then(Value::as_str).map(str::to_owned),
                ..RecMeta::default()
            };
            rec
        })
        .collect()
}

fn line_col(text: &str, offset: usize, start_line: u32) -> (u32, u32) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = memchr::memchr_iter(b'\n', before).count() as u32;
    let line_start = memchr::memrchr(b'\n', before).map_or(0, |i| i + 1);
    (start_line + line, column(&text[line_start..], offset - line_start))
}

fn message<'a>(m: &Value<'a>, index: usize) -> Vec<RecBody<'a>> {
    match m.type_str() {
        Some("user") => vec![RecBody::User(user_content(m.get("content")))],
        Some("gemini") => {
            let mut out = vec![RecBody::Assistant {
                id: Value::str(format!("gemini-{index}")),
                content: Value::Array(assistant_blocks(m)),
            }];
            let results = tool_results(m);
            if !results.is_empty() {
                out.push(RecBody::User(Value::Array(results)));
            }
            out
        }
        Some(kind @ ("info" | "error" | "warning")) => {
            let text = m.get("content").map(to_py_str).unwrap_or_default();
            vec![RecBody::System(Value::str(format!("{kind}: {text}")))]
        }
        _ => vec![RecBody::Ignored],
    }
}

fn user_content<'a>(content: Option<&Value<'a>>) -> Value<'a> {
    match content {
        Some(Value::Array(parts)) => Value::Array(
            parts.iter().filter_map(|p| p.get("text").cloned().map(|t| text_block(to_py_str(&t)))).collect(),
        ),
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

fn assistant_blocks<'a>(m: &Value<'a>) -> Vec<Value<'a>> {
    let mut blocks = Vec::new();
    for t in m.get("thoughts").and_then(Value::as_array).unwrap_or_default() {
        let subject = t.get("subject").map(to_py_str).unwrap_or_default();
        let description = t.get("description").map(to_py_str).unwrap_or_default();
        let text = match (subject.is_empty(), description.is_empty()) {
            (false, false) => format!("{subject}\n{description}"),
            (true, _) => description,
            (false, true) => subject,
        };
        blocks.push(thinking_block(text));
    }
    match m.get("content") {
        Some(Value::Str(s)) => blocks.push(text_block(s.clone())),
        Some(Value::Array(parts)) => {
            blocks.extend(parts.iter().filter_map(|p| p.get("text").map(|t| text_block(to_py_str(t)))));
        }
        _ => {}
    }
    for call in m.get("toolCalls").and_then(Value::as_array).unwrap_or_default() {
        let id = call.get("id").cloned().unwrap_or(Value::str(""));
        let name = call.get("name").cloned().unwrap_or(Value::str("unknown"));
        let args = call.get("args").cloned().unwrap_or(Value::Object(Default::default()));
        blocks.push(tool_use_block(id, name, args));
    }
    blocks
}

fn tool_results<'a>(m: &Value<'a>) -> Vec<Value<'a>> {
    let calls = m.get("toolCalls").and_then(Value::as_array).unwrap_or_default();
    calls
        .iter()
        .filter(|call| call.get("result").is_some() || call.get("status").is_some())
        .map(|call| {
            let id = call.get("id").cloned().unwrap_or(Value::str(""));
            let name = call.get("name").map(to_py_str).unwrap_or_else(|| "unknown".into());
            let is_error = call.get("status").and_then(Value::as_str) == Some("error");
            tool_result_block(id, name, is_error, Value::str(result_text(call)))
        })
        .collect()
}

/// The text of a call's `functionResponse.response` (`output`, else `error`, else JSON).
fn result_text(call: &Value<'_>) -> String {
    let responses = call.get("result").and_then(Value::as_array).unwrap_or_default();
    let texts: Vec<String> = responses
        .iter()
        .filter_map(|r| r.get("functionResponse").and_then(|f| f.get("response")))
        .map(|resp| match resp.get("output").or_else(|| resp.get("error")) {
            Some(Value::Str(s)) => s.to_string(),
            Some(other) => crate::events::to_json(other),
            None => crate::events::to_json(resp),
        })
        .collect();
    if texts.is_empty() { call.get("resultDisplay").map(to_py_str).unwrap_or_default() } else { texts.join("\n\n") }
}
