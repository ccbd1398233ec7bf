//! Fuzz the append-batch validator (`memex_event::prepare_batch`, with `batch_fingerprint` and the
//! artifact excerpt it calls), on batches built from the fuzz bytes: kinds drawn from the built-in
//! set, extension kinds or raw text; tool-call ids from a small pool so calls and results pair (or
//! not); metadata JSON raw or built; contents small or repeated past the artifact threshold; limits
//! and artifact policies within what the server config accepts. Any panic is a bug; so is a
//! prepared batch that breaks the documented rules checked at the end.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use memex_event::{
    ArtifactId, ArtifactPolicy, BatchLimits, EventInput, EventKind, batch_fingerprint, prepare_batch, role_of_kind,
};
use memex_pointer::EventFlags;

const KINDS: [&str; 14] = [
    "user_message",
    "assistant_message",
    "thinking",
    "tool_call",
    "tool_result",
    "tool_error",
    "system",
    "decision",
    "constraint",
    "report",
    "note",
    "x-plan_node.v2",
    "x-",
    "Tool_Call",
];
const IDS: [&str; 4] = ["c1", "c2", "toolu_01", "call-\u{e9}"];
const MEDIA: [&str; 5] = ["text/plain", "application/json; charset=utf-8", "text", "a/b/c", "image/png;x=1"];

