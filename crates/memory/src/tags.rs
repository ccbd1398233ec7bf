//! Heuristic topic tags of a turn: what it names (files and their modules, error classes,
//! identifiers, test runs, packages), then keyphrases of its dialogue; each normalised
//! (kebab-case, plurals folded), most specific first. A short reply with no tags of its own
//! ("yes", "the second one") inherits the previous turn's (§3.2's lookback).
use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;

use regex::Regex;

use crate::facts::{CallKind, call_kind, shell};
use crate::lines::error_class;
use crate::model::Turn;

/// Tags per turn, at most (§3.2: 5–10).
pub const MAX_TAGS: usize = 10;
/// Tags a short reply inherits from the turn before.
const INHERITED: usize = 3;
/// A turn of fewer words than this, without tags of its own, is a reply to the one before.
const SHORT_REPLY_WORDS: usize = 8;

/// Words that never make a keyphrase: function words, and the verbs and fillers of agent dialogue.
const STOP: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "done",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "him",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "let",
    "lets",
    "need",
    "needs",
    "use",
    "used",
    "using",
    "make",
    "makes",
    "made",
    "see",
    "look",
    "looks",
    "looking",
    "check",
    "checking",
    "run",
    "running",
    "get",
    "gets",
    "got",
    "set",
    "want",
    "like",
    "think",
    "know",
    "going",
    "one",
    "two",
    "new",
    "first",
    "okay",
    "ok",
    "yes",
    "yeah",
    "sure",
    "thanks",
    "thank",
    "great",
    "good",
    "well",
    "really",
    "may",
    "might",
    "must",
    "shall",
    "ll",
    "ve",
    "re",
    "don",
    "doesn",
    "didn",
    "isn",
    "wasn",
    "won",
    "let's",
    "now",
    "next",
    "try",
    "trying",
    "still",
    "already",
    "actually",
    "seems",
    "seem",
    "way",
    "thing",
    "things",
    "something",
    "anything",
    "everything",
    "lot",
    "bit",
    "sounds",
    "sound",
    "hey",
    "hi",
    "hello",
    "wow",
    "oh",
    "haha",
    "lol",
    "fix",
    "fixed",
    "issue",
    "problem",
    "file",
    "files",
    "code",
    "line",
    "lines",
    "change",
    "changes",
    "update",
    "updated",
    "add",
    "added",
    "time",
    "work",
    "works",
    "working",
    "right",
    "able",
    "sure",
    "great",
    "nice",
    "much",
    "many",
    "every",
    "via",
    "etc",
    "will",
    "says",
    "said",
    "tell",
    "told",
    "take",
    "took",
    "keep",
    "kept",
    "go",
    "goes",
    "went",
    "come",
    "came",
    "back",
    "last",
    "since",
    "yet",
    "ever",
    "even",
    "though",
    "however",
    "instead",
    "maybe",
    "perhaps",
    "probably",
    "definitely",
    "today",
    "yesterday",
    "tomorrow",
    "day",
    "days",
    "week",
    "weeks",
    "year",
    "years",
    "thought",
    "command",
    "output",
    "result",
    "results",
];

static STOPSET: LazyLock<BTreeSet<&'static str>> = LazyLock::new(|| STOP.iter().copied().collect());

