//! On the gRPC listener, a request whose `Content-Length` says it is larger than any
//! message within `--max-request-bytes` could be is refused before its body is read,
//! and so before an HTTP/1 (gRPC-Web) `Expect: 100-continue` is answered. It sits
//! outside the gRPC-Web translation, which drops `Content-Length`; tonic's own limit
//! (`max_decoding_message_size`) still bounds messages without a declared length.

use std::task::{Context, Poll};

use futures::future::Either;
use http::{HeaderValue, Request, Response, header};

use memmachine_core::error::Error;

/// The body length a request declares (`Content-Length`), when it declares a valid one.
pub fn declared(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

#[derive(Clone)]
pub struct DeclaredLengthLayer {
    max_request_bytes: usize,
}

impl DeclaredLengthLayer {
    pub fn new(max_request_bytes: usize) -> DeclaredLengthLayer {
        DeclaredLengthLayer { max_request_bytes }
    }
}

impl<S> tower::Layer<S> for DeclaredLengthLayer {
    type Service = DeclaredLength<S>;

    fn layer(&self, inner: S) -> DeclaredLength<S> {
        DeclaredLength {
            inner,
            max_request_bytes: self.max_request_bytes,
        }
    }
}

#[derive(Clone)]
pub struct DeclaredLength<S> {
    inner: S,
    max_request_bytes: usize,
}

impl<S, B, R> tower::Service<Request<B>> for DeclaredLength<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    R: Default,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = Either<std::future::Ready<Result<Response<R>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let headers = request.headers();
        let declared = declared(headers);
        let content_type = headers.get(header::CONTENT_TYPE).cloned();
        let allowed = largest_body(self.max_request_bytes as u64, content_type.as_ref());
        if declared.is_none_or(|length| length <= allowed) {
            return Either::Right(self.inner.call(request));
        }
        let status = tonic::Status::from(Error::ResourceExhausted {
            message: format!(
                "the request is larger than this server accepts ({} bytes; \
                 --max-request-bytes)",
                self.max_request_bytes
            ),
            retry_after: None,
        });
        let mut response = status.into_http::<R>();
        // A gRPC-Web client reads a headers-only answer in its own content type.
        if let Some(web) = content_type.filter(is_grpc_web) {
            response.headers_mut().insert(header::CONTENT_TYPE, web);
        }
        Either::Left(std::future::ready(Ok(response)))
    }
}

fn is_grpc_web(content_type: &HeaderValue) -> bool {
    content_type.as_bytes().starts_with(b"application/grpc-web")
}

/// The longest body one message of `max` bytes makes: its 5-byte frame header, room
/// for compression that grew it (deflate's worst case is well under 1/256), and
/// base64's third more for `application/grpc-web-text`.
fn largest_body(max: u64, content_type: Option<&HeaderValue>) -> u64 {
    let framed = max.saturating_add(5 + 64).saturating_add(max / 256);
    let text = content_type.is_some_and(|t| t.as_bytes().starts_with(b"application/grpc-web-text"));
    if text {
        framed.div_ceil(3).saturating_mul(4)
    } else {
        framed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_body_allows_a_whole_message_in_every_encoding() {
        let binary = HeaderValue::from_static("application/grpc-web+proto");
        let text = HeaderValue::from_static("application/grpc-web-text");
        assert!(largest_body(1000, None) >= 1005);
        assert!(largest_body(1000, Some(&binary)) >= 1005);
        assert!(largest_body(1000, Some(&text)) >= 1005 * 4 / 3);
        assert!(largest_body(64 << 20, None) < 65 << 20);
        assert_eq!(largest_body(u64::MAX, Some(&text)), u64::MAX);
    }
}
