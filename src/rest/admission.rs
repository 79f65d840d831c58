//! The gateway's admission, the same as gRPC calls pass (`crate::admission`): a request
//! id and a span, refusal while starting or draining, the API key, per-caller limits,
//! the request deadline, and metrics and logs by route. Health and the OpenAPI document
//! need no key, as gRPC health and reflection do not.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use tracing::Instrument;

use super::{ApiError, Gateway};
use crate::admission::host_and_origin::Refusal;
use crate::admission::{CallRecord, REQUEST_ID, authorization, call_span, log_answer, request_id};
use memmachine_core::error::Error;

/// Routes anyone may call, before the server is ready and without a key.
const PUBLIC: [&str; 2] = ["/api/v2/health", "/api/v2/openapi.json"];
/// Routes that read no memory, served while the server starts or drains.
const OPERATIONAL: [&str; 1] = ["/api/v2/metrics"];

pub async fn admit(State(gateway): State<Gateway>, mut request: Request, next: Next) -> Response {
    let admission = gateway.admission.clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string());
    // Only routes the gateway has get their own label, so that callers cannot grow the
    // metrics with made-up paths.
    let label = route.as_deref().map_or_else(
        || "unknown".to_string(),
        |r| format!("REST {} {r}", request.method()),
    );
    let public = route.as_deref().is_some_and(|r| PUBLIC.contains(&r));
    let memory = !public && !route.as_deref().is_some_and(|r| OPERATIONAL.contains(&r));
    let request_id = request_id(request.headers().get(REQUEST_ID));
    let span = call_span(&label, &request_id);
    let authorization = authorization(request.headers());
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string());
    let record = CallRecord::new(admission.metrics.clone(), label);
    let timeout = admission.request_timeout;
    let result = async {
        let entry = if public {
            None
        } else {
            Some(
                admission
                    .enter(memory, false, authorization.as_deref(), &peer)
                    .await?,
            )
        };
        if let Some(caller) = entry.as_ref().and_then(|e| e.caller.clone()) {
            let route = memmachine_domain::auth::route(request.headers())?;
            request
                .extensions_mut()
                .insert(memmachine_domain::auth::Access::new(caller, route));
        }
        let response = tokio::time::timeout(timeout, next.run(request))
            .await
            .map_err(|_| deadline_passed(timeout))?;
        drop(entry);
        Ok::<_, Error>(response)
    }
    .instrument(span.clone())
    .await;
    let mut response = match result {
        Ok(response) => response,
        Err(err) => span.in_scope(|| ApiError::from(err).into_response()),
    };
    let code = response
        .extensions()
        .get::<tonic::Code>()
        .copied()
        .unwrap_or_else(|| code_of(response.status()));
    let elapsed = record.answer(code);
    span.in_scope(|| {
        if public {
            // Probes answer 503 every few hundred ms while the server starts or drains.
            tracing::debug!(
                code = memmachine_domain::metrics::code_name(code),
                "public route answered"
            );
        } else {
            log_answer(code, elapsed, &peer);
        }
    });
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// Refuses what a browser should not have sent (`crate::admission::host_and_origin`): a host
/// or origin the server does not answer to, or a POST to the API that is not JSON.
pub async fn browsers(State(gateway): State<Gateway>, request: Request, next: Next) -> Response {
    let api = ["/api/", "/mcp"]
        .iter()
        .any(|prefix| request.uri().path().starts_with(prefix));
    let checked = gateway
        .admission
        .browsers
        .check(request.uri(), request.headers())
        .and_then(|()| {
            if api {
                crate::admission::host_and_origin::require_json(request.method(), request.headers())
            } else {
                Ok(())
            }
        });
    match checked {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            gateway.admission.metrics.record_refusal("browser");
            let status = match refusal {
                Refusal::Forbidden(_) => http::StatusCode::FORBIDDEN,
                Refusal::NotJson(_) => http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            };
            ApiError::from(Error::from(refusal))
                .with_status(status)
                .into_response()
        }
    }
}

fn deadline_passed(timeout: Duration) -> Error {
    Error::DeadlineExceeded(format!(
        "the request did not finish within the server's deadline ({:.3} s, \
         --request-timeout)",
        timeout.as_secs_f64()
    ))
}

/// The code of an answer that did not come from a domain error (axum's own 404s, 405s).
fn code_of(status: http::StatusCode) -> tonic::Code {
    match status.as_u16() {
        200..=299 => tonic::Code::Ok,
        404 => tonic::Code::NotFound,
        405 | 415 => tonic::Code::Unimplemented,
        413 => tonic::Code::ResourceExhausted,
        400..=499 => tonic::Code::InvalidArgument,
        503 => tonic::Code::Unavailable,
        _ => tonic::Code::Unknown,
    }
}
