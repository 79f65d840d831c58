//! Observability: the Prometheus scrape after real calls, request ids on every answer,
//! and structured logs that carry them and never message contents or keys.

use std::time::Duration;

use crate::common;
use crate::common::calls::{add, create_project, get_project, search, with_key};
use crate::common::child::Run;
use crate::common::{InProcess, ServerProcess, free_port};
use memmachine::config::EmbedderKind;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;

/// The value of the sample whose line starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test]
async fn metrics_count_calls_by_method_and_code_and_read_the_store() {
    let metrics_addr = free_port();
    let server = InProcess::start_with(|config| {
        config.metrics_listen = Some(metrics_addr);
        config.embedder.kind = Some(EmbedderKind::Hash);
    })
    .await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    for _ in 0..3 {
        add(&channel, None, "acme").await.unwrap();
    }
    search(&channel, None, "acme").await.unwrap();
    let missing = get_project(&channel, None, "acme", "missing").await;
    assert_eq!(missing.unwrap_err().code(), tonic::Code::NotFound);

    // Made-up paths share one label.
    let raw = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for path in ["memmachine.v2.Nope/Nothing", "made/up-1", "made/up-2"] {
        raw.post(format!("{}/{path}", server.url))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(vec![0u8, 0, 0, 0, 0])
            .send()
            .await
            .unwrap();
    }

    let url = format!("http://{metrics_addr}/metrics");
    let mut text = String::new();
    for _ in 0..100 {
        text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        if sample(&text, "memmachine_embedding_queue_depth") == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let calls = |method: &str, code: &str| {
        sample(
            &text,
            &format!(
                "memmachine_grpc_requests_total{{method=\"memmachine.v2.{method}\",code=\"{code}\"}}"
            ),
        )
    };
    assert_eq!(
        calls("ProjectService/CreateProject", "OK"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(calls("MemoryService/AddMemories", "OK"), Some(3.0));
    assert_eq!(calls("MemoryService/SearchMemories", "OK"), Some(1.0));
    assert_eq!(calls("ProjectService/GetProject", "NOT_FOUND"), Some(1.0));
    assert_eq!(
        sample(
            &text,
            "memmachine_grpc_request_duration_seconds_count{method=\"memmachine.v2.MemoryService/AddMemories\"}"
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            "memmachine_grpc_request_duration_seconds_bucket{le=\"+Inf\",method=\"memmachine.v2.MemoryService/AddMemories\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(sample(&text, "memmachine_episodes_stored"), Some(3.0));
    assert_eq!(sample(&text, "memmachine_embedding_queue_depth"), Some(0.0));
    assert_eq!(
        sample(&text, "memmachine_embedding_queue_lag_seconds"),
        Some(0.0)
    );
    // Three episodes and one query went through the hash embedder.
    assert_eq!(
        sample(
            &text,
            "memmachine_embedded_texts_total{embedder=\"hash:256\"}"
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "memmachine_grpc_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert!(!text.contains("made/up") && !text.contains("Nope"));
    assert!(text.trim_end().ends_with("# EOF"));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn answers_carry_request_ids() {
    let server = InProcess::start().await;
    let mut client = ProjectServiceClient::new(server.channel().await);
    let mut request = tonic::Request::new(pb::GetProjectRequest {
        org_id: "universal".into(),
        project_id: "universal".into(),
    });
    request
        .metadata_mut()
        .insert("x-request-id", "trace-me-123".parse().unwrap());
    let answer = client.get_project(request).await.unwrap();
    assert_eq!(
        answer.metadata().get("x-request-id").unwrap(),
        "trace-me-123"
    );
    // Errors carry one too, made up when the client sent none.
    let err = client
        .get_project(pb::GetProjectRequest {
            org_id: "acme".into(),
            project_id: "missing".into(),
        })
        .await
        .unwrap_err();
    let id = err
        .metadata()
        .get("x-request-id")
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(id.len(), 32);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn json_logs_carry_the_request_id_and_never_contents_or_keys() {
    let dir = tempfile::tempdir().unwrap();
    let created = std::process::Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["keys", "create", "--admin"])
        .args(common::store_args(dir.path()))
        .run();
    let key = String::from_utf8(created.stdout)
        .unwrap()
        .trim()
        .to_string();
    let server = ServerProcess::start(dir.path(), &["--log-format", "json", "--auth"]);
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let secret_content = "SECRET-CONTENT-4242";
    let mut projects = ProjectServiceClient::new(channel.clone());
    projects
        .create_project(with_key(
            pb::CreateProjectRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
                ..Default::default()
            },
            Some(&key),
        ))
        .await
        .unwrap();
    memmachine_proto::v2::memory_service_client::MemoryServiceClient::new(channel.clone())
        .add_memories(with_key(
            pb::AddMemoriesRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
                messages: vec![pb::MemoryMessage {
                    content: secret_content.into(),
                    producer: "user".into(),
                    ..Default::default()
                }],
                ..Default::default()
            },
            Some(&key),
        ))
        .await
        .unwrap();
    let mut refused = with_key(
        pb::GetProjectRequest {
            org_id: "acme".into(),
            project_id: "missing".into(),
        },
        Some(&key),
    );
    refused
        .metadata_mut()
        .insert("x-request-id", "trace-me-456".parse().unwrap());
    assert!(projects.get_project(refused).await.is_err());
    let last = if key.ends_with('0') { "1" } else { "0" };
    let wrong_key = format!("{}{last}", &key[..key.len() - 1]);
    assert!(
        get_project(&channel, Some(&wrong_key), "acme", "notes")
            .await
            .is_err()
    );
    let log = server.log.clone();
    assert!(server.terminate_async().await.success());

    let log = log.lock().unwrap().clone();
    assert!(!log.is_empty());
    for line in &log {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}"));
        assert!(value["level"].is_string() && value["timestamp"].is_string());
        assert!(
            !line.contains(secret_content),
            "message content logged: {line}"
        );
        assert!(
            !line.contains(&key) && !line.contains(&wrong_key),
            "key logged: {line}"
        );
    }
    assert!(
        log.iter()
            .any(|l| l.contains("trace-me-456") && l.contains("NOT_FOUND")),
        "the refused call is logged with its request id: {log:#?}"
    );
    let key_id = key.split('_').nth(1).unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("trace-me-456") && l.contains(key_id)),
        "the key's id (not the key) names the caller"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("UNAUTHENTICATED") && l.contains("127.0.0.1"))
    );
}

type Posts = std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// An OTLP/HTTP collector that keeps the bodies posted to /v1/traces; over TLS when
/// given a certificate and key (PEM).
async fn collector(tls: Option<(String, String)>) -> (String, Posts) {
    let bodies = Posts::default();
    let kept = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push(body.to_vec());
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let Some((cert, key)) = tls else {
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        return (format!("http://{addr}"), bodies);
    };
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![rustls::pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
        rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(
                    hyper_util::rt::TokioIo::new(tls),
                    hyper_util::service::TowerToHyperService::new(app),
                )
                .await;
            });
        }
    });
    (format!("https://127.0.0.1:{}", addr.port()), bodies)
}

