//! Fuzz the decoding of the gRPC API's requests: the first byte picks one of the 36 request
//! messages of `memex.v1` (one per RPC), the rest is decoded as it with prost. A decoded message
//! must encode to `encoded_len` bytes and decode again to the same bytes. Then it goes through the
//! database-free checks the server makes on it, where they are public: `status::parse_uuid` on
//! its ids, the line-pointer and store-pointer parsers, the append-batch validator, timestamps,
//! tokenizer / format / enum names, task states (`memex_task::validate`), view predicates
//! (built and run over a small compiled trace) and the memory reader's time presets. (The
//! server's own `convert` and `service::*` helpers are private; their logic is reached through
//! the crates they call.) Any panic is a bug.
#![no_main]

use chrono::{DateTime, TimeZone, Utc};
use libfuzzer_sys::fuzz_target;
use memex_event::{ArtifactId, ArtifactPolicy, BatchLimits, Role, batch_fingerprint, prepare_batch};
use memex_pointer::{Pointer, SeqRange};
use memex_proto::v1 as pb;
use memex_server::status::{check_size, parse_opt_uuid, parse_uuid, session_id};
use memex_task::{KeyPointer, Phase, TaskState, TaskStateLimits, TaskStateVersion};
use memex_tokens::Tokenizer;
use memex_vcc::{CompileOptions, CompiledTrace, InputFormat, PredicateSpec, compile_trace};
use prost::Message;

/// The server's defaults (`LimitsConfig`, `IngestConfig`).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
const MAX_ID_BYTES: usize = 256;

/// Decodes `bytes` as `M`; a message that decodes must re-encode consistently.
fn decode<M: Message + Default>(bytes: &[u8]) -> Option<M> {
    let m = M::decode(bytes).ok()?;
    let enc = m.encode_to_vec();
    assert_eq!(enc.len(), m.encoded_len(), "encoded_len disagrees with encode");
    let back = M::decode(enc.as_slice()).expect("a re-encoded message decodes");
    assert_eq!(back.encode_to_vec(), enc, "decode(encode(m)) encodes differently");
    Some(m)
}

macro_rules! requests {
    ($($name:ident),* $(,)?) => {
        // Some requests have no check beyond decoding: their payload is never read.
        #[allow(clippy::large_enum_variant, dead_code)]
        enum Req { $($name(pb::$name)),* }
        const COUNT: usize = [$(stringify!($name)),*].len();
        const _: () = assert!(COUNT == 36, "one request message per RPC");
        fn decode_nth(n: usize, bytes: &[u8]) -> Option<Req> {
            let mut i = 0usize;
            $(
                if i == n {
                    return decode::<pb::$name>(bytes).map(Req::$name);
                }
                i += 1;
            )*
            let _ = i;
            None
        }
    };
}

// One request message per RPC of proto/memex/v1/*.proto, in file order (as the fuzz corpus
// was first grown on 34 of them) and then the later ones.
requests!(
    // admin.proto
    CreateApiKeyRequest,
    ListApiKeysRequest,
    RevokeApiKeyRequest,
    // context.proto
    GetTaskStateRequest,
    UpdateTaskStateRequest,
    ListTaskStateVersionsRequest,
    DelegateRequest,
    ReportRequest,
    WatchReportsRequest,
    CompactRequest,
    ExpandManifestRequest,
    GetWindowRequest,
    BuildPackRequest,
    GetPackRequest,
    BuildSnapshotRequest,
    // events.proto
    AppendEventsRequest,
    StreamEventsRequest,
    GetEventsRequest,
    GetArtifactRequest,
    // memory.proto
    FindQuoteRequest,
    QueryFactsRequest,
    ExpandTopicRequest,
    RememberWhenRequest,
    RecallAllRequest,
    ListTopicsRequest,
    GetFactRequest,
    GetMemoryStatusRequest,
    // search.proto
    SearchRequest,
    // sessions.proto
    CreateSessionRequest,
    GetSessionRequest,
    ListSessionsRequest,
    // views.proto
    ImportTraceRequest,
    CompileViewRequest,
    ReadLinesRequest,
    // Added to admin.proto later; last, so the seeds' first bytes keep their meaning.
    RotateApiKeyRequest,
    EraseSubjectRequest,
);

fn uuid(field: &str, v: &str) {
    let required = parse_uuid(field, v);
    let optional = parse_opt_uuid(field, v);
    match (&required, &optional) {
        (Ok(a), Ok(Some(b))) => assert_eq!(a, b),
        (Err(_), Ok(None)) => assert!(v.is_empty()),
        (Err(_), Err(_)) => {}
        _ => panic!("parse_uuid and parse_opt_uuid disagree on {v:?}"),
    }
}

