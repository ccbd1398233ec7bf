//! Exit statuses: what kind of failure a command met, so a script can tell a typo from a missing
//! key from a missing session from a server that is down.
use memex_client::ClientError;
use tonic::Code;

/// Shown by `memex --help`; README's "Exit status" says the same.
pub const HELP: &str = "Exit status: 0 success; 1 server, connection or local error; 2 usage \
(bad flags); 3 not allowed (UNAUTHENTICATED, PERMISSION_DENIED); 4 not found (NOT_FOUND); \
5 invalid argument (INVALID_ARGUMENT, OUT_OF_RANGE); 6 conflict (FAILED_PRECONDITION, \
ALREADY_EXISTS, ABORTED: e.g. a stale task-state version). Errors print as \
`memex: CODE: the server's message`.";

pub const SERVER: u8 = 1;
pub const AUTH: u8 = 3;
pub const NOT_FOUND: u8 = 4;
pub const INVALID: u8 = 5;
pub const CONFLICT: u8 = 6;

/// The exit status for a failed command: from the first gRPC code found in its error chain.
pub fn status(e: &anyhow::Error) -> u8 {
    let code = e.chain().find_map(|c| {
        c.downcast_ref::<ClientError>()
            .map(ClientError::code)
            .or_else(|| c.downcast_ref::<tonic::Status>().map(|s| s.code()))
    });
    match code {
        Some(Code::Unauthenticated | Code::PermissionDenied) => AUTH,
        Some(Code::NotFound) => NOT_FOUND,
        Some(Code::InvalidArgument | Code::OutOfRange) => INVALID,
        Some(Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted) => CONFLICT,
        _ => SERVER,
    }
}

/// Whether the command failed only because stdout was closed under it.
pub fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// The line printed for a failed command: `memex: CODE: message` for a status, the causes
/// joined by `: ` otherwise.
pub fn message(e: &anyhow::Error) -> String {
    match e.downcast_ref::<tonic::Status>() {
        Some(s) => format!("memex: {}: {}", memex_client::code_name(s.code()), s.message()),
        None => format!("memex: {}", chain_text(e)),
    }
}

/// The error and its causes joined by ": ", leaving out a cause whose text the link before it
/// already ends with: a wrapper written `#[error("search index: {0}")]` with `#[from]` shows its
/// source in its own text and as its source, and `{:#}` printed the sentence twice.
fn chain_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if last.is_empty() || !last.ends_with(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        last = text;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_statuses() {
        let err = |s: tonic::Status| anyhow::Error::from(ClientError::from(s));
        assert_eq!(status(&err(tonic::Status::permission_denied("x"))), AUTH);
        assert_eq!(status(&err(tonic::Status::not_found("x"))), NOT_FOUND);
        assert_eq!(status(&err(tonic::Status::invalid_argument("x"))), INVALID);
        assert_eq!(status(&err(tonic::Status::failed_precondition("x"))), CONFLICT);
        assert_eq!(status(&err(tonic::Status::unavailable("x"))), SERVER);
        assert_eq!(status(&anyhow::anyhow!("disk full")), SERVER);
        let raw = anyhow::Error::from(tonic::Status::not_found("session s1"));
        assert_eq!((status(&raw), message(&raw)), (NOT_FOUND, "memex: NOT_FOUND: session s1".to_owned()));
        assert_eq!(message(&err(tonic::Status::not_found("session s1"))), "memex: NOT_FOUND: session s1");
    }

    #[test]
    fn a_cause_is_said_once() {
        let dir_in_use = memex_search::IndexError::DirInUse { dir: "data/index".into() };
        let e = anyhow::Error::from(memex_server::ServerError::Index(dir_in_use)).context("serving");
        assert_eq!(
            message(&e),
            "memex: serving: search index: the index directory data/index is in use by another memex process; \
             give each process its own search.index_dir (MEMEX_SEARCH__INDEX_DIR)"
        );
        // A cause that adds to its parent's text still shows.
        let io = std::io::Error::other("disk full");
        let e = anyhow::Error::from(io).context("writing data/index");
        assert_eq!(message(&e), "memex: writing data/index: disk full");
    }
}
