//! The `--metrics-listen` listener: `GET /metrics` in the OpenMetrics text format.

use std::sync::Arc;

use crate::connections::GatedListener;
use crate::store::StatsStore;
use memmachine_domain::metrics::Metrics;

/// Serves `GET /metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: GatedListener,
    metrics: Arc<Metrics>,
    store: Arc<dyn StatsStore>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::header::CONTENT_TYPE;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let (metrics, store) = (metrics.clone(), store.clone());
            async move {
                (
                    [(
                        CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.render(store.as_ref()).await,
                )
            }
        }),
    );
    crate::rest::serve(listener, app, shutdown).await
}
