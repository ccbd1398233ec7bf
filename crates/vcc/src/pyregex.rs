//! Translation of Python `re` syntax to the `regex` crate's, so `--grep` patterns written for
//! the reference mean the same thing here.
//!
//! Handled: `\Z` → `\z`, `\uXXXX`/`\UXXXXXXXX`/octal escapes, escaped punctuation as literals
//! (`\<` is `<` in Python but a word boundary in Rust), Python's `\s` (which also matches
//! `\x1c`–`\x1f`), `[` / `&` / `~` / `--` as literals inside classes, `]` first in a class, `{`
//! that does not start a repetition as a literal, `(?#…)` comments. Lookaround, backreferences,
//! atomic groups and possessive quantifiers have no equivalent and are rejected.

use crate::predicate::PatternError;

const PY_SPACE_EXTRA: &str = r"\x1c-\x1f";

pub(crate) fn translate(py: &str) -> Result<String, PatternError> {
    let chars: Vec<char> = py.chars().collect();
    let mut out = String::with_capacity(py.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i = match c {
            '\\' => escape(&chars, i, false, &mut out)?,
            '[' => class(&chars, i, &mut out)?,
            '(' => group(&chars, i, &mut out)?,
            '{' => brace(&chars, i, &mut out),
            '}' => {
                out.push_str(r"\}");
                i + 1
            }
            '*' | '+' | '?' if chars.get(i + 1) == Some(&'+') => {
                return Err(PatternError::Unsupported("possessive quantifiers"));
            }
            _ => {
                out.push(c);
                i + 1
            }
        };
    }
    Ok(out)
}

/// Translates the escape at `i`; returns the index after it.
fn escape(chars: &[char], i: usize, in_class: bool, out: &mut String) -> Result<usize, PatternError> {
    let Some(&c) = chars.get(i + 1) else {
        return Err(PatternError::Invalid("bad escape (end of pattern)".into()));
    };
    let hex = |n: usize| -> Result<u32, PatternError> {
        let digits: String = chars.get(i + 2..i + 2 + n).unwrap_or_default().iter().collect();
        if digits.len() == n && digits.chars().all(|d| d.is_ascii_hexdigit()) {
            u32::from_str_radix(&digits, 16).map_err(|e| PatternError::Invalid(e.to_string()))
        } else {
            Err(PatternError::Invalid(format!("incomplete escape \\{c}")))
        }
    };
    let mut next = i + 2;
    match c {
        'd' | 'D' | 'w' | 'W' | 'n' | 't' | 'r' | 'f' | 'v' => push_escape(out, c),
        'A' | 'B' if !in_class => push_escape(out, c),
        'b' if !in_class => push_escape(out, c),
        'b' => out.push_str(r"\x08"),
        's' if in_class => {
            out.push_str(r"\s");
            out.push_str(PY_SPACE_EXTRA);
        }
        's' => out.push_str(&format!(r"[\s{PY_SPACE_EXTRA}]")),
        'S' if in_class => return Err(PatternError::Unsupported(r"\S inside a character class")),
        'S' => out.push_str(&format!(r"[^\s{PY_SPACE_EXTRA}]")),
        'Z' if !in_class => out.push_str(r"\z"),
        'a' => out.push_str(r"\x07"),
        'x' => {
            push_code(out, hex(2)?);
            next += 2;
        }
        'u' => {
            push_code(out, hex(4)?);
            next += 4;
        }
        'U' => {
            push_code(out, hex(8)?);
            next += 8;
        }
        '0' => {
            let mut code = 0u32;
            while next < i + 4 && chars.get(next).is_some_and(|d| ('0'..='7').contains(d)) {
                code = code * 8 + chars[next].to_digit(8).unwrap_or(0);
                next += 1;
            }
            push_code(out, code);
        }
        '1'..='9' => return Err(PatternError::Unsupported("backreferences")),
        c if c.is_ascii_alphanumeric() => {
            return Err(PatternError::Invalid(format!("bad escape \\{c}")));
        }
        c => out.push_str(&regex::escape(&c.to_string())),
    }
    Ok(next)
}