#[derive(Arbitrary, Debug)]
enum Kind {
    Known(u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum Ident {
    Empty,
    Pool(u8),
    Raw(String),
    Long(u16),
}

#[derive(Arbitrary, Debug)]
enum Content {
    Text(String),
    /// `unit` repeated `times` times: crosses the artifact threshold and the excerpt budget.
    Repeat { unit: String, times: u16 },
}

#[derive(Arbitrary, Debug)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    List(Vec<String>),
}

#[derive(Arbitrary, Debug)]
enum Meta {
    Empty,
    Raw(String),
    Object(Vec<(String, Json)>),
}

#[derive(Arbitrary, Debug)]
enum Media {
    Empty,
    Known(u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Ev {
    kind: Kind,
    content: Content,
    agent_id: Ident,
    task_id: Ident,
    tool_name: Ident,
    tool_call_id: Ident,
    event_time: Option<(i64, u32)>,
    metadata: Meta,
    media_type: Media,
}

#[derive(Arbitrary, Debug)]
struct Batch {
    max_events: u8,
    max_id_bytes: u16,
    threshold_bytes: u16,
    excerpt_bytes: u16,
    head_percent: u8,
    session_id: String,
    events: Vec<Ev>,
}

fn ident(i: Ident) -> String {
    match i {
        Ident::Empty => String::new(),
        Ident::Pool(n) => IDS[n as usize % IDS.len()].to_owned(),
        Ident::Raw(s) => s,
        Ident::Long(n) => "i".repeat(n as usize % 600),
    }
}

fn content(c: Content) -> String {
    match c {
        Content::Text(s) => s,
        Content::Repeat { unit, times } => {
            let times = if unit.is_empty() { 0 } else { (times as usize).min(64 * 1024 / unit.len().max(1)) };
            unit.repeat(times)
        }
    }
}

fn json(j: Json) -> serde_json::Value {
    match j {
        Json::Null => serde_json::Value::Null,
        Json::Bool(b) => b.into(),
        Json::Num(n) => serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number),
        Json::Str(s) => s.into(),
        Json::List(l) => l.into(),
    }
}

fn metadata(m: Meta) -> String {
    match m {
        Meta::Empty => String::new(),
        Meta::Raw(s) => s,
        Meta::Object(fields) => {
            serde_json::Value::Object(fields.into_iter().map(|(k, v)| (k, json(v))).collect()).to_string()
        }
    }
}

fn input(e: Ev) -> EventInput {
    EventInput {
        kind: match e.kind {
            Kind::Known(n) => KINDS[n as usize % KINDS.len()].to_owned(),
            Kind::Raw(s) => s,
        },
        content: content(e.content),
        agent_id: ident(e.agent_id),
        task_id: ident(e.task_id),
        tool_name: ident(e.tool_name),
        tool_call_id: ident(e.tool_call_id),
        // As the server converts a proto Timestamp: an invalid one is refused before the batch.
        event_time: e.event_time.and_then(|(s, n)| chrono::DateTime::from_timestamp(s, n)),
        metadata_json: metadata(e.metadata),
        media_type: match e.media_type {
            Media::Empty => String::new(),
            Media::Known(n) => MEDIA[n as usize % MEDIA.len()].to_owned(),
            Media::Raw(s) => s,
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(b) = Batch::arbitrary(&mut u) else { return };
    // Limits and policies as `Config::validate` lets them through: max_batch_events > 0,
    // excerpt_head_percent <= 100, excerpt_bytes <= artifact_threshold_bytes.
    let limits = BatchLimits { max_events: usize::from(b.max_events.max(1)), max_id_bytes: usize::from(b.max_id_bytes) };
    let threshold = usize::from(b.threshold_bytes);
    let policy = ArtifactPolicy {
        threshold_bytes: threshold,
        head_percent: b.head_percent % 101,
        excerpt_bytes: usize::from(b.excerpt_bytes) % (threshold + 1),
    };
    let inputs: Vec<EventInput> = b.events.into_iter().take(300).map(input).collect();
    let fp = batch_fingerprint(&b.session_id, &inputs);
    assert_eq!(fp, batch_fingerprint(&b.session_id, &inputs));
    for e in &inputs {
        let _ = role_of_kind(&e.kind);
    }
    let Ok(batch) = prepare_batch(inputs.clone(), &limits, &policy) else { return };

    // What a prepared batch promises (see `prepare_batch`'s rules).
    assert!(!batch.events.is_empty() && batch.events.len() == inputs.len() && inputs.len() <= limits.max_events);
    for (i, (ev, input)) in batch.events.iter().zip(&inputs).enumerate() {
        assert_eq!(ev.kind.as_str(), input.kind);
        assert_eq!(EventKind::parse(ev.kind.as_str()).as_ref(), Ok(&ev.kind));
        for id in [&ev.agent_id, &ev.task_id, &ev.tool_name, &ev.tool_call_id].into_iter().flatten() {
            assert!(id.len() <= limits.max_id_bytes && !id.chars().any(char::is_control));
        }
        if ev.kind == EventKind::ToolCall {
            assert!(ev.tool_name.is_some() && ev.tool_call_id.is_some());
        }
        if ev.kind.is_tool_output() {
            assert!(ev.tool_call_id.is_some());
        }
        if let Some(m) = &ev.metadata {
            assert!(m.is_object());
            let _ = EventFlags::from_metadata(Some(m));
        }
        match &ev.artifact {
            Some(a) => {
                assert_eq!(a.body, input.content, "events[{i}]: the artifact keeps the exact content");
                assert_eq!(a.id, ArtifactId::of(a.body.as_bytes()));
                assert!(a.id.verifies(a.body.as_bytes()));
                assert_eq!(a.id.to_string().parse::<ArtifactId>(), Ok(a.id));
                assert!(!ev.content.contains('\0'), "events[{i}]: an excerpt holds no NUL");
                assert!(ev.content.contains(&a.id.to_string()), "events[{i}]: the excerpt names its artifact");
                // Head and tail within the budget (a NUL shows as 3 bytes), plus a one-line notice.
                assert!(ev.content.len() <= 3 * policy.excerpt_bytes + 256, "events[{i}]: excerpt too long");
            }
            None => {
                assert_eq!(ev.content, input.content);
                assert!(!ev.content.contains('\0'));
            }
        }
    }
    for (i, id) in &batch.external_tool_calls {
        let ev = &batch.events[*i];
        assert!(ev.kind.is_tool_output() && ev.tool_call_id.as_ref() == Some(id));
    }
});
