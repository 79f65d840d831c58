//! What the server shows of itself, from outside: an org key's metrics and
//! configuration hold its own org only; URLs are never shown with their secrets
//! (`config print`, the start-up log), and a base URL's query stays after the endpoint's
//! path; `/config/resources` reports each resource as its last real call ended.

use std::process::Command;
use std::time::Duration;

use crate::common;
use crate::common::child::Run;
use crate::common::embeddings::{Script, scripted_embeddings};
use crate::common::keys::create_key;
use crate::common::{InProcess, ServerProcess, free_port};
use memmachine::config::EmbedderKind;
use serde_json::{Value, json};

/// One REST call: the status and the body as text.
async fn call(
    method: reqwest::Method,
    url: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (u16, String) {
    let mut request = reqwest::Client::new().request(method, url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("HTTP request");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

async fn post(base: &str, path: &str, key: Option<&str>, body: Value) -> (u16, String) {
    call(
        reqwest::Method::POST,
        &format!("{base}{path}"),
        key,
        Some(body),
    )
    .await
}

async fn get(base: &str, path: &str, key: Option<&str>) -> (u16, String) {
    call(reqwest::Method::GET, &format!("{base}{path}"), key, None).await
}

/// The value of the sample whose line starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Adds `n` episodic memories to `org`'s project `notes`.
async fn add_episodes(base: &str, key: &str, org: &str, n: usize) {
    let messages: Vec<Value> = (0..n)
        .map(|i| json!({"content": format!("{org} note {i}")}))
        .collect();
    let body = json!({"org_id": org, "project_id": "notes", "types": ["episodic"],
                      "messages": messages});
    let (status, text) = post(base, "/memories", Some(key), body).await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn an_org_key_sees_its_own_orgs_metrics_and_no_server_details() {
    let rest = free_port();
    let server = InProcess::start_with(|config| {
        config.auth = true;
        config.rest_listen = Some(rest);
        config.embedder.kind = Some(EmbedderKind::Hash);
    })
    .await;
    let dir = server.data_dir.path().to_path_buf();
    let admin = create_key(&dir, &["--admin"]);
    let acme = create_key(&dir, &["--org", "acme"]);
    let globex = create_key(&dir, &["--org", "globex"]);
    let base = format!("http://{rest}/api/v2");
    for (org, key, n) in [("acme", &acme, 2), ("globex", &globex, 3)] {
        let project = json!({"org_id": org, "project_id": "notes"});
        let (status, text) = post(&base, "/projects", Some(key), project).await;
        assert_eq!(status, 201, "{text}");
        add_episodes(&base, key, org, n).await;
    }

    // The operator's view: every org's episodes and all traffic.
    let (status, all) = get(&base, "/metrics", Some(&admin)).await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        sample(&all, "memmachine_episodes_stored"),
        Some(5.0),
        "{all}"
    );
    assert!(all.contains("memmachine_grpc_requests_total"), "{all}");

    // An org's view: its own episodes, nothing of the others' traffic or models.
    let (status, own) = get(&base, "/metrics", Some(&acme)).await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(
        sample(&own, "memmachine_episodes_stored"),
        Some(2.0),
        "{own}"
    );
    // The embedder may still be at work: the depth counts this org's 2 at most, never
    // the other org's 3.
    let depth = sample(&own, "memmachine_embedding_queue_depth").expect("queue depth");
    assert!(depth <= 2.0, "{own}");
    for server_wide in [
        "grpc_requests",
        "rate_limited",
        "embedded_texts",
        "embedder_up",
        "llm_calls",
        "globex",
    ] {
        assert!(!own.contains(server_wide), "{server_wide} in {own}");
    }
    assert!(own.trim_end().ends_with("# EOF"), "{own}");
    let (_, theirs) = get(&base, "/metrics", Some(&globex)).await;
    assert_eq!(sample(&theirs, "memmachine_episodes_stored"), Some(3.0));

    // The configuration: where the store is only for the operator.
    let store = server.store.describe();
    let (kind, location) = store.split_once(' ').unwrap();
    let (status, config) = get(&base, "/config", Some(&admin)).await;
    assert_eq!(status, 200, "{config}");
    assert!(config.contains(location), "{config}");
    for path in [
        "/config",
        "/config/resources",
        "/config/memory/episodic",
        "/config/memory/episodic/long_term",
        "/config/memory/semantic",
    ] {
        let (status, shown) = get(&base, path, Some(&acme)).await;
        assert_eq!(status, 200, "{path}: {shown}");
        assert!(!shown.contains(location), "{path}: {shown}");
    }
    let (_, resources) = get(&base, "/config/resources", Some(&acme)).await;
    let resources: Value = serde_json::from_str(&resources).unwrap();
    let database = &resources["databases"][0];
    assert_eq!(database["name"], kind, "{resources}");
    assert_eq!(database["status"], "ready", "{resources}");
    server.stop().await.unwrap();
}

#[test]
fn config_print_shows_no_password_and_no_query_value() {
    let output = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args([
            "config",
            "print",
            "--store",
            "postgres://mm:pg-secret@db.example:5432/memory?sslmode=require&password=pg-q",
            "--llm-base-url",
            "https://me:llm-secret@llm.example/v1?key=sk-llm",
            "--llm-model",
            "chat",
            "--embedder",
            "openai",
            "--embedder-base-url",
            "https://emb.example/v1?api-key=sk-emb",
            "--embedder-model",
            "embed",
            "--reranker-base-url",
            "http://rr:rr-secret@rerank.example?token=sk-rr",
            "--otlp-endpoint",
            "https://otel.example:4318?auth=sk-otlp",
        ])
        .env_clear()
        .run();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for secret in [
        "pg-secret",
        "pg-q",
        "llm-secret",
        "sk-llm",
        "sk-emb",
        "rr-secret",
        "sk-rr",
        "sk-otlp",
    ] {
        assert!(!printed.contains(secret), "{secret} in\n{printed}");
    }
    for shown in [
        "store = \"postgres://mm:***@db.example:5432/memory?sslmode=***&password=***\"",
        "llm_base_url = \"https://me:***@llm.example/v1?key=***\"",
        "embedder_base_url = \"https://emb.example/v1?api-key=***\"",
        "reranker_base_url = \"http://rr:***@rerank.example?token=***\"",
        "otlp_endpoint = \"https://otel.example:4318?auth=***\"",
    ] {
        assert!(printed.contains(shown), "{shown} not in\n{printed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_log_shows_no_secret_and_a_query_stays_after_the_path() {
    let (endpoint, requests) = scripted_embeddings(Script::Slow(Duration::ZERO)).await;
    // The endpoint answers only at /v1/embeddings: the query must come after it.
    let embedder = endpoint.replace("http://", "http://me:emb-secret@") + "?key=sk-emb";
    let llm = "http://me:llm-secret@127.0.0.1:9/v1?key=sk-llm";
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_path_buf();
    let server = tokio::task::spawn_blocking(move || {
        let args = [
            "--embedder",
            "openai",
            "--embedder-base-url",
            embedder.as_str(),
            "--embedder-model",
            "embed",
            "--llm-base-url",
            llm,
            "--llm-model",
            "chat",
        ];
        ServerProcess::start(&dir, &args)
    })
    .await
    .unwrap();
    let log = server.log.lock().unwrap().join("\n");
    assert!(log.contains(common::READY), "{log}");
    for secret in ["emb-secret", "sk-emb", "llm-secret", "sk-llm"] {
        assert!(!log.contains(secret), "{secret} in\n{log}");
    }
    assert!(
        log.contains("/v1/chat/completions?key=***"),
        "the chat endpoint is not logged with its query after the path:\n{log}"
    );
    // The start-up probe reached /v1/embeddings (with the query after it) and was answered.
    assert!(
        requests.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "{log}"
    );
    assert!(!log.contains("not answering yet"), "{log}");
}

/// The embedder entry of `/config/resources` once its status is no longer `pending`.
async fn embedder_status(base: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..300 {
        let (status, text) = get(base, "/config/resources", None).await;
        assert_eq!(status, 200, "{text}");
        let resources: Value = serde_json::from_str(&text).unwrap();
        last = resources["embedders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"].as_str().unwrap().starts_with("openai:"))
            .cloned()
            .unwrap_or(Value::Null);
        if last["status"] != "pending" {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the embedder stayed pending: {last}");
}

/// A server whose default embedder is the OpenAI-compatible endpoint at `url`, after
/// an add and a search that need it: its `/config/resources` entry for that embedder.
async fn status_after_use(url: String) -> Value {
    let rest = free_port();
    let server = InProcess::start_with(|config| {
        config.rest_listen = Some(rest);
        config.embedder.kind = Some(EmbedderKind::Openai);
        config.embedder.base_url = Some(memmachine_core::urls::SecretUrl::new(url));
        config.embedder.model = Some("embed".into());
        config.embedder.dimensions = Some(4);
    })
    .await;
    let base = format!("http://{rest}/api/v2");
    let project = json!({"org_id": "acme", "project_id": "notes"});
    let (status, text) = post(&base, "/projects", None, project).await;
    assert_eq!(status, 201, "{text}");
    let body = json!({"org_id": "acme", "project_id": "notes", "types": ["episodic"],
                      "messages": [{"content": "the cat sat on the mat"}]});
    let (status, text) = post(&base, "/memories", None, body).await;
    assert_eq!(status, 200, "{text}");
    let query = json!({"org_id": "acme", "project_id": "notes", "query": "cat",
                       "types": ["episodic"]});
    post(&base, "/memories/search", None, query).await;
    let status = embedder_status(&base).await;
    server.stop().await.unwrap();
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_report_the_last_real_call_of_each_embedder() {
    // Nothing listens there; the URL's secrets must not surface in the error either.
    let dead = format!("http://me:dead-secret@{}/v1?key=sk-dead", free_port());
    let failed = status_after_use(dead).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let error = failed["error"].as_str().unwrap();
    assert!(
        !error.contains("dead-secret") && !error.contains("sk-dead"),
        "{error}"
    );

    let (working, _) = scripted_embeddings(Script::Slow(Duration::ZERO)).await;
    let ready = status_after_use(working).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert!(ready["error"].is_null(), "{ready}");
}
