//! Limits over real gRPC: the request size, per-key rate and concurrency (one caller
//! held up or throttled does not hold up another), and deadlines from `grpc-timeout`
//! and the server's cap, honoured down to the store.
//!
//! sqlite-only: stalls the store by holding the SQLite file's write lock.

use std::time::{Duration, Instant};

use crate::common::InProcess;
use crate::common::calls::{WriteLock, add, count, create_project, frame, get_project};
use memmachine::admission::limits::CallerLimits;
use memmachine_core::model::KeyScope;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

async fn key(server: &InProcess, org: &str) -> String {
    memmachine::auth::manage::create(&server.store, KeyScope::Org(org.into()), "")
        .await
        .unwrap()
        .token
}

/// The `grpc-retry-pushback-ms` trailer of a refusal (gRFC A6), when it has one.
pub fn pushback_ms(status: &tonic::Status) -> Option<i64> {
    let value = status.metadata().get("grpc-retry-pushback-ms")?;
    Some(value.to_str().ok()?.parse().expect("an integer pushback"))
}

/// A server with `--auth` and `limits`, keys for acme and globex, and a channel.
async fn two_keys(limits: CallerLimits) -> (InProcess, String, String, Channel) {
    let server = InProcess::start_with(|config| {
        config.auth = true;
        config.caller_limits = limits;
    })
    .await;
    let (a, b) = (key(&server, "acme").await, key(&server, "globex").await);
    let channel = server.channel().await;
    (server, a, b, channel)
}

#[tokio::test]
async fn the_rate_limit_is_per_key_and_says_when_to_retry() {
    let (server, a, b, channel) = two_keys(CallerLimits {
        rate: 1,
        burst: 2,
        concurrent: 0,
    })
    .await;
    create_project(&channel, Some(&a), "acme", "notes")
        .await
        .unwrap();
    get_project(&channel, Some(&a), "acme", "notes")
        .await
        .unwrap();
    let refused = get_project(&channel, Some(&a), "acme", "notes")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let wait = refused
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
        .expect("a RetryInfo detail");
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(1),
        "{wait:?}"
    );
    // The same wait as gRPC's retry throttling trailer, which retry policies honour.
    let pushback = pushback_ms(&refused).expect("a grpc-retry-pushback-ms trailer");
    assert!(
        (1..=1000).contains(&pushback) && pushback.abs_diff(wait.as_millis() as i64) <= 1,
        "{pushback} against {wait:?}"
    );
    // Another key is not throttled by the first one's calls.
    create_project(&channel, Some(&b), "globex", "notes")
        .await
        .unwrap();
    tokio::time::sleep(wait + Duration::from_millis(20)).await;
    get_project(&channel, Some(&a), "acme", "notes")
        .await
        .unwrap();
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_key_with_calls_stuck_in_flight_does_not_hold_up_another() {
    let (server, a, b, channel) = two_keys(CallerLimits {
        rate: 0,
        burst: 0,
        concurrent: 1,
    })
    .await;
    create_project(&channel, Some(&a), "acme", "notes")
        .await
        .unwrap();
    create_project(&channel, Some(&b), "globex", "notes")
        .await
        .unwrap();

    let lock = WriteLock::take(server.data_dir.path());
    let stuck = {
        let (channel, a) = (channel.clone(), a.clone());
        tokio::spawn(async move { add(&channel, Some(&a), "acme").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = get_project(&channel, Some(&a), "acme", "notes")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.get_details_retry_info().is_some());
    assert_eq!(pushback_ms(&refused), Some(100), "{refused:?}");
    // The other key is served meanwhile.
    get_project(&channel, Some(&b), "globex", "notes")
        .await
        .unwrap();
    drop(lock);
    stuck.await.unwrap().unwrap();
    assert_eq!(count(&channel, Some(&a), "acme").await.unwrap(), 1);
    get_project(&channel, Some(&a), "acme", "notes")
        .await
        .unwrap();
    server.stop().await.unwrap();
}

#[tokio::test]
async fn an_oversized_request_is_resource_exhausted() {
    let server = InProcess::start_with(|config| config.max_request_bytes = 4096).await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    let big = pb::AddMemoriesRequest {
        org_id: "acme".into(),
        project_id: "notes".into(),
        messages: vec![pb::MemoryMessage {
            content: "x".repeat(10_000),
            producer: "user".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let err = MemoryServiceClient::new(channel.clone())
        .add_memories(big)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("4096"), "{}", err.message());
    // Waiting does not make it smaller: a retry policy is told not to resend it.
    assert_eq!(pushback_ms(&err), Some(-1), "{err:?}");
    // The connection is still good for normal calls.
    add(&channel, None, "acme").await.unwrap();
    server.stop().await.unwrap();
}

/// An AddMemories call made by hand over HTTP/2 with `grpc-timeout`; the grpc-status the
/// server answered.
async fn raw_grpc_add(url: &str, timeout: &str) -> String {
    let body = frame(&pb::AddMemoriesRequest {
        org_id: "acme".into(),
        project_id: "notes".into(),
        messages: vec![pb::MemoryMessage {
            content: "too late".into(),
            producer: "user".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = client
        .post(format!("{url}/memmachine.v2.MemoryService/AddMemories"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", timeout)
        .body(body)
        .send()
        .await
        .unwrap();
    // A call that ends in an error before any message answers with headers only.
    response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn deadlines_are_honoured_down_to_the_store() {
    // The server's cap is far above the client's deadline, so that an answer at the
    // client's deadline cannot be mistaken for one at the cap on a busy machine.
    let server =
        InProcess::start_with(|config| config.request_timeout = Duration::from_millis(3000)).await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    let lock = WriteLock::take(server.data_dir.path());

    // The client's grpc-timeout, sent by hand (tonic's client would also keep the
    // deadline itself and answer first): the answer is the server's.
    let started = Instant::now();
    let status = raw_grpc_add(&server.url, "200m").await;
    assert_eq!(status, "4", "DEADLINE_EXCEEDED");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );

    // No grpc-timeout: the server's cap (--request-timeout) applies.
    let started = Instant::now();
    let err = add(&channel, None, "acme").await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(2900));

    // Once the store is free, neither abandoned write is applied.
    drop(lock);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count(&channel, None, "acme").await.unwrap(), 0);
    add(&channel, None, "acme").await.unwrap();
    assert_eq!(count(&channel, None, "acme").await.unwrap(), 1);
    server.stop().await.unwrap();
}
