//! The one mapping from the domain error to `tonic::Status`.

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::error::Error;

impl From<Error> for Status {
    fn from(err: Error) -> Status {
        match err {
            Error::InvalidArgument(violations) => {
                let message = Error::InvalidArgument(violations.clone()).to_string();
                let mut details = ErrorDetails::new();
                for v in violations {
                    details.add_bad_request_violation(v.field, v.description);
                }
                Status::with_error_details(Code::InvalidArgument, message, details)
            }
            Error::NotFound(m) => Status::not_found(m),
            Error::AlreadyExists(m) => Status::already_exists(m),
            Error::FailedPrecondition(m) => Status::failed_precondition(m),
            Error::Unimplemented(m) => Status::unimplemented(m),
            // Worth retrying: say when (a store busy, restarting or briefly unreachable).
            Error::Unavailable(m) => {
                let mut details = ErrorDetails::new();
                details.set_retry_info(Some(std::time::Duration::from_secs(1)));
                Status::with_error_details(Code::Unavailable, m, details)
            }
            Error::Closed => Status::unavailable("the server is stopping"),
            Error::Unauthenticated(m) => Status::unauthenticated(m),
            Error::PermissionDenied(m) => Status::permission_denied(m),
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
            Error::DeadlineExceeded(m) => Status::deadline_exceeded(m),
            Error::Internal(m) => {
                // The details stay in the log; the client learns only that it failed.
                tracing::error!(error = %m, "internal error");
                Status::internal("internal error; see the server log")
            }
        }
    }
}