/// Starts the binary exporting to `endpoint`, makes one call, stops it (which flushes
/// the batch exporter) and says whether the call's span reached the collector.
async fn call_span_exported(endpoint: &str, posts: &Posts, env: &[(&str, &str)]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_env(dir.path(), &["--otlp-endpoint", endpoint], env);
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    create_project(&channel, None, "acme", "traced")
        .await
        .unwrap();
    assert!(server.terminate_async().await.success());
    let bodies = posts.lock().unwrap();
    bodies.iter().any(|body| {
        String::from_utf8_lossy(body).contains("memmachine.v2.ProjectService/CreateProject")
    })
}

#[tokio::test]
async fn spans_are_exported_over_otlp() {
    let (endpoint, posts) = collector(None).await;
    assert!(call_span_exported(&endpoint, &posts, &[]).await);
}

#[tokio::test]
async fn spans_are_exported_over_otlp_with_tls() {
    let authority = common::pki::ca("collector CA");
    let (endpoint, posts) = collector(Some(common::pki::leaf(&["127.0.0.1"], &authority))).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, authority.pem()).unwrap();

    // Not trusted: nothing is delivered (and the server still runs and stops cleanly).
    assert!(!call_span_exported(&endpoint, &posts, &[]).await);
    assert!(posts.lock().unwrap().is_empty());
    // Trusted through SSL_CERT_FILE, as for a collector with a private CA.
    let trusted = [("SSL_CERT_FILE", ca_file.to_str().unwrap())];
    assert!(call_span_exported(&endpoint, &posts, &trusted).await);
}
