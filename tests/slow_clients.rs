//! Slow and idle clients do not starve the others: hundreds of connections that sit
//! idle after the HTTP/2 handshake, never send a byte, or ask for large pages and never
//! read them, while a well-behaved client goes on being served at its usual latency.

mod common;

use std::time::{Duration, Instant};

use common::InProcess;
use common::calls::frame;
use memmachine::pb;
use memmachine::pb::memory_service_client::MemoryServiceClient;
use memmachine::pb::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

const IDLE: usize = 150;
const SILENT: usize = 100;
const SLOW_READERS: usize = 50;
const CALLS: usize = 40;

async fn setup(channel: &Channel) {
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // Episodes of 8 KiB: a page of them is about 2 MB, which a reader that never reads
    // leaves the server holding.
    for batch in 0..4 {
        let messages = (0..50)
            .map(|i| pb::MemoryMessage {
                content: format!("note b{batch}i{i} {}", "about the weather ".repeat(455)),
                ..Default::default()
            })
            .collect();
        MemoryServiceClient::new(channel.clone())
            .add_memories(pb::AddMemoriesRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
                messages,
                ..Default::default()
            })
            .await
            .unwrap();
    }
}

/// Latencies of `CALLS` calls of a well-behaved client (searches, with an add every
/// fourth call), sorted.
async fn well_behaved(channel: &Channel) -> Vec<Duration> {
    let mut client = MemoryServiceClient::new(channel.clone());
    let mut latencies = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let started = Instant::now();
        if i % 4 == 3 {
            client
                .add_memories(pb::AddMemoriesRequest {
                    org_id: "acme".into(),
                    project_id: "notes".into(),
                    messages: vec![pb::MemoryMessage {
                        content: format!("a short note {i}"),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .await
                .expect("an add while slow clients wait");
        } else {
            client
                .search_memories(pb::SearchMemoriesRequest {
                    org_id: "acme".into(),
                    project_id: "notes".into(),
                    query: format!("note b1i{i}"),
                    ..Default::default()
                })
                .await
                .expect("a search while slow clients wait");
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

/// An HTTP/2 connection that handshakes (with a tiny receive window) and is then kept
/// open by its driver task; with `read_nothing`, it asks for a large page and never
/// reads it.
async fn slow_connection(
    addr: &str,
    read_nothing: bool,
) -> (
    tokio::task::JoinHandle<()>,
    Option<h2::client::ResponseFuture>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(1024)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    if !read_nothing {
        return (driver, None);
    }
    let mut send = send.ready().await.unwrap();
    let request = http::Request::post(format!(
        "http://{addr}/memmachine.v2.MemoryService/ListMemories"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (response, mut body) = send.send_request(request, false).unwrap();
    let list = pb::ListMemoriesRequest {
        org_id: "acme".into(),
        project_id: "notes".into(),
        page_size: Some(1000),
        ..Default::default()
    };
    body.send_data(frame(&list).into(), true).unwrap();
    (driver, Some(response))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_reading_connections_do_not_starve_a_well_behaved_client() {
    let server = InProcess::start().await;
    let channel = server.channel().await;
    setup(&channel).await;
    let before = well_behaved(&channel).await;

    let addr = server.url.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..IDLE {
        held.push(slow_connection(&addr, false).await);
    }
    let mut silent = Vec::new();
    for _ in 0..SILENT {
        silent.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    for _ in 0..SLOW_READERS {
        held.push(slow_connection(&addr, true).await);
    }
    // The slow readers' pages are being written (and stuck on their windows).
    tokio::time::sleep(Duration::from_millis(500)).await;

    let during = well_behaved(&channel).await;
    // A new client gets in too, past the crowd.
    let newcomer = server.channel().await;
    let from_newcomer = well_behaved(&newcomer).await;

    let (p50, max) = (
        |l: &[Duration]| l[l.len() / 2],
        |l: &[Duration]| l[l.len() - 1],
    );
    eprintln!(
        "well-behaved client: p50/max {:.2}/{:.2} ms alone, {:.2}/{:.2} ms among {} idle, \
         {} silent and {} slow-reading connections, {:.2}/{:.2} ms for a newcomer",
        ms(p50(&before)),
        ms(max(&before)),
        ms(p50(&during)),
        ms(max(&during)),
        IDLE,
        SILENT,
        SLOW_READERS,
        ms(p50(&from_newcomer)),
        ms(max(&from_newcomer)),
    );
    // Starvation would show as calls waiting for seconds (or timing out); the bound is
    // loose so a busy test machine does not trip it.
    for latencies in [&during, &from_newcomer] {
        assert!(
            p50(latencies) <= p50(&before) * 10 + Duration::from_millis(50),
            "the usual latency is kept: {:?} against {:?} alone",
            p50(latencies),
            p50(&before)
        );
        assert!(
            max(latencies) < Duration::from_secs(2),
            "no call waits long: {:?}",
            max(latencies)
        );
    }
    drop(held);
    drop(silent);
}