fn uuids(field: &str, vs: &[String]) {
    for v in vs {
        uuid(field, v);
    }
}

/// As the server reads a proto timestamp: nanos must fit `u32` and the instant must exist.
fn time(t: Option<&prost_types::Timestamp>) -> Option<DateTime<Utc>> {
    t.and_then(|t| u32::try_from(t.nanos).ok().and_then(|n| DateTime::from_timestamp(t.seconds, n)))
}

fn tokenizer(name: &str) -> Option<Tokenizer> {
    let t = name.parse::<Tokenizer>().ok()?;
    assert_eq!(t.name().parse::<Tokenizer>().ok(), Some(t));
    Some(t)
}

/// A store pointer as the context API accepts it (`KeyPointer`), or `None` where it refuses it.
fn key_pointer(p: &pb::Pointer) -> Option<KeyPointer> {
    use pb::pointer::Target as T;
    // The CLI's text form reads back what it prints.
    let printed = memex_client::format_pointer(p);
    if let Ok(back) = memex_client::parse_pointer(&printed) {
        assert_eq!(&back, p, "{printed:?}");
    }
    let kp = match p.target.as_ref()? {
        T::EventId(id) => KeyPointer::Event(parse_uuid("event_id", id).ok()?),
        T::ArtifactId(a) => {
            let id = a.parse::<ArtifactId>().ok()?;
            assert_eq!(id.to_string().parse::<ArtifactId>(), Ok(id));
            KeyPointer::Artifact(a.clone())
        }
        T::Span(s) => KeyPointer::Span {
            session_id: parse_uuid("span.session_id", &s.session_id).ok()?,
            seqs: SeqRange::new(s.first_seq, s.last_seq).filter(|r| r.first >= 1)?,
        },
    };
    let json = serde_json::to_value(&kp).expect("a key pointer serializes");
    assert_eq!(serde_json::from_value::<KeyPointer>(json).ok().as_ref(), Some(&kp));
    Some(kp)
}

fn key_pointers(ps: &[pb::Pointer]) -> Option<Vec<KeyPointer>> {
    // Every pointer is looked at, as the server does until the first bad one.
    let all: Vec<Option<KeyPointer>> = ps.iter().map(key_pointer).collect();
    all.into_iter().collect()
}

fn events(session: &str, evs: &[pb::EventInput], encoded_len: usize) {
    uuid("session_id", session);
    let _ = check_size("request", encoded_len, MAX_MESSAGE_BYTES);
    let mut inputs = Vec::with_capacity(evs.len());
    for e in evs {
        let event_time = match &e.event_time {
            Some(t) => match time(Some(t)) {
                Some(t) => Some(t),
                None => return, // refused: not a valid timestamp
            },
            None => None,
        };
        inputs.push(memex_event::EventInput {
            kind: e.kind.clone(),
            content: e.content.clone(),
            agent_id: e.agent_id.clone(),
            task_id: e.task_id.clone(),
            tool_name: e.tool_name.clone(),
            tool_call_id: e.tool_call_id.clone(),
            event_time,
            metadata_json: e.metadata_json.clone(),
            media_type: e.media_type.clone(),
        });
    }
    let _ = batch_fingerprint(session, &inputs);
    let limits = BatchLimits { max_events: 10_000, max_id_bytes: MAX_ID_BYTES };
    if let Ok(batch) = prepare_batch(inputs, &limits, &ArtifactPolicy::default()) {
        for e in &batch.events {
            let _ = memex_pointer::EventFlags::from_metadata(e.metadata.as_ref());
        }
    }
}

fn task_state(task_id: &str, version: u64, s: &pb::TaskState, tokenizer_name: &str) {
    let phase = match pb::Phase::try_from(s.phase) {
        Ok(pb::Phase::Unspecified | pb::Phase::Planning) => Phase::Planning,
        Ok(pb::Phase::Execution) => Phase::Execution,
        Ok(pb::Phase::Evaluation) => Phase::Evaluation,
        Err(_) => return,
    };
    assert_eq!(phase.as_str().parse::<Phase>(), Ok(phase));
    let Some(key_pointers) = key_pointers(&s.key_pointers) else { return };
    let state = TaskState {
        goals: s.goals.clone(),
        constraints: s.constraints.clone(),
        open_loops: s.open_loops.clone(),
        next_actions: s.next_actions.clone(),
        key_pointers,
        phase,
        self_assessment: s.self_assessment,
        premises: s.premises.clone(),
    };
    let counter = tokenizer(tokenizer_name).unwrap_or_default();
    let limits = TaskStateLimits::default();
    if let Ok((text, tokens)) = memex_task::validate(task_id, TaskStateVersion(version), &state, &limits, &counter) {
        assert!(tokens <= limits.max_tokens);
        assert_eq!(counter.count(&text), tokens);
    }
    let json = serde_json::to_value(&state).expect("a task state serializes");
    assert_eq!(serde_json::from_value::<TaskState>(json).ok().as_ref(), Some(&state));
}

