//! Artifactization (TRACE A.1, Virtual Context §3.7): a large tool output is stored once, out of
//! line, addressed by its BLAKE3 hash; the event keeps a head…tail excerpt and a one-line notice.

use std::fmt;
use std::str::FromStr;

/// Media type recorded for an artifact when the client names none.
pub const DEFAULT_MEDIA_TYPE: &str = "text/plain; charset=utf-8";

/// The content address of an artifact: the BLAKE3 hash of its uncompressed bytes.
/// Written `blake3:<64 lower-case hex digits>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArtifactId(pub [u8; 32]);

impl ArtifactId {
    pub fn of(bytes: &[u8]) -> Self {
        ArtifactId(*blake3::hash(bytes).as_bytes())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(ArtifactId)
    }

    /// True when `bytes` hash to this id: the check made before artifact bytes leave the store.
    pub fn verifies(&self, bytes: &[u8]) -> bool {
        // blake3::Hash compares in constant time; not needed here, but free.
        blake3::Hash::from_bytes(self.0) == blake3::hash(bytes)
    }
}

impl fmt::Display for ArtifactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("blake3:")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ArtifactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid artifact id {0:?}: expected \"blake3:\" followed by 64 hex digits")]
pub struct ArtifactIdError(pub String);

impl FromStr for ArtifactId {
    type Err = ArtifactIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ArtifactIdError(s.chars().take(80).collect());
        let hex = s.strip_prefix("blake3:").ok_or_else(err)?;
        if hex.len() != 64 {
            return Err(err());
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16).ok_or_else(err)?;
            let lo = (pair[1] as char).to_digit(16).ok_or_else(err)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Ok(ArtifactId(out))
    }
}

/// When a tool output is artifactized and how much of it stays inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactPolicy {
    /// Tool results and errors longer than this many bytes are stored as artifacts.
    pub threshold_bytes: usize,
    /// Share of the inline excerpt taken from the head of the output, in percent (the rest is tail).
    pub head_percent: u8,
    /// Size of the inline excerpt (head + tail, notice excluded), in bytes.
    pub excerpt_bytes: usize,
}

impl Default for ArtifactPolicy {
    fn default() -> Self {
        ArtifactPolicy { threshold_bytes: 8 * 1024, head_percent: 60, excerpt_bytes: 8 * 1024 }
    }
}

/// The inline text kept in place of an artifactized body: the head and tail of `content`, each cut
/// on a line boundary, around a one-line notice naming the artifact and the full size.
///
/// NUL characters are shown as `␀` because Postgres text cannot hold them; the artifact keeps the
/// exact bytes. When the whole content fits the excerpt budget (an artifact made only because of a
/// NUL), it is all kept and the notice goes last.
pub fn excerpt(content: &str, id: &ArtifactId, policy: &ArtifactPolicy) -> String {
    let total = content.len();
    let budget = policy.excerpt_bytes;
    let mut out = String::with_capacity(budget.min(total) + 160);
    if total <= budget {
        push_visible(&mut out, content);
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "[memex: content contains NUL characters, shown as \u{2400}; the exact {total} bytes are in artifact {id}]"
        ));
        return out;
    }
    let head_budget = budget * usize::from(policy.head_percent.min(100)) / 100;
    let tail_budget = budget - head_budget;
    let head = cut_head(content, head_budget);
    let tail = cut_tail(&content[head.len()..], tail_budget);
    let omitted = total - head.len() - tail.len();
    push_visible(&mut out, head);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!("[memex: {omitted} of {total} bytes omitted here; the full output is artifact {id}]"));
    if !tail.is_empty() {
        out.push('\n');
        push_visible(&mut out, tail);
    }
    out
}

fn push_visible(out: &mut String, s: &str) {
    if s.contains('\0') {
        out.push_str(&s.replace('\0', "\u{2400}"));
    } else {
        out.push_str(s);
    }
}

/// The longest prefix of at most `max` bytes ending after a newline; if the first line alone is
/// longer than `max`, the longest prefix on a character boundary.
fn cut_head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let window = &s.as_bytes()[..max];
    match memrchr(b'\n', window) {
        Some(nl) => &s[..nl + 1],
        None => &s[..floor_char_boundary(s, max)],
    }
}

