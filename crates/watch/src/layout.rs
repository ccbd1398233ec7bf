//! Which files are traces, how each is read, which memex session each version of a file is, and
//! which file a sub-agent's trace belongs to. Pure: paths in, names out.

use std::path::{Path, PathBuf};

use memex_vcc::{InputFormat, TraceFormat};

/// How a trace file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// JSON lines, appended to (Claude Code, Codex CLI, memex events): `*.jsonl`.
    Lines,
    /// One JSON document rewritten whole (Gemini CLI): `*.json`.
    Document,
}

/// How `path` is read under `format`, or `None` if it is not a trace to follow.
pub fn shape(path: &Path, format: InputFormat) -> Option<Shape> {
    let ext = path.extension().and_then(|e| e.to_str())?;
    match (ext, format) {
        ("jsonl", InputFormat::Gemini) => None,
        ("jsonl", _) => Some(Shape::Lines),
        ("json", InputFormat::Auto | InputFormat::Gemini) => Some(Shape::Document),
        _ => None,
    }
}

/// The session of version `version` (1, 2, …) of the trace at `path` in `namespace`: a UUID
/// derived from the three, so that a restarted watcher finds the sessions it created without
/// keeping any state of its own (a version-8, "custom", UUID).
pub fn session_id(namespace: &str, path: &Path, version: u32) -> String {
    let mut h = blake3::Hasher::new();
    for part in [namespace.as_bytes(), path.as_os_str().as_encoded_bytes(), &version.to_le_bytes()] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&h.finalize().as_bytes()[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(bytes).to_string()
}

/// Whether `path` is a Claude Code sub-agent's trace (`agent-<id>.jsonl`, either flat beside its
/// parent, as before 2.1, or under `<parent session>/subagents/`).
pub fn is_subagent(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("agent-") && n.ends_with(".jsonl"))
}

/// The trace a sub-agent's trace belongs to: `<project>/<session>.jsonl` for
/// `<project>/<session>/subagents/agent-<id>.jsonl`; for a flat `<project>/agent-<id>.jsonl`,
/// `<project>/<sessionId>.jsonl`, where `session_hint` is the `sessionId` its records carry.
pub fn parent_trace(path: &Path, session_hint: Option<&str>) -> Option<PathBuf> {
    if !is_subagent(path) {
        return None;
    }
    let dir = path.parent()?;
    if dir.file_name().is_some_and(|n| n == "subagents") {
        let session_dir = dir.parent()?;
        let name = session_dir.file_name()?.to_str()?;
        return Some(session_dir.parent()?.join(format!("{name}.jsonl")));
    }
    let hint = session_hint.filter(|s| !s.is_empty() && !s.contains(['/', '\\']) && *s != "." && *s != "..")?;
    Some(dir.join(format!("{hint}.jsonl")))
}

/// The agent id a session gets when the watcher is not told one: who writes such traces.
pub fn default_agent(format: TraceFormat) -> &'static str {
    match format {
        TraceFormat::Claude => "claude-code",
        TraceFormat::Codex => "codex",
        TraceFormat::Gemini => "gemini-cli",
        TraceFormat::Memex => "memex",
    }
}

/// The session's metadata: which file and version it holds, and what it is linked to.
pub fn session_metadata(path: &Path, version: u32, previous: Option<&str>, parent_file: Option<&Path>) -> String {
    let mut m = serde_json::Map::new();
    m.insert("file".into(), path.display().to_string().into());
    m.insert("version".into(), version.into());
    if let Some(p) = previous {
        m.insert("previous_session_id".into(), p.into());
    }
    if let Some(p) = parent_file {
        m.insert("parent_file".into(), p.display().to_string().into());
    }
    serde_json::json!({ crate::MARK_KEY: m }).to_string()
}

/// Orders files so that a parent's trace comes before its sub-agents' (their sessions link to
/// the parent's, which must exist first).
pub fn parents_first(files: &mut [PathBuf]) {
    files.sort_by(|a, b| is_subagent(a).cmp(&is_subagent(b)).then_with(|| a.cmp(b)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_by_extension_and_format() {
        let p = Path::new;
        assert_eq!(shape(p("/a/s.jsonl"), InputFormat::Auto), Some(Shape::Lines));
        assert_eq!(shape(p("/a/session-1.json"), InputFormat::Auto), Some(Shape::Document));
        assert_eq!(shape(p("/a/session-1.json"), InputFormat::Gemini), Some(Shape::Document));
        assert_eq!(shape(p("/a/session-1.json"), InputFormat::Claude), None);
        assert_eq!(shape(p("/a/s.jsonl"), InputFormat::Gemini), None);
        assert_eq!(shape(p("/a/notes.txt"), InputFormat::Auto), None);
        assert_eq!(shape(p("/a/jsonl"), InputFormat::Auto), None);
    }

    #[test]
    fn session_ids_are_stable_and_distinct() {
        let p = Path::new("/home/u/.claude/projects/x/s.jsonl");
        let v1 = session_id("default", p, 1);
        assert_eq!(v1, session_id("default", p, 1));
        assert_ne!(v1, session_id("default", p, 2));
        assert_ne!(v1, session_id("other", p, 1));
        assert_ne!(v1, session_id("default", Path::new("/home/u/.claude/projects/x/t.jsonl"), 1));
        let u = uuid::Uuid::parse_str(&v1).expect("a uuid");
        assert_eq!(u.get_version_num(), 8);
    }

    #[test]
    fn sub_agents_find_their_parent_in_both_layouts() {
        let nested = Path::new("/p/proj/4d5611e5/subagents/agent-a2898e3.jsonl");
        assert_eq!(parent_trace(nested, None), Some(PathBuf::from("/p/proj/4d5611e5.jsonl")));
        let flat = Path::new("/p/proj/agent-668b5ac2.jsonl");
        assert_eq!(parent_trace(flat, Some("cb2e607c")), Some(PathBuf::from("/p/proj/cb2e607c.jsonl")));
        assert_eq!(parent_trace(flat, None), None);
        assert_eq!(parent_trace(flat, Some("../x")), None);
        assert_eq!(parent_trace(Path::new("/p/proj/cb2e607c.jsonl"), Some("cb2e607c")), None);
        let mut files =
            vec![PathBuf::from("/p/a/agent-1.jsonl"), PathBuf::from("/p/b.jsonl"), PathBuf::from("/p/a.jsonl")];
        parents_first(&mut files);
        assert_eq!(
            files,
            [PathBuf::from("/p/a.jsonl"), PathBuf::from("/p/b.jsonl"), PathBuf::from("/p/a/agent-1.jsonl")]
        );
    }

    #[test]
    fn metadata_names_file_version_and_links() {
        let m = session_metadata(Path::new("/t/s.jsonl"), 2, Some("prev"), Some(Path::new("/t/p.jsonl")));
        let v: serde_json::Value = serde_json::from_str(&m).expect("json");
        assert_eq!(v["memex_watch"]["version"], 2);
        assert_eq!(v["memex_watch"]["previous_session_id"], "prev");
        assert_eq!(v["memex_watch"]["parent_file"], "/t/p.jsonl");
    }
}
