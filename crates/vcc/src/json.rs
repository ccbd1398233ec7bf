//! A JSON reader with the semantics of Python's `json.loads`, which produced the reference output.
//!
//! Why not `serde_json`: the reference accepts what Python accepts (`NaN`, `Infinity`, unbounded
//! integers, lone surrogate escapes), keeps object keys in first-insertion order with the *last*
//! value for duplicated keys, and distinguishes `1` from `1.0` when it prints values back with
//! `str()`. The reader also has to be fast on multi-megabyte records of which most bytes are never
//! rendered, so it can *skip* (validate without building) any subtree a [`Schema`] does not ask for.
//!
//! Errors carry a byte offset into the parsed text; callers turn it into `line:col`.

use std::borrow::Cow;

/// Nesting deeper than this is rejected (Python raises `RecursionError` near 1000).
pub(crate) const MAX_DEPTH: usize = 1000;

/// A parsed JSON value. Strings borrow from the input unless they contained escapes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    /// An integer literal as written (Python integers are unbounded).
    Int(Cow<'a, str>),
    Float(f64),
    Str(Cow<'a, str>),
    Array(Vec<Value<'a>>),
    Object(Object<'a>),
}

/// A JSON object as parsed: every `key: value` pair in input order, duplicates included.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Object<'a> {
    pub entries: Vec<(Cow<'a, str>, Value<'a>)>,
}

impl<'a> Object<'a> {
    /// Python `d.get(key)`: the value of the last pair with this key.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Moves the value of `key` out (leaving `Null` behind).
    pub fn take(&mut self, key: &str) -> Option<Value<'a>> {
        let slot = self.entries.iter_mut().rev().find(|(k, _)| k == key)?;
        Some(std::mem::replace(&mut slot.1, Value::Null))
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Iterates like a Python dict built from the pairs: each key once, at the position of its
    /// first occurrence, with the value of its last occurrence.
    pub fn iter_py(&self) -> impl Iterator<Item = (&str, &Value<'a>)> {
        let dedup = has_duplicate_keys(&self.entries);
        self.entries.iter().enumerate().filter_map(move |(i, (k, v))| {
            if !dedup {
                return Some((k.as_ref(), v));
            }
            if self.entries[..i].iter().any(|(k2, _)| k2 == k) {
                return None;
            }
            let last = self.entries[i..].iter().rev().find(|(k2, _)| k2 == k);
            Some((k.as_ref(), last.map_or(v, |(_, v2)| v2)))
        })
    }

    pub fn into_owned(self) -> Object<'static> {
        Object { entries: self.entries.into_iter().map(|(k, v)| (owned_str(k), v.into_owned())).collect() }
    }
}

fn has_duplicate_keys(entries: &[(Cow<'_, str>, Value<'_>)]) -> bool {
    if entries.len() < 2 {
        return false;
    }
    if entries.len() <= 16 {
        return entries.iter().enumerate().any(|(i, (k, _))| entries[..i].iter().any(|(k2, _)| k2 == k));
    }
    let mut seen = std::collections::HashSet::with_capacity(entries.len());
    entries.iter().any(|(k, _)| !seen.insert(k.as_ref()))
}

impl<'a> Value<'a> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Object<'a>> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value<'a>]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// `value.get(key)` for objects; `None` for anything else.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.as_object().and_then(|o| o.get(key))
    }

    /// `value.get("type")` as a string, the block/record discriminator everywhere in the inputs.
    pub fn type_str(&self) -> Option<&str> {
        self.get("type").and_then(Value::as_str)
    }

    /// Python truthiness.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Int(s) => s.bytes().any(|c| c.is_ascii_digit() && c != b'0'),
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.entries.is_empty(),
        }
    }

    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(b),
            Value::Int(s) => Value::Int(Cow::Owned(s.into_owned())),
            Value::Float(f) => Value::Float(f),
            Value::Str(s) => Value::Str(owned_str(s)),
            Value::Array(a) => Value::Array(a.into_iter().map(Value::into_owned).collect()),
            Value::Object(o) => Value::Object(o.into_owned()),
        }
    }

    pub fn str(s: impl Into<Cow<'a, str>>) -> Self {
        Value::Str(s.into())
    }

    /// Builds an object from `(key, value)` pairs (used by the non-Claude lexers).
    pub fn object<K: Into<Cow<'a, str>>>(pairs: impl IntoIterator<Item = (K, Value<'a>)>) -> Self {
        Value::Object(Object { entries: pairs.into_iter().map(|(k, v)| (k.into(), v)).collect() })
    }
}

