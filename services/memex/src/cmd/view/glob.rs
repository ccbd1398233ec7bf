//! A small glob with Python `glob.glob(recursive=True)` semantics.
use regex::Regex;
use std::path::Path;

pub fn expand(pattern: &str) -> Vec<String> {
    if !pattern.contains(['*', '?', '[']) {
        return if Path::new(pattern).exists() { vec![pattern.to_string()] } else { Vec::new() };
    }
    let absolute = pattern.starts_with('/');
    let parts: Vec<&str> = pattern.split('/').filter(|p| !p.is_empty()).collect();
    let start = if absolute { "/".to_string() } else { String::new() };
    let mut out = Vec::new();
    walk(&start, &parts, &mut out);
    out.sort();
    out.dedup();
    out
}

fn walk(prefix: &str, parts: &[&str], out: &mut Vec<String>) {
    let Some((part, rest)) = parts.split_first() else {
        if !prefix.is_empty() {
            out.push(prefix.trim_end_matches('/').to_string());
        }
        return;
    };
    if *part == "**" {
        walk(prefix, rest, out);
        for dir in entries(prefix, "*").into_iter().filter(|d| Path::new(d).is_dir()) {
            walk(&format!("{dir}/"), parts, out);
        }
        return;
    }
    if !part.contains(['*', '?', '[']) {
        let next = format!("{prefix}{part}");
        if Path::new(&next).exists() {
            let sep = if rest.is_empty() { "" } else { "/" };
            walk(&format!("{next}{sep}"), rest, out);
        }
        return;
    }
    for entry in entries(prefix, part) {
        let sep = if rest.is_empty() { "" } else { "/" };
        if rest.is_empty() || Path::new(&entry).is_dir() {
            walk(&format!("{entry}{sep}"), rest, out);
        }
    }
}

/// Entries of directory `prefix` whose names match `part` (fnmatch).
fn entries(prefix: &str, part: &str) -> Vec<String> {
    let Some(re) = fnmatch(part) else {
        return Vec::new();
    };
    let dir = if prefix.is_empty() { "." } else { prefix };
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = read
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| (part.starts_with('.') || !n.starts_with('.')) && re.is_match(n))
        .map(|n| format!("{prefix}{n}"))
        .collect();
    names.sort();
    names
}

fn fnmatch(part: &str) -> Option<Regex> {
    let mut re = String::from("^");
    let mut chars = part.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            '[' => {
                let class: String = chars.by_ref().take_while(|&c| c != ']').collect();
                let class = class.strip_prefix('!').map_or(class.clone(), |c| format!("^{c}"));
                re.push_str(&format!("[{}]", class.replace('[', "\\[")));
            }
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    Regex::new(&format!("(?s){re}")).ok()
}
