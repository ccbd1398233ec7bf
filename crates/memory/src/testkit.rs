//! Events for the tests.
use chrono::{TimeZone, Utc};

use crate::model::MemEvent;

pub fn ev(seq: u64, kind: &str, content: &str) -> MemEvent {
    MemEvent {
        seq,
        kind: kind.into(),
        content: content.into(),
        tool_name: None,
        tool_call_id: None,
        agent_id: "agent".into(),
        time: Utc.timestamp_opt(1_700_000_000 + seq as i64, 0).single().expect("a time"),
        after_quiet: false,
    }
}

impl MemEvent {
    pub fn tool(mut self, name: &str, id: &str) -> MemEvent {
        self.tool_name = Some(name.into());
        self.tool_call_id = Some(id.into());
        self
    }

    pub fn call_id(mut self, id: &str) -> MemEvent {
        self.tool_call_id = Some(id.into());
        self
    }
}
