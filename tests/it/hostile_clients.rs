//! What a careless or hostile client found when the server was probed from outside,
//! each over real gRPC (or raw HTTP/2 and TCP) against a real server: queries of very
//! many words, huge invalid input echoed back, pages too big for a stock client,
//! malformed frames, idle sockets, unbounded streams, look-alike ids, the bearer scheme's
//! case, and a data directory that cannot be used.

use std::collections::HashMap;
use std::time::Duration;

use crate::common;
use crate::common::InProcess;
use crate::common::calls::frame;
use crate::common::child::Run;
use crate::common::paging::collect_pages;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use prost::Message;
use tokio::io::AsyncReadExt;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

async fn create(channel: &tonic::transport::Channel, org: &str, project: &str) {
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: org.into(),
            project_id: project.into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

fn search(query: String) -> pb::SearchMemoriesRequest {
    pb::SearchMemoriesRequest {
        org_id: "acme".into(),
        project_id: "notes".into(),
        query,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_query_of_too_many_distinct_words_is_refused_naming_the_limit() {
    let server = InProcess::start_with(|config| config.limits.max_query_words = 8).await;
    let channel = server.channel().await;
    create(&channel, "acme", "notes").await;
    let mut memories = MemoryServiceClient::new(channel.clone());
    let words = |n: usize| {
        (0..n)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // Repeated words count once.
    let repeated = format!("{} {}", words(8), words(8));
    memories.search_memories(search(repeated)).await.unwrap();
    for query in [words(9), words(100_000)] {
        let err = memories.search_memories(search(query)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
        assert!(
            err.message().contains("--max-query-words"),
            "{}",
            err.message()
        );
        let violations = err.get_details_bad_request().unwrap().field_violations;
        assert_eq!(violations[0].field, "query");
    }
}

#[tokio::test]
async fn huge_invalid_input_is_not_echoed_whole() {
    let server = InProcess::start().await;
    let channel = server.channel().await;
    create(&channel, "acme", "notes").await;
    let mut memories = MemoryServiceClient::new(channel.clone());
    let key = "k".repeat(30_000);
    let err = memories
        .add_memories(pb::AddMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            messages: vec![pb::MemoryMessage {
                content: "hello".into(),
                producer: "user".into(),
                metadata: HashMap::from([(key, "v".into())]),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().len() < 2_000, "{} bytes", err.message().len());
    assert!(
        err.message().contains("more characters"),
        "{}",
        err.message()
    );
    assert!(
        err.details().len() < 4_000,
        "{} bytes of details",
        err.details().len()
    );

    let ids: Vec<String> = (0..10_000).map(|i| format!("not-a-uuid-{i}")).collect();
    let err = memories
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            episode_ids: ids,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().len() < 8_000, "{} bytes", err.message().len());
    let violations = err.get_details_bad_request().unwrap().field_violations;
    assert!(
        violations.len() <= 21,
        "{} violations listed",
        violations.len()
    );
    assert!(
        violations
            .last()
            .unwrap()
            .description
            .contains("more violations")
    );
}

#[tokio::test]
async fn pages_of_large_episodes_end_at_the_byte_budget() {
    let server = InProcess::start().await;
    let channel = server.channel().await;
    create(&channel, "acme", "notes").await;
    let mut memories = MemoryServiceClient::new(channel.clone());
    let big = "x".repeat(256 * 1024 - 16);
    for batch in 0..4 {
        memories
            .add_memories(pb::AddMemoriesRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
                messages: (0..10)
                    .map(|i| pb::MemoryMessage {
                        content: format!("{:03} {big}", batch * 10 + i),
                        producer: "user".into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // A stock client (tonic's default 4 MiB decoding limit, as grpcio's) reads every
    // page of a page_size far beyond what fits.
    let mut pages = 0;
    let seen = collect_pages(async |token| {
        let page = memories
            .list_memories(pb::ListMemoriesRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
                page_size: Some(1000),
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            page.encoded_len() < 4 * 1024 * 1024,
            "{} bytes",
            page.encoded_len()
        );
        pages += 1;
        let heads = page.episodes.iter().map(|e| e.content[..3].to_string());
        (heads.collect::<Vec<_>>(), page.next_page_token)
    })
    .await;
    let expected: Vec<String> = (0..40).map(|i| format!("{i:03}")).collect();
    assert_eq!(seen, expected, "every episode once, in order");
    assert!(pages >= 5, "{pages} pages");
}

/// A unary call made by hand over HTTP/2 with this body; the grpc-status answered.
async fn raw_call(url: &str, content_type: &str, body: Vec<u8>) -> (String, String) {
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = client
        .post(format!("{url}/memmachine.v2.ProjectService/GetProject"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(body)
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    (header("grpc-status"), header("grpc-message"))
}

#[tokio::test]
async fn malformed_requests_are_the_clients_mistake() {
    let server = InProcess::start().await;
    let invalid = (Code::InvalidArgument as i32).to_string();
    let whole = frame(&pb::GetProjectRequest {
        org_id: "acme".into(),
        project_id: "notes".into(),
    });
    let cases = [
        ("an empty body", "application/grpc", Vec::new()),
        (
            "a truncated frame",
            "application/grpc",
            whole[..whole.len() - 3].to_vec(),
        ),
        (
            "bad gRPC-Web base64",
            "application/grpc-web-text",
            b"!!!not base64!!!".to_vec(),
        ),
    ];
    for (what, content_type, body) in cases {
        let (status, message) = raw_call(&server.url, content_type, body).await;
        assert_eq!(status, invalid, "{what}: {message}");
    }
}

/// Whether the server closes this connection (before `within`, a bound for failing
/// rather than a timing under test).
async fn closed_by_server(tcp: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, tcp.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_preface_timeout() {
    let server = InProcess::start_with(|config| {
        config.connections.preface_timeout = Duration::from_millis(300);
    })
    .await;
    let addr = server.url.trim_start_matches("http://").to_string();
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert!(closed_by_server(&mut silent, Duration::from_secs(30)).await);
}

#[tokio::test]
async fn connections_are_bounded_and_silent_ones_make_room() {
    let server = InProcess::start_with(|config| {
        config.connections.max = 4;
        config.connections.preface_timeout = Duration::from_secs(600);
    })
    .await;
    let addr = server.url.trim_start_matches("http://").to_string();
    // Every place taken by silent sockets: a client still gets through, again and again.
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    for _ in 0..3 {
        let status = memmachine::probe::check(&server.url, "", Duration::from_secs(10), None)
            .await
            .expect("a health check gets through");
        assert_eq!(status as i32, 1);
    }
    // Every place taken by clients that talk: a newcomer is closed at once.
    let mut talkers = Vec::new();
    for _ in 0..4 {
        let channel = server.channel().await;
        HealthClient::new(channel.clone())
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap();
        talkers.push(channel);
    }
    let mut newcomer = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert!(closed_by_server(&mut newcomer, Duration::from_secs(60)).await);
    drop(talkers);
}

#[tokio::test]
async fn the_server_bounds_streams_per_connection_and_watches_per_peer() {
    let server = InProcess::start_with(|config| {
        config.max_streams_per_connection = 50;
        config.max_watch_streams_per_peer = 3;
    })
    .await;
    let addr = server.url.trim_start_matches("http://").to_string();
    // The HTTP/2 SETTINGS the server sends name the bound.
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (_send, mut connection) = h2::client::handshake(tcp).await.unwrap();
    let mut ping = connection.ping_pong().unwrap();
    tokio::select! {
        _ = &mut connection => panic!("the connection ended"),
        pong = ping.ping(h2::Ping::opaque()) => { pong.unwrap(); }
    }
    assert_eq!(connection.max_concurrent_send_streams(), 50);

    // Watch streams: three per address; the fourth is refused until one ends.
    let channel = server.channel().await;
    let watch = || {
        let mut health = HealthClient::new(channel.clone());
        async move {
            health
                .watch(tonic_health::pb::HealthCheckRequest::default())
                .await
        }
    };
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(
            watch()
                .await
                .expect("a watch within the share")
                .into_inner(),
        );
    }
    let refused = watch().await.unwrap_err();
    assert_eq!(
        refused.code(),
        Code::ResourceExhausted,
        "{}",
        refused.message()
    );
    drop(open.pop());
    let mut again = None;
    for _ in 0..100 {
        // The server learns of the closed stream a moment later.
        if let Ok(stream) = watch().await {
            again = Some(stream);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        again.is_some(),
        "a place freed by a closed watch is given again"
    );
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let server = InProcess::start_with(|config| config.auth = true).await;
    let token = memmachine::auth::manage::create(
        &server.store,
        memmachine_core::model::KeyScope::Org("acme".into()),
        "",
    )
    .await
    .unwrap()
    .token;
    let channel = server.channel().await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let mut request = tonic::Request::new(pb::ListProjectsRequest {
            org_id: Some("acme".into()),
            ..Default::default()
        });
        request.metadata_mut().insert(
            "authorization",
            format!("{scheme} {token}").parse().unwrap(),
        );
        ProjectServiceClient::new(channel.clone())
            .list_projects(request)
            .await
            .unwrap_or_else(|err| panic!("{scheme}: {err}"));
    }
}

#[tokio::test]
async fn ids_that_look_like_others_are_refused() {
    let server = InProcess::start().await;
    let channel = server.channel().await;
    create(&channel, "acme", "notes").await;
    let err = ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: "ａｃｍｅ".into(),
            project_id: "notes".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("\"acme\""), "{}", err.message());
}

/// A page whose name was rebound to the server would call it as `:authority` NAME: without
/// keys the server answers only to addresses, localhost and names it was given.
#[tokio::test]
async fn a_rebound_name_is_refused_over_grpc_without_keys() {
    let server = InProcess::start_with(|config| {
        config.allowed_hosts = vec!["memory.internal".into()];
    })
    .await;
    let port = server.url.rsplit(':').next().unwrap().to_string();
    let via = |authority: &str| {
        let origin: http::Uri = format!("http://{authority}:{port}").parse().unwrap();
        tonic::transport::Endpoint::from_shared(server.url.clone())
            .unwrap()
            .origin(origin)
    };
    let rebound = via("evil.example").connect().await.unwrap();
    let err = ProjectServiceClient::new(rebound.clone())
        .list_projects(pb::ListProjectsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    assert!(
        err.message().contains("--allowed-host"),
        "{}",
        err.message()
    );
    let health = HealthClient::new(rebound)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await;
    assert_eq!(health.unwrap_err().code(), Code::PermissionDenied);
    for name in ["memory.internal", "localhost", "127.0.0.1"] {
        let channel = via(name).connect().await.unwrap();
        ProjectServiceClient::new(channel)
            .list_projects(pb::ListProjectsRequest::default())
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}"));
    }
}

/// `memmachine serve` on this data directory: its exit status and what it printed.
fn serve_on(data_dir: &std::path::Path) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["serve", "--listen", "127.0.0.1:0", "--embedder", "none"])
        .arg("--data-dir")
        .arg(data_dir)
        .env("NO_COLOR", "1")
        .run();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn an_unusable_data_dir_says_what_is_wrong_with_which_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let (ok, log) = serve_on(&file);
    assert!(!ok);
    assert!(
        log.contains(&format!("--data-dir {} is a file", file.display())),
        "{log}"
    );
    assert!(!log.contains("internal error"), "{log}");

    let link = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("gone"), &link).unwrap();
    let (ok, log) = serve_on(&link);
    assert!(!ok);
    assert!(log.contains("is a symbolic link to"), "{log}");
    assert!(log.contains("which does not exist"), "{log}");
}

/// Starts an AddMemories call by hand over HTTP/2 whose body stops half-way (a frame
/// that announces more bytes than are sent), then leaves: by resetting the stream, or
/// by closing the connection.
async fn leave_mid_request(addr: &str, reset: bool) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut send = send.ready().await.unwrap();
    let request = http::Request::post(format!(
        "http://{addr}/memmachine.v2.MemoryService/AddMemories"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (_response, mut body) = send.send_request(request, false).unwrap();
    let mut partial = vec![0u8];
    partial.extend_from_slice(&1000u32.to_be_bytes());
    partial.extend_from_slice(b"half a message");
    body.send_data(partial.into(), false).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    if reset {
        body.send_reset(h2::Reason::CANCEL);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    driver.abort();
}

#[tokio::test]
async fn a_client_that_leaves_mid_call_is_cancelled_not_unknown() {
    let metrics_addr = common::free_port();
    let server = InProcess::start_with(|config| config.metrics_listen = Some(metrics_addr)).await;
    let addr = server.url.trim_start_matches("http://").to_string();
    leave_mid_request(&addr, true).await;
    leave_mid_request(&addr, false).await;

    let url = format!("http://{metrics_addr}/metrics");
    let series = |code: &str| {
        format!(
            "memmachine_grpc_requests_total{{method=\"memmachine.v2.MemoryService/AddMemories\",code=\"{code}\"}}"
        )
    };
    let count = |text: &str, code: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&series(code))?.trim().parse::<f64>().ok())
    };
    let mut text = String::new();
    for _ in 0..100 {
        text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        if count(&text, "CANCELLED") == Some(2.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(count(&text, "CANCELLED"), Some(2.0), "{text}");
    assert_eq!(count(&text, "UNKNOWN"), None, "{text}");
    assert_eq!(count(&text, "INTERNAL"), None, "{text}");
}
