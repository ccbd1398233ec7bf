//! Shell commands as facts see them: the simple commands of a command line, what each does to
//! files and packages, whether it runs tests, and a normalised form that names "the same
//! command" across retries.
use std::sync::LazyLock;

use regex::Regex;

/// One simple command: its words, quotes removed, after `cd`, `sudo`, `env X=1`, `timeout N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simple {
    pub words: Vec<String>,
    /// `>`/`>>` redirect targets (not `/dev/null`, not `&1`), and whether each appends.
    pub redirects: Vec<(String, bool)>,
}

impl Simple {
    pub fn head(&self) -> &str {
        self.words.first().map_or("", String::as_str)
    }

    fn arg(&self, i: usize) -> &str {
        self.words.get(i).map_or("", String::as_str)
    }
}

/// What one command line does, as far as facts go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandEffects {
    pub created: Vec<String>,
    pub edited: Vec<String>,
    pub deleted: Vec<String>,
    pub installed: Vec<String>,
    /// The test run, normalised (`pytest tests/test_x.py`), when the line runs tests.
    pub test: Option<String>,
    /// Only inspection (`ls`, `cat`, `grep`, `git diff`, …): not worth a command fact when it works.
    pub inspection_only: bool,
    /// The directory of a leading `cd`.
    pub cwd: Option<String>,
}

/// Splits a command line into words with shell quoting (single, double, backslash). Heredoc
/// bodies are dropped: only the first line of a command with `<<` is read.
fn words(line: &str) -> Vec<(String, bool)> {
    // (word, was_operator)
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut chars = line.chars().peekable();
    let push = |out: &mut Vec<(String, bool)>, cur: &mut String, has: &mut bool| {
        if *has {
            out.push((std::mem::take(cur), false));
            *has = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                has = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    cur.push(d);
                }
            }
            '"' => {
                has = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                cur.push(e);
                            }
                        }
                        _ => cur.push(d),
                    }
                }
            }
            '\\' => {
                if let Some(d) = chars.next() {
                    has = true;
                    cur.push(d);
                }
            }
            ' ' | '\t' => push(&mut out, &mut cur, &mut has),
            ';' | '&' | '|' | '\n' | '(' | ')' => {
                push(&mut out, &mut cur, &mut has);
                let mut op = c.to_string();
                if let Some(&d) = chars.peek()
                    && (d == c && (c == '&' || c == '|'))
                {
                    op.push(d);
                    chars.next();
                }
                out.push((op, true));
            }
            '>' | '<' => {
                // `2>` names a file descriptor, not an argument.
                let mut op = String::new();
                if has && c == '>' && cur.chars().all(|d| d.is_ascii_digit()) {
                    op = std::mem::take(&mut cur);
                    has = false;
                }
                push(&mut out, &mut cur, &mut has);
                op.push(c);
                while let Some(&d) = chars.peek() {
                    if d == '>' || d == '<' || d == '&' || (op.ends_with('&') && d.is_ascii_digit()) {
                        op.push(d);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push((op, false));
            }
            _ => {
                has = true;
                cur.push(c);
            }
        }
    }
    push(&mut out, &mut cur, &mut has);
    out
}

/// The simple commands of a command line, in order.
pub fn simple_commands(line: &str) -> Vec<Simple> {
    // A heredoc's body is data, not commands.
    let line = match line.find("<<") {
        Some(i) => {
            let end = line[i..].find('\n').map_or(line.len(), |j| i + j);
            &line[..end]
        }
        None => line,
    };
    let mut out = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut redirects = Vec::new();
    let mut toks = words(line).into_iter().peekable();
    let flush = |out: &mut Vec<Simple>, cur: &mut Vec<String>, redirects: &mut Vec<(String, bool)>| {
        let mut w = std::mem::take(cur);
        let r = std::mem::take(redirects);
        strip_prefixes(&mut w);
        if !w.is_empty() || !r.is_empty() {
            out.push(Simple { words: w, redirects: r });
        }
    };
    while let Some((t, op)) = toks.next() {
        if op {
            flush(&mut out, &mut cur, &mut redirects);
            continue;
        }
        if t.starts_with('>') || (t.len() > 1 && t[1..].starts_with('>') && t.starts_with(|c: char| c.is_ascii_digit()))
        {
            let append = t.contains(">>");
            if t.contains('&') {
                continue; // 2>&1
            }
            if let Some((target, false)) = toks.next()
                && target != "/dev/null"
            {
                redirects.push((target, append));
            }
            continue;
        }
        if t.starts_with('<') {
            toks.next(); // an input file or heredoc tag
            continue;
        }
        cur.push(t);
    }
    flush(&mut out, &mut cur, &mut redirects);
    out
}

