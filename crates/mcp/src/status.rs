//! A failed gRPC call as an MCP tool error: the code's canonical name, then the server's message,
//! which names the field at fault (`INVALID_ARGUMENT: limit: must be 1..=1000`).
use memex_client::code_name;
use rmcp::model::{CallToolResult, ContentBlock};

/// `CODE: message`, the one line an agent (or a person) reads.
pub fn status_text(status: &tonic::Status) -> String {
    format!("{}: {}", code_name(status.code()), status.message())
}

/// The tool error for a failed call: the line as text, and `{code, message}` as structured content.
pub(crate) fn tool_error(status: &tonic::Status) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(status_text(status))]);
    result.structured_content =
        Some(serde_json::json!({ "code": code_name(status.code()), "message": status.message() }));
    result
}

/// A mistake in the arguments found before any call (a malformed pointer string in a list, an
/// unknown enum word), reported the way the server reports its own.
pub(crate) fn invalid_argument(field: &str, why: impl std::fmt::Display) -> CallToolResult {
    tool_error(&tonic::Status::invalid_argument(format!("{field}: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_code_then_the_servers_message() {
        let s = tonic::Status::invalid_argument("limit: must be 1..=1000, got 5000");
        assert_eq!(status_text(&s), "INVALID_ARGUMENT: limit: must be 1..=1000, got 5000");
        let r = tool_error(&tonic::Status::unauthenticated("missing API key"));
        assert_eq!(r.is_error, Some(true));
        let content = r.structured_content.expect("structured");
        assert_eq!(content["code"], "UNAUTHENTICATED");
    }
}
