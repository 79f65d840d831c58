//! The one domain error type. It is mapped to gRPC status codes once, in `status`
//! (beside it: `From<Error> for tonic::Status` may only live in this crate).

mod status;

pub use status::http_status;

/// One rejected field of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    pub field: String,
    pub description: String,
}

#[derive(Debug, Clone, thiserror::Error)]
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
    /// A position past what is kept (a change-feed cursor older than the kept feed);
    /// `resume_after` is where the client may start again, also sent machine-readably.
    #[error("{message}")]
    OutOfRange {
        message: String,
        resume_after: String,
    },
    /// A fault of the server or its storage, never of the client's input.
    #[error("internal error: {0}")]
    Internal(String),
}

fn describe(violations: &[FieldViolation]) -> String {
    violations
        .iter()
        .map(|v| {
            // A violation of no one field ("and 3 more violations") has no name to show.
            if v.field.is_empty() {
                v.description.clone()
            } else {
                format!("{}: {}", v.field, v.description)
            }
        })
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

/// Longest field name or description sent to a client: input echoed in them is cut, so
/// a huge bad key cannot make an answer (or a `grpc-message` header) clients refuse.
const MAX_ECHOED_CHARS: usize = 256;
/// Longest message of the other errors sent to a client.
const MAX_MESSAGE_CHARS: usize = 1024;
/// Most violations listed in one answer; the rest are counted in a last one.
const MAX_LISTED_VIOLATIONS: usize = 20;

impl Error {
    /// This error as a client may be sent it: echoed values cut, violations capped.
    pub fn bounded(self) -> Error {
        let cut = |m: String| truncate(m, MAX_MESSAGE_CHARS);
        match self {
            Error::InvalidArgument(violations) => {
                let total = violations.len();
                let mut listed: Vec<FieldViolation> = violations
                    .into_iter()
                    .take(MAX_LISTED_VIOLATIONS)
                    .map(|v| FieldViolation {
                        field: truncate(v.field, MAX_ECHOED_CHARS),
                        description: truncate(v.description, MAX_ECHOED_CHARS),
                    })
                    .collect();
                if total > listed.len() {
                    listed.push(FieldViolation {
                        field: String::new(),
                        description: format!("and {} more violations", total - listed.len()),
                    });
                }
                Error::InvalidArgument(listed)
            }
            Error::NotFound(m) => Error::NotFound(cut(m)),
            Error::AlreadyExists(m) => Error::AlreadyExists(cut(m)),
            Error::FailedPrecondition(m) => Error::FailedPrecondition(cut(m)),
            Error::Unimplemented(m) => Error::Unimplemented(cut(m)),
            Error::Unavailable(m) => Error::Unavailable(cut(m)),
            Error::Unauthenticated(m) => Error::Unauthenticated(cut(m)),
            Error::PermissionDenied(m) => Error::PermissionDenied(cut(m)),
            Error::DeadlineExceeded(m) => Error::DeadlineExceeded(cut(m)),
            Error::OutOfRange {
                message,
                resume_after,
            } => Error::OutOfRange {
                message: cut(message),
                resume_after,
            },
            Error::ResourceExhausted {
                message,
                retry_after,
            } => Error::ResourceExhausted {
                message: cut(message),
                retry_after,
            },
            other @ (Error::Closed | Error::Internal(_)) => other,
        }
    }
}

/// `text` cut to `max` characters, saying how much was left out.
fn truncate(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text,
        Some((end, _)) => {
            let left = text[end..].chars().count();
            format!("{}… ({left} more characters)", &text[..end])
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_values_are_cut_and_violations_capped() {
        let key = "k".repeat(30_000);
        let mut violations = Violations::default();
        for i in 0..10_000 {
            violations.add(format!("metadata[{key}]"), format!("bad id {i}"));
        }
        let Err(Error::InvalidArgument(listed)) = violations.into_result().map_err(Error::bounded)
        else {
            panic!("expected invalid argument");
        };
        assert_eq!(listed.len(), MAX_LISTED_VIOLATIONS + 1);
        assert!(listed[0].field.starts_with("metadata[kkk"));
        assert!(listed[0].field.ends_with("more characters)"));
        assert!(listed[0].field.chars().count() < MAX_ECHOED_CHARS + 40);
        assert_eq!(listed[20].description, "and 9980 more violations");
        let message = Error::InvalidArgument(listed).to_string();
        assert!(message.len() < 16 * 1024, "{} bytes", message.len());
    }

    #[test]
    fn short_values_and_messages_pass_unchanged() {
        assert_eq!(truncate("héllo".into(), 5), "héllo");
        assert_eq!(truncate("héllo".into(), 2), "hé… (3 more characters)");
        let Error::NotFound(m) = Error::NotFound("x".repeat(5000)).bounded() else {
            panic!()
        };
        assert!(m.len() < MAX_MESSAGE_CHARS + 40);
    }
}
