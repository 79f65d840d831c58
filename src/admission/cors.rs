//! Browsers calling from other origins (gRPC-Web, the REST gateway). With `--auth` and
//! no `--allowed-origin`, any origin may call (keys are bearer tokens the page must
//! hold, not cookies); otherwise only the origins listed, or with none listed and no
//! keys, none: any page open in a browser could read and write every org's memories.

use std::time::Duration;

use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::host_and_origin::BrowserPolicy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Rest,
}

pub fn layer(policy: &BrowserPolicy, transport: Transport) -> CorsLayer {
    let origins = match policy.cross_origins() {
        None => AllowOrigin::mirror_request(),
        Some([]) => return CorsLayer::new(),
        Some(list) => AllowOrigin::list(
            list.iter()
                .filter_map(|origin| HeaderValue::from_str(origin).ok()),
        ),
    };
    let headers = |names: &[&'static str]| -> Vec<HeaderName> {
        names.iter().map(|n| HeaderName::from_static(n)).collect()
    };
    let mut allowed = headers(&["x-request-id", memmachine_domain::auth::ROUTE_HEADER]);
    allowed.extend([AUTHORIZATION, CONTENT_TYPE]);
    let (methods, exposed) = match transport {
        Transport::Grpc => {
            allowed.extend(headers(&["x-grpc-web", "x-user-agent", "grpc-timeout"]));
            (
                vec![http::Method::POST, http::Method::OPTIONS],
                headers(&[
                    "grpc-status",
                    "grpc-message",
                    "grpc-status-details-bin",
                    "x-request-id",
                ]),
            )
        }
        Transport::Rest => (
            vec![
                http::Method::GET,
                http::Method::POST,
                http::Method::PUT,
                http::Method::DELETE,
                http::Method::OPTIONS,
            ],
            headers(&["x-request-id", "retry-after"]),
        ),
    };
    CorsLayer::new()
        .allow_origin(origins)
        .allow_methods(methods)
        .allow_headers(allowed)
        .expose_headers(exposed)
        .max_age(Duration::from_secs(86400))
}