/// Detaches a string, without allocating for the keys and type tags every record repeats.
fn owned_str(s: Cow<'_, str>) -> Cow<'static, str> {
    let common = match s.as_ref() {
        "type" => "type",
        "text" => "text",
        "thinking" => "thinking",
        "id" => "id",
        "name" => "name",
        "input" => "input",
        "content" => "content",
        "tool_use_id" => "tool_use_id",
        "is_error" => "is_error",
        "source" => "source",
        "media_type" => "media_type",
        "data" => "data",
        "signature" => "signature",
        "tool_use" => "tool_use",
        "tool_result" => "tool_result",
        "base64" => "base64",
        "image" => "image",
        "command" => "command",
        "description" => "description",
        "file_path" => "file_path",
        _ => return Cow::Owned(s.into_owned()),
    };
    Cow::Borrowed(common)
}

/// Which parts of a document to materialise; everything else is validated and skipped.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Schema {
    /// Build the whole subtree.
    Full,
    /// If an object, keep only these keys (each with its own schema); otherwise build it fully.
    Fields(&'static [(&'static str, Schema)]),
    /// Like `Fields`, but a non-object is skipped and read as `Null` (the caller only uses dicts).
    ObjectOnly(&'static [(&'static str, Schema)]),
}

/// A syntax error at a byte offset of the parsed text, worded like Python's `JSONDecodeError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonError {
    pub offset: usize,
    pub message: &'static str,
}

/// Parses one JSON document (surrounding whitespace allowed) restricted to `schema`.
///
/// The second result is true when a lone UTF-16 surrogate escape was replaced by U+FFFD (Python
/// keeps it and then fails to write it out).
pub(crate) fn parse_document(text: &str, schema: Schema) -> Result<(Value<'_>, bool), JsonError> {
    let (v, replaced, end) = parse_first(text, schema)?;
    if end != text.len() {
        return Err(JsonError { offset: end, message: "Extra data" });
    }
    Ok((v, replaced))
}

/// Parses the first JSON document of `text` (leading and trailing whitespace allowed); also
/// returns the offset just past it and its trailing whitespace, where any further data begins.
pub(crate) fn parse_first(text: &str, schema: Schema) -> Result<(Value<'_>, bool, usize), JsonError> {
    let mut p = Parser { src: text, b: text.as_bytes(), pos: 0, replaced_surrogate: false };
    p.skip_ws();
    if p.b.starts_with("\u{feff}".as_bytes()) {
        return Err(p.err("Unexpected UTF-8 BOM (decode using utf-8-sig)"));
    }
    let v = p.value(schema, 0)?;
    p.skip_ws();
    Ok((v, p.replaced_surrogate, p.pos))
}

struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    pos: usize,
    replaced_surrogate: bool,
}

impl<'a> Parser<'a> {
    fn err(&self, message: &'static str) -> JsonError {
        JsonError { offset: self.pos, message }
    }

    fn err_at(&self, offset: usize, message: &'static str) -> JsonError {
        JsonError { offset, message }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn value(&mut self, schema: Schema, depth: usize) -> Result<Value<'a>, JsonError> {
        match (schema, self.peek()) {
            (Schema::Fields(fields) | Schema::ObjectOnly(fields), Some(b'{')) => self.object_filtered(fields, depth),
            (Schema::ObjectOnly(_), _) => {
                self.skip(depth)?;
                Ok(Value::Null)
            }
            _ => self.full(depth),
        }
    }

    fn check_depth(&self, depth: usize) -> Result<(), JsonError> {
        if depth >= MAX_DEPTH { Err(self.err("maximum nesting depth exceeded")) } else { Ok(()) }
    }

