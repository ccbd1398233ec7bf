//! Text helpers with the reference's exact semantics: sanitising, Python whitespace, the VCC
//! tokenizer (truncation and word counts) and the UI view's markup stripping.

use std::borrow::Cow;

/// Python's `str.isspace()` (also what `\s` and `str.strip()` use for `str` patterns).
pub(crate) fn is_py_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n'
            | '\u{b}'
            | '\u{c}'
            | '\r'
            | '\u{1c}'..='\u{1f}'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// Python's `s.strip()`.
pub(crate) fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Python's `s.split()` (runs of whitespace, no empty pieces).
pub(crate) fn py_split_whitespace(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_py_space).filter(|p| !p.is_empty())
}

/// The reference's `_sanitize`: drop `\r`, ANSI escape sequences (if any ESC), then the control
/// characters `[\x00-\x08\x0b-\x1f\x7f-\x9f]`. Borrowed when nothing needs removing.
pub(crate) fn sanitize(text: &str) -> Cow<'_, str> {
    if !needs_sanitizing(text.as_bytes()) {
        return Cow::Borrowed(text);
    }
    let has_esc = text.contains('\x1b');
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().filter(|&c| c != '\r').peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && has_esc && skip_ansi(&mut chars) {
            continue;
        }
        if !is_ctrl(c) {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn is_ctrl(c: char) -> bool {
    matches!(c, '\0'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

fn needs_sanitizing(b: &[u8]) -> bool {
    const SUSPECT: [bool; 256] = {
        let mut t = [false; 256];
        let mut i = 0;
        while i < 0x20 {
            t[i] = i != 0x09 && i != 0x0a;
            i += 1;
        }
        t[0x7f] = true;
        t[0xc2] = true;
        t
    };
    b.iter()
        .enumerate()
        .any(|(i, &c)| SUSPECT[c as usize] && (c != 0xc2 || b.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n))))
}

/// After an ESC: consumes `[@-Z\\-_]` or a CSI sequence `\[[0-?]*[ -/]*[@-~]`; returns whether
/// a sequence matched (if not, nothing is consumed).
fn skip_ansi<I: Iterator<Item = char> + Clone>(chars: &mut std::iter::Peekable<I>) -> bool {
    match chars.peek() {
        Some('@'..='Z' | '\\'..='_') => {
            chars.next();
            true
        }
        Some('[') => {
            let mut probe = chars.clone();
            probe.next();
            while let Some('0'..='?') = probe.peek() {
                probe.next();
            }
            while let Some(' '..='/') = probe.peek() {
                probe.next();
            }
            if let Some('@'..='~') = probe.next() {
                *chars = probe;
                true
            } else {
                false
            }
        }
        _ => false,
    }
}

/// What the tokenizer `[a-zA-Z]+|[0-9]+|[^\sa-zA-Z0-9]|\s+` sees at one character.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TokClass {
    Letter,
    Digit,
    Other,
    Space,
}

fn tok_class(c: char) -> TokClass {
    if c.is_ascii_alphabetic() {
        TokClass::Letter
    } else if c.is_ascii_digit() {
        TokClass::Digit
    } else if is_py_space(c) {
        TokClass::Space
    } else {
        TokClass::Other
    }
}

/// Byte offsets where counted (non-whitespace) tokens start, stopping after `limit` of them if
/// given. The VCC tokenizer groups ASCII letter runs and digit runs; every other non-space
/// character is a token of its own.
fn token_starts(text: &str, mut each: impl FnMut(usize) -> bool) {
    let mut prev = TokClass::Space;
    for (i, c) in text.char_indices() {
        let class = tok_class(c);
        let starts = match class {
            TokClass::Space => false,
            TokClass::Other => true,
            TokClass::Letter | TokClass::Digit => class != prev,
        };
        prev = class;
        if starts && !each(i) {
            return;
        }
    }
}