/// The longest suffix of at most `max` bytes starting at a line start; if the last line alone is
/// longer than `max`, the longest suffix on a character boundary.
fn cut_tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let start = s.len() - max;
    // A suffix starting exactly at `start` is at a line start when the byte before it is '\n'.
    if s.as_bytes()[start - 1] == b'\n' {
        return &s[start..];
    }
    match s.as_bytes()[start..].iter().position(|&b| b == b'\n') {
        Some(nl) if start + nl + 1 < s.len() => &s[start + nl + 1..],
        _ => &s[ceil_char_boundary(s, start)..],
    }
}

fn memrchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().rposition(|&b| b == needle)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(excerpt_bytes: usize) -> ArtifactPolicy {
        ArtifactPolicy { threshold_bytes: excerpt_bytes, head_percent: 60, excerpt_bytes }
    }

    #[test]
    fn id_display_and_parse_round_trip() {
        let id = ArtifactId::of(b"hello");
        let text = id.to_string();
        assert!(text.starts_with("blake3:") && text.len() == 7 + 64);
        assert_eq!(text.parse::<ArtifactId>(), Ok(id));
        assert!("blake3:zz".parse::<ArtifactId>().is_err());
        assert!("sha256:00".parse::<ArtifactId>().is_err());
        assert!(id.verifies(b"hello"));
        assert!(!id.verifies(b"hellO"));
    }

    #[test]
    fn excerpt_cuts_on_line_boundaries_around_a_notice() {
        let content: String = (0..1000).map(|i| format!("line {i:04}\n")).collect();
        let id = ArtifactId::of(content.as_bytes());
        let ex = excerpt(&content, &id, &policy(100));
        let lines: Vec<&str> = ex.lines().collect();
        // 60 bytes of head = 6 whole lines of 10 bytes; 40 bytes of tail = 4 whole lines.
        assert_eq!(&lines[..6], &["line 0000", "line 0001", "line 0002", "line 0003", "line 0004", "line 0005"]);
        assert_eq!(lines[6], format!("[memex: 9900 of 10000 bytes omitted here; the full output is artifact {id}]"));
        assert_eq!(&lines[7..], &["line 0996", "line 0997", "line 0998", "line 0999"]);
    }

    #[test]
    fn excerpt_of_one_long_line_cuts_on_char_boundaries() {
        let content = "é".repeat(10_000); // 2 bytes per char
        let id = ArtifactId::of(content.as_bytes());
        let ex = excerpt(&content, &id, &policy(101));
        let mut parts = ex.split('\n');
        let head = parts.next().unwrap_or_default();
        let _notice = parts.next();
        let tail = parts.next().unwrap_or_default();
        assert_eq!(head.len(), 60); // floor(60.6) -> 60 -> already a boundary
        assert_eq!(tail.len(), 40);
    }

    #[test]
    fn nul_characters_are_made_visible() {
        let content = "a\0b";
        let id = ArtifactId::of(content.as_bytes());
        let ex = excerpt(content, &id, &policy(100));
        assert!(ex.starts_with("a\u{2400}b\n[memex: content contains NUL"), "{ex}");
        assert!(!ex.contains('\0'));
    }

    proptest! {
        #[test]
        fn excerpt_is_bounded_and_keeps_head_and_tail(content in ".{0,3000}", budget in 10usize..400) {
            let id = ArtifactId::of(content.as_bytes());
            let ex = excerpt(&content, &id, &policy(budget));
            prop_assert!(!ex.contains('\0'));
            if content.len() > budget && !content.contains('\0') {
                let notice_at = ex.find("[memex: ").unwrap_or(usize::MAX);
                prop_assert!(notice_at <= budget * 60 / 100 + 1);
                let head = &ex[..notice_at].trim_end_matches('\n');
                prop_assert!(content.starts_with(head));
                let after = &ex[notice_at..];
                let tail = after.split_once('\n').map(|(_, t)| t).unwrap_or("");
                prop_assert!(content.ends_with(tail));
                prop_assert!(tail.len() <= budget - budget * 60 / 100);
            }
        }
    }
}
