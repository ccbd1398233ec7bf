//! Fuzz the pointer parsers: full-view line pointers (`memex_pointer::Pointer::parse`,
//! `session:first-last` / `session#chain:first-last`, what `ReadLines` takes), store pointers
//! (`memex_client::parse_pointer`, `event:ID` / `blake3:HEX` / `span:SESSION:FIRST-LAST`) and
//! artifact ids (`blake3:<64 hex>`). The bytes are read as text for every parser, then again as a
//! structured pointer whose printed form must parse back to it. Any panic is a bug; so is a
//! round trip that does not come back.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use memex_client::{format_pointer, line_pointer, parse_pointer};
use memex_event::{ArtifactId, SessionId};
use memex_pointer::{LineRange, Pointer, SeqRange};
use memex_proto::v1 as pb;
use memex_task::KeyPointer;

#[derive(Arbitrary, Debug)]
enum Target {
    EventId(String),
    ArtifactId(String),
    Span { session_id: String, first_seq: u64, last_seq: u64 },
}

#[derive(Arbitrary, Debug)]
struct Structured {
    session: [u8; 16],
    chain: u32,
    first: u32,
    last: u32,
    store: Option<Target>,
    artifact: [u8; 32],
}

/// A store pointer as the server's context API accepts it (the checks of
/// `memex_server::service::context::wire::pointer`, which is private, through the public parts
/// it uses), then as JSON the way task states store it.
fn key_pointer(p: &pb::Pointer) {
    use pb::pointer::Target as T;
    let kp = match &p.target {
        Some(T::EventId(id)) => match memex_server::status::parse_uuid("pointer.event_id", id) {
            Ok(u) => KeyPointer::Event(u),
            Err(_) => return,
        },
        Some(T::ArtifactId(a)) => match a.parse::<ArtifactId>() {
            Ok(id) => {
                assert_eq!(id.to_string().parse::<ArtifactId>(), Ok(id));
                assert!(id.to_string().eq_ignore_ascii_case(a));
                KeyPointer::Artifact(a.clone())
            }
            Err(_) => return,
        },
        Some(T::Span(s)) => {
            let Ok(session_id) = memex_server::status::parse_uuid("pointer.span.session_id", &s.session_id) else {
                return;
            };
            let Some(seqs) = SeqRange::new(s.first_seq, s.last_seq).filter(|r| r.first >= 1) else { return };
            assert!(seqs.len() >= 1 && seqs.contains(s.first_seq) && seqs.contains(s.last_seq));
            KeyPointer::Span { session_id, seqs }
        }
        None => return,
    };
    let json = serde_json::to_value(&kp).expect("a key pointer serializes");
    let back: KeyPointer = serde_json::from_value(json).expect("a key pointer deserializes");
    assert_eq!(back, kp);
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);

    // Full-view line pointers.
    if let Ok(p) = Pointer::parse(&text) {
        let printed = p.to_string();
        assert_eq!(Pointer::parse(&printed), Ok(p), "{printed:?} does not parse back");
        if p.chain >= 1 {
            let client =
                line_pointer(&p.session.to_string(), p.chain, u64::from(p.range.first), u64::from(p.range.last));
            assert_eq!(client, printed, "the client and the server print a line pointer differently");
        }
    }

    // Store pointers.
    if let Ok(p) = parse_pointer(&text) {
        let printed = format_pointer(&p);
        let back = parse_pointer(&printed).unwrap_or_else(|e| panic!("{printed:?} does not parse back: {e}"));
        assert_eq!(back, p);
        key_pointer(&p);
    }

    // Artifact ids.
    if let Ok(id) = text.parse::<ArtifactId>() {
        assert_eq!(id.to_string().parse::<ArtifactId>(), Ok(id));
    }

    // Structured pointers: printed, then parsed back.
    let mut u = Unstructured::new(data);
    let Ok(s) = Structured::arbitrary(&mut u) else { return };
    let p = Pointer {
        session: SessionId(uuid::Uuid::from_bytes(s.session)),
        chain: s.chain,
        range: LineRange { first: s.first, last: s.last },
    };
    assert_eq!(Pointer::parse(&p.to_string()), Ok(p));
    let id = ArtifactId(s.artifact);
    assert_eq!(id.to_string().parse::<ArtifactId>(), Ok(id));
    if let Some(t) = s.store {
        use pb::pointer::Target as T;
        let empty_id = matches!(&t, Target::EventId(x) | Target::ArtifactId(x) if x.is_empty());
        let target = match t {
            Target::EventId(x) => T::EventId(x),
            Target::ArtifactId(x) => T::ArtifactId(x),
            Target::Span { session_id, first_seq, last_seq } => T::Span(pb::Span { session_id, first_seq, last_seq }),
        };
        let p = pb::Pointer { target: Some(target) };
        let printed = format_pointer(&p);
        match parse_pointer(&printed) {
            Ok(back) => assert_eq!(back, p, "{printed:?} parses to another pointer"),
            Err(e) => assert!(empty_id, "{printed:?} does not parse back: {e}"),
        }
        key_pointer(&p);
    }
});
