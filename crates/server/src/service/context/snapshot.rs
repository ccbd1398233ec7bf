//! BuildSnapshot's wire conversions: the request checked field by field, the answer encoded.
use memex_handoff::{Format, Options};
use memex_proto::v1 as pb;
use memex_recall::handoff::{DEFAULT_BUDGET, HandoffSnapshot, SnapshotItem, SnapshotRequest, SnapshotScope};
use tonic::Status;

use crate::convert;

pub fn request(r: pb::BuildSnapshotRequest, max_id: usize) -> Result<SnapshotRequest, Status> {
    let task_id = convert::ident("task_id", r.task_id, max_id)?;
    let agent_id = convert::ident("agent_id", r.agent_id, max_id)?;
    let scope = match (r.session_id.as_str(), &agent_id, &task_id) {
        ("", Some(a), _) => SnapshotScope::Agent(a.clone()),
        ("", None, Some(t)) => SnapshotScope::Task(t.clone()),
        ("", None, None) => {
            return Err(Status::invalid_argument(
                "session_id: is required (or agent_id / task_id, for their latest session)",
            ));
        }
        (s, _, _) => SnapshotScope::Session(crate::status::session_id(s)?),
    };
    let format = match pb::SnapshotFormat::try_from(r.format) {
        Ok(pb::SnapshotFormat::Unspecified | pb::SnapshotFormat::Xml) => Format::Xml,
        Ok(pb::SnapshotFormat::Markdown) => Format::Markdown,
        Err(_) => return Err(Status::invalid_argument(format!("format: unknown value {}", r.format))),
    };
    let defaults = Options::default();
    let req = SnapshotRequest {
        scope,
        task_id,
        budget: if r.budget_tokens == 0 { DEFAULT_BUDGET } else { r.budget_tokens as usize },
        tokenizer: super::wire::tokenizer("tokenizer", &r.tokenizer)?.unwrap_or_default(),
        format,
        options: Options {
            recent_actions: r.recent_actions.map_or(defaults.recent_actions, |n| n as usize),
            tail_events: r.tail_events.map_or(defaults.tail_events, |n| n as usize),
            ..defaults
        },
    };
    req.check().map_err(|e| crate::status::recall_status(&e))?;
    Ok(req)
}

fn item(i: SnapshotItem) -> pb::SnapshotItem {
    pb::SnapshotItem {
        section: i.section.to_owned(),
        label: i.label.to_owned(),
        text: i.text,
        pointer: i.pointer,
        first_seq: i.first_seq,
        last_seq: i.last_seq,
        priority: i.priority.to_owned(),
    }
}

pub fn out(namespace: &str, req: &SnapshotRequest, s: HandoffSnapshot) -> pb::Snapshot {
    let (task_id, task_state_version) = s.task.unwrap_or_default();
    pb::Snapshot {
        namespace: namespace.to_owned(),
        session_id: s.session.to_string(),
        task_id,
        task_state_version,
        format: match req.format {
            Format::Xml => pb::SnapshotFormat::Xml,
            Format::Markdown => pb::SnapshotFormat::Markdown,
        } as i32,
        tokenizer: req.tokenizer.name().to_owned(),
        text: s.text,
        tokens: s.tokens as u32,
        budget_tokens: req.budget as u32,
        items: s.items.into_iter().map(item).collect(),
        omitted: s.omitted.into_iter().map(item).collect(),
        head_seq: s.head,
        memory_seq: s.memory_seq,
    }
}
