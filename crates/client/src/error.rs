//! What can go wrong talking to a server, in a form a caller can act on: the gRPC status code
//! and the server's message, not tonic's Debug dump.
use tonic::Code;
use tonic::codegen::http::uri::InvalidUri;
use tonic::metadata::errors::InvalidMetadataValue;

/// Why a call failed. The messages name the flag or field to fix; [`ClientError::code`] says
/// which kind of failure it was.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the API key is not printable ASCII")]
    ApiKey(#[source] InvalidMetadataValue),
    #[error("bad --endpoint")]
    Endpoint(#[source] InvalidUri),
    #[error("cannot connect to {endpoint}")]
    Connect {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The server (or the transport under it) answered with a status: `PERMISSION_DENIED:
    /// namespace: this API key belongs to …`.
    #[error("{}: {message}", code_name(*code))]
    Status { code: Code, message: String },
    /// An argument refused before anything was sent (the message names it).
    #[error("{0}")]
    Input(String),
}

impl From<tonic::Status> for ClientError {
    fn from(s: tonic::Status) -> Self {
        ClientError::Status { code: s.code(), message: s.message().to_owned() }
    }
}

impl ClientError {
    /// The gRPC code this failure amounts to: a status's own; a connection that could not be
    /// made is `UNAVAILABLE`, an unusable key `UNAUTHENTICATED`, a bad argument
    /// `INVALID_ARGUMENT`.
    pub fn code(&self) -> Code {
        match self {
            ClientError::Status { code, .. } => *code,
            ClientError::Connect { .. } => Code::Unavailable,
            ClientError::ApiKey(_) => Code::Unauthenticated,
            ClientError::Endpoint(_) | ClientError::Input(_) => Code::InvalidArgument,
        }
    }
}

/// The canonical name of a code, as the gRPC spec and other tools print it (`NOT_FOUND`).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reads_as_code_name_and_message() {
        let e =
            ClientError::from(tonic::Status::permission_denied("namespace: this API key belongs to namespace \"a\""));
        assert_eq!(e.to_string(), "PERMISSION_DENIED: namespace: this API key belongs to namespace \"a\"");
        assert_eq!(e.code(), Code::PermissionDenied);
        assert_eq!(ClientError::Input("pointer: expected SESSION:FIRST-LAST".into()).code(), Code::InvalidArgument);
    }
}