thread_local! {
    /// A small trace for predicates to run over (memex's own JSONL export).
    static TRACE: Option<CompiledTrace> = compile_trace(
        concat!(
            r#"{"id":"1","session_id":"s","seq":1,"kind":"user_message","agent_id":"a","content":"find the Error in main.rs"}"#, "\n",
            r#"{"id":"2","session_id":"s","seq":2,"kind":"tool_call","agent_id":"a","tool_name":"Bash","tool_call_id":"c1","content":"{\"command\":\"grep -n err src/main.rs\"}"}"#, "\n",
            r#"{"id":"3","session_id":"s","seq":3,"kind":"tool_result","tool_call_id":"c1","content":"12: let e = Err(x);\n13: é ü ß \u00e9"}"#, "\n",
            r#"{"id":"4","session_id":"s","seq":4,"kind":"assistant_message","agent_id":"a","content":"Line 12 returns an Error."}"#, "\n",
        )
        .as_bytes(),
        "fuzz",
        CompileOptions { format: InputFormat::Memex, strict: false },
    )
    .ok();
}

/// A `CompileView` predicate as the server decodes it (`view_query`, `predicate_spec`), built,
/// and run over the small trace.
fn predicate(p: &pb::Predicate) {
    let Ok(ranker) = pb::Ranker::try_from(p.ranker) else { return };
    if ranker != pb::Ranker::Unspecified {
        return; // ranked queries go to the search index
    }
    if !p.query.is_empty() {
        return;
    }
    let given = [!p.regex.is_empty(), !p.literal.is_empty(), !p.terms.is_empty()].iter().filter(|b| **b).count();
    if given != 1 {
        return;
    }
    let spec = PredicateSpec {
        regex: (!p.regex.is_empty()).then(|| p.regex.clone()),
        literal: (!p.literal.is_empty()).then(|| p.literal.clone()),
        terms: p.terms.clone(),
        all_terms: p.all_terms,
        ignore_case: p.ignore_case,
        roles: p.roles.clone(),
    };
    let Ok(Some(pred)) = spec.build() else { return };
    TRACE.with(|t| {
        for chain in t.iter().flat_map(|t| t.chains()) {
            let _ = chain.adaptive_view(pred.as_ref());
        }
    });
}

