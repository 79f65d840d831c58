//! Request bodies: JSON (the browsers guard, `admission::host_and_origin`, has refused any other
//! content type by now), an empty (or `null`) body read as `{}`, and every decoding
//! failure a 422 naming the field, in the gateway's error body. A body declared larger
//! than the limit is refused before it is read; one that comes too slowly is a 408.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::ApiError;
use memmachine_core::error::Error;

/// A JSON request body of type `T`.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == http::StatusCode::PAYLOAD_TOO_LARGE {
                    too_large()
                } else if let Some(slow) = crate::connections::request_gate::too_slow_in(&rejection)
                {
                    ApiError::from(Error::DeadlineExceeded(slow.to_string()))
                        .with_status(http::StatusCode::REQUEST_TIMEOUT)
                } else {
                    ApiError::from(Error::invalid(WHOLE_BODY, rejection.body_text()))
                }
            })?;
        let text: &[u8] =
            if bytes.iter().all(u8::is_ascii_whitespace) || bytes.trim_ascii() == b"null" {
                b"{}"
            } else {
                &bytes
            };
        // Every body is an object: serde would also read a struct from an array, by
        // position, which MemMachine refuses.
        if !text.trim_ascii_start().starts_with(b"{") {
            return Err(Error::invalid(WHOLE_BODY, "must be a JSON object").into());
        }
        let mut json = serde_json::Deserializer::from_slice(text);
        match serde_path_to_error::deserialize(&mut json) {
            Ok(value) => Ok(Body(value)),
            Err(err) => {
                let path = err.path().to_string();
                let message = err.inner().to_string();
                // A failure at the top level has the path "." or "?": name the missing
                // field when serde says which, else the body as a whole.
                let field = if matches!(path.as_str(), "." | "?") {
                    missing_field(&message).unwrap_or_else(|| WHOLE_BODY.to_string())
                } else {
                    path
                };
                Err(Error::invalid(field, message).into())
            }
        }
    }
}

/// The field named when the whole body, not one field of it, is at fault.
const WHOLE_BODY: &str = "the request body";

/// `x` of serde's "missing field `x`".
fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// The answer to a body over `--max-request-bytes`.
fn too_large() -> ApiError {
    ApiError::from(Error::ResourceExhausted {
        message: "the request body is larger than this server accepts (--max-request-bytes)".into(),
        retry_after: None,
    })
    .with_status(http::StatusCode::PAYLOAD_TOO_LARGE)
}

/// Refuses a request whose `Content-Length` is over `limit` before its body is read,
/// and so before hyper answers `Expect: 100-continue`: reading a body only to refuse
/// it costs the server the time and the memory the limit is there to save.
pub async fn refuse_declared_oversize(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let declared = crate::admission::declared_length::declared(request.headers());
    if declared.is_some_and(|length| length > limit as u64) {
        return too_large().into_response();
    }
    next.run(request).await
}
