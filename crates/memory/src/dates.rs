//! Dates in text, resolved against the time the text was written (§3.4's deterministic fallback
//! `resolve_relative_date`), and the date guard that keeps supersession monotonic in time.
use std::sync::LazyLock;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc, Weekday};
use regex::Regex;

static RELATIVE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:(yesterday|today|tonight|this morning|this afternoon|this evening|last night|tomorrow)|(last|next|this) (week|month|year|weekend|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|a couple of) (days?|weeks?|months?|years?) (ago|from now))\b",
    )
    .expect("a valid pattern")
});

static ISO: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b(\d{4})-(\d{2})-(\d{2})\b").expect("a valid pattern"));

fn number(word: &str) -> Option<i64> {
    Some(match word.to_ascii_lowercase().as_str() {
        "a" | "an" | "one" => 1,
        "two" | "a couple of" => 2,
        "three" | "a few" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        "ten" => 10,
        n => n.parse().ok()?,
    })
}

fn weekday(w: &str) -> Option<Weekday> {
    w.to_ascii_lowercase().parse().ok()
}

fn midnight(d: NaiveDate) -> Option<DateTime<Utc>> {
    d.and_hms_opt(0, 0, 0).map(|t| Utc.from_utc_datetime(&t))
}

/// The day a text's first date refers to, anchored at `anchor` (when the text was written):
/// an ISO date as written, or "yesterday", "last week", "3 days ago", "next Friday", … resolved.
/// `None` when the text names no date.
pub fn resolve_relative_date(text: &str, anchor: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if let Some(c) = ISO.captures(text) {
        let d = NaiveDate::from_ymd_opt(c[1].parse().ok()?, c[2].parse().ok()?, c[3].parse().ok()?)?;
        return midnight(d);
    }
    let c = RELATIVE.captures(text)?;
    let today = anchor.date_naive();
    let day = if let Some(w) = c.get(1) {
        match w.as_str().to_ascii_lowercase().as_str() {
            "yesterday" | "last night" => today - Duration::days(1),
            "tomorrow" => today + Duration::days(1),
            _ => today,
        }
    } else if let (Some(dir), Some(unit)) = (c.get(2), c.get(3)) {
        let sign = match dir.as_str().to_ascii_lowercase().as_str() {
            "last" => -1,
            "next" => 1,
            _ => 0,
        };
        match unit.as_str().to_ascii_lowercase().as_str() {
            "week" => today + Duration::days(7 * sign),
            "weekend" => {
                // The Saturday of that weekend.
                let to_sat =
                    (Weekday::Sat.num_days_from_monday() as i64) - (today.weekday().num_days_from_monday() as i64);
                today + Duration::days(to_sat + 7 * sign.min(0) + if sign > 0 { 7 } else { 0 })
            }
            "month" => today.checked_add_months(chrono::Months::new(0)).and_then(|d| {
                if sign < 0 {
                    d.checked_sub_months(chrono::Months::new(1))
                } else if sign > 0 {
                    d.checked_add_months(chrono::Months::new(1))
                } else {
                    Some(d)
                }
            })?,
            "year" => NaiveDate::from_ymd_opt(today.year() + sign as i32, today.month(), today.day().min(28))?,
            w => {
                let wd = weekday(w)?;
                let diff = wd.num_days_from_monday() as i64 - today.weekday().num_days_from_monday() as i64;
                match sign {
                    -1 => today + Duration::days(if diff < 0 { diff } else { diff - 7 }),
                    1 => today + Duration::days(if diff > 0 { diff } else { diff + 7 }),
                    _ => today + Duration::days(diff),
                }
            }
        }
    } else {
        let n = number(c.get(4)?.as_str())?;
        let unit = c.get(5)?.as_str().to_ascii_lowercase();
        let sign = if c.get(6)?.as_str().eq_ignore_ascii_case("ago") { -1 } else { 1 };
        let days = match unit.trim_end_matches('s') {
            "day" => n,
            "week" => 7 * n,
            "month" => 30 * n,
            _ => 365 * n,
        };
        today + Duration::days(sign * days)
    };
    midnight(day)
}

/// The date guard: `newer` may supersede `older` only if it is not earlier in time (§3.4). Ties in
/// time go by position (session, seq), which the caller passes as `newer_after`.
pub fn may_supersede(older: DateTime<Utc>, newer: DateTime<Utc>, newer_after: bool) -> bool {
    newer > older || (newer == older && newer_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).expect("a valid time")
    }

    fn day(s: &str) -> Option<String> {
        // 2024-05-08 is a Wednesday.
        resolve_relative_date(s, at("2024-05-08T15:00:00Z")).map(|d| d.format("%Y-%m-%d").to_string())
    }

    #[test]
    fn relative_dates_resolve_against_the_message() {
        assert_eq!(day("I went yesterday").as_deref(), Some("2024-05-07"));
        assert_eq!(day("we met 3 days ago").as_deref(), Some("2024-05-05"));
        assert_eq!(day("last Friday was fun").as_deref(), Some("2024-05-03"));
        assert_eq!(day("next Monday then").as_deref(), Some("2024-05-13"));
        assert_eq!(day("last month").as_deref(), Some("2024-04-08"));
        assert_eq!(day("a couple of weeks ago").as_deref(), Some("2024-04-24"));
        assert_eq!(day("on 2023-01-02 it broke").as_deref(), Some("2023-01-02"));
        assert_eq!(day("nothing dated"), None);
    }

    #[test]
    fn the_date_guard_never_lets_the_older_win() {
        let (a, b) = (at("2024-01-01T00:00:00Z"), at("2024-01-02T00:00:00Z"));
        assert!(may_supersede(a, b, false));
        assert!(!may_supersede(b, a, true));
        assert!(may_supersede(a, a, true) && !may_supersede(a, a, false));
    }
}
