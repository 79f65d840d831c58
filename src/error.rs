//! The one domain error type. It is mapped to gRPC status codes once, in
//! `grpc::status`.

/// One rejected field of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    pub field: String,
    pub description: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client sent bad input; every offending field is listed.
    #[error("invalid argument: {}", describe(.0))]
    InvalidArgument(Vec<FieldViolation>),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    Unimplemented(String),
    #[error("{0}")]
    Unavailable(String),
    /// The store was closed (the server is stopping): background work ends.
    #[error("the store is closed")]
    Closed,
    /// No credentials, or credentials that are not valid.
    #[error("{0}")]
    Unauthenticated(String),
    /// Valid credentials that do not reach what was asked for.
    #[error("{0}")]
    PermissionDenied(String),
    /// A limit was hit; when waiting helps, the caller may retry after `retry_after`.
    #[error("{message}")]
    ResourceExhausted {
        message: String,
        retry_after: Option<std::time::Duration>,
    },
    /// The call's deadline passed before it finished.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// A fault of the server or its storage, never of the client's input.
    #[error("internal error: {0}")]
    Internal(String),
}

fn describe(violations: &[FieldViolation]) -> String {
    violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// A single invalid field.
    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Error {
        Error::InvalidArgument(vec![FieldViolation {
            field: field.into(),
            description: description.into(),
        }])
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Collects field violations so a request reports all of them at once.
#[derive(Debug, Default)]
pub struct Violations(Vec<FieldViolation>);

impl Violations {
    pub fn add(&mut self, field: impl Into<String>, description: impl Into<String>) {
        self.0.push(FieldViolation {
            field: field.into(),
            description: description.into(),
        });
    }

    /// Records the violations of `result`, returning its value when it is `Ok`.
    pub fn check<T>(&mut self, result: Result<T>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(Error::InvalidArgument(mut v)) => {
                self.0.append(&mut v);
                None
            }
            Err(other) => {
                self.add("", other.to_string());
                None
            }
        }
    }

    pub fn into_result(self) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(self.0))
        }
    }
}
