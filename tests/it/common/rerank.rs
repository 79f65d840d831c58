//! A real local HTTP server speaking the rerank protocol (`POST /rerank`, as TEI, Jina
//! and Cohere do), scripted by the query: it scores each document by how often it says
//! [`KEYWORD`], unless the query asks it to fail (see [`scripted_rerank`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The word whose occurrences are a document's score.
pub const KEYWORD: &str = "zebra";

/// The score the endpoint gives `document`.
pub fn keyword_score(document: &str) -> f32 {
    document.matches(KEYWORD).count() as f32
}

/// Every request body the endpoint received, in order.
pub type Requests = Arc<Mutex<Vec<Value>>>;

/// Serves on a loopback port and returns its base URL (`/rerank` is appended by the
/// client) with the requests it receives. A query containing
/// - `fail500` is answered 500 every time;
/// - `hang` is answered after 60 s (past any test's timeout);
/// - `garbage` is answered 200 with a body that is not a rerank answer;
/// - `flaky429` / `flaky500` is answered 429 (`Retry-After: 0`) / 500 the first time,
///   then as usual;
/// - `tei` is answered in TEI's shape (`[{"index","score"}]`), any other in Cohere's
///   (`{"results":[{"index","relevance_score"}]}`).
pub async fn scripted_rerank() -> (String, Requests) {
    let requests: Requests = Arc::default();
    let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let recorded = requests.clone();
    let app = axum::Router::new().route(
        "/rerank",
        axum::routing::post(move |Json(body): Json<Value>| {
            recorded.lock().unwrap().push(body.clone());
            let seen = seen.clone();
            async move { answer(body, &seen).await }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), requests)
}

async fn answer(body: Value, seen: &Mutex<HashMap<String, usize>>) -> Response {
    let query = body["query"].as_str().unwrap_or_default().to_string();
    let times = {
        let mut seen = seen.lock().unwrap();
        let n = seen.entry(query.clone()).or_default();
        *n += 1;
        *n
    };
    if query.contains("fail500") || (query.contains("flaky500") && times == 1) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "model crashed").into_response();
    }
    if query.contains("flaky429") && times == 1 {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "0")],
            Json(json!({"message": "slow down"})),
        )
            .into_response();
    }
    if query.contains("hang") {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    if query.contains("garbage") {
        return (StatusCode::OK, "<html>maintenance</html>").into_response();
    }
    let documents = body
        .get("documents")
        .or_else(|| body.get("texts"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut scored: Vec<(usize, f32)> = documents
        .iter()
        .enumerate()
        .map(|(i, d)| (i, keyword_score(d.as_str().unwrap_or_default())))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    if query.contains("tei") {
        let list: Vec<Value> = scored
            .iter()
            .map(|(i, s)| json!({"index": i, "score": s}))
            .collect();
        return Json(Value::Array(list)).into_response();
    }
    let results: Vec<Value> = scored
        .iter()
        .map(|(i, s)| json!({"index": i, "relevance_score": s}))
        .collect();
    Json(json!({"id": "r1", "results": results, "meta": {"billed_units": {"search_units": 1}}}))
        .into_response()
}
