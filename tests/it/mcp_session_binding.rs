//! An MCP session over Streamable HTTP belongs to the key that opened it (issue 26,
//! finding 5): its id sent with another org's key (at a URL of that org), or another
//! key of the same org, is answered 404 (as an unknown session) for POST, GET and
//! DELETE alike; without a key the gateway answers 401; and the session lives on for
//! its owner. Real server, real HTTP.

use crate::common::ServerProcess;
use crate::common::keys::create_key;
use crate::common::mcp_http::Session;
use reqwest::{Method, StatusCode};
use serde_json::json;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_session_id_works_for_the_key_that_opened_it_only() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        data.path(),
        &[
            "--embedder",
            "none",
            "--rest-listen",
            "127.0.0.1:0",
            "--auth",
        ],
    );
    let acme = create_key(data.path(), &["--org", "acme"]);
    let acme_too = create_key(data.path(), &["--org", "acme"]);
    let globex = create_key(data.path(), &["--org", "globex"]);
    let http = http();
    let base = server.rest_url();
    let mut session = Session::open(&http, &base, ("acme", "notes", "alice"), Some(&acme))
        .await
        .expect("open a session");
    let tools = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}});

    // Another caller holding the id sends it with a URL its key reaches.
    for (who, key, scope) in [
        (
            "another org's key",
            globex.as_str(),
            ("globex", "notes", "alice"),
        ),
        (
            "another key of the same org",
            acme_too.as_str(),
            ("acme", "notes", "alice"),
        ),
    ] {
        let listed = session
            .raw_at(scope, Method::POST, Some(key), Some(&tools))
            .await;
        assert_eq!(
            listed.status,
            StatusCode::NOT_FOUND,
            "tools/list with {who}: {listed:?}"
        );
        assert!(
            !listed.body.contains("add_memory"),
            "tools/list with {who} listed the tools: {listed:?}"
        );
        let stream = session.raw_at(scope, Method::GET, Some(key), None).await;
        assert_eq!(
            stream.status,
            StatusCode::NOT_FOUND,
            "GET with {who}: {stream:?}"
        );
        let ended = session.raw_at(scope, Method::DELETE, Some(key), None).await;
        assert_eq!(
            ended.status,
            StatusCode::NOT_FOUND,
            "DELETE with {who}: {ended:?}"
        );
    }
    // With the session's own URL another org's key is refused by the org check.
    let foreign = session.post(Some(&globex), &tools).await;
    assert_eq!(foreign.status, StatusCode::FORBIDDEN, "{foreign:?}");
    // Without a key the gateway refuses before the session is looked at.
    let anonymous = session.post(None, &tools).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{anonymous:?}");

    // The owner's session survived every attempt, and is the owner's to end.
    let listed = session
        .request("tools/list", json!({}))
        .await
        .expect("the owner lists the tools");
    assert!(listed.to_string().contains("add_memory"), "{listed}");
    let ended = session.raw(Method::DELETE, Some(&acme), None).await;
    assert!(ended.status.is_success(), "the owner's DELETE: {ended:?}");
    let after = session.post(Some(&acme), &tools).await;
    assert_eq!(after.status, StatusCode::NOT_FOUND, "{after:?}");
}

#[tokio::test]
async fn without_auth_sessions_work_as_before() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        data.path(),
        &["--embedder", "none", "--rest-listen", "127.0.0.1:0"],
    );
    let http = http();
    let base = server.rest_url();
    let mut session = Session::open(&http, &base, ("acme", "notes", "alice"), None)
        .await
        .expect("open a session");
    let listed = session
        .request("tools/list", json!({}))
        .await
        .expect("tools/list");
    assert!(listed.to_string().contains("search_memory"), "{listed}");
    // An id the server never issued is unknown, as rmcp answers.
    let mut stranger = Session::open(&http, &base, ("acme", "notes", "bob"), None)
        .await
        .expect("open a second session");
    stranger.id = uuid::Uuid::new_v4().to_string();
    let unknown = stranger
        .post(
            None,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{unknown:?}");
    let ended = session.raw(Method::DELETE, None, None).await;
    assert!(ended.status.is_success(), "{ended:?}");
    let after = session
        .post(
            None,
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await;
    assert_eq!(after.status, StatusCode::NOT_FOUND, "{after:?}");
}
