//! The one mapping from the domain error to `tonic::Status`.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::Error;

/// gRPC's retry throttling trailer (gRFC A6): a client whose retry policy covers the
/// code waits this many milliseconds before its next attempt; a negative value asks it
/// not to retry at all.
pub const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";
/// How long a caller of an UNAVAILABLE server (starting, draining, its store briefly
/// unreachable) is told to wait.
pub const UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);

impl Error {
    /// The canonical code of each domain error, on every transport.
    pub fn grpc_code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound(_) => Code::NotFound,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::Unimplemented(_) => Code::Unimplemented,
            Error::Unavailable(_) | Error::Closed => Code::Unavailable,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::PermissionDenied(_) => Code::PermissionDenied,
            Error::ResourceExhausted { .. } => Code::ResourceExhausted,
            Error::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Error::OutOfRange { .. } => Code::OutOfRange,
            Error::Internal(_) => Code::Internal,
        }
    }
}

/// The HTTP status of each gRPC code the domain's errors map to (422 for bad input, as
/// MemMachine answers), for the JSON transports.
pub fn http_status(code: Code) -> http::StatusCode {
    use http::StatusCode;
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::UNPROCESSABLE_ENTITY,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Internal | Code::Unknown | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Status {
        let err = err.bounded();
        match err {
            Error::InvalidArgument(violations) => {
                let message = Error::InvalidArgument(violations.clone()).to_string();
                let mut details = ErrorDetails::new();
                for v in violations {
                    details.add_bad_request_violation(v.field, v.description);
                }
                Status::with_error_details(Code::InvalidArgument, message, details)
            }
            Error::NotFound(ref m)
            | Error::AlreadyExists(ref m)
            | Error::FailedPrecondition(ref m)
            | Error::Unimplemented(ref m)
            | Error::Unauthenticated(ref m)
            | Error::PermissionDenied(ref m)
            | Error::DeadlineExceeded(ref m) => Status::new(err.grpc_code(), m.clone()),
            // Worth retrying: say when (a store busy, restarting or briefly unreachable).
            Error::Unavailable(m) => {
                let mut details = ErrorDetails::new();
                details.set_retry_info(Some(UNAVAILABLE_RETRY));
                let status = Status::with_error_details(Code::Unavailable, m, details);
                with_pushback(status, Some(UNAVAILABLE_RETRY))
            }
            Error::Closed => {
                let mut details = ErrorDetails::new();
                details.set_retry_info(Some(UNAVAILABLE_RETRY));
                let status = Status::with_error_details(
                    Code::Unavailable,
                    "the server is stopping",
                    details,
                );
                with_pushback(status, Some(UNAVAILABLE_RETRY))
            }
            // Where to resume, for clients that would rather not parse the message.
            Error::OutOfRange {
                message,
                resume_after,
            } => {
                let metadata =
                    std::collections::HashMap::from([("resume_after".to_string(), resume_after)]);
                let details =
                    ErrorDetails::with_error_info("CURSOR_PRUNED", "memmachine", metadata);
                Status::with_error_details(Code::OutOfRange, message, details)
            }
            Error::ResourceExhausted {
                message,
                retry_after,
            } => {
                let mut details = ErrorDetails::new();
                if let Some(wait) = retry_after {
                    details.set_retry_info(Some(wait));
                }
                let status = Status::with_error_details(Code::ResourceExhausted, message, details);
                // A limit that waiting does not lift (a request too large, a full disk)
                // says so, so that a retry policy covering the code does not resend it.
                with_pushback(status, retry_after)
            }
            Error::Internal(m) => {
                // The details stay in the log; the client learns only that it failed.
                tracing::error!(error = %m, "internal error");
                Status::internal("internal error; see the server log")
            }
        }
    }
}

/// `status` with its `grpc-retry-pushback-ms` trailer: the wait in whole milliseconds,
/// rounded up (a retry a moment early would be refused again), or -1 (do not retry)
/// when no wait helps.
fn with_pushback(mut status: Status, wait: Option<Duration>) -> Status {
    let ms = wait.map_or(-1, |wait| {
        i64::try_from(wait.as_micros().div_ceil(1000))
            .unwrap_or(i64::MAX)
            .max(1)
    });
    status
        .metadata_mut()
        .insert(RETRY_PUSHBACK, MetadataValue::from(ms));
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushback(err: Error) -> Option<String> {
        let status = Status::from(err);
        let value = status.metadata().get(RETRY_PUSHBACK)?;
        Some(value.to_str().ok()?.to_string())
    }

    #[test]
    fn refusals_that_waiting_lifts_say_how_long_to_wait() {
        let limited = Error::ResourceExhausted {
            message: "rate".into(),
            retry_after: Some(Duration::from_micros(249_001)),
        };
        assert_eq!(pushback(limited).as_deref(), Some("250"));
        let soon = Error::ResourceExhausted {
            message: "rate".into(),
            retry_after: Some(Duration::from_micros(10)),
        };
        assert_eq!(pushback(soon).as_deref(), Some("1"));
        let unavailable = Error::Unavailable("starting".into());
        assert_eq!(pushback(unavailable).as_deref(), Some("1000"));
        let for_good = Error::ResourceExhausted {
            message: "too large".into(),
            retry_after: None,
        };
        assert_eq!(pushback(for_good).as_deref(), Some("-1"));
        assert_eq!(pushback(Error::NotFound("x".into())), None);
    }
}
