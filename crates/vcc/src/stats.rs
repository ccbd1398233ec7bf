//! The full view's `[stats]` footer, accumulated record by record.
//!
//! It reproduces the reference's arithmetic, including its quirks: only the first chunk of a
//! streamed message contributes usage, model and timestamp; `duration` is max − min of the
//! timestamp *strings*; `effective` is a float sum truncated to an integer.

use crate::ir::SEPARATOR;
use crate::json::Value;
use crate::pyfmt::thousands;
use crate::record::RecStats;
use std::collections::BTreeSet;

#[derive(Debug, Default, Clone)]
pub(crate) struct ChainStats {
    api_calls: u64,
    tool_uses: u64,
    input: i128,
    cache_read: i128,
    cache_create: i128,
    output: i128,
    models: BTreeSet<String>,
    timestamps: Timestamps,
    subagent_tokens: i128,
}

/// Enough of Python's `min()`/`max()` over the truthy timestamps to reproduce `duration`.
#[derive(Debug, Default, Clone)]
struct Timestamps {
    count: usize,
    all_strings: bool,
    min: Option<String>,
    max: Option<String>,
}

impl ChainStats {
    /// Adds one (merged) record.
    pub fn add(&mut self, s: &RecStats<'_>) {
        if let Some(ts) = s.timestamp.as_ref().filter(|t| t.truthy()) {
            self.timestamps.add(ts);
        }
        if let Some(usage) = s.usage.as_ref().filter(|u| u.truthy()) {
            self.api_calls += 1;
            self.add_usage(usage);
        }
        if let Some(Value::Str(model)) = s.model.as_ref()
            && !model.is_empty()
        {
            self.models.insert(model.to_string());
        }
        self.tool_uses += s.tool_uses;
        self.subagent_tokens += s.subagent_tokens.unwrap_or(0);
    }

    /// `tool_use` blocks of a later chunk merged into an earlier record.
    pub fn add_tool_uses(&mut self, n: u64) {
        self.tool_uses += n;
    }

    fn add_usage(&mut self, usage: &Value<'_>) {
        let Some(obj) = usage.as_object() else { return };
        for (key, v) in obj.iter_py() {
            let n = match v {
                Value::Int(digits) => digits.parse::<i128>().unwrap_or(0),
                Value::Bool(b) => i128::from(*b),
                _ => continue,
            };
            let slot = match key {
                "input_tokens" => &mut self.input,
                "cache_read_input_tokens" => &mut self.cache_read,
                "cache_creation_input_tokens" => &mut self.cache_create,
                "output_tokens" => &mut self.output,
                _ => continue,
            };
            *slot += n;
        }
    }

    /// The footer lines (starting with the separator), or `None` without API calls.
    pub fn footer(&self) -> Option<Vec<String>> {
        if self.api_calls == 0 {
            return None;
        }
        let models: Vec<&str> = self.models.iter().map(String::as_str).collect();
        let mut lines = vec![
            SEPARATOR.to_string(),
            "[stats]".into(),
            String::new(),
            format!("model: {}", models.join(", ")),
            format!("api_calls: {}  tool_uses: {}", self.api_calls, self.tool_uses),
        ];
        if let Some(secs) = self.timestamps.duration() {
            let (m, s) = (secs.div_euclid(60), secs.rem_euclid(60));
            lines.push(if m != 0 { format!("duration: {m}m{s:02}s") } else { format!("duration: {s}s") });
        }
        self.token_lines(&mut lines);
        Some(lines)
    }

    fn token_lines(&self, lines: &mut Vec<String>) {
        let (inp, cr, cc, out) = (self.input, self.cache_read, self.cache_create, self.output);
        let own = inp + cr + cc + out;
        let own_eff = (inp as f64 * 1.0 + cr as f64 * 0.1 + cc as f64 * 1.25 + out as f64 * 5.0).trunc() as i128;
        let sub = self.subagent_tokens;
        let pfx = if sub != 0 { "  " } else { "" };
        if sub != 0 {
            lines.extend([
                String::new(),
                "Subagents:".into(),
                format!("  total: {}", thousands(sub)),
                String::new(),
                "Main:".into(),
            ]);
        }
        let parts: Vec<String> = [("input", inp), ("cache_read", cr), ("cache_create", cc)]
            .into_iter()
            .filter(|(_, n)| *n != 0)
            .map(|(label, n)| format!("{label}: {}", thousands(n)))
            .collect();
        if !parts.is_empty() {
            lines.push(format!("{pfx}{}", parts.join("  ")));
        }
        lines.push(format!("{pfx}output: {}", thousands(out)));
        lines.push(format!("{pfx}{}", total_line(own, own_eff)));
        if sub != 0 {
            lines.extend([String::new(), "All:".into(), format!("  {}", total_line(own + sub, own_eff + sub))]);
        }
    }
}

fn total_line(raw: i128, eff: i128) -> String {
    format!("total: {} (effective: {})", thousands(raw), thousands(eff))
}

