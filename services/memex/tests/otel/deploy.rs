//! `deploy/grafana/memex.json` and `deploy/prometheus/alerts.yaml`: valid for the tools that load
//! them (promtool parses every query and runs the alerts' unit tests), and querying only metrics
//! memex really exports (`check_names_against`, called with what the receiver collected).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::prom::selected_metrics;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("deploy/grafana/memex.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every PromQL query of the dashboard (panels' targets, in rows too).
fn dashboard_exprs() -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&dashboard(), &mut out);
    out
}

#[derive(serde::Deserialize)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(serde::Deserialize)]
struct Group {
    rules: Vec<Rule>,
}

#[derive(serde::Deserialize)]
struct Rule {
    record: Option<String>,
    expr: String,
}

/// The rules' expressions, and the names their recording rules define.
fn alert_rules() -> (Vec<String>, BTreeSet<String>) {
    let text = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yaml")).unwrap();
    let file: RuleFile = serde_saphyr::from_str(&text).unwrap();
    let rules: Vec<Rule> = file.groups.into_iter().flat_map(|g| g.rules).collect();
    let recorded = rules.iter().filter_map(|r| r.record.clone()).collect();
    (rules.into_iter().map(|r| r.expr).collect(), recorded)
}

/// promtool from `scripts/install-promtool.sh` (or `PROMTOOL`, or PATH); None (the test is
/// skipped) only outside CI.
fn promtool() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("PROMTOOL").map(PathBuf::from),
        Some(root().join("tools/prometheus/usr/bin/promtool")),
        Some(PathBuf::from("promtool")),
    ];
    let found = candidates.into_iter().flatten().find(|p| Command::new(p).arg("--version").output().is_ok());
    if found.is_none() {
        let required = std::env::var_os("REQUIRE_DB").is_some() || std::env::var_os("CI").is_some();
        assert!(!required, "promtool is missing: run scripts/install-promtool.sh (make test does)");
        eprintln!("SKIP: no promtool (run scripts/install-promtool.sh)");
    }
    found
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?}:\n{text}");
}

#[test]
fn alert_rules_pass_promtool_checks_and_unit_tests() {
    let Some(promtool) = promtool() else { return };
    let dir = root().join("deploy/prometheus");
    run(Command::new(&promtool).args(["check", "rules", "alerts.yaml"]).current_dir(&dir));
    run(Command::new(&promtool).args(["test", "rules", "alerts_test.yaml"]).current_dir(&dir));
}

/// Every dashboard query parses: promtool checks them as the expressions of recording rules.
#[test]
fn dashboard_queries_are_valid_promql() {
    let Some(promtool) = promtool() else { return };
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in dashboard_exprs().iter().enumerate() {
        // Grafana's interval variable, as Grafana would fill it in.
        let e = e.replace("$__rate_interval", "5m");
        rules.push_str(&format!("      - record: dashboard:query_{i}\n        expr: {}\n", serde_json::json!(e)));
    }
    let path = std::env::temp_dir().join(format!("memex-dashboard-rules-{}.yaml", std::process::id()));
    std::fs::write(&path, rules).unwrap();
    run(Command::new(&promtool).args(["check", "rules"]).arg(&path));
    let _ = std::fs::remove_file(path);
}

#[test]
fn dashboard_is_a_grafana_dashboard_over_one_prometheus_datasource() {
    let d = dashboard();
    assert_eq!(d["uid"], "memex-overview");
    let vars = d["templating"]["list"].as_array().unwrap();
    assert!(vars.iter().any(|v| v["name"] == "datasource" && v["type"] == "datasource" && v["query"] == "prometheus"));
    let panels = d["panels"].as_array().unwrap();
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel id {} twice", p["id"]);
        let g = &p["gridPos"];
        assert!(g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24, "{}: wider than the grid", p["title"]);
        titles.insert(p["title"].as_str().unwrap().to_owned());
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}: no query", p["title"]);
        let refs: BTreeSet<&str> = targets.iter().map(|t| t["refId"].as_str().unwrap()).collect();
        assert_eq!(refs.len(), targets.len(), "{}: refIds", p["title"]);
    }
    for row in ["RPCs", "Ingest", "Derived state lag", "Caches", "Postgres", "Packs"] {
        assert!(titles.contains(row), "no {row} row");
    }
}

/// Every metric a dashboard query or a rule selects is exported (by its Prometheus name) or
/// recorded by a rule of alerts.yaml.
pub fn check_names_against(exported: &BTreeSet<String>) {
    let (rules, recorded) = alert_rules();
    let mut missing = Vec::new();
    let all = dashboard_exprs().into_iter().map(|e| ("dashboard", e)).chain(rules.into_iter().map(|e| ("alerts", e)));
    for (origin, expr) in all {
        let names = selected_metrics(&expr);
        assert!(!names.is_empty(), "{origin}: no metric in {expr}");
        for n in names {
            let known = if n.contains(':') { recorded.contains(&n) } else { exported.contains(&n) };
            if !known {
                missing.push(format!("{origin}: {n}"));
            }
        }
    }
    assert!(missing.is_empty(), "queried but not exported: {missing:?}\nexported: {exported:?}");
}