/// Number of non-whitespace tokens (the "words" in the CLI's summary lines).
///
/// Byte-level and branch-light: a token starts at every "other" byte and wherever a letter or
/// digit run begins; UTF-8 continuation bytes never start one, so a non-ASCII character counts
/// once (by its lead byte). Python's few non-ASCII whitespace characters are then subtracted.
pub(crate) fn count_words(text: &str) -> usize {
    const SPACE: u8 = 0;
    const LETTER: u8 = 1;
    const DIGIT: u8 = 2;
    const OTHER: u8 = 3;
    const CONT: u8 = 4;
    /// A lead byte that may begin a non-ASCII space (0xC2, 0xE1, 0xE2, 0xE3).
    const MAYBE_SPACE: u8 = 5;
    const CLASS: [u8; 256] = {
        let mut t = [OTHER; 256];
        let mut i = 0;
        while i < 256 {
            let c = i as u8;
            t[i] = match c {
                b'a'..=b'z' | b'A'..=b'Z' => LETTER,
                b'0'..=b'9' => DIGIT,
                b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0x1c..=0x1f | b' ' => SPACE,
                0x80..=0xbf => CONT,
                0xc2 | 0xe1 | 0xe2 | 0xe3 => MAYBE_SPACE,
                _ => OTHER,
            };
            i += 1;
        }
        t
    };
    const START: [[u8; 6]; 6] = {
        let mut t = [[0u8; 6]; 6];
        let mut prev = 0;
        while prev < 6 {
            t[prev][OTHER as usize] = 1;
            t[prev][MAYBE_SPACE as usize] = 1;
            t[prev][LETTER as usize] = (prev != LETTER as usize) as u8;
            t[prev][DIGIT as usize] = (prev != DIGIT as usize) as u8;
            prev += 1;
        }
        t
    };
    let b = text.as_bytes();
    let mut n = 0usize;
    let mut spaces = 0usize;
    let mut prev = SPACE as usize;
    for (i, &c) in b.iter().enumerate() {
        let class = CLASS[c as usize] as usize;
        n += usize::from(START[prev][class]);
        if class == MAYBE_SPACE as usize && lead_is_space(&b[i..]) {
            spaces += 1;
        }
        prev = class;
    }
    n - spaces
}

/// Whether the UTF-8 character starting `b` is Python whitespace (U+0085, U+00A0, U+1680,
/// U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
fn lead_is_space(b: &[u8]) -> bool {
    matches!(
        b,
        [0xc2, 0x85 | 0xa0, ..]
            | [0xe1, 0x9a, 0x80, ..]
            | [0xe2, 0x80, 0x80..=0x8a | 0xa8 | 0xa9 | 0xaf, ..]
            | [0xe2, 0x81, 0x9f, ..]
            | [0xe3, 0x80, 0x80, ..]
    )
}

/// The reference's `_trunc`: keep everything before the `(limit+1)`-th counted token, then
/// append `...(truncated from {reference})`. A zero limit or empty text is returned unchanged.
pub(crate) fn truncate_tokens<'t>(text: &'t str, limit: i64, reference: &str) -> Cow<'t, str> {
    if limit == 0 || text.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut count: i64 = 0;
    let mut cut = None;
    token_starts(text, |at| {
        count += 1;
        if count > limit {
            cut = Some(at);
            return false;
        }
        true
    });
    match cut {
        None => Cow::Borrowed(text),
        Some(at) => Cow::Owned(format!("{}...(truncated from {reference})", &text[..at])),
    }
}

/// Tags removed with their content (and the whitespace after them) in the UI view's user text.
const NOISE_TAGS: [&str; 4] = ["ide_opened_file", "ide_selection", "system-reminder", "command-message"];
/// Tags unwrapped (the tag goes, the text stays).
const UNWRAP_TAGS: [&str; 4] = ["<command-name>", "</command-name>", "<command-args>", "</command-args>"];

/// The reference's `_strip_noise_xml`: `<(tag)>.*?</\1>\s*` removed (DOTALL), wrapper tags
/// unwrapped, then `strip()`.
pub(crate) fn strip_noise_xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        match noise_element_len(&rest[lt..]) {
            Some(len) => {
                let after = &rest[lt + len..];
                rest = after.trim_start_matches(is_py_space);
            }
            None => {
                out.push('<');
                rest = &rest[lt + 1..];
            }
        }
    }
    out.push_str(rest);
    py_strip(&remove_unwrap_tags(&out)).to_string()
}

