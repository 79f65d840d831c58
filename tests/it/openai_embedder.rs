//! The OpenAI embedder against a real local HTTP server (axum on 127.0.0.1:0) that speaks
//! the OpenAI embeddings protocol, scripted per test: what it answers to the n-th request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use memmachine_domain::embed::openai::{OpenAiConfig, OpenAiEmbedder};
use memmachine_domain::embed::{EmbedError, Embedder};
use serde_json::{Value, json};

/// What the server answers to one request.
#[derive(Clone)]
enum Reply {
    /// Embeddings of this length for every input, listed in reverse order (the
    /// indices say where each belongs).
    Embeddings(usize),
    /// An error status with this body and maybe a `Retry-After`.
    Status(u16, String, Option<&'static str>),
    /// Sleeps, then answers.
    Slow(Duration, Box<Reply>),
    /// A 200 with this body as it is.
    Raw(String),
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    authorization: Option<String>,
    body: Value,
}

type Script = dyn Fn(usize) -> Reply + Send + Sync;

#[derive(Clone)]
struct Mock {
    script: Arc<Script>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

struct Server {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn attempts(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// Starts a server answering the n-th request (from 0) with `script(n)`.
async fn serve(script: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Server {
    let mock = Mock {
        script: Arc::new(script),
        seen: Arc::default(),
    };
    let seen = mock.seen.clone();
    let app = Router::new()
        .route("/v1/embeddings", post(handle))
        .with_state(mock);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server {
        base: format!("http://{addr}"),
        seen,
    }
}

async fn handle(
    State(mock): State<Mock>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let n = {
        let mut seen = mock.seen.lock().unwrap();
        seen.push(Seen {
            path: uri.path().to_string(),
            authorization: headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_string()),
            body: body.clone(),
        });
        seen.len() - 1
    };
    let mut reply = (mock.script)(n);
    while let Reply::Slow(delay, then) = reply {
        tokio::time::sleep(delay).await;
        reply = *then;
    }
    let (status, text, retry_after) = match reply {
        Reply::Embeddings(dims) => {
            let inputs: Vec<String> = body["input"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect();
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .rev()
                .map(
                    |(i, t)| json!({"object": "embedding", "index": i, "embedding": fake(t, dims)}),
                )
                .collect();
            let response = json!({
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": inputs.len(), "total_tokens": inputs.len()},
            });
            (200, response.to_string(), None)
        }
        Reply::Status(code, body, retry_after) => (code, body, retry_after),
        Reply::Raw(body) => (200, body, None),
        Reply::Slow(..) => unreachable!(),
    };
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json");
    if let Some(secs) = retry_after {
        response = response.header("retry-after", secs);
    }
    response.body(Body::from(text)).unwrap()
}

/// The server's (unnormalised) vector for `text`: deterministic, different per text.
fn fake(text: &str, dims: usize) -> Vec<f32> {
    let mut h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (0..dims)
        .map(|_| {
            h = h
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((h >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    memmachine_domain::embed::normalize(&mut v);
    v
}

/// A config for a test: fast backoff, short timeout.
fn config(base: &str) -> OpenAiConfig {
    let mut c = OpenAiConfig::new(base, "test-embed");
    c.backoff = Duration::from_millis(1);
    c.max_backoff = Duration::from_millis(5);
    c.timeout = Duration::from_secs(2);
    c
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text number {i}")).collect()
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?} != {want:?}");
    }
}

#[tokio::test]
async fn happy_path_batches_orders_by_index_normalises_and_authenticates() {
    let server = serve(|_| Reply::Embeddings(6)).await;
    let mut c = config(&format!("{}/v1/", server.base));
    c.api_key = Some("sk-test-key".into());
    c.batch_size = 3;
    let e = OpenAiEmbedder::new(c).unwrap();
    assert_eq!(e.id(), "openai:test-embed");
    assert_eq!(e.dimensions(), 0, "unknown before the first call");

    let input = texts(7);
    let vectors = e.embed(&input).await.unwrap();

    assert_eq!(vectors.len(), 7);
    for (v, t) in vectors.iter().zip(&input) {
        assert_close(v, &normalised(fake(t, 6)));
        let norm: f32 = v.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-5);
    }
    assert_eq!(e.dimensions(), 6);

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "7 texts in batches of 3");
    let mut sent = Vec::new();
    for (r, size) in requests.iter().zip([3, 3, 1]) {
        assert_eq!(r.path, "/v1/embeddings");
        assert_eq!(r.authorization.as_deref(), Some("Bearer sk-test-key"));
        assert_eq!(r.body["model"], "test-embed");
        assert!(r.body.get("dimensions").is_none(), "{}", r.body);
        let batch = r.body["input"].as_array().unwrap();
        assert_eq!(batch.len(), size);
        sent.extend(batch.iter().map(|t| t.as_str().unwrap().to_string()));
    }
    assert_eq!(sent, input);
    // The endpoint reports one prompt token per text (see `handle`).
    assert_eq!(e.tokens(), 7, "tokens as the endpoint counted them");
}

#[tokio::test]
async fn no_key_means_no_auth_header_and_configured_dimensions_are_sent() {
    let server = serve(|_| Reply::Embeddings(4)).await;
    let mut c = config(&server.base);
    c.dimensions = Some(4);
    let e = OpenAiEmbedder::new(c).unwrap();
    assert_eq!(e.id(), "openai:test-embed:4");
    assert_eq!(e.dimensions(), 4, "known from the config");

    let vectors = e.embed(&texts(2)).await.unwrap();
    assert_eq!(vectors.len(), 2);
    assert_eq!(e.probe().await.unwrap(), 4);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].authorization, None);
    assert_eq!(requests[0].body["dimensions"], 4);
    assert_eq!(requests[1].body["input"], json!(["dimension probe"]));
}

#[tokio::test]
async fn retries_429_and_500_then_succeeds() {
    let server = serve(|n| match n {
        0 => Reply::Status(429, r#"{"error":{"message":"slow down"}}"#.into(), None),
        1 => Reply::Status(500, r#"{"error":{"message":"boom"}}"#.into(), None),
        _ => Reply::Embeddings(3),
    })
    .await;
    let e = OpenAiEmbedder::new(config(&server.base)).unwrap();
    let input = texts(2);
    let vectors = e.embed(&input).await.unwrap();
    assert_close(&vectors[1], &normalised(fake(&input[1], 3)));
    assert_eq!(server.attempts(), 3);
    let requests = server.requests();
    assert!(
        requests.iter().all(|r| r.body == requests[0].body),
        "the same request is retried"
    );
}

#[tokio::test]
async fn honours_retry_after_seconds() {
    let server = serve(|n| match n {
        0 => Reply::Status(429, "{}".into(), Some("1")),
        _ => Reply::Embeddings(3),
    })
    .await;
    let e = OpenAiEmbedder::new(config(&server.base)).unwrap();
    let started = Instant::now();
    e.embed(&texts(1)).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.attempts(), 2);
}

#[tokio::test]
async fn persistent_500_is_unavailable_after_all_retries() {
    let server =
        serve(|_| Reply::Status(503, r#"{"error":{"message":"overloaded"}}"#.into(), None)).await;
    let mut c = config(&server.base);
    c.max_retries = 3;
    let e = OpenAiEmbedder::new(c).unwrap();
    let err = e.embed(&texts(1)).await.unwrap_err();
    match &err {
        EmbedError::Unavailable(m) => {
            assert!(m.contains("overloaded") && m.contains("4 attempts"), "{m}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(server.attempts(), 4, "max_retries + 1");
}

#[tokio::test]
async fn client_error_is_failed_with_the_server_message_and_not_retried() {
    let server = serve(|_| {
        Reply::Status(
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":null}}"#.into(),
            None,
        )
    })
    .await;
    let e = OpenAiEmbedder::new(config(&server.base)).unwrap();
    let err = e.embed(&texts(1)).await.unwrap_err();
    match &err {
        EmbedError::Failed(m) => {
            assert!(m.contains("maximum context length is 8192 tokens"), "{m}");
            assert!(m.contains("400"), "{m}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(server.attempts(), 1);
}

#[tokio::test]
async fn unauthorised_is_failed_and_never_shows_the_key() {
    let server = serve(|_| {
        Reply::Status(
            401,
            r#"{"error":{"message":"Incorrect API key provided"}}"#.into(),
            None,
        )
    })
    .await;
    let mut c = config(&server.base);
    c.api_key = Some("sk-secret-123".into());
    let e = OpenAiEmbedder::new(c).unwrap();
    let err = e.embed(&texts(1)).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, EmbedError::Failed(_)), "{text}");
    assert!(text.contains("Incorrect API key provided"), "{text}");
    assert!(!text.contains("sk-secret-123"), "{text}");
    assert!(!format!("{e:?}").contains("sk-secret-123"));
    assert_eq!(server.attempts(), 1);
}

#[tokio::test]
async fn a_dimension_change_between_calls_is_failed_naming_both() {
    let server = serve(|n| Reply::Embeddings(if n == 0 { 8 } else { 12 })).await;
    let e = OpenAiEmbedder::new(config(&server.base)).unwrap();
    assert_eq!(e.dimensions(), 0);
    assert_eq!(e.probe().await.unwrap(), 8);
    assert_eq!(e.dimensions(), 8);
    let err = e.embed(&texts(2)).await.unwrap_err();
    match &err {
        EmbedError::Failed(m) => {
            assert!(m.contains("returned 12 dimensions, expected 8"), "{m}")
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(e.dimensions(), 8, "the known length does not change");
    assert_eq!(server.attempts(), 2, "not retried");
}

#[tokio::test]
async fn a_server_ignoring_configured_dimensions_is_failed() {
    let server = serve(|_| Reply::Embeddings(1536)).await;
    let mut c = config(&server.base);
    c.dimensions = Some(256);
    let e = OpenAiEmbedder::new(c).unwrap();
    let err = e.probe().await.unwrap_err();
    match &err {
        EmbedError::Failed(m) => {
            assert!(m.contains("returned 1536 dimensions, expected 256"), "{m}")
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test]
async fn timeouts_are_retried_then_unavailable() {
    let server =
        serve(|_| Reply::Slow(Duration::from_secs(3), Box::new(Reply::Embeddings(3)))).await;
    let mut c = config(&server.base);
    c.timeout = Duration::from_millis(100);
    c.max_retries = 2;
    let e = OpenAiEmbedder::new(c).unwrap();
    let started = Instant::now();
    let err = e.embed(&texts(1)).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    match &err {
        EmbedError::Unavailable(m) => assert!(m.contains("timed out"), "{m}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(server.attempts(), 3);
}

#[tokio::test]
async fn a_slow_answer_within_the_timeout_succeeds() {
    let server = serve(|n| match n {
        0 => Reply::Slow(Duration::from_secs(3), Box::new(Reply::Embeddings(3))),
        _ => Reply::Slow(Duration::from_millis(20), Box::new(Reply::Embeddings(3))),
    })
    .await;
    let mut c = config(&server.base);
    c.timeout = Duration::from_millis(300);
    let e = OpenAiEmbedder::new(c).unwrap();
    assert_eq!(e.embed(&texts(1)).await.unwrap().len(), 1);
    assert_eq!(server.attempts(), 2);
}

/// Decision: a 2xx whose body is not an embeddings response means a wrong `base_url` or
/// an incompatible server; retrying will not help, so it is `Failed` at once.
#[tokio::test]
async fn malformed_success_bodies_are_failed_without_retry() {
    for (body, expect) in [
        ("this is not json", "not an OpenAI embeddings response"),
        (r#"{"data": "nope"}"#, "not an OpenAI embeddings response"),
        (
            r#"{"data":[{"index":0,"embedding":[1.0,2.0]}]}"#,
            "1 embeddings for 2 texts",
        ),
        (
            r#"{"data":[{"index":0,"embedding":[1.0]},{"index":0,"embedding":[2.0]}]}"#,
            "index 0 twice",
        ),
        (
            r#"{"data":[{"index":0,"embedding":[1.0]},{"index":5,"embedding":[2.0]}]}"#,
            "index 5 for 2 texts",
        ),
    ] {
        let server = serve(move |_| Reply::Raw(body.into())).await;
        let e = OpenAiEmbedder::new(config(&server.base)).unwrap();
        let err = e.embed(&texts(2)).await.unwrap_err();
        match &err {
            EmbedError::Failed(m) => assert!(m.contains(expect), "{body}: {m}"),
            other => panic!("{body}: expected Failed, got {other:?}"),
        }
        assert_eq!(server.attempts(), 1, "{body}");
    }
}

#[tokio::test]
async fn responses_without_indices_keep_their_listed_order() {
    let server = serve(|_| {
        Reply::Raw(r#"{"data":[{"embedding":[3.0,4.0]},{"embedding":[0.0,2.0]}]}"#.into())
    })
    .await;
    let e = OpenAiEmbedder::new(config(&server.base)).unwrap();
    let vectors = e.embed(&texts(2)).await.unwrap();
    assert_close(&vectors[0], &[0.6, 0.8]);
    assert_close(&vectors[1], &[0.0, 1.0]);
}

#[tokio::test]
async fn connection_refused_is_unavailable_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut c = config(&format!("http://{addr}"));
    c.max_retries = 2;
    let e = OpenAiEmbedder::new(c).unwrap();
    match e.embed(&texts(1)).await.unwrap_err() {
        EmbedError::Unavailable(m) => assert!(m.contains("3 attempts"), "{m}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn empty_inputs_are_not_sent() {
    let server = serve(|_| Reply::Embeddings(5)).await;
    let e = OpenAiEmbedder::new(config(&server.base)).unwrap();
    assert!(e.embed(&[]).await.unwrap().is_empty());
    assert_eq!(server.attempts(), 0);

    // Only empty texts, dimensions unknown: one probe to learn the length.
    let vectors = e.embed(&[String::new()]).await.unwrap();
    assert_eq!(vectors, vec![vec![0.0; 5]]);
    assert_eq!(server.attempts(), 1);

    let input = vec!["a".to_string(), String::new(), "b".to_string()];
    let vectors = e.embed(&input).await.unwrap();
    assert_close(&vectors[0], &normalised(fake("a", 5)));
    assert_eq!(vectors[1], vec![0.0; 5]);
    assert_close(&vectors[2], &normalised(fake("b", 5)));
    assert_eq!(server.requests()[1].body["input"], json!(["a", "b"]));
}

#[test]
fn bad_configurations_are_rejected() {
    let ok = || OpenAiConfig::new("http://127.0.0.1:1", "m");
    let defaults = ok();
    assert_eq!(defaults.timeout, Duration::from_secs(30));
    assert_eq!(defaults.max_retries, 4);
    assert_eq!(defaults.batch_size, 128);
    assert_eq!(defaults.backoff, Duration::from_millis(200));
    assert!(defaults.api_key.is_none() && defaults.dimensions.is_none());
    assert!(OpenAiEmbedder::new(ok()).is_ok());

    let mut c = ok();
    c.base_url = "not a url".into();
    assert!(matches!(OpenAiEmbedder::new(c), Err(EmbedError::Failed(_))));
    let mut c = ok();
    c.model = " ".into();
    assert!(matches!(OpenAiEmbedder::new(c), Err(EmbedError::Failed(_))));
    let mut c = ok();
    c.batch_size = 0;
    assert!(matches!(OpenAiEmbedder::new(c), Err(EmbedError::Failed(_))));
    let mut c = ok();
    c.dimensions = Some(0);
    assert!(matches!(OpenAiEmbedder::new(c), Err(EmbedError::Failed(_))));
    let mut c = ok();
    c.api_key = Some("bad\nkey".into());
    assert!(matches!(OpenAiEmbedder::new(c), Err(EmbedError::Failed(_))));
}
