//! Python's `str()` and `repr()` of JSON values, and its number formatting.
//!
//! The reference prints tool parameters and UI summary values with `str(v)`, so `true` is `True`,
//! `1.0` stays `1.0`, `1e16` is `1e+16` and a nested list prints as `['a', 1]`. Matching those
//! bytes needs Python's rules, not JSON's.

use crate::json::Value;
use std::fmt::Write;

/// Appends `str(v)`.
pub(crate) fn py_str(v: &Value<'_>, out: &mut String) {
    match v {
        Value::Str(s) => out.push_str(s),
        _ => py_repr(v, out),
    }
}

/// `str(v)` as a new string.
pub(crate) fn to_py_str(v: &Value<'_>) -> String {
    let mut s = String::new();
    py_str(v, &mut s);
    s
}

/// Appends `repr(v)`.
pub(crate) fn py_repr(v: &Value<'_>, out: &mut String) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Int(digits) => out.push_str(py_int(digits)),
        Value::Float(f) => out.push_str(&py_float(*f)),
        Value::Str(s) => py_str_repr(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(obj) => {
            out.push('{');
            for (i, (k, item)) in obj.iter_py().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_str_repr(k, out);
                out.push_str(": ");
                py_repr(item, out);
            }
            out.push('}');
        }
    }
}

/// A JSON integer literal as Python prints the int it parses to (`-0` is `0`).
pub(crate) fn py_int(digits: &str) -> &str {
    if digits == "-0" { "0" } else { digits }
}

/// `repr(float)`: shortest round-trip digits, fixed notation for decimal exponents in
/// `-4 <= exp < 16`, otherwise `d.ddde+XX`.
pub(crate) fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. "1.5e-7", "-1e16", "0e0".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if neg {
        out.push('-');
    }
    let point = exp + 1; // digits are 0.d1d2... x 10^point
    if (-3..=16).contains(&point) {
        fixed_notation(&digits, point, &mut out);
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.abs());
    }
    out
}

fn fixed_notation(digits: &str, point: i32, out: &mut String) {
    if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
        out.push_str(digits);
        return;
    }
    let point = point as usize;
    if digits.len() <= point {
        out.push_str(digits);
        out.extend(std::iter::repeat_n('0', point - digits.len()));
        out.push_str(".0");
    } else {
        out.push_str(&digits[..point]);
        out.push('.');
        out.push_str(&digits[point..]);
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`; escapes for `\\`,
/// the quote, `\t\n\r`, and non-printable characters.
pub(crate) fn py_str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c if (c as u32) <= 0xff => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) <= 0xffff => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable` for one character, without the unassigned-code-point (Cn) check:
/// false for controls, format characters, separators other than space, and private use.
fn is_printable(c: char) -> bool {
    let u = c as u32;
    if u < 0x20 || (0x7f..=0xa0).contains(&u) {
        return false;
    }
    if u < 0x7f {
        return true;
    }
    const NOT_PRINTABLE: &[(u32, u32)] = &[
        (0x00ad, 0x00ad),
        (0x0600, 0x0605),
        (0x061c, 0x061c),
        (0x06dd, 0x06dd),
        (0x070f, 0x070f),
        (0x0890, 0x0891),
        (0x08e2, 0x08e2),
        (0x1680, 0x1680),
        (0x180e, 0x180e),
        (0x2000, 0x200f),
        (0x2028, 0x202f),
        (0x205f, 0x2064),
        (0x2066, 0x206f),
        (0x3000, 0x3000),
        (0xe000, 0xf8ff),
        (0xfeff, 0xfeff),
        (0xfff9, 0xfffb),
        (0x110bd, 0x110bd),
        (0x110cd, 0x110cd),
        (0x13430, 0x1343f),
        (0x1bca0, 0x1bca3),
        (0x1d173, 0x1d17a),
        (0xe0001, 0xe0001),
        (0xe0020, 0xe007f),
        (0xf0000, 0x10ffff),
    ];
    !NOT_PRINTABLE.iter().any(|&(lo, hi)| (lo..=hi).contains(&u))
}

/// `f"{n:,}"`.
pub(crate) fn thousands(n: i128) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::json::{Schema, parse_document};

    fn repr_of(json: &str) -> String {
        let v = parse_document(json, Schema::Full).unwrap().0;
        to_py_str(&v)
    }

    #[test]
    fn floats_follow_python_repr() {
        let cases = [
            (1.5, "1.5"),
            (1.0, "1.0"),
            (100000.0, "100000.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (123456789.125, "123456789.125"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
        ];
        for (f, want) in cases {
            assert_eq!(py_float(f), want, "{f:e}");
        }
    }

    #[test]
    fn containers_print_like_python() {
        assert_eq!(
            repr_of(r#"[3, 4, "a'b", "x", null, true, 1.0, {"k": [1]}]"#),
            r#"[3, 4, "a'b", 'x', None, True, 1.0, {'k': [1]}]"#
        );
        assert_eq!(repr_of(r#""tab\there""#), "tab\there");
        assert_eq!(repr_of(r#"["tab\there\u0001\u00a0é"]"#), r"['tab\there\x01\xa0é']");
        assert_eq!(repr_of("-0"), "0");
        assert_eq!(repr_of("{}"), "{}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(6231544), "6,231,544");
        assert_eq!(thousands(-1234), "-1,234");
    }
}