fn strip_prefixes(w: &mut Vec<String>) {
    loop {
        let Some(h) = w.first() else { return };
        let drop = if h == "sudo" || h == "time" || h == "nohup" || h == "exec" || h == "command" {
            1
        } else if h == "timeout" {
            2
        } else if h == "env" {
            1 + w[1..].iter().take_while(|a| a.contains('=')).count()
        } else if h.contains('=') && !h.starts_with('-') && !h.starts_with('=') {
            1
        } else if matches!(h.as_str(), "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye")
            && w.get(1).is_some_and(|a| a == "run")
        {
            // `uv run pytest …`: the tool runs the command that follows.
            2
        } else if matches!(h.as_str(), "npx" | "bunx" | "pnpx") {
            1
        } else {
            0
        };
        if drop == 0 {
            return;
        }
        w.drain(..drop.min(w.len()));
    }
}

static TEST_RUNNER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:pytest|py\.test|tox|nox|jest|vitest|mocha|rspec|phpunit|ctest|nosetests|runtests\.py|\./runtests\.py|tests/runtests\.py|\./tests/runtests\.py)$",
    )
    .expect("a valid pattern")
});

/// `pytest`, `cargo test`, `go test`, `npm test`, `python -m pytest`, … : the runner's words.
fn test_runner(s: &Simple) -> Option<usize> {
    let h = s.head();
    let base = h.rsplit('/').next().unwrap_or(h);
    if TEST_RUNNER.is_match(base) || TEST_RUNNER.is_match(h) {
        return Some(1);
    }
    match base {
        "cargo" if matches!(s.arg(1), "test" | "nextest") => Some(if s.arg(1) == "nextest" { 3 } else { 2 }),
        "go" | "mvn" | "gradle" | "./gradlew" | "dotnet" | "mix" | "swift" if s.arg(1) == "test" => Some(2),
        "npm" | "yarn" | "pnpm" | "bun"
            if s.arg(1) == "test" || (s.arg(1) == "run" && s.arg(2).starts_with("test")) =>
        {
            Some(if s.arg(1) == "run" { 3 } else { 2 })
        }
        "make" if s.arg(1).starts_with("test") || s.arg(1) == "check" => Some(2),
        // Task runners: `mise run test`, `just test`, `task test`.
        "mise" | "task" | "just" | "invoke" | "nox"
            if s.arg(1).starts_with("test") || (s.arg(1) == "run" && s.arg(2).starts_with("test")) =>
        {
            Some(if s.arg(1) == "run" { 3 } else { 2 })
        }
        "python" | "python3" | "python2"
            if s.arg(1) == "-m" && matches!(s.arg(2), "pytest" | "unittest" | "nose" | "tox") =>
        {
            Some(3)
        }
        "python" | "python3"
            if s.arg(1).contains("runtests") || s.arg(1).rsplit('/').next().is_some_and(|f| f.starts_with("test_")) =>
        {
            Some(2)
        }
        _ if h == "bin/test" || h == "./bin/test" => Some(1),
        _ => None,
    }
}