fn push_escape(out: &mut String, c: char) {
    out.push('\\');
    out.push(c);
}

fn push_code(out: &mut String, code: u32) {
    out.push_str(&format!(r"\x{{{code:x}}}"));
}

/// A character class starting at `i` (`[`); Python takes `[`, `&`, `~` literally inside.
fn class(chars: &[char], i: usize, out: &mut String) -> Result<usize, PatternError> {
    out.push('[');
    let mut j = i + 1;
    if chars.get(j) == Some(&'^') {
        out.push('^');
        j += 1;
    }
    if chars.get(j) == Some(&']') {
        out.push_str(r"\]");
        j += 1;
    }
    while let Some(&c) = chars.get(j) {
        match c {
            ']' => {
                out.push(']');
                return Ok(j + 1);
            }
            '\\' => {
                j = escape(chars, j, true, out)?;
                continue;
            }
            '[' | '&' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '-' if chars.get(j + 1) == Some(&'-') => out.push_str(r"\-"),
            c => out.push(c),
        }
        j += 1;
    }
    Err(PatternError::Invalid("unterminated character set".into()))
}

/// A group opener at `i`; rejects what the Rust engine cannot do.
fn group(chars: &[char], i: usize, out: &mut String) -> Result<usize, PatternError> {
    if chars.get(i + 1) != Some(&'?') {
        out.push('(');
        return Ok(i + 1);
    }
    let rest: String = chars[i + 2..].iter().take(3).collect();
    if rest.starts_with('=') || rest.starts_with('!') || rest.starts_with("<=") || rest.starts_with("<!") {
        return Err(PatternError::Unsupported("lookaround"));
    }
    if rest.starts_with("P=") {
        return Err(PatternError::Unsupported("backreferences"));
    }
    if rest.starts_with('>') {
        return Err(PatternError::Unsupported("atomic groups"));
    }
    if rest.starts_with('(') {
        return Err(PatternError::Unsupported("conditional groups"));
    }
    if rest.starts_with('#') {
        let close = chars[i..].iter().position(|&c| c == ')');
        return match close {
            Some(at) => Ok(i + at + 1),
            None => Err(PatternError::Invalid("missing ), unterminated comment".into())),
        };
    }
    out.push_str("(?");
    let mut j = i + 2;
    // Inline flags: Python's `a` (ASCII), `L` and `u` have no counterpart; drop `u` (the default).
    while let Some(&c) = chars.get(j) {
        match c {
            'i' | 'm' | 's' | 'x' | '-' => out.push(c),
            'u' => {}
            'a' | 'L' => return Err(PatternError::Unsupported("the a/L inline flags")),
            _ => break,
        }
        j += 1;
    }
    Ok(j)
}

/// `{` starts a repetition only as `{m}`, `{m,}`, `{,n}` or `{m,n}`; otherwise it is literal.
fn brace(chars: &[char], i: usize, out: &mut String) -> usize {
    let mut j = i + 1;
    let digits = |j: &mut usize| {
        let start = *j;
        while chars.get(*j).is_some_and(char::is_ascii_digit) {
            *j += 1;
        }
        chars[start..*j].iter().collect::<String>()
    };
    let min = digits(&mut j);
    let mut max = None;
    if chars.get(j) == Some(&',') {
        j += 1;
        max = Some(digits(&mut j));
    }
    let is_repeat = chars.get(j) == Some(&'}') && !(min.is_empty() && max.is_none());
    if !is_repeat {
        out.push_str(r"\{");
        return i + 1;
    }
    let min = if min.is_empty() { "0".to_string() } else { min };
    match max {
        None => out.push_str(&format!("{{{min}}}")),
        Some(max) => out.push_str(&format!("{{{min},{max}}}")),
    }
    j + 1
}