/// One left-to-right pass of `re.sub(r'</?(?:command-name|command-args)>', '', text)`.
fn remove_unwrap_tags(text: &str) -> Cow<'_, str> {
    if !text.contains("<command-") && !text.contains("</command-") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        let at = &rest[lt..];
        match UNWRAP_TAGS.iter().find(|tag| at.starts_with(*tag)) {
            Some(tag) => rest = &at[tag.len()..],
            None => {
                out.push('<');
                rest = &at[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// If `s` starts with `<tag>` for a noise tag and a matching `</tag>` follows, the length of the
/// element through the closing tag.
fn noise_element_len(s: &str) -> Option<usize> {
    NOISE_TAGS.iter().find_map(|tag| {
        let body = s.strip_prefix('<')?.strip_prefix(tag)?.strip_prefix('>')?;
        let close = format!("</{tag}>");
        let end = body.find(&close)?;
        Some(tag.len() + 2 + end + close.len())
    })
}

/// `^\s*<(task-notification|local-command-caveat|local-command-stdout|local-command-stderr)\b`
pub(crate) fn is_meta_user_text(text: &str) -> bool {
    const NAMES: [&str; 4] =
        ["task-notification", "local-command-caveat", "local-command-stdout", "local-command-stderr"];
    let Some(rest) = text.trim_start_matches(is_py_space).strip_prefix('<') else {
        return false;
    };
    NAMES
        .iter()
        .any(|name| rest.strip_prefix(name).is_some_and(|after| !after.chars().next().is_some_and(is_word_char)))
}

/// Python's `\w` for `str` patterns (Unicode alphanumerics and underscore).
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_matches_reference() {
        assert_eq!(sanitize("plain"), "plain");
        assert_eq!(sanitize("a\r\nb"), "a\nb");
        assert_eq!(sanitize("\x1b[1;31mred\x1b[0m \x1b]0;title\x07"), "red 0;title");
        assert_eq!(sanitize("x\x1bMy"), "xy");
        assert_eq!(sanitize("bell\x07\u{85}\u{9f}\u{a0}"), "bell\u{a0}");
        assert_eq!(sanitize("\x1b[12"), "[12");
    }

    #[test]
    fn words_count_tokens_like_the_reference() {
        assert_eq!(count_words("Hello, world 42x!"), 6);
        assert_eq!(count_words("日本語 ok"), 4);
        assert_eq!(count_words(""), 0);
        assert_eq!(count_words("a\u{1c}b"), 2);
        assert_eq!(count_words("é"), 1);
        assert_eq!(count_words("a\u{a0}b\u{3000}c\u{2028}d"), 4);
        assert_eq!(count_words("══ x"), 3);
        assert_eq!(count_words("ab12cd"), 3);
    }

    #[test]
    fn truncation_keeps_prefix_and_whitespace() {
        assert_eq!(truncate_tokens("one two three", 2, "f:1-1"), "one two ...(truncated from f:1-1)");
        assert_eq!(truncate_tokens("one two", 2, "f:1-1"), "one two");
        assert_eq!(truncate_tokens("one two", 0, "f:1-1"), "one two");
        assert_eq!(truncate_tokens("a b", -1, "r"), "...(truncated from r)");
    }

    #[test]
    fn noise_xml_is_stripped() {
        assert_eq!(strip_noise_xml("<system-reminder>x\ny</system-reminder>\n  hi"), "hi");
        assert_eq!(
            strip_noise_xml("<command-message>m</command-message>\n<command-name>/cost</command-name>"),
            "/cost"
        );
        assert_eq!(strip_noise_xml("<ide_selection>unclosed"), "<ide_selection>unclosed");
        assert_eq!(strip_noise_xml(" a < b "), "a < b");
        assert_eq!(strip_noise_xml("<command-args<command-name>>"), "<command-args>");
    }

    #[test]
    fn meta_user_text_needs_word_boundary() {
        assert!(is_meta_user_text("  <local-command-stdout>x"));
        assert!(is_meta_user_text("<task-notification"));
        assert!(!is_meta_user_text("<task-notifications>"));
        assert!(!is_meta_user_text("x <task-notification>"));
    }
}
