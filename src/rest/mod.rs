//! The MemMachine-compatible JSON gateway (`--rest-listen`): MemMachine 0.4's v2 paths
//! under `/api/v2`, with its request and response shapes, so that its published client
//! works unchanged. Handlers are thin adapters over the same domain calls as gRPC, behind
//! the same admission (keys, limits, deadlines, metrics) and CORS rule. `/ui` serves the
//! memory console, a page over these same routes.

mod admission;
mod body;
mod changes;
mod config_updates;
mod console;
mod error;
mod extraction;
mod feature_history;
mod forget;
mod health;
mod memories;
mod projects;
mod semantic;
mod serve;
mod server_config;
mod shapes;
mod usage;

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::admission::Admission;
use crate::admission::cors::Transport;
use crate::domain::Domain;
use crate::store::StatsStore;

pub use error::ApiError;
pub use serve::serve;

/// What every handler reaches: the domain once it is ready, and what serves before it.
#[derive(Clone)]
pub struct Gateway {
    domain: Arc<OnceLock<Domain>>,
    /// The same keys, limits, lifecycle and metrics as gRPC calls pass.
    admission: Arc<Admission>,
    stats: Arc<dyn StatsStore>,
    /// The server's own settings, shown by `/config`.
    settings: Arc<server_config::Settings>,
}

impl Gateway {
    pub fn new(
        admission: Arc<Admission>,
        stats: Arc<dyn StatsStore>,
        config: &crate::config::ServeConfig,
    ) -> Gateway {
        Gateway {
            domain: Arc::default(),
            admission,
            stats,
            settings: Arc::new(server_config::Settings::of(config)),
        }
    }

    /// Makes the domain reachable; until then memory routes answer 503.
    pub fn set(&self, domain: Domain) {
        let _ = self.domain.set(domain);
    }

    fn domain(&self) -> Result<&Domain, ApiError> {
        self.domain.get().ok_or_else(|| {
            ApiError::from(memmachine_core::error::Error::Unavailable(
                "the server is starting; retry in a moment".into(),
            ))
        })
    }

    /// Every route of the gateway, and the OpenAPI document describing them.
    pub fn router(&self) -> Router {
        let (api, mut document) = api().split_for_parts();
        document_routing_header(&mut document);
        let document = Arc::new(document);
        let openapi = axum::routing::get(move || {
            let document = document.clone();
            async move { axum::Json(document.as_ref().clone()) }
        });
        Router::new()
            .nest("/api/v2", api.route("/openapi.json", openapi))
            .nest_service("/mcp", crate::mcp::http::service(self.domain.clone()))
            .route_layer(axum::middleware::from_fn_with_state(
                self.clone(),
                admission::admit,
            ))
            .merge(console::routes())
            .layer(DefaultBodyLimit::max(self.admission.max_request_bytes))
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                admission::browsers,
            ))
            .layer(axum::middleware::from_fn_with_state(
                self.admission.max_request_bytes,
                body::refuse_declared_oversize,
            ))
            .layer(crate::admission::cors::layer(
                &self.admission.browsers,
                Transport::Rest,
            ))
            .with_state(self.clone())
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "memmachine REST gateway",
        description = "MemMachine 0.4's v2 JSON API over this server's memory domain. \
                       Errors answer {\"detail\": {\"code\", \"message\", ...}}; with \
                       --auth, send Authorization: Bearer KEY."
    ),
    servers((url = "/api/v2"))
)]
struct ApiDoc;

/// Names the optional routing header on every operation but health: a proxy with
/// project affinity routes on it; the gateway refuses one naming another project.
fn document_routing_header(document: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    let parameter = ParameterBuilder::new()
        .name(memmachine_domain::auth::ROUTE_HEADER)
        .parameter_in(ParameterIn::Header)
        .required(utoipa::openapi::Required::False)
        .description(Some(
            "The request's own project as `ORG/PROJECT` (each id percent-encoded; empty \
             for universal), for a proxy's project affinity. A value naming another \
             project than the request's is refused (422).",
        ))
        .schema(Some(
            utoipa::openapi::ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::Type::String),
        ))
        .build();
    for (path, item) in document.paths.paths.iter_mut() {
        if path == "/health" {
            continue;
        }
        for operation in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            operation
                .parameters
                .get_or_insert_with(Vec::new)
                .push(utoipa::openapi::RefOr::T(parameter.clone()));
        }
    }
}

/// The routes under `/api/v2`, with their OpenAPI paths.
fn api() -> OpenApiRouter<Gateway> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(health::routes())
        .merge(projects::routes())
        .merge(memories::routes())
        .merge(changes::routes())
        .merge(semantic::routes())
        .merge(feature_history::routes())
        .merge(server_config::routes())
        .merge(usage::routes())
        .merge(extraction::routes())
        .merge(forget::routes())
}
