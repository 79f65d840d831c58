//! `MemoryService.ImportMemories` end to end: a real server on a loopback port, the tonic
//! client streaming batches over TCP.

use std::time::Duration;

use crate::common::InProcess;
use crate::common::calls::{create_project, with_key};
use crate::common::keys::create_key;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

fn batch(
    org: &str,
    project: &str,
    contents: impl IntoIterator<Item = String>,
) -> pb::ImportMemoriesRequest {
    pb::ImportMemoriesRequest {
        org_id: org.into(),
        project_id: project.into(),
        types: vec![],
        messages: contents
            .into_iter()
            .map(|content| pb::MemoryMessage {
                content,
                producer: "loader".into(),
                ..Default::default()
            })
            .collect(),
    }
}

/// Batch `b` of `n` messages "m{b}-{i}", naming the project only in the first.
fn numbered(b: usize, n: usize) -> pb::ImportMemoriesRequest {
    let (org, project) = if b == 0 { ("acme", "notes") } else { ("", "") };
    batch(org, project, (0..n).map(|i| format!("m{b}-{i}")))
}

async fn import(
    channel: &Channel,
    key: Option<&str>,
    batches: Vec<pb::ImportMemoriesRequest>,
) -> Result<pb::ImportMemoriesResponse, tonic::Status> {
    MemoryServiceClient::new(channel.clone())
        .import_memories(with_key(tokio_stream::iter(batches), key))
        .await
        .map(tonic::Response::into_inner)
}

/// Every stored episode of acme/notes, in sequence order.
async fn episodes(channel: &Channel) -> Vec<pb::Episode> {
    let mut client = MemoryServiceClient::new(channel.clone());
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
                page_size: Some(1000),
                page_token,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        all.extend(page.episodes);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    all.sort_by_key(|e| e.sequence_num);
    all
}

async fn server_with_project() -> (InProcess, Channel) {
    let server = InProcess::start().await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    (server, channel)
}

#[tokio::test]
async fn batches_are_stored_in_order() {
    let (_server, channel) = server_with_project().await;
    let mut batches: Vec<_> = (0..30).map(|b| numbered(b, 40)).collect();
    // Later batches may repeat the project instead of leaving it empty.
    batches[7].org_id = "acme".into();
    batches[7].project_id = "notes".into();
    let answer = import(&channel, None, batches).await.unwrap();
    assert_eq!(
        (answer.batches, answer.messages, answer.duplicates),
        (30, 1200, 0)
    );
    assert_eq!(answer.first_error, None);
    let stored = episodes(&channel).await;
    let contents: Vec<String> = stored.iter().map(|e| e.content.clone()).collect();
    let expected: Vec<String> = (0..30)
        .flat_map(|b| (0..40).map(move |i| format!("m{b}-{i}")))
        .collect();
    assert_eq!(contents, expected);
    let first = stored[0].sequence_num;
    for (i, e) in stored.iter().enumerate() {
        assert_eq!(
            e.sequence_num,
            first + i as i64,
            "consecutive sequence numbers"
        );
    }

    // An empty stream stores nothing and says so.
    let empty = import(&channel, None, vec![]).await.unwrap();
    assert_eq!(empty, pb::ImportMemoriesResponse::default());
}

/// A retried import (the same idempotency keys) stores nothing again and counts the
/// duplicates; a key repeated within the stream is a duplicate too.
#[tokio::test]
async fn a_retried_import_stores_nothing_twice() {
    let (_server, channel) = server_with_project().await;
    let keyed = |b: usize| {
        let mut request = numbered(b, 10);
        for (i, message) in request.messages.iter_mut().enumerate() {
            message.idempotency_key = format!("k{b}-{i}");
        }
        request
    };
    let first = import(&channel, None, (0..3).map(keyed).collect())
        .await
        .unwrap();
    assert_eq!(
        (first.batches, first.messages, first.duplicates),
        (3, 30, 0)
    );
    // The retry resends the three batches and one more, whose first message repeats a key.
    let mut again: Vec<_> = (0..4).map(keyed).collect();
    again[3].messages[0].idempotency_key = "k0-0".into();
    let second = import(&channel, None, again).await.unwrap();
    assert_eq!(
        (second.batches, second.messages, second.duplicates),
        (4, 40, 31)
    );
    assert_eq!(episodes(&channel).await.len(), 39);
}

