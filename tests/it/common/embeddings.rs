//! A real local HTTP server speaking the OpenAI embeddings protocol, scripted by test:
//! every text gets the same vector, unless the script refuses or delays it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use serde_json::{Value, json};

/// How the scripted endpoint answers the n-th request (0: the server's start-up probe).
#[derive(Clone, Copy)]
pub enum Script {
    /// Refuses any input containing "POISON" as too long, as OpenAI does (400).
    RefusePoison,
    /// Answers the start-up probe, then never in time.
    HangAfterStartUp,
    /// Answers every request, each after this long.
    Slow(Duration),
}

/// Serves `script` on a loopback port: the base URL (`http://ADDR/v1`) and a count of
/// the requests so far.
pub async fn scripted_embeddings(script: Script) -> (String, Arc<AtomicUsize>) {
    let (url, requests, _) = recording_embeddings(script).await;
    (url, requests)
}

/// Every text the scripted endpoint was asked to embed, in order.
pub type Texts = Arc<std::sync::Mutex<Vec<String>>>;

/// As `scripted_embeddings`, also recording every text it is asked to embed.
pub async fn recording_embeddings(script: Script) -> (String, Arc<AtomicUsize>, Texts) {
    let requests = Arc::new(AtomicUsize::new(0));
    let texts: Texts = Arc::default();
    let (seen, recorded) = (requests.clone(), texts.clone());
    let app = axum::Router::new().route(
        "/v1/embeddings",
        axum::routing::post(move |Json(body): Json<Value>| {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let recorded = recorded.clone();
            async move {
                let inputs: Vec<String> = body["input"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
                    .unwrap_or_default();
                match script {
                    Script::RefusePoison if inputs.iter().any(|t| t.contains("POISON")) => {
                        return (
                            axum::http::StatusCode::BAD_REQUEST,
                            Json(json!({"error": {
                                "message": "This model's maximum context length is 8192 tokens",
                                "type": "invalid_request_error"}})),
                        );
                    }
                    Script::HangAfterStartUp if n > 0 => {
                        tokio::time::sleep(Duration::from_secs(600)).await;
                    }
                    Script::Slow(delay) => tokio::time::sleep(delay).await,
                    _ => {}
                }
                // Recorded once answered: a request cut short embedded nothing.
                recorded.lock().unwrap().extend(inputs.iter().cloned());
                let data: Vec<Value> = (0..inputs.len())
                    .map(|i| json!({"object": "embedding", "index": i, "embedding": [0.6, 0.8, 0.0, 0.0]}))
                    .collect();
                let tokens = inputs.len();
                (
                    axum::http::StatusCode::OK,
                    Json(json!({"object": "list", "data": data, "model": body["model"],
                                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), requests, texts)
}
