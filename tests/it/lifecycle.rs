//! Health through the server's life over real gRPC: NOT_SERVING while it starts (here:
//! waiting for its embeddings endpoint) and while it drains; liveness SERVING
//! throughout; in-flight calls finish on shutdown and new ones are refused.
//!
//! sqlite-only: stalls the store by holding the SQLite file's write lock.

use std::time::Duration;

use crate::common::InProcess;
use crate::common::calls::{WriteLock, add, create_project, get_project};
use crate::common::embeddings::{Script, scripted_embeddings};
use memmachine::config::EmbedderKind;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

async fn health(url: &str, service: &str) -> ServingStatus {
    memmachine::probe::check(url, service, Duration::from_secs(5), None)
        .await
        .expect("health answers")
}

#[tokio::test]
async fn not_serving_while_starting() {
    let (endpoint, _) = scripted_embeddings(Script::Slow(Duration::from_millis(1500))).await;
    let server = InProcess::launch_with(|config| {
        config.embedder.kind = Some(EmbedderKind::Openai);
        config.embedder.base_url = Some(memmachine_core::urls::SecretUrl::new(endpoint));
        config.embedder.model = Some("slow-model".into());
    })
    .await;
    assert_eq!(health(&server.url, "").await, ServingStatus::NotServing);
    assert_eq!(
        health(&server.url, "memmachine.v2.MemoryService").await,
        ServingStatus::NotServing
    );
    assert_eq!(
        health(&server.url, "liveness").await,
        ServingStatus::Serving
    );
    let channel = server.channel().await;
    let err = get_project(&channel, None, "acme", "notes")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("starting"), "{}", err.message());
    // A retry policy waits as long as it is told (gRFC A6's throttling trailer).
    assert_eq!(crate::limits::pushback_ms(&err), Some(1000), "{err:?}");

    server.wait_serving().await;
    assert_eq!(
        health(&server.url, "memmachine.v2.MemoryService").await,
        ServingStatus::Serving
    );
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    server.stop().await.unwrap();
}

#[tokio::test]
async fn draining_finishes_calls_in_flight_and_refuses_new_ones() {
    let mut server =
        InProcess::start_with(|config| config.drain_delay = Duration::from_secs(2)).await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();

    let lock = WriteLock::take(server.data_dir.path());
    let in_flight = {
        let channel = channel.clone();
        tokio::spawn(async move { add(&channel, None, "acme").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.begin_stop();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The drain delay: health says NOT_SERVING, so balancers stop sending, while calls
    // that still arrive are served.
    assert_eq!(health(&server.url, "").await, ServingStatus::NotServing);
    assert_eq!(
        health(&server.url, "liveness").await,
        ServingStatus::Serving
    );
    get_project(&channel, None, "acme", "notes").await.unwrap();

    // After it: new calls are refused; the one in flight is still waiting.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let err = get_project(&channel, None, "acme", "notes")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(crate::limits::pushback_ms(&err), Some(1000), "{err:?}");
    assert!(!in_flight.is_finished());

    // It finishes, and only then does the server stop.
    drop(lock);
    in_flight.await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(10), &mut server.task)
        .await
        .expect("the server stops once its calls are done")
        .unwrap()
        .unwrap();
    let db = rusqlite::Connection::open(server.data_dir.path().join("memmachine.db")).unwrap();
    let stored: i64 = db
        .query_row("SELECT COUNT(*) FROM episodes", [], |row| row.get(0))
        .unwrap();
    assert_eq!(stored, 1, "the write in flight was committed");
}

/// What a raw HTTP/2 peer that says hello and then only listens sees of the server for
/// `watch`: how many pings arrived, and whether the server closed the connection.
/// It acknowledges the server's settings, and its pings only when `answer_pings`.
async fn silent_peer(url: &str, answer_pings: bool, watch: Duration) -> (usize, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SETTINGS: u8 = 4;
    const PING: u8 = 6;
    const ACK: u8 = 1;
    let frame = |kind: u8, flags: u8, payload: &[u8]| {
        let len = (payload.len() as u32).to_be_bytes();
        let mut bytes = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 0];
        bytes.extend_from_slice(payload);
        bytes
    };
    let mut stream = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(SETTINGS, 0, &[]));
    stream.write_all(&hello).await.unwrap();

    let mut pings = 0;
    let closed = tokio::time::timeout(watch, async {
        loop {
            let mut header = [0u8; 9];
            if stream.read_exact(&mut header).await.is_err() {
                return;
            }
            let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let mut payload = vec![0u8; len];
            if stream.read_exact(&mut payload).await.is_err() {
                return;
            }
            let (kind, flags) = (header[3], header[4]);
            if kind == SETTINGS && flags & ACK == 0 {
                stream.write_all(&frame(SETTINGS, ACK, &[])).await.unwrap();
            }
            if kind == PING && flags & ACK == 0 {
                pings += 1;
                if answer_pings {
                    stream.write_all(&frame(PING, ACK, &payload)).await.unwrap();
                }
            }
        }
    })
    .await
    .is_ok();
    (pings, closed)
}

#[tokio::test]
async fn keepalive_closes_connections_whose_peer_is_gone() {
    let server = InProcess::start_with(|config| {
        config.keepalive.interval = Some(Duration::from_millis(200));
        config.keepalive.timeout = Duration::from_millis(300);
    })
    .await;
    let (pings, closed) = silent_peer(&server.url, false, Duration::from_secs(5)).await;
    assert!(pings >= 1, "the server pings an idle connection");
    assert!(closed, "an unanswered ping closes the connection");

    // A peer that answers stays connected, however long it is idle.
    let (pings, closed) = silent_peer(&server.url, true, Duration::from_millis(1500)).await;
    assert!(pings >= 2, "pings every interval ({pings})");
    assert!(!closed, "an answering peer is kept");
    server.stop().await.unwrap();

    // With keepalive off, a silent peer is neither pinged nor dropped.
    let server = InProcess::start_with(|config| config.keepalive.interval = None).await;
    let (pings, closed) = silent_peer(&server.url, false, Duration::from_millis(1500)).await;
    assert_eq!((pings, closed), (0, false));
    server.stop().await.unwrap();
}
