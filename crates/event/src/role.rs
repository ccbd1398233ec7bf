//! Which role an event speaks with, derived from its kind. Search filters and hits use roles so a
//! caller can ask for "what the user said" without listing kinds. (Not the VCC full view's section
//! header, `memex_vcc::Role`, nor who asks for a pack, `memex_pack::AgentRole`.)

/// The speaker of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// `user_message`.
    User,
    /// `assistant_message`, `thinking`: what the agent itself said or thought.
    Assistant,
    /// `tool_call`, `tool_result`, `tool_error`: the agent's actions and what came back.
    Tool,
    /// `system`, `decision`, `constraint`, `report`, `note`: records about the work rather than
    /// turns of the conversation.
    System,
    /// Extension kinds (`x-…`): integration-defined, so no role is assumed.
    Other,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::User, Role::Assistant, Role::Tool, Role::System, Role::Other];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
            Role::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl crate::EventKind {
    /// The role this kind speaks with.
    pub fn role(&self) -> Role {
        role_of_kind(self.as_str())
    }
}

/// The role of an event of kind `kind` (its wire name).
pub fn role_of_kind(kind: &str) -> Role {
    match kind {
        "user_message" => Role::User,
        "assistant_message" | "thinking" => Role::Assistant,
        "tool_call" | "tool_result" | "tool_error" => Role::Tool,
        "system" | "decision" | "constraint" | "report" | "note" => Role::System,
        _ => Role::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_kind_has_a_role_and_names_round_trip() {
        assert_eq!(role_of_kind("user_message"), Role::User);
        assert_eq!(role_of_kind("thinking"), Role::Assistant);
        assert_eq!(role_of_kind("tool_error"), Role::Tool);
        assert_eq!(role_of_kind("constraint"), Role::System);
        assert_eq!(role_of_kind("x-ci.build"), Role::Other);
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(Role::parse("robot"), None);
    }
}