impl Timestamps {
    fn add(&mut self, ts: &Value<'_>) {
        if self.count == 0 {
            self.all_strings = true;
        }
        self.count += 1;
        let Value::Str(s) = ts else {
            self.all_strings = false;
            return;
        };
        if self.min.as_deref().is_none_or(|m| s.as_ref() < m) {
            self.min = Some(s.to_string());
        }
        if self.max.as_deref().is_none_or(|m| s.as_ref() > m) {
            self.max = Some(s.to_string());
        }
    }

    /// Whole seconds from the smallest to the largest timestamp string, if Python's
    /// `datetime.fromisoformat` would have parsed both.
    fn duration(&self) -> Option<i64> {
        if self.count < 2 || !self.all_strings {
            return None;
        }
        let t0 = IsoTime::parse(&self.min.as_ref()?.replace('Z', "+00:00"))?;
        let t1 = IsoTime::parse(&self.max.as_ref()?.replace('Z', "+00:00"))?;
        if t0.offset_us.is_some() != t1.offset_us.is_some() {
            return None; // aware minus naive raises TypeError
        }
        let micros = t1.utc_micros() - t0.utc_micros();
        Some((micros / 1_000_000) as i64)
    }
}

/// The subset of ISO 8601 that `datetime.fromisoformat` accepts in its extended form.
#[derive(Debug, PartialEq, Eq)]
struct IsoTime {
    local_micros: i128,
    offset_us: Option<i128>,
}

impl IsoTime {
    fn parse(s: &str) -> Option<IsoTime> {
        let b = s.as_bytes();
        let num = |from: usize, len: usize| -> Option<i64> {
            let part = b.get(from..from + len)?;
            part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')))
        };
        let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
        if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') || !valid_date(y, mo, d) {
            return None;
        }
        let days = days_from_civil(y, mo, d);
        let mut micros = i128::from(days) * 86_400_000_000;
        let mut offset_us = None;
        if b.len() > 10 {
            let (secs, tz) = parse_time(s.get(11..)?)?;
            micros += secs;
            offset_us = tz;
        }
        Some(IsoTime { local_micros: micros, offset_us })
    }

    fn utc_micros(&self) -> i128 {
        self.local_micros - self.offset_us.unwrap_or(0)
    }
}

/// `HH[:MM[:SS[.ffffff]]]` plus an optional `±HH:MM[:SS[.ffffff]]` offset; returns micros.
fn parse_time(s: &str) -> Option<(i128, Option<i128>)> {
    let split = s.find(['+', '-']);
    let (time, tz) = match split {
        Some(at) => (&s[..at], Some(&s[at..])),
        None => (s, None),
    };
    let local = clock_micros(time, 23)?;
    let offset = match tz {
        None => None,
        Some(tz) => {
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            Some(sign * clock_micros(&tz[1..], 23)?)
        }
    };
    Some((local, offset))
}

fn clock_micros(s: &str, max_hour: i64) -> Option<i128> {
    let (hms, frac) = match s.split_once(['.', ',']) {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (s, None),
    };
    let fields: Vec<&str> = hms.split(':').collect();
    if fields.is_empty() || fields.len() > 3 || fields.iter().any(|f| f.len() != 2) {
        return None;
    }
    let vals: Option<Vec<i64>> = fields.iter().map(|f| f.parse::<i64>().ok()).collect();
    let vals = vals?;
    let (h, m, sec) = (vals[0], *vals.get(1).unwrap_or(&0), *vals.get(2).unwrap_or(&0));
    if h > max_hour || m > 59 || sec > 59 {
        return None;
    }
    let mut micros = i128::from((h * 60 + m) * 60 + sec) * 1_000_000;
    if let Some(frac) = frac {
        if fields.len() != 3 || frac.is_empty() || !frac.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let six: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
        micros += six.parse::<i128>().ok()?;
    }
    Some(micros)
}

fn valid_date(y: i64, m: i64, d: i64) -> bool {
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    y >= 1 && (1..=12).contains(&m) && d >= 1 && d <= days[(m - 1) as usize]
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ts(s: &str) -> Value<'_> {
        Value::str(s)
    }

    #[test]
    fn duration_from_iso_strings() {
        let mut t = Timestamps::default();
        t.add(&ts("2026-02-07T00:27:51.475Z"));
        t.add(&ts("2026-02-07T01:08:56.999Z"));
        assert_eq!(t.duration(), Some(41 * 60 + 5));
    }

    #[test]
    fn duration_needs_two_parseable_strings() {
        let mut t = Timestamps::default();
        t.add(&ts("2026-02-07T00:27:51Z"));
        assert_eq!(t.duration(), None);
        t.add(&Value::Int("5".into()));
        assert_eq!(t.duration(), None);
        let mut bad = Timestamps::default();
        bad.add(&ts("yesterday"));
        bad.add(&ts("today"));
        assert_eq!(bad.duration(), None);
    }

    #[test]
    fn iso_offsets_and_days() {
        let a = IsoTime::parse("2024-03-01T00:00:00+01:00").unwrap();
        let b = IsoTime::parse("2024-02-29T23:00:00+00:00").unwrap();
        assert_eq!(a.utc_micros(), b.utc_micros());
        assert!(IsoTime::parse("2023-02-29T00:00:00").is_none());
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }
}