#[tokio::test]
async fn the_first_bad_batch_is_named_and_the_ones_before_it_stay() {
    let (_server, channel) = server_with_project().await;
    let mut bad = numbered(2, 5);
    bad.messages[3].content = String::new();
    let answer = import(
        &channel,
        None,
        vec![numbered(0, 5), numbered(1, 5), bad, numbered(3, 5)],
    )
    .await
    .unwrap();
    assert_eq!((answer.batches, answer.messages), (2, 10));
    let error = answer.first_error.expect("first_error");
    assert_eq!(error.batch, 2);
    assert_eq!(error.code, Code::InvalidArgument as i32);
    assert!(
        error.message.contains("messages[3].content"),
        "{}",
        error.message
    );
    let stored = episodes(&channel).await;
    assert_eq!(stored.len(), 10, "batch 2 is atomic, batch 3 never stored");
    assert_eq!(stored[9].content, "m1-4");

    // The same limits as AddMemories: an empty batch, a batch over 1,000 messages, and a
    // batch naming another project each stop the import where they stand.
    let too_many = batch("", "", (0..1001).map(|i| format!("x{i}")));
    let other = batch("acme", "elsewhere", ["y".to_string()]);
    for (wrong, field) in [
        (batch("", "", []), "messages"),
        (too_many, "messages"),
        (other, "project_id"),
    ] {
        let answer = import(&channel, None, vec![numbered(0, 2), wrong])
            .await
            .unwrap();
        assert_eq!(answer.batches, 1);
        let error = answer.first_error.expect("first_error");
        assert_eq!((error.batch, error.code), (1, Code::InvalidArgument as i32));
        assert!(error.message.contains(field), "{}", error.message);
    }
    assert_eq!(episodes(&channel).await.len(), 16);
}

#[tokio::test]
async fn a_missing_project_is_the_first_error() {
    let (_server, channel) = server_with_project().await;
    let answer = import(&channel, None, vec![batch("acme", "nowhere", ["x".into()])])
        .await
        .unwrap();
    assert_eq!(answer.batches, 0);
    let error = answer.first_error.expect("first_error");
    assert_eq!((error.batch, error.code), (0, Code::NotFound as i32));
    // A malformed project id as well, as AddMemories would answer it.
    let answer = import(&channel, None, vec![batch("acme", "no/pe", ["x".into()])])
        .await
        .unwrap();
    assert_eq!(
        answer.first_error.unwrap().code,
        Code::InvalidArgument as i32
    );
}

#[tokio::test]
async fn another_orgs_key_is_refused_as_add_memories_refuses_it() {
    let server = InProcess::start_with(|config| config.auth = true).await;
    let dir = server.data_dir.path().to_path_buf();
    let admin = create_key(&dir, &["--admin"]);
    let globex = create_key(&dir, &["--org", "globex"]);
    let acme = create_key(&dir, &["--org", "acme"]);
    let channel = server.channel().await;
    create_project(&channel, Some(&admin), "acme", "notes")
        .await
        .unwrap();
    let refused = import(&channel, Some(&globex), vec![numbered(0, 3)])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let unknown = import(&channel, None, vec![numbered(0, 3)])
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::Unauthenticated);
    let answer = import(&channel, Some(&acme), vec![numbered(0, 3), numbered(1, 3)])
        .await
        .unwrap();
    assert_eq!((answer.batches, answer.messages), (2, 6));
}