/// A test run as a subject: the runner's name and its positional arguments (the tests it names),
/// flags dropped, so retries with other flags name the same run.
fn test_subject(s: &Simple, runner_words: usize) -> String {
    let h = s.head().rsplit('/').next().unwrap_or("");
    let runner = match (h, s.arg(1), s.arg(2)) {
        ("python" | "python3" | "python2", "-m", m) => m.to_owned(),
        ("python" | "python3" | "python2", f, _) => f.to_owned(),
        _ => s.words[..runner_words.min(s.words.len())].join(" "),
    };
    let mut parts = vec![runner];
    let mut skip_next = false;
    for w in s.words.iter().skip(runner_words) {
        if skip_next {
            skip_next = false;
            continue;
        }
        if w.starts_with('-') {
            // Flags with a separate value whose value is not a test.
            skip_next =
                matches!(w.as_str(), "-k" | "-m" | "-p" | "-c" | "--tb" | "-n" | "--settings" | "--parallel" | "-j");
            if w == "-k" {
                skip_next = false;
                parts.push("-k".into());
            }
            continue;
        }
        parts.push(w.clone());
    }
    parts.join(" ")
}

static INSTALLERS: &[(&str, &str)] = &[
    ("pip", "install"),
    ("pip3", "install"),
    ("npm", "install"),
    ("npm", "i"),
    ("npm", "add"),
    ("yarn", "add"),
    ("pnpm", "add"),
    ("pnpm", "install"),
    ("bun", "add"),
    ("cargo", "add"),
    ("cargo", "install"),
    ("apt-get", "install"),
    ("apt", "install"),
    ("go", "get"),
    ("go", "install"),
    ("gem", "install"),
    ("brew", "install"),
    ("conda", "install"),
    ("poetry", "add"),
    ("uv", "add"),
];

