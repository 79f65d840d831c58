//! Slow and idle clients do not starve the others: hundreds of connections that sit
//! idle after the HTTP/2 handshake, never send a byte, or ask for large pages and never
//! read them, while a well-behaved client goes on being served at its usual latency.

use std::time::{Duration, Instant};

use crate::common::InProcess;
use crate::common::calls::frame;
use crate::common::child::Run;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
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

// Clients that trickle: their request headers (HTTP/1 on either listener, HTTP/2 after
// the preface), or their body. They hold a place only until the connection gate needs
// it, or until the header timeout (or the body's minimum rate) runs out.

use std::process::Command;

use crate::common::ServerProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How a trickling client ended: the server closed its connection, or it stopped.
#[derive(Debug, PartialEq)]
enum Trickled {
    ClosedByServer,
    Stopped,
}

/// Connects to `addr`, sends `opening` at once, then one of `drip`'s chunks every
/// `every` (cycling), reading and discarding what the server sends, until the server
/// closes the connection or `for_at_most` passes.
async fn trickle(
    addr: String,
    opening: Vec<u8>,
    drip: Vec<Vec<u8>>,
    every: Duration,
    for_at_most: Duration,
) -> Trickled {
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut read, mut write) = tcp.into_split();
    let server_closed = async move {
        let mut buf = [0u8; 1024];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let dripping = async move {
        if write.write_all(&opening).await.is_err() {
            return Trickled::ClosedByServer;
        }
        for chunk in drip.iter().cycle() {
            tokio::time::sleep(every).await;
            if write.write_all(chunk).await.is_err() {
                return Trickled::ClosedByServer;
            }
        }
        Trickled::Stopped
    };
    tokio::select! {
        () = server_closed => Trickled::ClosedByServer,
        ended = dripping => ended,
        () = tokio::time::sleep(for_at_most) => Trickled::Stopped,
    }
}

/// An HTTP/1 request whose header lines come one at a time.
fn http1_trickler(addr: &str, path: &str, every: Duration, for_at_most: Duration) -> Trickler {
    let opening = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nX-Opening: a header line\r\n");
    let drip = (0..1000)
        .map(|i| format!("X-Slow-{i}: one more line\r\n").into_bytes())
        .collect();
    tokio::spawn(trickle(
        addr.to_string(),
        opening.into_bytes(),
        drip,
        every,
        for_at_most,
    ))
}

/// An HTTP/2 connection that sends the preface and its SETTINGS, then a HEADERS frame
/// (END_HEADERS, 4 KiB of header block) a byte at a time.
fn h2_trickler(addr: &str, every: Duration, for_at_most: Duration) -> Trickler {
    let mut opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // An empty SETTINGS frame.
    opening.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    // HEADERS, length 4096, END_HEADERS, stream 1; the block itself never comes whole.
    opening.extend_from_slice(&[0x00, 0x10, 0x00, 0x1, 0x4, 0, 0, 0, 1]);
    tokio::spawn(trickle(
        addr.to_string(),
        opening,
        vec![vec![0x40]],
        every,
        for_at_most,
    ))
}

type Trickler = tokio::task::JoinHandle<Trickled>;

fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// `memmachine health --addr ADDR`, the probe containers run: its exit and output.
async fn health_cli(addr: String) -> (bool, String) {
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_memmachine"))
            .args(["health", "--addr", &addr, "--timeout-secs", "10"])
            .run()
    })
    .await
    .unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    )
}

