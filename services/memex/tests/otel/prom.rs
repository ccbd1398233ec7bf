//! How Prometheus names the OTLP metrics memex exports, and which metric names a PromQL
//! expression selects: the dashboards and alerts are checked against the first with the second.
//!
//! The naming is the OpenTelemetry Collector's Prometheus exporter's (and Prometheus' own OTLP
//! receiver's, `translation_strategy: UnderscoreEscapingWithSuffixes`, its default): the name's
//! words joined by `_`; the unit's Prometheus word appended unless the name has it (`s` →
//! `_seconds`, `By` → `_bytes`; annotations such as `{event}` and the unit `1` add nothing);
//! `_total` for monotonic sums, `_ratio` for gauges of unit `1`; a histogram is three series,
//! `_bucket`, `_sum` and `_count`. Attribute keys become labels with `.` as `_`.
use std::collections::BTreeSet;

use opentelemetry_proto::tonic::metrics::v1::{Metric, metric::Data};

fn unit_word(unit: &str) -> &str {
    match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        "1" => "",
        other => other,
    }
}

fn per_unit_word(unit: &str) -> &str {
    match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

/// The Prometheus series names of one OTLP metric.
pub fn series_names(m: &Metric) -> Vec<String> {
    let mut words: Vec<String> =
        m.name.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_owned).collect();
    let mut units = m.unit.splitn(2, '/');
    if let Some(main) = units.next().map(str::trim).filter(|u| !u.is_empty() && !u.contains(['{', '}'])) {
        let w = unit_word(main);
        if !w.is_empty() && !words.iter().any(|x| x == w) {
            words.push(w.to_owned());
        }
    }
    if let Some(per) = units.next().map(str::trim).filter(|u| !u.is_empty() && !u.contains(['{', '}'])) {
        let w = per_unit_word(per);
        if !words.iter().any(|x| x == w) {
            words.push("per".into());
            words.push(w.to_owned());
        }
    }
    match &m.data {
        Some(Data::Sum(s)) if s.is_monotonic => {
            words.retain(|w| w != "total");
            words.push("total".into());
        }
        Some(Data::Gauge(_)) if m.unit == "1" => {
            words.retain(|w| w != "ratio");
            words.push("ratio".into());
        }
        _ => {}
    }
    let base = words.join("_");
    match &m.data {
        Some(Data::Histogram(_)) => vec![format!("{base}_bucket"), format!("{base}_sum"), format!("{base}_count")],
        _ => vec![base],
    }
}

/// Identifiers PromQL reserves: never metric names. The aggregation operators are among them, as
/// they may be followed by `by (…)` rather than by their `(`.
const KEYWORDS: [&str; 25] = [
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names an expression selects: identifiers outside label matchers (`{…}`), ranges
/// (`[…]`), strings and label lists, that are not functions, keywords or Grafana variables.
pub fn selected_metrics(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let next_non_space = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_group(&chars, i, '{', '}'),
            '[' => i = skip_group(&chars, i, '[', ']'),
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '$' => {
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let after = next_non_space(i);
                let paren = chars.get(after) == Some(&'(');
                if LABEL_LISTS.contains(&word.as_str()) {
                    if paren {
                        i = skip_group(&chars, after, '(', ')');
                    }
                } else if !paren && !KEYWORDS.contains(&word.as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn skip_string(chars: &[char], open: usize) -> usize {
    let quote = chars[open];
    let mut i = open + 1;
    while i < chars.len() && chars[i] != quote {
        i += if chars[i] == '\\' && quote != '`' { 2 } else { 1 };
    }
    i + 1
}

/// Past the group opened at `open`, strings inside included.
fn skip_group(chars: &[char], open: usize, o: char, c: char) -> usize {
    let mut depth = 0;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            x if x == o => depth += 1,
            x if x == c => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

#[test]
fn expressions_yield_their_metric_names_only() {
    let e = r#"histogram_quantile(0.99, sum by (le, rpc_method) (rate(rpc_server_duration_seconds_bucket{rpc_service=~"memex\\.v1\\..*", le!="}"}[$__rate_interval])))"#;
    assert_eq!(selected_metrics(e), BTreeSet::from(["rpc_server_duration_seconds_bucket".to_owned()]));
    let e = "sum(rate(a_total[5m])) / on (job) group_left (x) (sum(rate(b_total[5m] offset 1h)) + 1e3) > bool 0.5 and memex:slo:ratio_rate5m";
    let want: BTreeSet<String> = ["a_total", "b_total", "memex:slo:ratio_rate5m"].map(str::to_owned).into();
    assert_eq!(selected_metrics(e), want);
    assert_eq!(selected_metrics("max_over_time((memex_index_lag > bool 2000)[1h:1m])").len(), 1);
}

#[test]
fn otlp_names_translate_like_the_collectors_prometheus_exporter() {
    use opentelemetry_proto::tonic::metrics::v1::{Gauge, Histogram, Sum};
    let m = |name: &str, unit: &str, data: Data| Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(data),
        ..Default::default()
    };
    let counter = || Data::Sum(Sum { is_monotonic: true, ..Default::default() });
    let gauge = || Data::Gauge(Gauge::default());
    assert_eq!(
        series_names(&m("rpc.server.duration", "s", Data::Histogram(Histogram::default()))),
        ["rpc_server_duration_seconds_bucket", "rpc_server_duration_seconds_sum", "rpc_server_duration_seconds_count"]
    );
    assert_eq!(series_names(&m("memex.artifacts.bytes", "By", counter())), ["memex_artifacts_bytes_total"]);
    assert_eq!(series_names(&m("memex.events.appended", "", counter())), ["memex_events_appended_total"]);
    assert_eq!(series_names(&m("memex.index.lag", "{event}", gauge())), ["memex_index_lag"]);
    assert_eq!(series_names(&m("x.used", "1", gauge())), ["x_used_ratio"]);
    assert_eq!(series_names(&m("x.rate", "By/s", gauge())), ["x_rate_bytes_per_second"]);
    let updown = Data::Sum(Sum { is_monotonic: false, ..Default::default() });
    assert_eq!(series_names(&m("db.client.connection.count", "{connection}", updown)), ["db_client_connection_count"]);
}