/// Packages an install command names (flags, requirement files and local paths left out).
fn installed(s: &Simple) -> Vec<String> {
    let mut w: &[String] = &s.words;
    let h = s.head().rsplit('/').next().unwrap_or("");
    // python -m pip install …, uv pip install …
    if (h.starts_with("python") && s.arg(1) == "-m" && s.arg(2).starts_with("pip")) || (h == "uv" && s.arg(1) == "pip")
    {
        w = &w[if h == "uv" { 1 } else { 2 }..];
    }
    let (Some(tool), Some(verb)) = (w.first(), w.get(1)) else { return Vec::new() };
    let tool = tool.rsplit('/').next().unwrap_or(tool);
    if !INSTALLERS.iter().any(|(t, v)| *t == tool && v == verb) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut skip_next = false;
    for a in &w[2..] {
        if skip_next {
            skip_next = false;
            continue;
        }
        if a.starts_with('-') {
            skip_next = matches!(
                a.as_str(),
                "-r" | "--requirement"
                    | "-c"
                    | "--constraint"
                    | "-e"
                    | "--editable"
                    | "-t"
                    | "--target"
                    | "-i"
                    | "--index-url"
            );
            continue;
        }
        if a == "." || a.starts_with("./") || a.starts_with('/') || a.ends_with(".txt") || a.ends_with(".whl") {
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// The package's name without a version or extras: `requests==2.31` → `requests`.
pub fn package_name(spec: &str) -> (&str, &str) {
    let cut = spec.find(['=', '<', '>', '~', '!', '[', ';']).unwrap_or(spec.len());
    let (name, rest) = spec.split_at(cut);
    // npm: name@version (but not a scope's leading @).
    if let Some(i) = name.get(1..).and_then(|n| n.find('@')) {
        return (&name[..=i], &name[i + 2..]);
    }
    (name, rest.trim_start_matches(['=', '<', '>', '~', '!']))
}

const INSPECTION: &[&str] = &[
    "ls", "cat", "head", "tail", "less", "more", "grep", "egrep", "rg", "ag", "find", "fd", "wc", "pwd", "echo",
    "printf", "which", "whereis", "type", "tree", "file", "stat", "du", "df", "env", "printenv", "true", "sort",
    "uniq", "cut", "awk", "nl", "diff", "cmp", "date", "whoami", "id", "uname", "ps", "sleep", "clear", "history",
    "cd", "sed", "xxd", "od", "hexdump", "jq", "column", "basename", "dirname", "realpath", "readlink",
];

fn is_inspection(s: &Simple) -> bool {
    let h = s.head().rsplit('/').next().unwrap_or("");
    if h == "sed" {
        return !s.words.iter().any(|w| w.starts_with("-i"));
    }
    if h == "git" {
        return matches!(
            s.arg(1),
            "status" | "diff" | "log" | "show" | "branch" | "grep" | "blame" | "ls-files" | "rev-parse" | "remote"
        );
    }
    INSPECTION.contains(&h) && s.redirects.is_empty()
}

fn looks_like_path(w: &str) -> bool {
    !w.is_empty() && !w.starts_with('-') && !w.contains('*') && !w.contains('$') && w.len() < 300
}

/// What a command line does.
pub fn effects(line: &str) -> CommandEffects {
    let cmds = simple_commands(line);
    let mut fx = CommandEffects { inspection_only: !cmds.is_empty(), ..Default::default() };
    for (i, s) in cmds.iter().enumerate() {
        if s.head() == "cd" && i == 0 {
            fx.cwd = s.words.get(1).cloned();
            continue;
        }
        let h = s.head().rsplit('/').next().unwrap_or("");
        if !is_inspection(s) && !s.words.is_empty() {
            fx.inspection_only = false;
        }
        for (target, append) in &s.redirects {
            if looks_like_path(target) && !target.starts_with("/tmp/") && !target.starts_with("/proc") {
                if *append {
                    fx.edited.push(target.clone())
                } else {
                    fx.created.push(target.clone())
                }
                fx.inspection_only = false;
            }
        }
        match h {
            "rm" | "unlink" => fx.deleted.extend(s.words[1..].iter().filter(|w| looks_like_path(w)).cloned()),
            "git" if s.arg(1) == "rm" => fx.deleted.extend(s.words[2..].iter().filter(|w| looks_like_path(w)).cloned()),
            "touch" => fx.created.extend(s.words[1..].iter().filter(|w| looks_like_path(w)).cloned()),
            "sed" | "perl" if s.words.iter().any(|w| w.starts_with("-i") || w == "-pi") => {
                if let Some(last) = s.words.last().filter(|w| looks_like_path(w) && s.words.len() > 2) {
                    fx.edited.push(last.clone());
                }
            }
            "cp" if s.words.len() >= 3 => {
                if let Some(last) = s.words.last().filter(|w| looks_like_path(w)) {
                    fx.created.push(last.clone());
                }
            }
            "mv" if s.words.len() == 3 && looks_like_path(&s.words[1]) && looks_like_path(&s.words[2]) => {
                fx.deleted.push(s.words[1].clone());
                fx.created.push(s.words[2].clone());
            }
            _ => {}
        }
        fx.installed.extend(installed(s));
        if fx.test.is_none()
            && let Some(n) = test_runner(s)
        {
            fx.test = Some(test_subject(s, n));
        }
    }
    if fx.test.is_some() || !fx.installed.is_empty() {
        fx.inspection_only = false;
    }
    fx
}

/// Scripts a command line runs: `python x.py`, `python3 -u x.py`, `node x.js`, `./x.py`.
pub fn scripts_run(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for s in simple_commands(line) {
        let h = s.head();
        let base = h.rsplit('/').next().unwrap_or(h);
        let script = if base.starts_with("python") || matches!(base, "node" | "deno" | "tsx" | "ts-node" | "bun") {
            s.words.iter().skip(1).find(|w| !w.starts_with('-')).cloned()
        } else if h.starts_with("./") && (h.ends_with(".py") || h.ends_with(".js")) {
            Some(h.to_owned())
        } else {
            None
        };
        if let Some(p) = script.filter(|p| p.contains('.')) {
            out.push(p);
        }
    }
    out
}

static CANNOT_REMOVE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"cannot remove '([^']+)': No such file or directory").expect("a valid pattern"));

/// The files of a failed `rm` that were removed all the same: every one but those it says were
/// not there. None when it failed for another reason (permissions, a directory).
pub fn removed_despite(paths: &[String], errors: &[String]) -> Vec<String> {
    let missing: Vec<&str> =
        errors.iter().filter_map(|e| CANNOT_REMOVE.captures(e)).filter_map(|c| c.get(1)).map(|m| m.as_str()).collect();
    let other = errors.iter().any(|e| e.contains("cannot remove") && !CANNOT_REMOVE.is_match(e));
    if missing.is_empty() || other {
        return Vec::new();
    }
    paths.iter().filter(|p| !missing.contains(&p.as_str())).cloned().collect()
}

static LEADING_CD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*cd\s+[^\s;&|]+\s*(?:&&|;)\s*").expect("a valid pattern"));
static TRAILING_FILTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\s*\|\s*(?:head|tail|less|more|tee|sort|uniq|wc|cat)\b[^|]*$").expect("a valid pattern")
});
static STDERR_TO_STDOUT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s*2>&1").expect("a valid pattern"));

