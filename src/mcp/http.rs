//! MCP over Streamable HTTP at `/mcp` on the REST listener. The scope is the URL's
//! (`/mcp?org=O&project=P&user=U`, each optional), checked against the authenticated
//! caller on every request before rmcp sees it: another org is HTTP 403.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower::Layer;

use super::Scope;
use super::tools::MemoryTools;
use crate::domain::Domain;
use crate::error::Error;

/// The tower service to nest at `/mcp`: tools answer once `domain` is set.
pub fn service(
    domain: Arc<OnceLock<Domain>>,
) -> impl tower::Service<
    Request<Body>,
    Response = Response,
    Error = std::convert::Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    // Host checks guard a local server against DNS rebinding; this listener's other
    // routes answer any host, and --auth is what guards them all.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let mcp = StreamableHttpService::new(
        move || Ok(MemoryTools::per_session(domain.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::middleware::from_fn(admit).layer(mcp)
}

/// Resolves the URL's scope, refuses it unless the caller reaches its org, and hands
/// it to the tools in the request's extensions.
async fn admit(mut request: Request, next: Next) -> Response {
    let scope = match scope_of(request.uri().query().unwrap_or("")) {
        Ok(scope) => scope,
        Err(err) => return refusal(StatusCode::BAD_REQUEST, &err),
    };
    // The gateway's admission authenticated the request and recorded its caller.
    let caller = match crate::auth::caller_of(request.extensions()) {
        Ok(caller) => caller,
        Err(err) => return refusal(StatusCode::FORBIDDEN, &err),
    };
    if let Err(err) = caller.check_org(&scope.project.org_id) {
        return refusal(StatusCode::FORBIDDEN, &err);
    }
    request.extensions_mut().insert(scope);
    next.run(request).await
}

fn scope_of(query: &str) -> Result<Scope, Error> {
    let (mut org, mut project, mut user) = (String::new(), String::new(), String::new());
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "org" => org = value.into_owned(),
            "project" => project = value.into_owned(),
            "user" => user = value.into_owned(),
            other => {
                return Err(Error::invalid(
                    other,
                    "is not a parameter of /mcp (org, project, user)",
                ));
            }
        }
    }
    Scope::new(&org, &project, &user)
}

/// A JSON-RPC error body (no id: the request was not read) with the HTTP status.
fn refusal(status: StatusCode, err: &Error) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32600, "message": err.to_string()},
    });
    let mut response = (status, axum::Json(body)).into_response();
    // The gateway's metrics and logs count it under the domain error's code.
    response.extensions_mut().insert(err.grpc_code());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_scope() {
        let scope = scope_of("org=acme&project=p%2D1&user=alice+smith").unwrap();
        assert_eq!(scope.project.org_id, "acme");
        assert_eq!(scope.project.project_id, "p-1");
        assert_eq!(scope.user, "alice smith");
        let default = scope_of("").unwrap();
        assert_eq!(default.project.org_id, "universal");
        assert_eq!(default.user, "user");
        assert!(scope_of("org=a/b").is_err());
        assert!(scope_of("tenant=x").is_err());
    }
}
