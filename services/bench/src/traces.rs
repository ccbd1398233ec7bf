//! Real agent trajectories for the context benchmarks: the mini-swe-agent × SWE-bench runs in
//! `shared/bench-data/agent-traces/` (read at bench time from the path given; never copied).
//!
//! A trajectory's messages become memex events: the system prompt a `system` event, the task a
//! `user_message`, each assistant turn an `assistant_message` (its THOUGHT) plus a `tool_call`
//! (tool `Bash`, the command of its ```bash block), and the next user message — the command's
//! output — the `tool_result` of that call.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::Context;
use memex_proto::v1 as pb;

/// The file inside the agent-traces folder.
pub const TRAJECTORIES: &str = "mini-swe-agent-gemini3pro-swebench-verified-500.jsonl.gz";

/// One event of a trajectory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    pub kind: &'static str,
    pub content: String,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
}

impl TraceEvent {
    pub fn new(kind: &'static str, content: impl Into<String>) -> TraceEvent {
        TraceEvent { kind, content: content.into(), tool_name: None, tool_call_id: None }
    }

    pub fn call(id: &str, command: impl Into<String>) -> TraceEvent {
        TraceEvent {
            tool_name: Some("Bash".into()),
            tool_call_id: Some(id.into()),
            ..TraceEvent::new("tool_call", command)
        }
    }

    pub fn result(id: &str, output: impl Into<String>) -> TraceEvent {
        TraceEvent { tool_call_id: Some(id.into()), ..TraceEvent::new("tool_result", output) }
    }

    pub fn input(&self) -> pb::EventInput {
        pb::EventInput {
            kind: self.kind.into(),
            content: self.content.clone(),
            tool_name: self.tool_name.clone().unwrap_or_default(),
            tool_call_id: self.tool_call_id.clone().unwrap_or_default(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trajectory {
    pub instance_id: String,
    pub events: Vec<TraceEvent>,
}

impl Trajectory {
    /// The agent's steps: runs of events starting at each assistant turn (the first step is the
    /// system prompt and the task).
    pub fn steps(&self) -> Vec<&[TraceEvent]> {
        let mut out = Vec::new();
        let mut start = 0;
        for (i, e) in self.events.iter().enumerate() {
            if i > start && e.kind == "assistant_message" {
                out.push(&self.events[start..i]);
                start = i;
            }
        }
        if start < self.events.len() {
            out.push(&self.events[start..]);
        }
        out
    }
}

/// The goal of a trajectory's task: the first line of its first user message that is not markup.
pub fn task_goal(events: &[TraceEvent]) -> String {
    events
        .iter()
        .find(|e| e.kind == "user_message")
        .and_then(|e| e.content.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('<')))
        .unwrap_or("resolve the issue")
        .chars()
        .take(300)
        .collect()
}

/// The trajectories file: `path` itself, or the known file inside the folder `path`.
pub fn trajectories_file(path: &Path) -> PathBuf {
    if path.is_dir() { path.join(TRAJECTORIES) } else { path.to_owned() }
}

/// Reads up to `limit` trajectories, skipping the first `skip`.
pub fn read_trajectories(path: &Path, skip: usize, limit: usize) -> anyhow::Result<Vec<Trajectory>> {
    let file = trajectories_file(path);
    let f = std::fs::File::open(&file).with_context(|| format!("cannot open {}", file.display()))?;
    let reader = BufReader::new(flate2::read::GzDecoder::new(f));
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        if out.len() >= limit {
            break;
        }
        let line = line.with_context(|| format!("{}: line {}", file.display(), i + 1))?;
        if i < skip || line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{}: line {} is not JSON", file.display(), i + 1))?;
        out.push(convert(&v));
    }
    Ok(out)
}

/// The command of an assistant message's ```bash block.
pub fn bash_command(text: &str) -> Option<String> {
    let start = text.find("```bash")? + "```bash".len();
    let rest = &text[start..];
    let end = rest.find("```")?;
    let cmd = rest[..end].trim();
    (!cmd.is_empty()).then(|| cmd.to_owned())
}

fn convert(v: &serde_json::Value) -> Trajectory {
    let instance_id = v.get("instance_id").and_then(|s| s.as_str()).unwrap_or("unknown").to_owned();
    let mut events = Vec::new();
    let mut pending: Option<String> = None;
    let mut calls = 0usize;
    let mut first_user = true;
    for m in v.get("messages").and_then(|m| m.as_array()).into_iter().flatten() {
        let role = m.get("role").and_then(|r| r.as_str()).unwrap_or("");
        let content = m.get("content").and_then(|c| c.as_str()).unwrap_or("").to_owned();
        match role {
            "system" => events.push(TraceEvent::new("system", content)),
            "assistant" => {
                let command = bash_command(&content);
                let thought = match content.find("```bash") {
                    Some(i) => content[..i].trim_end().to_owned(),
                    None => content.clone(),
                };
                events.push(TraceEvent::new("assistant_message", thought));
                if let Some(cmd) = command {
                    calls += 1;
                    let id = format!("call_{calls}");
                    events.push(TraceEvent::call(&id, cmd));
                    pending = Some(id);
                }
            }
            _ => match pending.take() {
                Some(id) => events.push(TraceEvent::result(&id, content)),
                None if first_user => {
                    first_user = false;
                    events.push(TraceEvent::new("user_message", content));
                }
                None => events.push(TraceEvent::new("user_message", content)),
            },
        }
    }
    Trajectory { instance_id, events }
}

/// A small deterministic generator (splitmix64): the benchmarks plant the same needles on every
/// run for a given seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn hex(&mut self, digits: usize) -> String {
        let mut s = String::with_capacity(digits);
        while s.len() < digits {
            s.push_str(&format!("{:016x}", self.next()));
        }
        s.truncate(digits);
        s
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_become_events() {
        let v = serde_json::json!({
            "instance_id": "astropy__astropy-12907",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "<pr_description>fix it</pr_description>"},
                {"role": "assistant", "content": "THOUGHT: look around.\n\n```bash\nls -la\n```"},
                {"role": "user", "content": "<returncode>0</returncode>\n<output>a\nb</output>"},
                {"role": "assistant", "content": "THOUGHT: done, no command"},
                {"role": "user", "content": "Please always provide EXACTLY ONE action"},
            ]
        });
        let t = convert(&v);
        let kinds: Vec<&str> = t.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            vec![
                "system",
                "user_message",
                "assistant_message",
                "tool_call",
                "tool_result",
                "assistant_message",
                "user_message"
            ]
        );
        assert_eq!(t.events[3].content, "ls -la");
        assert_eq!(t.events[2].content, "THOUGHT: look around.");
        assert_eq!(t.events[4].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(t.steps().len(), 3);
    }

    #[test]
    fn task_goals_skip_markup() {
        let events = vec![
            TraceEvent::new("system", "you are an agent"),
            TraceEvent::new("user_message", "<pr_description>\n\n  Fix the parser on empty input\nmore"),
        ];
        assert_eq!(task_goal(&events), "Fix the parser on empty input");
        assert_eq!(task_goal(&[]), "resolve the issue");
    }

    #[test]
    fn the_generator_is_deterministic() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!(a.hex(64), b.hex(64));
        assert_eq!(a.hex(64).len(), 64);
    }
}
