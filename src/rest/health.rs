//! `GET /api/v2/health` and `GET /api/v2/metrics`.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Gateway;
use memmachine_domain::auth::Access;

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new()
        .routes(routes!(health))
        .routes(routes!(metrics))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `healthy` while the server serves memory calls; `starting` before and
    /// `draining` once shutdown began.
    status: &'static str,
    service: &'static str,
    version: &'static str,
}

/// 200 while the server serves memory calls; 503 while it starts or drains, so that a
/// proxy checking this route sends calls only where they are served (the same phase
/// gRPC health reports).
#[utoipa::path(get, path = "/health", tag = "System",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
async fn health(State(gateway): State<Gateway>) -> (StatusCode, Json<Health>) {
    use crate::admission::lifecycle::Phase;
    let (code, status) = match gateway.admission.lifecycle.reported() {
        Phase::Serving => (StatusCode::OK, "healthy"),
        Phase::Starting => (StatusCode::SERVICE_UNAVAILABLE, "starting"),
        Phase::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
    };
    (
        code,
        Json(Health {
            status,
            service: "memmachine",
            version: env!("CARGO_PKG_VERSION"),
        }),
    )
}

/// Prometheus metrics; needs a key with --auth. An admin key (or none without --auth)
/// gets what `--metrics-listen` serves; an org key only its own org's store figures.
#[utoipa::path(get, path = "/metrics", tag = "System",
    responses((status = 200, content_type = "application/openmetrics-text")))]
async fn metrics(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
) -> impl IntoResponse {
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        gateway
            .admission
            .metrics
            .render_for(&caller, gateway.stats.as_ref())
            .await,
    )
}