#[tokio::test]
async fn an_oversized_batch_stops_the_import() {
    let server = InProcess::start_with(|config| config.max_request_bytes = 64 * 1024).await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    let big = batch("", "", (0..4).map(|_| "z".repeat(30 * 1024)));
    let answer = import(&channel, None, vec![numbered(0, 2), big, numbered(2, 2)])
        .await
        .unwrap();
    assert_eq!(answer.batches, 1);
    let error = answer.first_error.expect("first_error");
    assert_eq!(
        (error.batch, error.code),
        (1, Code::ResourceExhausted as i32)
    );
    assert!(
        error.message.contains("--max-request-bytes"),
        "{}",
        error.message
    );
    assert_eq!(episodes(&channel).await.len(), 2);
}

/// Sends `batches` one by one through a channel the test controls.
fn streaming(
    channel: &Channel,
) -> (
    mpsc::Sender<pb::ImportMemoriesRequest>,
    tokio::task::JoinHandle<Result<pb::ImportMemoriesResponse, tonic::Status>>,
) {
    let (tx, rx) = mpsc::channel(1);
    let mut client = MemoryServiceClient::new(channel.clone());
    let call = tokio::spawn(async move {
        client
            .import_memories(ReceiverStream::new(rx))
            .await
            .map(tonic::Response::into_inner)
    });
    (tx, call)
}

async fn wait_for_episodes(channel: &Channel, n: usize) {
    for _ in 0..200 {
        if episodes(channel).await.len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{n} episodes never appeared");
}

#[tokio::test]
async fn a_client_that_leaves_keeps_what_was_stored() {
    let (_server, channel) = server_with_project().await;
    let (tx, call) = streaming(&channel);
    for b in 0..3 {
        tx.send(numbered(b, 10)).await.unwrap();
    }
    wait_for_episodes(&channel, 30).await;
    call.abort();
    drop(tx);
    let _ = call.await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(episodes(&channel).await.len(), 30);
    // The server goes on serving imports.
    let answer = import(&channel, None, vec![numbered(0, 1)]).await.unwrap();
    assert_eq!(answer.batches, 1);
}

#[tokio::test]
async fn an_import_outlives_the_request_timeout_but_not_a_stall() {
    let server = InProcess::start_with(|config| {
        config.request_timeout = Duration::from_millis(2000);
    })
    .await;
    let channel = server.channel().await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    // Twelve batches 250 ms apart: three seconds in all, each wait far within the
    // timeout (a busy machine may stretch a wait, never by seconds).
    let (tx, call) = streaming(&channel);
    for b in 0..12 {
        tx.send(numbered(b, 3)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(tx);
    let answer = call.await.unwrap().unwrap();
    assert_eq!((answer.batches, answer.first_error), (12, None));
    // A client that stops sending without ending its stream is told after the timeout.
    let (tx, call) = streaming(&channel);
    tx.send(numbered(0, 3)).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the import ended")
        .unwrap()
        .unwrap();
    drop(tx);
    assert_eq!(answer.batches, 1);
    let error = answer.first_error.expect("first_error");
    assert_eq!(
        (error.batch, error.code),
        (1, Code::DeadlineExceeded as i32)
    );
}

#[tokio::test]
async fn a_draining_server_finishes_the_batch_under_way_and_stops() {
    let (mut server, channel) = server_with_project().await;
    let (tx, call) = streaming(&channel);
    tx.send(numbered(0, 10)).await.unwrap();
    wait_for_episodes(&channel, 10).await;
    server.begin_stop();
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.send(numbered(1, 10)).await.unwrap();
    let answer = call.await.unwrap().unwrap();
    assert_eq!(answer.batches, 1);
    let error = answer.first_error.expect("first_error");
    assert_eq!((error.batch, error.code), (1, Code::Unavailable as i32));
    assert!(error.message.contains("shutting down"), "{}", error.message);
    server.stop().await.unwrap();
}
