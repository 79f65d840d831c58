//! What went wrong, as one line and an exit code (the table is `super::EXIT_CODES`).

use tonic::Code;
use tonic_types::StatusExt;

#[derive(Debug)]
pub enum CliError {
    /// Flags or arguments that make no sense (exit 2, as clap's own).
    Usage(String),
    /// The server could not be reached at all (exit 3).
    Connect { addr: String, reason: String },
    /// Input the client itself could not turn into a request (exit 4).
    Input(String),
    /// The server answered with a non-OK status.
    Status(tonic::Status),
    /// A refused batch of a bulk add, with which input it held (exit as the status).
    Batch {
        status: tonic::Status,
        context: String,
    },
    /// Anything else (exit 1).
    Failed(String),
}

impl From<tonic::Status> for CliError {
    fn from(status: tonic::Status) -> CliError {
        CliError::Status(status)
    }
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Connect { .. } => 3,
            CliError::Input(_) => 4,
            CliError::Status(status) | CliError::Batch { status, .. } => {
                status_exit_code(status.code())
            }
            CliError::Failed(_) => 1,
        }
    }

    /// The message, on one line (after `memmachine: `).
    pub fn line(&self) -> String {
        let text = match self {
            CliError::Usage(m) | CliError::Input(m) | CliError::Failed(m) => m.clone(),
            CliError::Connect { addr, reason } => {
                format!("cannot reach server at {addr}: {reason}")
            }
            CliError::Status(status) => status_line(status),
            CliError::Batch { status, context } => format!("{} ({context})", status_line(status)),
        };
        one_line(&text)
    }
}

fn status_exit_code(code: Code) -> u8 {
    match code {
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 4,
        Code::NotFound => 5,
        Code::AlreadyExists => 6,
        Code::Unauthenticated | Code::PermissionDenied => 7,
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::Cancelled => 8,
        _ => 1,
    }
}

/// The canonical name of a code, as grpcurl and the gRPC docs write it.
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

/// `CODE: message`, with the BadRequest field violations and the RetryInfo delay. The
/// server's message for a bad request already lists the violations; then they are
/// shown once, not twice.
fn status_line(status: &tonic::Status) -> String {
    let mut line = format!("{}: ", code_name(status.code()));
    let violations = status
        .get_details_bad_request()
        .map(|bad| {
            bad.field_violations
                .iter()
                .map(|v| format!("{}: {}", v.field, v.description))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    let message = status.message();
    let message = message
        .strip_prefix("invalid argument: ")
        .unwrap_or(message);
    match (message.is_empty(), violations.is_empty()) {
        (_, true) => line.push_str(message),
        (true, false) => line.push_str(&violations),
        (false, false) if message.contains(&violations) => line.push_str(message),
        (false, false) => line.push_str(&format!("{message} ({violations})")),
    }
    if let Some(delay) = status.get_details_retry_info().and_then(|r| r.retry_delay) {
        line.push_str(&format!(" (retry after {:.1}s)", delay.as_secs_f64()));
    }
    line
}

/// Newlines (a transport error's chain, say) become spaces, so each error is one line.
fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    #[test]
    fn a_bad_request_names_each_field_once_on_one_line() {
        let mut details = ErrorDetails::new();
        details.add_bad_request_violation("messages[0].content", "must not be empty");
        let status = tonic::Status::with_error_details(
            Code::InvalidArgument,
            "invalid argument: messages[0].content: must not be empty",
            details,
        );
        let err = CliError::Status(status);
        assert_eq!(
            err.line(),
            "INVALID_ARGUMENT: messages[0].content: must not be empty"
        );
        assert_eq!(err.exit_code(), 4);
        let mut details = ErrorDetails::new();
        details.add_bad_request_violation("filter", "bad");
        let status = tonic::Status::with_error_details(Code::InvalidArgument, "no\ngood", details);
        assert_eq!(
            CliError::Status(status).line(),
            "INVALID_ARGUMENT: no good (filter: bad)"
        );
    }

    #[test]
    fn codes_map_to_the_documented_exit_codes() {
        let exit = |code| CliError::Status(tonic::Status::new(code, "x")).exit_code();
        assert_eq!(exit(Code::NotFound), 5);
        assert_eq!(exit(Code::AlreadyExists), 6);
        assert_eq!(exit(Code::Unauthenticated), 7);
        assert_eq!(exit(Code::PermissionDenied), 7);
        assert_eq!(exit(Code::Unavailable), 8);
        assert_eq!(exit(Code::Internal), 1);
        let connect = CliError::Connect {
            addr: "a".into(),
            reason: "r".into(),
        };
        assert_eq!(connect.exit_code(), 3);
        assert_eq!(connect.line(), "cannot reach server at a: r");
    }
}