/// A command line as a fact's subject, as written (quotes kept): its first line, without a
/// leading `cd DIR &&`, `2>&1` or trailing pipes into output filters (`| head`, `| tail -20`), so
/// a retry that only trims its output names the same command.
pub fn command_key(line: &str) -> String {
    // A multi-line argument (a description, a script) is not part of what names the command.
    let mut key = line.lines().next().unwrap_or("").trim().to_owned();
    while let Some(m) = LEADING_CD.find(&key) {
        key = key[m.end()..].to_owned();
    }
    key = STDERR_TO_STDOUT.replace_all(&key, "").into_owned();
    while let Some(m) = TRAILING_FILTER.find(&key) {
        key.truncate(m.start());
    }
    let key = key.trim();
    if key.chars().count() > 160 { key.chars().take(160).collect::<String>() + "…" } else { key.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_commands_split_and_strip() {
        let c = simple_commands("cd /repo && FOO=1 sudo python -m pytest tests/a.py -x 2>&1 | tail -n 20");
        let w: Vec<Vec<&str>> = c.iter().map(|s| s.words.iter().map(String::as_str).collect()).collect();
        assert_eq!(
            w,
            vec![vec!["cd", "/repo"], vec!["python", "-m", "pytest", "tests/a.py", "-x"], vec!["tail", "-n", "20"]]
        );
        let c = simple_commands("cat <<'EOF' > reproduce.py\nimport x\nprint('a > b')\nEOF");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].redirects, vec![("reproduce.py".to_owned(), false)]);
    }

    #[test]
    fn effects_of_command_lines() {
        let fx = effects("cd /testbed && python -m pytest tests/test_x.py::test_y -xvs 2>&1 | head -50");
        assert_eq!(fx.test.as_deref(), Some("pytest tests/test_x.py::test_y"));
        assert_eq!(fx.cwd.as_deref(), Some("/testbed"));
        assert!(!fx.inspection_only);
        assert_eq!(effects("cargo test -p memex-memory --lib").test.as_deref(), Some("cargo test"));
        assert_eq!(
            effects("pip install requests==2.31 -r req.txt 'flask>=2'").installed,
            vec!["requests==2.31", "flask>=2"]
        );
        assert_eq!(effects("python -m pip install -e . numpy").installed, vec!["numpy"]);
        let fx = effects("rm -rf build/ old.py && sed -i 's/a/b/' src/x.py && echo hi >> notes.md");
        assert_eq!(fx.deleted, vec!["build/", "old.py"]);
        assert_eq!(fx.edited, vec!["src/x.py", "notes.md"]);
        assert!(effects("ls -la && cat x.py | grep foo && git diff").inspection_only);
        assert!(!effects("python reproduce.py").inspection_only);
        assert_eq!(
            effects("./tests/runtests.py auth_tests --parallel 1").test.as_deref(),
            Some("./tests/runtests.py auth_tests")
        );
    }

    #[test]
    fn keys_name_retries_alike() {
        assert_eq!(command_key("cd /repo && python reproduce.py 2>&1 | tail -20"), "python reproduce.py");
        assert_eq!(command_key("python reproduce.py"), "python reproduce.py");
        assert_eq!(command_key("grep -r \"x y\" t/ | grep -B 1 441 | head -5"), "grep -r \"x y\" t/ | grep -B 1 441");
        assert_eq!(package_name("requests==2.31"), ("requests", "2.31"));
        assert_eq!(package_name("@types/node@20"), ("@types/node", "20"));
        assert_eq!(package_name("lodash"), ("lodash", ""));
    }
}
