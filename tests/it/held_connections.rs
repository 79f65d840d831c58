//! Connections held without end cannot lock a server: with every place taken by
//! connections that made one health check and hold on (answering pings), a probe still
//! gets in through the health reserve (gRPC and REST), an address over its cap is told
//! so at once, and connections with nothing in progress are closed after
//! `--idle-timeout`, after which new clients get in.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::common::ServerProcess;
use crate::common::child::Run;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;

/// A channel to `server` whose one connection comes from `source` (a loopback
/// address of its own: the server counts connections per address).
async fn channel_from(source: Ipv4Addr, server: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{server}"))
        .unwrap()
        .timeout(Duration::from_secs(10))
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_: Uri| async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(IpAddr::V4(source), 0))?;
            let stream = socket.connect(server).await?;
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }))
        .await
        .expect("connect")
}

async fn list_projects(channel: &Channel) -> Result<(), tonic::Status> {
    ProjectServiceClient::new(channel.clone())
        .list_projects(pb::ListProjectsRequest::default())
        .await
        .map(drop)
}

async fn check(channel: &Channel) -> Result<i32, tonic::Status> {
    HealthClient::new(channel.clone())
        .check(HealthCheckRequest::default())
        .await
        .map(|r| r.into_inner().status)
}

/// `memmachine health --addr ADDR`: its exit and output.
async fn health_cli(addr: String) -> (bool, String) {
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_memmachine"))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_connections_leave_room_for_probes_and_idle_ones_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    // The newer limits through the environment: a server without them starts all the
    // same (and then locks its probes out).
    let server = ServerProcess::start_env(
        dir.path(),
        &[
            "--embedder",
            "none",
            "--rest-listen",
            "127.0.0.1:0",
            "--max-connections",
            "4",
            // Longer than the idle timeout: what closes an idle keep-alive connection
            // below is the idle timeout.
            "--header-timeout",
            "60",
        ],
        &[
            ("MEMMACHINE_MAX_CONNECTIONS_PER_PEER", "2"),
            // Room for the five probes below, however late their sockets are seen closed.
            ("MEMMACHINE_HEALTH_RESERVE", "6"),
            ("MEMMACHINE_IDLE_TIMEOUT", "3"),
        ],
    );
    let addr: SocketAddr = server.addr.parse().unwrap();
    let rest = server.rest_url();

    // Every place taken: two connections from each of two addresses, each after one
    // health check holding a Watch stream open (busy, so not idle yet).
    let mut held = Vec::new();
    let mut watches = Vec::new();
    for source in [Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)] {
        for _ in 0..2 {
            let channel = channel_from(source, addr).await;
            assert_eq!(check(&channel).await.unwrap(), 1, "SERVING");
            let watch = HealthClient::new(channel.clone())
                .watch(HealthCheckRequest::default())
                .await
                .unwrap()
                .into_inner();
            watches.push(watch);
            held.push(channel);
        }
    }
    // The first answer of each Watch has come: the streams are open on the server.
    for watch in &mut watches {
        let first: Option<HealthCheckResponse> = watch.message().await.unwrap();
        assert!(first.is_some());
    }

    // (i) The probe containers run still gets in, through the reserve.
    let (ok, said) = health_cli(server.addr.clone()).await;
    assert!(ok && said.contains("SERVING"), "memmachine health: {said}");
    // So does a REST probe; anything else there is told why, at once.
    // Each request on a connection of its own (its first: no idle timeout between).
    let rest_get = |source: u8, path: &str| {
        let url = format!("{rest}{path}");
        async move {
            reqwest::Client::builder()
                .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, source)))
                .build()
                .unwrap()
                .get(url)
                .send()
                .await
                .unwrap()
        }
    };
    assert_eq!(rest_get(5, "/api/v2/health").await.status(), 200);
    let other = rest_get(6, "/api/v2/projects").await;
    assert_eq!(other.status(), 429);
    let body = other.text().await.unwrap();
    assert!(body.contains("--max-connections"), "{body}");

    // A new client finds no place: a clear RESOURCE_EXHAUSTED, not a hang.
    let newcomer = channel_from(Ipv4Addr::new(127, 0, 0, 4), addr).await;
    let err = list_projects(&newcomer).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("--max-connections"), "{err:?}");
    drop(newcomer);

    // (iii) An address at its cap: the third connection is told so at once (and may
    // still ask for health).
    let third = channel_from(Ipv4Addr::new(127, 0, 0, 2), addr).await;
    let err = list_projects(&third).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("--max-connections-per-peer 2"),
        "{err:?}"
    );
    assert_eq!(check(&third).await.unwrap(), 1, "SERVING");
    drop(third);

    // (ii) The streams end; the connections stay open, answering pings, with nothing
    // in progress: closed after the idle timeout, and a new client gets in, even from
    // the address that was at its cap.
    drop(watches);
    let began = Instant::now();
    loop {
        let fresh = channel_from(Ipv4Addr::new(127, 0, 0, 2), addr).await;
        // Refused (RESOURCE_EXHAUSTED) while the idle ones are open.
        let Err(err) = list_projects(&fresh).await else {
            break;
        };
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the idle connections were not closed: {err:?}"
        );
        drop(fresh);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(held);

    // The REST listener too: a keep-alive connection idle after its answer is closed
    // (gracefully: hyper ends it after the answer it gave).
    let mut socket = tokio::net::TcpStream::connect(rest.trim_start_matches("http://"))
        .await
        .unwrap();
    socket
        .write_all(b"GET /api/v2/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), socket.read_to_end(&mut answer))
        .await
        .expect("an idle REST connection was not closed within 30 s (--idle-timeout 3)");
    read.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