fn start(extra: &[&str]) -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--embedder", "none", "--rest-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = ServerProcess::start(dir.path(), &args);
    (dir, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_trickling_their_headers_do_not_lock_out_new_ones() {
    // A header timeout long enough that only the gate's eviction can make room.
    let (_dir, server) = start(&["--max-connections", "6", "--header-timeout", "600"]);
    let grpc = addr_of(&server.url());
    let rest = addr_of(&server.rest_url());
    let (every, at_most) = (Duration::from_millis(200), Duration::from_secs(120));
    let mut tricklers = Vec::new();
    for _ in 0..3 {
        tricklers.push(http1_trickler(&rest, "/api/v2/projects", every, at_most));
        tricklers.push(http1_trickler(
            &grpc,
            "/memmachine.v2.ProjectService/CreateProject",
            every,
            at_most,
        ));
        tricklers.push(h2_trickler(&grpc, every, at_most));
        // Each has spoken (more than a preface's worth) before the next comes.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Nine tricklers for six places: the probe, a gRPC call and a REST call get in.
    let (ok, output) = health_cli(grpc.clone()).await;
    assert!(ok, "memmachine health among tricklers: {output}");
    assert!(output.contains("SERVING"), "{output}");
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .expect("a gRPC client connects among tricklers");
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            ..Default::default()
        })
        .await
        .expect("a gRPC call among tricklers");
    let response = reqwest::Client::new()
        .post(format!("{}/api/v2/projects/get", server.rest_url()))
        .json(&serde_json::json!({"org_id": "acme", "project_id": "notes"}))
        .send()
        .await
        .expect("a REST call among tricklers");
    assert_eq!(response.status(), 200);
    // The live gRPC client keeps its place while more tricklers come and go.
    for _ in 0..6 {
        tricklers.push(h2_trickler(&grpc, every, at_most));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    ProjectServiceClient::new(channel)
        .get_project(pb::GetProjectRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
        })
        .await
        .expect("a live client keeps its place");
    let (ok, output) = health_cli(grpc).await;
    assert!(ok, "memmachine health again: {output}");
    for trickler in tricklers {
        trickler.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_trickling_their_headers_are_closed_after_the_header_timeout() {
    let (_dir, server) = start(&["--header-timeout", "1"]);
    let grpc = addr_of(&server.url());
    let rest = addr_of(&server.rest_url());
    // Bounds the wait for a failing test (under hyper's own 30 s on gRPC HTTP/1).
    let (every, at_most) = (Duration::from_millis(200), Duration::from_secs(20));
    let tricklers = [
        (
            "HTTP/1 on the REST listener",
            http1_trickler(&rest, "/api/v2/projects", every, at_most),
        ),
        (
            "HTTP/1 on the gRPC listener",
            http1_trickler(
                &grpc,
                "/memmachine.v2.ProjectService/CreateProject",
                every,
                at_most,
            ),
        ),
        (
            "HTTP/2 on the gRPC listener",
            h2_trickler(&grpc, every, at_most),
        ),
        (
            "HTTP/2 on the REST listener",
            h2_trickler(&rest, every, at_most),
        ),
    ];
    for (what, trickler) in tricklers {
        assert_eq!(trickler.await.unwrap(), Trickled::ClosedByServer, "{what}");
    }
    // A client that sends its request at once is served as before.
    let (ok, output) = health_cli(grpc).await;
    assert!(ok, "{output}");
}

/// The head of the first response on `tcp` (up to the blank line), or what came before
/// the connection closed or `within` passed.
async fn response_head(tcp: &mut tokio::net::TcpStream, within: Duration) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let reading = async {
        while !head.ends_with(b"\r\n\r\n") {
            match tcp.read(&mut byte).await {
                Ok(1) => head.push(byte[0]),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(within, reading).await;
    String::from_utf8_lossy(&head).into_owned()
}

/// The body of a response whose head is `head`, by its Content-Length.
async fn response_body(tcp: &mut tokio::net::TcpStream, head: &str) -> String {
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut body))
        .await
        .expect("the body in time")
        .expect("the body");
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_below_the_minimum_rate_is_cut_off() {
    let (_dir, server) = start(&["--header-timeout", "1", "--min-body-rate", "1000"]);
    let rest = addr_of(&server.rest_url());
    let mut tcp = tokio::net::TcpStream::connect(&rest).await.unwrap();
    tcp.write_all(
        format!(
            "POST /api/v2/projects HTTP/1.1\r\nHost: {rest}\r\nContent-Type: application/json\r\n\
             Content-Length: 100000\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (mut read, mut write) = tcp.into_split();
    let drip = tokio::spawn(async move {
        for _ in 0..1000 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if write.write_all(b" ").await.is_err() {
                break;
            }
        }
    });
    // Bounds the wait for a failing test (the request deadline would answer at 60 s).
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), read.read_to_end(&mut answer)).await;
    drip.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a 408, then the connection closed: {answer:?}"
    );
    assert!(answer.contains("--min-body-rate"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_body_trickled_below_the_minimum_rate_is_cut_off() {
    let (_dir, server) = start(&["--header-timeout", "1", "--min-body-rate", "1000"]);
    let tcp = tokio::net::TcpStream::connect(addr_of(&server.url()))
        .await
        .unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut send = send.ready().await.unwrap();
    let request = http::Request::post(format!(
        "{}/memmachine.v2.ProjectService/GetProject",
        server.url()
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let (response, mut body) = send.send_request(request, false).unwrap();
    let drip = tokio::spawn(async move {
        // A frame header promising 1000 bytes, then a byte at a time.
        if body
            .send_data(vec![0, 0, 0, 0x03, 0xe8].into(), false)
            .is_err()
        {
            return;
        }
        for _ in 0..1000 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if body.send_data(vec![0u8].into(), false).is_err() {
                return;
            }
        }
    });
    let response = tokio::time::timeout(Duration::from_secs(20), response)
        .await
        .expect("an answer before the request deadline (60 s)")
        .unwrap();
    drip.abort();
    let status = response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_string());
    assert_eq!(
        status.as_deref(),
        Some((tonic::Code::DeadlineExceeded as i32).to_string().as_str()),
        "{:?}",
        response.headers()
    );
    let message = response.headers()["grpc-message"].to_str().unwrap();
    assert!(message.contains("min-body-rate"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_declared_over_the_limit_is_refused_before_it_is_read() {
    let (_dir, server) = start(&["--max-request-bytes", "1000000"]);
    let rest = addr_of(&server.rest_url());
    for expect in ["", "Expect: 100-continue\r\n"] {
        let mut tcp = tokio::net::TcpStream::connect(&rest).await.unwrap();
        tcp.write_all(
            format!(
                "POST /api/v2/memories HTTP/1.1\r\nHost: {rest}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100000000\r\n{expect}\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        // No body is sent: the answer must not wait for one (nor invite it).
        let head = response_head(&mut tcp, Duration::from_secs(10)).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{expect:?}: {head:?}");
        let body = response_body(&mut tcp, &head).await;
        let json: serde_json::Value = serde_json::from_str(&body).expect("a JSON error body");
        assert_eq!(json["detail"]["code"], 413, "{body}");
        assert_eq!(json["detail"]["exception"], "RESOURCE_EXHAUSTED", "{body}");
        assert!(body.contains("--max-request-bytes"), "{body}");
    }
    // A body within the limit is still read and answered on its merits.
    let response = reqwest::Client::new()
        .post(format!("{}/api/v2/projects/get", server.rest_url()))
        .json(&serde_json::json!({"org_id": "acme", "project_id": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);

    // gRPC-Web over HTTP/1 on the gRPC listener: refused as gRPC-Web, no 100 Continue.
    let grpc = addr_of(&server.url());
    let mut tcp = tokio::net::TcpStream::connect(&grpc).await.unwrap();
    tcp.write_all(
        format!(
            "POST /memmachine.v2.ProjectService/GetProject HTTP/1.1\r\nHost: {grpc}\r\n\
             Content-Type: application/grpc-web+proto\r\nX-Grpc-Web: 1\r\n\
             Content-Length: 100000000\r\nExpect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let head = response_head(&mut tcp, Duration::from_secs(10)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head:?}");
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains(&format!(
            "grpc-status: {}",
            tonic::Code::ResourceExhausted as i32
        )),
        "{head}"
    );
    assert!(
        lower.contains("content-type: application/grpc-web"),
        "{head}"
    );
}