fn check(req: Req) {
    use Req::*;
    match req {
        CreateApiKeyRequest(r) => {
            let _ = pb::Right::try_from(r.right);
        }
        ListApiKeysRequest(_) | GetMemoryStatusRequest(_) | RecallAllRequest(_) | WatchReportsRequest(_) => {}
        RevokeApiKeyRequest(r) => uuid("key_id", &r.key_id),
        RotateApiKeyRequest(r) => uuid("key_id", &r.key_id),
        EraseSubjectRequest(r) => uuids("session_ids", &r.session_ids),
        GetTaskStateRequest(_) => {}
        UpdateTaskStateRequest(r) => {
            let _ = tokenizer(&r.tokenizer);
            if let Some(s) = &r.state {
                task_state(&r.task_id, r.expected_version.saturating_add(1), s, &r.tokenizer);
            }
        }
        ListTaskStateVersionsRequest(r) => {
            let _ = r.page_token.parse::<u64>();
        }
        DelegateRequest(r) => {
            let _ = key_pointers(&r.pointers);
            uuid("delegated_by_session_id", &r.delegated_by_session_id);
            let _ = tokenizer(&r.tokenizer);
            let s = pb::TaskState {
                goals: vec![r.objective.clone()],
                constraints: r.constraints.clone(),
                next_actions: r.acceptance_criteria.clone(),
                key_pointers: r.pointers.clone(),
                ..Default::default()
            };
            task_state(&r.task_id, 1, &s, &r.tokenizer);
        }
        ReportRequest(r) => {
            uuid("session_id", &r.session_id);
            uuid("report_id", &r.report_id);
            let _ = key_pointers(&r.pointers);
        }
        CompactRequest(r) => {
            let _ = session_id(&r.session_id);
            let _ = tokenizer(&r.tokenizer);
        }
        ExpandManifestRequest(r) => {
            uuid("manifest_id", &r.manifest_id);
            let _ = r.page_token.parse::<u64>();
        }
        GetWindowRequest(r) => {
            let _ = session_id(&r.session_id);
            let _ = tokenizer(&r.tokenizer);
        }
        BuildPackRequest(r) => {
            uuid("session_id", &r.session_id);
            let _ = tokenizer(&r.tokenizer);
            let _ = pb::Role::try_from(r.role);
            let _ = pb::PackView::try_from(r.view);
        }
        GetPackRequest(r) => {
            uuid("pack_id", &r.pack_id);
            let _ = pb::PackView::try_from(r.view);
        }
        BuildSnapshotRequest(r) => {
            uuid("session_id", &r.session_id);
            let _ = tokenizer(&r.tokenizer);
            let _ = pb::SnapshotFormat::try_from(r.format);
        }
        AppendEventsRequest(r) => {
            let len = r.encoded_len();
            events(&r.session_id, &r.events, len);
        }
        StreamEventsRequest(r) => {
            let len = r.encoded_len();
            events(&r.session_id, &r.events, len);
        }
        GetEventsRequest(r) => {
            uuids("event_ids", &r.event_ids);
            uuid("session_id", &r.session_id);
        }
        GetArtifactRequest(r) => {
            if let Ok(id) = r.artifact_id.parse::<ArtifactId>() {
                assert_eq!(id.to_string().parse::<ArtifactId>(), Ok(id));
            }
        }
        FindQuoteRequest(r) => uuids("session_ids", &r.session_ids),
        QueryFactsRequest(r) => {
            uuids("session_ids", &r.session_ids);
            let _ = memex_memory::model::FactType::parse(&r.fact_type);
            let _ = memex_memory::model::TemporalStatus::parse(&r.status);
            let _ = time(r.as_of.as_ref());
        }
        ExpandTopicRequest(r) => {
            let _ = memex_memory::paging::Depth::parse(&r.depth);
        }
        RememberWhenRequest(r) => {
            uuids("session_ids", &r.session_ids);
            let (from, to) = (time(r.from.as_ref()), time(r.to.as_ref()));
            let invalid = |t: &Option<prost_types::Timestamp>, v: &Option<DateTime<Utc>>| t.is_some() && v.is_none();
            if invalid(&r.from, &from) || invalid(&r.to, &to) {
                return; // refused before the range is resolved
            }
            let now = Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0).single().expect("a valid instant");
            if let Ok(range) = memex_recall::reader::resolve_range(&r.preset, from, to, now) {
                assert!(range.from <= range.to);
            }
        }
        ListTopicsRequest(_) => {}
        GetFactRequest(r) => uuid("fact_id", &r.fact_id),
        SearchRequest(r) => {
            if let Some(f) = &r.filter {
                uuids("filter.session_ids", &f.session_ids);
                for role in &f.roles {
                    if let Some(parsed) = Role::parse(role) {
                        assert_eq!(Role::parse(parsed.as_str()), Some(parsed));
                    }
                }
                let _ = (time(f.time_from.as_ref()), time(f.time_to.as_ref()));
            }
        }
        CreateSessionRequest(r) => {
            uuid("session_id", &r.session_id);
            uuid("parent_session_id", &r.parent_session_id);
            if !r.metadata_json.trim().is_empty() {
                let _ = serde_json::from_str::<serde_json::Value>(&r.metadata_json);
            }
        }
        GetSessionRequest(r) => {
            let _ = session_id(&r.session_id);
        }
        ListSessionsRequest(r) => uuid("parent_session_id", &r.parent_session_id),
        ImportTraceRequest(r) => {
            uuid("session_id", &r.session_id);
            uuid("parent_session_id", &r.parent_session_id);
            let _ = r.input_format.parse::<InputFormat>();
        }
        CompileViewRequest(r) => {
            let _ = session_id(&r.session_id);
            let _ = pb::ViewKind::try_from(r.view);
            if let Some(p) = &r.predicate {
                predicate(p);
            }
        }
        ReadLinesRequest(r) => {
            if r.pointer.is_empty() {
                let _ = session_id(&r.session_id);
            } else if let Ok(p) = Pointer::parse(&r.pointer) {
                assert_eq!(Pointer::parse(&p.to_string()), Ok(p));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else { return };
    let n = usize::from(pick) % COUNT;
    if let Some(req) = decode_nth(n, bytes) {
        check(req);
    }
});
