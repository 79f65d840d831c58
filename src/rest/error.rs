//! The one mapping from the domain error to an HTTP answer, in MemMachine's error body:
//! `{"detail": {"code", "message", "internal_error", "exception", "trace"}}`, with the
//! rejected fields listed (as gRPC's `BadRequest` detail does) and the gRPC code's name.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use memmachine_core::error::{Error, http_status};

/// A domain error on its way to an HTTP client.
#[derive(Debug)]
pub struct ApiError {
    error: Error,
    /// Set where HTTP has a more precise status than the code's (413 for a large body).
    status: Option<StatusCode>,
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        ApiError {
            error,
            status: None,
        }
    }
}

impl ApiError {
    pub fn with_status(mut self, status: StatusCode) -> ApiError {
        self.status = Some(status);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error = self.error.bounded();
        let code = error.grpc_code();
        let status = self.status.unwrap_or_else(|| http_status(code));
        let retry_after = match &error {
            Error::ResourceExhausted { retry_after, .. } => retry_after.map(|d| d.as_secs().max(1)),
            Error::Unavailable(_) | Error::Closed => Some(1),
            _ => None,
        };
        let violations: Vec<_> = match &error {
            Error::InvalidArgument(v) => v
                .iter()
                .map(|v| json!({"field": v.field, "description": v.description}))
                .collect(),
            _ => Vec::new(),
        };
        let resume_after = match &error {
            Error::OutOfRange { resume_after, .. } => Some(resume_after.clone()),
            _ => None,
        };
        let message = match error {
            Error::Internal(m) => {
                // The details stay in the log; the client learns only that it failed.
                tracing::error!(error = %m, "internal error");
                "internal error; see the server log".to_string()
            }
            other => other.to_string(),
        };
        let body = json!({
            "detail": {
                "code": status.as_u16(),
                "message": message,
                "internal_error": "",
                "exception": memmachine_domain::metrics::code_name(code),
                "trace": "",
                "field_violations": violations,
            }
        });
        let mut body = body;
        if let Some(cursor) = resume_after {
            body["detail"]["resume_after"] = cursor.into();
        }
        let mut response = (status, axum::Json(body)).into_response();
        // The admission layer reads the code for its metrics and log.
        response.extensions_mut().insert(code);
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
