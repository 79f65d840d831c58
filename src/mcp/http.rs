//! MCP over Streamable HTTP at `/mcp` on the REST listener. The scope is the URL's
//! (`/mcp?org=O&project=P&user=U`, each optional), checked against the authenticated
//! caller on every request before rmcp sees it: another org is HTTP 403. A session is
//! bound to the caller (the key) whose `initialize` opened it: its id sent by anyone
//! else is HTTP 404, as an unknown session's, whatever the method.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower::Layer;

use super::Scope;
use super::tools::MemoryTools;
use crate::domain::Domain;
use memmachine_core::error::Error;
use memmachine_domain::auth::{Access, Caller};

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
    // rmcp's own host check is off: the gateway's browsers guard
    // (`admission::host_and_origin`) checks the host of every route, this one included.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let manager = Arc::new(LocalSessionManager::default());
    let owners = Owners {
        by_session: Arc::default(),
        manager: manager.clone(),
    };
    let mcp = StreamableHttpService::new(
        move || Ok(MemoryTools::per_session(domain.clone())),
        manager,
        config,
    );
    axum::middleware::from_fn_with_state(owners, admit).layer(mcp)
}

/// The header carrying a session's id, both ways.
const SESSION_HEADER: &str = "mcp-session-id";

/// Which caller opened each live session. rmcp's session manager sees no callers, so
/// the binding lives here, learned from the `initialize` answer's session header.
#[derive(Clone)]
struct Owners {
    by_session: Arc<Mutex<HashMap<String, Caller>>>,
    /// rmcp's sessions: a binding goes when its session has ended, however it ended.
    manager: Arc<LocalSessionManager>,
}

impl Owners {
    fn owner(&self, session: &str) -> Option<Caller> {
        let owners = self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        owners.get(session).cloned()
    }

    /// Binds a new session, dropping the bindings of sessions that ended (idle ones
    /// rmcp closed, say) on the way.
    async fn bind(&self, session: &str, caller: Caller) {
        let live = self.manager.sessions.read().await;
        let mut owners = self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        owners.retain(|id, _| live.contains_key(id.as_str()));
        owners.insert(session.to_string(), caller);
    }

    fn forget(&self, session: &str) {
        let mut owners = self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        owners.remove(session);
    }
}

/// Resolves the URL's scope, refuses it unless the caller reaches its org and (for a
/// session's request) opened the session, and hands the scope to the tools in the
/// request's extensions.
async fn admit(State(owners): State<Owners>, mut request: Request, next: Next) -> Response {
    // The gateway's admission authenticated the request and recorded its caller.
    let caller = match memmachine_domain::auth::caller_of(request.extensions()) {
        Ok(caller) => caller,
        Err(err) => return refusal(StatusCode::FORBIDDEN, &err),
    };
    // A malformed URL is 400; a project the caller may not reach, 403.
    let scope = match scope_of(caller, request.uri().query().unwrap_or("")) {
        Ok(scope) => scope,
        Err(err) => return refusal(memmachine_core::error::http_status(err.grpc_code()), &err),
    };
    let caller = caller.caller().clone();
    // Another caller's session is answered as one that does not exist: nothing says
    // whether it does.
    let session = match request.headers().get(SESSION_HEADER) {
        None => None,
        Some(value) => match value.to_str() {
            Ok(id) if owners.owner(id).as_ref() == Some(&caller) => Some(id.to_string()),
            _ => {
                return refusal(
                    StatusCode::NOT_FOUND,
                    &Error::NotFound(
                        "no such MCP session for this caller: open one with initialize".into(),
                    ),
                );
            }
        },
    };
    let ends = request.method() == Method::DELETE;
    request.extensions_mut().insert(scope);
    let response = next.run(request).await;
    match session {
        // An `initialize` that opened a session: bound to its caller.
        None => {
            if let Some(id) = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                owners.bind(id, caller).await;
            }
        }
        Some(id) if ends && response.status().is_success() => owners.forget(&id),
        Some(_) => {}
    }
    response
}

fn scope_of(caller: &Access, query: &str) -> Result<Scope, Error> {
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
    Scope::new(caller, &org, &project, &user)
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
        let open = Access::unrouted(Caller::Anyone);
        let scope_of = |query| super::scope_of(&open, query);
        let scope = scope_of("org=acme&project=p%2D1&user=alice+smith").unwrap();
        assert_eq!(scope.project.org_id, "acme");
        assert_eq!(scope.project.project_id, "p-1");
        assert_eq!(scope.user, "alice smith");
        let default = scope_of("").unwrap();
        assert_eq!(default.project.org_id, "universal");
        assert_eq!(default.user, "user");
        assert!(scope_of("org=a/b").is_err());
        assert!(scope_of("tenant=x").is_err());
        let org_key = Access::unrouted(Caller::Org {
            key_id: "k".into(),
            org_id: "acme".into(),
        });
        assert!(super::scope_of(&org_key, "org=acme").is_ok());
        assert!(matches!(
            super::scope_of(&org_key, "org=globex"),
            Err(Error::PermissionDenied(_))
        ));
    }
}