static MARKUP: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"</?[A-Za-z_][\w-]*>").expect("a valid pattern"));
static BACKTICK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`([^`\s]{2,60})`").expect("a valid pattern"));
static CAMEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+)\b").expect("a valid pattern"));
static SNAKE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b").expect("a valid pattern"));

/// Directory names too generic to be a module tag.
const GENERIC_DIRS: &[&str] = &[
    "",
    ".",
    "..",
    "src",
    "lib",
    "libs",
    "test",
    "tests",
    "testbed",
    "app",
    "apps",
    "pkg",
    "cmd",
    "internal",
    "home",
    "users",
    "root",
    "tmp",
    "repo",
    "workspace",
    "code",
    "project",
    "projects",
    "main",
    "crates",
    "packages",
    "dist",
    "build",
    "bin",
    "usr",
    "var",
    "etc",
    "opt",
    "private",
];

/// Folds an English plural to its singular (`tests` → `test`, `libraries` → `library`), leaving
/// words that only look plural (`status`, `analysis`, `process`) alone.
pub fn fold_plural(w: &str) -> String {
    if w.len() < 4 || !w.ends_with('s') || !w.is_ascii() {
        return w.to_owned();
    }
    for (suffix, keep) in [
        ("sses", "ss"),
        ("tches", "tch"),
        ("nches", "nch"),
        ("shes", "sh"),
        ("xes", "x"),
        ("zzes", "zz"),
        ("iases", "ias"),
        ("uses", "us"),
    ] {
        if let Some(stem) = w.strip_suffix(suffix) {
            return format!("{stem}{keep}");
        }
    }
    if let Some(stem) = w.strip_suffix("ies")
        && w.len() > 4
    {
        return format!("{stem}y");
    }
    if ["ss", "us", "is", "as", "os", "ys"].iter().any(|s| w.ends_with(s)) {
        return w.to_owned();
    }
    w[..w.len() - 1].to_owned()
}

/// A tag's canonical spelling: lowercase kebab-case, CamelCase split, `_` and spaces as `-`,
/// plurals folded word by word (not in file names). `None` for what cannot be a tag.
pub fn normalize_tag(raw: &str) -> Option<String> {
    let raw = raw.trim().trim_matches(|c: char| !c.is_alphanumeric() && c != '.' && c != '_');
    if raw.is_empty() {
        return None;
    }
    let is_file = raw.contains('.') && raw.rsplit('.').next().is_some_and(|ext| (1..=5).contains(&ext.len()));
    if is_file {
        // A file name is its own tag, as written (lowercased): `__init__.py`, `reproduce_issue.py`.
        let name = raw.to_lowercase();
        let ok = (2..=48).contains(&name.len())
            && name.chars().any(char::is_alphabetic)
            && !name.contains(char::is_whitespace);
        return ok.then_some(name);
    }
    let mut kebab = String::with_capacity(raw.len() + 4);
    let mut prev_lower = false;
    for c in raw.chars() {
        if c.is_uppercase() && prev_lower && !is_file {
            kebab.push('-');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        match c {
            '_' | ' ' | '-' | ':' | '/' if !kebab.ends_with('-') => kebab.push('-'),
            '_' | ' ' | '-' | ':' | '/' => {}
            c if c.is_alphanumeric() || c == '.' => kebab.extend(c.to_lowercase()),
            _ => {}
        }
    }
    let kebab = kebab.trim_matches(['-', '.']).to_owned();
    let tag = if is_file {
        kebab
    } else {
        kebab.split('-').filter(|w| !w.is_empty()).map(fold_plural).collect::<Vec<_>>().join("-")
    };
    let ok = (2..=48).contains(&tag.len()) && tag.chars().any(|c| c.is_alphabetic());
    ok.then_some(tag)
}

fn basename(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or(path)
}

fn module_of(path: &str) -> Option<&str> {
    let mut parts = path.trim_end_matches('/').rsplit('/');
    parts.next()?;
    let dir = parts.next()?;
    (!GENERIC_DIRS.contains(&dir.to_ascii_lowercase().as_str()) && !dir.starts_with('.')).then_some(dir)
}

/// Paths, test runs and packages a turn's calls name.
fn call_names(turn: &Turn) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut paths, mut tests, mut packages) = (Vec::new(), Vec::new(), Vec::new());
    for (tool, input) in &turn.calls {
        match call_kind(tool, input) {
            CallKind::Read(p) | CallKind::Write(p) => paths.push(p),
            CallKind::Edit(ps) => paths.extend(ps),
            CallKind::Patch { added, updated, deleted } => {
                paths.extend(added.into_iter().chain(updated).chain(deleted))
            }
            CallKind::Shell(line) => {
                let fx = shell::effects(&line);
                paths.extend(fx.created.into_iter().chain(fx.edited).chain(fx.deleted));
                for s in shell::simple_commands(&line) {
                    // `python x.py`, `node x.js`, `bash run.sh`: the script is what the turn is about.
                    let h = s.head().rsplit('/').next().unwrap_or("");
                    if matches!(
                        h,
                        "python" | "python3" | "node" | "bash" | "sh" | "ruby" | "go" | "deno" | "tsx" | "ts-node"
                    ) && let Some(script) = s.words.iter().skip(1).find(|w| !w.starts_with('-'))
                        && script.contains('.')
                        && !script.contains(' ')
                    {
                        paths.push(script.clone());
                    }
                }
                if let Some(t) = fx.test {
                    tests.push(t);
                }
                packages.extend(fx.installed.iter().map(|p| shell::package_name(p).0.to_owned()));
            }
            CallKind::Other => {}
        }
    }
    (paths, tests, packages)
}

/// RAKE keyphrases (Rose et al. 2010) of prose: runs of content words between stopwords and
/// punctuation, scored by word degree over frequency; at most `n`, best first.
pub fn keyphrases(text: &str, n: usize, user: bool) -> Vec<String> {
    let mut phrases: Vec<Vec<String>> = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for token in line.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-')) {
            let w = token.trim_matches(['\'', '-']).to_lowercase();
            let content = w.len() >= 3 && w.chars().all(char::is_alphabetic) && !STOPSET.contains(w.as_str());
            if content && cur.len() < 2 {
                cur.push(w);
            } else {
                if !cur.is_empty() {
                    phrases.push(std::mem::take(&mut cur));
                }
                if content {
                    cur.push(w);
                }
            }
            // Punctuation between tokens ends a phrase too.
        }
        if !cur.is_empty() {
            phrases.push(std::mem::take(&mut cur));
        }
    }
    let mut freq: HashMap<&str, f64> = HashMap::new();
    let mut degree: HashMap<&str, f64> = HashMap::new();
    for p in &phrases {
        for w in p {
            *freq.entry(w).or_default() += 1.0;
            *degree.entry(w).or_default() += p.len() as f64;
        }
    }
    let mut scored: Vec<(f64, usize, String)> = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, p) in phrases.iter().enumerate() {
        let joined = p.join(" ");
        if !seen.insert(joined.clone()) {
            continue;
        }
        let times = phrases.iter().filter(|q| *q == p).count() as f64;
        let score: f64 = p.iter().map(|w| degree[w.as_str()] / freq[w.as_str()]).sum::<f64>() * times;
        // A single word is a tag only when the text keeps coming back to it; a phrase only when
        // it recurs or the speaker is the user (whose words set the topic).
        let recurs = if p.len() == 1 { freq[p[0].as_str()] >= 3.0 && p[0].len() >= 5 } else { times >= 2.0 || user };
        if !recurs {
            continue;
        }
        scored.push((score, i, joined));
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(n).map(|(_, _, p)| p).collect()
}

/// A turn's own tags, most specific first: files, modules, error classes, identifiers, test
/// runs, packages, keyphrases.
pub fn own_tags(turn: &Turn) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let push = |raw: &str, out: &mut Vec<String>| {
        if out.len() < MAX_TAGS
            && let Some(t) = normalize_tag(raw)
            && !out.contains(&t)
            && !STOPSET.contains(t.as_str())
        {
            out.push(t);
        }
    };
    let (paths, tests, packages) = call_names(turn);
    for p in paths.iter().take(4) {
        push(basename(p), &mut out);
    }
    for p in paths.iter().take(4) {
        if let Some(m) = module_of(p) {
            push(m, &mut out);
        }
    }
    for p in turn.output_lines() {
        if let Some(c) = error_class(&p.text) {
            push(&c, &mut out);
        }
    }
    // Markup (`<pr_description>`, `<format_example>`) is structure, not subject matter.
    let prose = MARKUP.replace_all(&turn.prose(), " ").into_owned();
    let mut idents: Vec<String> = Vec::new();
    for c in BACKTICK.captures_iter(&prose).chain(CAMEL.captures_iter(&prose)).chain(SNAKE.captures_iter(&prose)) {
        let id = c[1].trim_end_matches("()").to_owned();
        if !idents.contains(&id) && !id.contains('/') {
            idents.push(id);
        }
    }
    for id in idents.iter().take(4) {
        push(id, &mut out);
    }
    for t in tests.iter().take(2) {
        let runner = t.split(' ').take(if t.starts_with("cargo") || t.starts_with("go") || t.starts_with("npm") {
            2
        } else {
            1
        });
        push(&runner.collect::<Vec<_>>().join("-"), &mut out);
    }
    for p in packages.iter().take(3) {
        push(p, &mut out);
    }
    for k in keyphrases(&prose, 2, turn.from_user) {
        push(&k, &mut out);
    }
    out
}

/// Turns before a turn whose tags it may take up (§3.2's lookback).
pub const LOOKBACK: usize = 5;
/// Tags a turn takes from the lookback's vocabulary, at most.
const REUSED: usize = 3;

/// Whether a turn mentions a tag: a file name literally, other tags by the stems of all their
/// words (one of at least four letters).
fn mentions(text_lower: &str, terms: &BTreeSet<String>, tag: &str) -> bool {
    if tag.contains('.') {
        return text_lower.contains(tag);
    }
    let words = memex_rank::tokenize(&tag.replace(['-', '/'], " "));
    !words.is_empty() && words.iter().any(|w| w.len() >= 4) && words.iter().all(|w| terms.contains(w))
}

/// Tags of each turn of a sequence. `lookback` holds the tags of the turns just before the first
/// (oldest first). A turn also takes up tags of the last few turns that it mentions (the
/// session's vocabulary, as the paper's tagger is shown the tags in use), and a short reply
/// without tags of its own takes the first tags of the turn before it.
pub fn tag_turns(turns: &[Turn], lookback: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut window: std::collections::VecDeque<Vec<String>> =
        lookback.iter().skip(lookback.len().saturating_sub(LOOKBACK)).cloned().collect();
    let mut out: Vec<Vec<String>> = Vec::with_capacity(turns.len());
    for t in turns {
        let mut tags = own_tags(t);
        let text = t.text();
        let lower = text.to_lowercase();
        let terms: BTreeSet<String> = memex_rank::tokenize(&text).into_iter().collect();
        let mut reused = 0;
        'window: for prev in window.iter().rev() {
            for tag in prev {
                if tags.len() >= MAX_TAGS || reused >= REUSED {
                    break 'window;
                }
                if !tags.contains(tag) && mentions(&lower, &terms, tag) {
                    tags.push(tag.clone());
                    reused += 1;
                }
            }
        }
        if tags.is_empty() && t.prose().split_whitespace().count() < SHORT_REPLY_WORDS {
            tags = window.back().map(|p| p.iter().take(INHERITED).cloned().collect()).unwrap_or_default();
        }
        window.push_back(tags.clone());
        if window.len() > LOOKBACK {
            window.pop_front();
        }
        out.push(tags);
    }
    out
}

/// The analyzer's content terms of a text, deduplicated and sorted (for Jaccard overlap).
pub fn keywords(text: &str) -> Vec<String> {
    let stop: BTreeSet<String> = memex_rank::query_terms("").into_iter().collect();
    let mut set = BTreeSet::new();
    memex_rank::for_each_term(text, |t| {
        if t.len() >= 3 && !t.chars().all(|c| c.is_ascii_digit()) && !STOPSET.contains(t) && !stop.contains(t) {
            set.insert(t.to_owned());
        }
    });
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::ev;
    use crate::turns::turns;

    #[test]
    fn normalization() {
        assert_eq!(normalize_tag("BuildPack").as_deref(), Some("build-pack"));
        assert_eq!(normalize_tag("query_vectors").as_deref(), Some("query-vector"));
        assert_eq!(normalize_tag("parse.rs").as_deref(), Some("parse.rs"));
        assert_eq!(normalize_tag("__init__.py").as_deref(), Some("__init__.py"));
        assert_eq!(normalize_tag("Reproduce_Issue.py").as_deref(), Some("reproduce_issue.py"));
        assert_eq!(normalize_tag("Libraries").as_deref(), Some("library"));
        assert_eq!(normalize_tag("status").as_deref(), Some("status"));
        assert_eq!(normalize_tag("TypeError").as_deref(), Some("type-error"));
        assert_eq!(normalize_tag("42"), None);
        assert_eq!(fold_plural("matches"), "match");
        assert_eq!(fold_plural("caches"), "cache");
        assert_eq!(fold_plural("analysis"), "analysis");
        assert_eq!(fold_plural("aliases"), "alias");
        assert_eq!(fold_plural("statuses"), "status");
    }

    #[test]
    fn keyphrases_of_dialogue() {
        let k = keyphrases("I signed up for a pottery class last week. The pottery class is on Fridays.", 3, false);
        assert_eq!(k.first().map(String::as_str), Some("pottery class"));
        assert!(keyphrases("I signed up for a pottery class.", 3, false).is_empty());
        assert_eq!(keyphrases("I signed up for a pottery class.", 3, true), vec!["pottery class"]);
        assert!(keyphrases("ok", 3, true).is_empty());
    }

    #[test]
    fn a_turn_is_tagged_by_what_it_names() {
        let events = vec![
            ev(1, "user_message", "The `separability_matrix` breaks for nested CompoundModel inputs"),
            ev(2, "tool_call", "python -m pytest astropy/modeling/tests/test_separable.py").tool("Bash", "c1"),
            ev(3, "tool_result", "E   AssertionError: arrays differ\n=== 1 failed in 0.2s ==="),
            ev(4, "tool_call", r#"{"file_path":"astropy/modeling/separable.py","old_string":"a","new_string":"b"}"#)
                .tool("Edit", "c2"),
            ev(5, "tool_result", "ok").call_id("c2"),
            ev(6, "user_message", "yes"),
        ];
        let t = turns(&events);
        let tags = tag_turns(&t, &[]);
        assert_eq!(
            tags[0][..6],
            ["separable.py", "modeling", "assertion-error", "separability-matrix", "compound-model", "pytest"]
                .map(String::from)
        );
        // "yes" has no tags of its own: it answers the turn before.
        assert_eq!(tags[1], tags[0][..INHERITED].to_vec());
    }
}
