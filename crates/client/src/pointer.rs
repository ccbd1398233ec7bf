//! Store pointers (`memex.v1.Pointer`) as one line of text, the same way in and out, so what a
//! command prints can be pasted into the next one:
//!
//! - `event:<event id>`
//! - `blake3:<64 hex>` (an artifact; `artifact:blake3:…` is accepted too)
//! - `span:<session id>:<first seq>-<last seq>` (an inclusive run of a session's events)
//!
//! Full-view line pointers (`session:first-last`) are a different thing: `ReadLines` takes those
//! as they are, and the server parses them.
use memex_proto::v1 as pb;
use memex_proto::v1::pointer::Target;

use crate::ClientError;

/// Parses one pointer; the error names what was expected.
pub fn parse_pointer(s: &str) -> Result<pb::Pointer, ClientError> {
    let bad = || {
        ClientError::Input(format!("pointer {s:?}: expected event:ID, blake3:HEX or span:SESSION:FIRST-LAST (seqs)"))
    };
    let target = if let Some(id) = s.strip_prefix("event:") {
        Target::EventId(id.to_owned())
    } else if let Some(id) = s.strip_prefix("artifact:") {
        Target::ArtifactId(id.to_owned())
    } else if s.starts_with("blake3:") {
        Target::ArtifactId(s.to_owned())
    } else if let Some(rest) = s.strip_prefix("span:") {
        let (session, range) = rest.rsplit_once(':').ok_or_else(bad)?;
        let (first, last) = range.split_once('-').ok_or_else(bad)?;
        Target::Span(pb::Span {
            session_id: session.to_owned(),
            first_seq: first.parse().map_err(|_| bad())?,
            last_seq: last.parse().map_err(|_| bad())?,
        })
    } else {
        return Err(bad());
    };
    if matches!(&target, Target::EventId(id) | Target::ArtifactId(id) if id.is_empty()) {
        return Err(bad());
    }
    Ok(pb::Pointer { target: Some(target) })
}

/// The text form [`parse_pointer`] reads back (`?` for a pointer without a target).
pub fn format_pointer(p: &pb::Pointer) -> String {
    match &p.target {
        Some(Target::EventId(id)) => format!("event:{id}"),
        Some(Target::ArtifactId(id)) if id.starts_with("blake3:") => id.clone(),
        Some(Target::ArtifactId(id)) => format!("artifact:{id}"),
        Some(Target::Span(s)) => format!("span:{}:{}-{}", s.session_id, s.first_seq, s.last_seq),
        None => "?".to_owned(),
    }
}

/// A full-view line range as memex cites it: `session:first-last` (`session#chain:first-last`
/// past the first chain).
pub fn line_pointer(session: &str, chain: u32, first: u64, last: u64) -> String {
    if chain > 1 { format!("{session}#{chain}:{first}-{last}") } else { format!("{session}:{first}-{last}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_read_back_what_they_print() {
        for s in ["event:0190abcd", "blake3:00ff", "span:0190-aa:3-7", "artifact:other"] {
            assert_eq!(format_pointer(&parse_pointer(s).expect(s)), s);
        }
        assert_eq!(format_pointer(&parse_pointer("artifact:blake3:00").expect("artifact")), "blake3:00");
    }

    #[test]
    fn a_bad_pointer_says_what_was_expected() {
        for s in ["", "event:", "s1:3-7", "span:s1:3", "span:s1:a-b"] {
            let e = parse_pointer(s).expect_err(s);
            assert!(e.to_string().contains("expected event:ID"), "{s}: {e}");
        }
    }

    #[test]
    fn line_pointers_name_the_chain_past_the_first() {
        assert_eq!(line_pointer("s1", 1, 41, 62), "s1:41-62");
        assert_eq!(line_pointer("s1", 2, 1, 4), "s1#2:1-4");
    }
}