    fn full(&mut self, depth: usize) -> Result<Value<'a>, JsonError> {
        match self.peek() {
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'{') => {
                self.check_depth(depth)?;
                let mut obj = Object::default();
                self.members(|p, key| {
                    let v = p.full(depth + 1)?;
                    obj.entries.push((key, v));
                    Ok(())
                })?;
                Ok(Value::Object(obj))
            }
            Some(b'[') => {
                self.check_depth(depth)?;
                let mut items = Vec::new();
                self.elements(|p| {
                    items.push(p.full(depth + 1)?);
                    Ok(())
                })?;
                Ok(Value::Array(items))
            }
            _ => self.scalar(),
        }
    }

    fn object_filtered(
        &mut self,
        fields: &'static [(&'static str, Schema)],
        depth: usize,
    ) -> Result<Value<'a>, JsonError> {
        self.check_depth(depth)?;
        let mut obj = Object::default();
        self.members(|p, key| {
            match fields.iter().find(|(name, _)| *name == key) {
                Some((_, sub)) => {
                    let v = p.value(*sub, depth + 1)?;
                    obj.entries.push((key, v));
                }
                None => p.skip(depth + 1)?,
            }
            Ok(())
        })?;
        Ok(Value::Object(obj))
    }

    /// Validates one value without building it.
    fn skip(&mut self, depth: usize) -> Result<(), JsonError> {
        match self.peek() {
            Some(b'"') => self.skip_string(),
            Some(b'{') => {
                self.check_depth(depth)?;
                self.members(|p, _| p.skip(depth + 1))
            }
            Some(b'[') => {
                self.check_depth(depth)?;
                self.elements(|p| p.skip(depth + 1))
            }
            _ => self.scalar().map(drop),
        }
    }

    /// Walks `{ "k": v, ... }`, calling `each` with the decoded key positioned on the value.
    fn members(
        &mut self,
        mut each: impl FnMut(&mut Self, Cow<'a, str>) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        self.pos += 1; // '{'
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.err("Expecting property name enclosed in double quotes"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.err("Expecting ':' delimiter"));
            }
            self.pos += 1;
            self.skip_ws();
            each(self, key)?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.err("Expecting ',' delimiter")),
            }
        }
    }

    /// Walks `[ v, ... ]`, calling `each` positioned on every element.
    fn elements(&mut self, mut each: impl FnMut(&mut Self) -> Result<(), JsonError>) -> Result<(), JsonError> {
        self.pos += 1; // '['
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            each(self)?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                }
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.err("Expecting ',' delimiter")),
            }
        }
    }

    fn scalar(&mut self) -> Result<Value<'a>, JsonError> {
        let rest = &self.b[self.pos..];
        let literal = |word: &[u8]| rest.starts_with(word);
        let (v, len) = match self.peek() {
            Some(b'n') if literal(b"null") => (Value::Null, 4),
            Some(b't') if literal(b"true") => (Value::Bool(true), 4),
            Some(b'f') if literal(b"false") => (Value::Bool(false), 5),
            Some(b'N') if literal(b"NaN") => (Value::Float(f64::NAN), 3),
            Some(b'I') if literal(b"Infinity") => (Value::Float(f64::INFINITY), 8),
            Some(b'-') if literal(b"-Infinity") => (Value::Float(f64::NEG_INFINITY), 9),
            Some(b'-' | b'0'..=b'9') => return self.number(),
            _ => return Err(self.err("Expecting value")),
        };
        self.pos += len;
        Ok(v)
    }

    /// Python's number grammar: `-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?`, longest valid prefix.
    fn number(&mut self) -> Result<Value<'a>, JsonError> {
        let start = self.pos;
        let b = self.b;
        let mut i = start;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => i = digits_end(b, i),
            _ => return Err(self.err("Expecting value")),
        }
        let mut is_float = false;
        if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            i = digits_end(b, i + 1);
            is_float = true;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            let mut j = i + 1;
            if let Some(b'+' | b'-') = b.get(j) {
                j += 1;
            }
            if b.get(j).is_some_and(u8::is_ascii_digit) {
                i = digits_end(b, j);
                is_float = true;
            }
        }
        self.pos = i;
        let text = &self.src[start..i];
        if is_float {
            // Python's float() is correctly rounded and overflows to inf, as Rust's parse does.
            let f = text.parse::<f64>().unwrap_or(f64::NAN);
            Ok(Value::Float(f))
        } else {
            Ok(Value::Int(Cow::Borrowed(text)))
        }
    }

    fn skip_string(&mut self) -> Result<(), JsonError> {
        let start = self.pos;
        let mut i = self.pos + 1;
        loop {
            i = scan_plain(self.b, i);
            match self.b.get(i) {
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(());
                }
                Some(b'\\') => i = self.check_escape(i)?,
                Some(_) => return Err(self.err_at(i, "Invalid control character at")),
                None => return Err(self.err_at(start, "Unterminated string starting at")),
            }
        }
    }

    /// Validates the escape at `i` (a backslash) and returns the index after it.
    fn check_escape(&self, i: usize) -> Result<usize, JsonError> {
        match self.b.get(i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
            Some(b'u') => self.hex4(i + 2).map(|_| i + 6),
            None => Err(self.err_at(i, "Unterminated string starting at")),
            Some(_) => Err(self.err_at(i, "Invalid \\escape")),
        }
    }

    fn hex4(&self, at: usize) -> Result<u32, JsonError> {
        let digits = self.b.get(at..at + 4);
        let parsed = digits.and_then(|d| {
            d.iter().try_fold(0u32, |acc, &c| {
                let v = (c as char).to_digit(16)?;
                Some(acc * 16 + v)
            })
        });
        parsed.ok_or_else(|| self.err_at(at - 1, "Invalid \\uXXXX escape"))
    }

    fn string(&mut self) -> Result<Cow<'a, str>, JsonError> {
        let start = self.pos;
        let first = scan_plain(self.b, start + 1);
        if self.b.get(first) == Some(&b'"') {
            self.pos = first + 1;
            return Ok(Cow::Borrowed(&self.src[start + 1..first]));
        }
        let mut out = String::with_capacity(first - start + 16);
        out.push_str(&self.src[start + 1..first]);
        let mut i = first;
        loop {
            match self.b.get(i) {
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => i = self.unescape(i, &mut out)?,
                Some(_) => return Err(self.err_at(i, "Invalid control character at")),
                None => return Err(self.err_at(start, "Unterminated string starting at")),
            }
            let next = scan_plain(self.b, i);
            out.push_str(&self.src[i..next]);
            i = next;
        }
    }

    /// Decodes the escape at `i` into `out`; returns the index after it.
    fn unescape(&mut self, i: usize, out: &mut String) -> Result<usize, JsonError> {
        let simple = match self.b.get(i + 1) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => return self.unescape_u(i, out),
            None => return Err(self.err_at(i, "Unterminated string starting at")),
            Some(_) => return Err(self.err_at(i, "Invalid \\escape")),
        };
        out.push(simple);
        Ok(i + 2)
    }

    fn unescape_u(&mut self, i: usize, out: &mut String) -> Result<usize, JsonError> {
        let hi = self.hex4(i + 2)?;
        let mut next = i + 6;
        let code = if (0xd800..0xdc00).contains(&hi) && self.b.get(next..next + 2) == Some(b"\\u") {
            match self.hex4(next + 2) {
                Ok(lo) if (0xdc00..0xe000).contains(&lo) => {
                    next += 6;
                    0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                }
                Ok(_) => hi,
                Err(e) => return Err(e),
            }
        } else {
            hi
        };
        match char::from_u32(code) {
            Some(c) => out.push(c),
            None => {
                self.replaced_surrogate = true;
                out.push('\u{fffd}');
            }
        }
        Ok(next)
    }
}

