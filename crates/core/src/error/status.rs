//! The one mapping from the domain error to `tonic::Status`.

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::Error;

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
                details.set_retry_info(Some(std::time::Duration::from_secs(1)));
                Status::with_error_details(Code::Unavailable, m, details)
            }
            Error::Closed => Status::unavailable("the server is stopping"),
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
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            Error::Internal(m) => {
                // The details stay in the log; the client learns only that it failed.
                tracing::error!(error = %m, "internal error");
                Status::internal("internal error; see the server log")
            }
        }
    }
}