fn digits_end(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// Index of the first byte at or after `i` that is `"`, `\` or a control character (< 0x20).
///
/// `memchr2` (SIMD) finds the next quote or backslash; the span before it is then checked for
/// control characters with a loop the compiler vectorises. This is where most input bytes are
/// looked at.
#[inline]
fn scan_plain(b: &[u8], i: usize) -> usize {
    let rest = b.get(i..).unwrap_or_default();
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let span = &rest[..end];
    if has_control(span) {
        let at = span.iter().position(|&c| c < 0x20).unwrap_or(end);
        return i + at;
    }
    i + end
}

fn has_control(span: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut words = span.chunks_exact(8);
    let mut acc = 0u64;
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        let w = u64::from_le_bytes(word);
        // High bit set in a lane whose byte is below 0x20 (exact for bytes < 0x80; bytes >= 0x80
        // never set it because of `!w`).
        acc |= w.wrapping_sub(LO * 0x20) & !w & HI;
    }
    acc != 0 || words.remainder().iter().any(|&c| c < 0x20)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn full(s: &str) -> Value<'_> {
        parse_document(s, Schema::Full).unwrap().0
    }

    fn error(s: &str) -> JsonError {
        parse_document(s, Schema::Full).unwrap_err()
    }

    #[test]
    fn python_literals_and_numbers() {
        assert!(full("NaN").truthy());
        assert_eq!(full("-Infinity"), Value::Float(f64::NEG_INFINITY));
        assert_eq!(full("123456789012345678901234567890"), Value::Int("123456789012345678901234567890".into()));
        assert_eq!(full("1.5e3"), Value::Float(1500.0));
        assert_eq!(error("1.").message, "Extra data");
        assert_eq!(error("01").message, "Extra data");
        assert_eq!(error("-").message, "Expecting value");
    }

    #[test]
    fn strings_escapes_and_surrogates() {
        assert_eq!(full(r#""a\nb\u00e9""#), Value::str("a\nb\u{e9}"));
        assert_eq!(full(r#""\ud83d\ude00""#), Value::str("\u{1f600}"));
        let (v, replaced) = parse_document(r#""x\ud800y""#, Schema::Full).unwrap();
        assert_eq!(v, Value::str("x\u{fffd}y"));
        assert!(replaced);
        assert_eq!(error("\"a\u{1}\"").message, "Invalid control character at");
        assert_eq!(error(r#""\x""#).message, "Invalid \\escape");
        assert_eq!(error(r#""\u12""#).message, "Invalid \\uXXXX escape");
        assert_eq!(error(r#""abc"#).offset, 0);
    }

    #[test]
    fn glued_records_are_extra_data() {
        let e = error(r#"{"a":1}{"b":2}"#);
        assert_eq!((e.offset, e.message), (7, "Extra data"));
    }

    #[test]
    fn duplicate_keys_keep_first_position_last_value() {
        let v = full(r#"{"a":1,"b":2,"a":3}"#);
        let o = v.as_object().unwrap();
        let items: Vec<_> = o.iter_py().map(|(k, v)| (k.to_string(), v.clone())).collect();
        assert_eq!(items, vec![("a".into(), Value::Int("3".into())), ("b".into(), Value::Int("2".into()))]);
        assert_eq!(o.get("a"), Some(&Value::Int("3".into())));
    }

    #[test]
    fn schema_skips_unrequested_fields_but_validates_them() {
        const S: Schema = Schema::Fields(&[("keep", Schema::Full)]);
        let (v, _) = parse_document(r#"{"drop":[1,{"x":"y"}],"keep":"k"}"#, S).unwrap();
        assert_eq!(v.as_object().unwrap().entries.len(), 1);
        assert!(parse_document(r#"{"drop":[1,}],"keep":"k"}"#, S).is_err());
    }

    #[test]
    fn depth_is_bounded() {
        let deep = "[".repeat(5000);
        assert_eq!(error(&deep).message, "maximum nesting depth exceeded");
    }

    #[test]
    fn scan_plain_finds_specials_across_words() {
        let s = b"abcdefghijklmnop\"qr";
        assert_eq!(scan_plain(s, 0), 16);
        assert_eq!(scan_plain(b"abc\x01", 0), 3);
        assert_eq!(scan_plain("h\u{e9}llo w\u{f6}rld\\".as_bytes(), 0), 13);
    }
}
