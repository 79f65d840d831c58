//! `ChangeService.WatchChanges` (issue 30): every change of a project's memory in commit
//! order, resumable from a cursor without gaps or repeats, OUT_OF_RANGE past the kept
//! feed, across replicas, under the org's key and the stream limits, and a client that
//! stops reading is cut off. Servers are real processes; backend-generic
//! (`MEMMACHINE_TEST_BACKEND=postgres` runs them on PostgreSQL).

use std::collections::HashSet;
use std::time::Duration;

use crate::common::ServerProcess;
use crate::common::calls::with_key;
use crate::common::chat::{ChatServer, favourites};
use crate::common::keys::create_key;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::change_service_client::ChangeServiceClient;
use memmachine_proto::v2::lifecycle_service_client::LifecycleServiceClient;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use pb::ChangeKind as K;
use tonic::Code;
use tonic::transport::Channel;

const ORG: &str = "acme";
const PROJECT: &str = "notes";

async fn connect(server: &ServerProcess) -> Channel {
    Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn create(channel: &Channel, key: Option<&str>, project: &str) {
    ProjectServiceClient::new(channel.clone())
        .create_project(with_key(
            pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                ..Default::default()
            },
            key,
        ))
        .await
        .unwrap();
}

fn message(content: &str, producer: &str) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content: content.into(),
        producer: producer.into(),
        ..Default::default()
    }
}

async fn add_to(
    channel: &Channel,
    project: &str,
    messages: Vec<pb::MemoryMessage>,
    types: Vec<i32>,
) -> Vec<String> {
    MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            types,
            messages,
        })
        .await
        .unwrap()
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.uid)
        .collect()
}

/// Adds episodic-only messages to the test project.
async fn add(channel: &Channel, contents: &[&str]) -> Vec<String> {
    let messages = contents.iter().map(|c| message(c, "ada")).collect();
    add_to(
        channel,
        PROJECT,
        messages,
        vec![pb::MemoryType::Episodic as i32],
    )
    .await
}

async fn watch_as(
    channel: &Channel,
    key: Option<&str>,
    project: &str,
    after: &str,
) -> Result<tonic::Streaming<pb::Change>, tonic::Status> {
    ChangeServiceClient::new(channel.clone())
        .watch_changes(with_key(
            pb::WatchChangesRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                after: after.into(),
            },
            key,
        ))
        .await
        .map(tonic::Response::into_inner)
}

async fn watch(channel: &Channel, after: &str) -> tonic::Streaming<pb::Change> {
    watch_as(channel, None, PROJECT, after).await.unwrap()
}

/// The next change, failing the test after 10 s without one.
async fn next(stream: &mut tonic::Streaming<pb::Change>) -> pb::Change {
    match tokio::time::timeout(Duration::from_secs(10), stream.message()).await {
        Ok(Ok(Some(change))) => change,
        Ok(other) => panic!("the stream ended or failed: {other:?}"),
        Err(_) => panic!("no change within 10 s"),
    }
}

/// The next `n` changes.
async fn take(stream: &mut tonic::Streaming<pb::Change>, n: usize) -> Vec<pb::Change> {
    let mut changes = Vec::new();
    for _ in 0..n {
        changes.push(next(stream).await);
    }
    changes
}

/// Nothing more arrives for a moment.
async fn quiet(stream: &mut tonic::Streaming<pb::Change>) {
    if let Ok(more) = tokio::time::timeout(Duration::from_millis(700), stream.message()).await {
        panic!("expected nothing more, got {more:?}");
    }
}

fn kinds(changes: &[pb::Change]) -> Vec<K> {
    changes.iter().map(|c| c.kind()).collect()
}

fn uids(changes: &[pb::Change]) -> Vec<String> {
    changes.iter().map(|c| c.episode_uid.clone()).collect()
}

/// Cursors only ever grow: one stream's changes are in commit order.
fn assert_ordered(changes: &[pb::Change]) {
    for pair in changes.windows(2) {
        assert!(
            pair[0].cursor < pair[1].cursor,
            "cursors out of order: {} then {}",
            pair[0].cursor,
            pair[1].cursor
        );
    }
}

/// Reads changes until one satisfies `found`, returning all read.
async fn until(
    stream: &mut tonic::Streaming<pb::Change>,
    found: impl Fn(&pb::Change) -> bool,
) -> Vec<pb::Change> {
    let mut read = Vec::new();
    loop {
        let change = next(stream).await;
        let done = found(&change);
        read.push(change);
        if done {
            return read;
        }
    }
}

#[tokio::test]
async fn every_kind_of_change_arrives_in_commit_order() {
    let chat = ChatServer::start(favourites);
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        dir.path(),
        &[
            "--embedder",
            "none",
            "--llm-base-url",
            &chat.url,
            "--llm-model",
            "scripted",
            "--llm-max-calls-per-minute",
            "0",
            "--semantic-trigger-messages",
            "1",
            "--semantic-trigger-age",
            "0",
            "--short-term-window",
            "2",
            "--retention-sweep-interval",
            "0.3",
        ],
    );
    let channel = connect(&server).await;
    create(&channel, None, PROJECT).await;
    let mut stream = watch(&channel, "").await;

    // Episodes added, and a feature added, updated and deleted by the model.
    let all = vec![];
    let mut seen: Vec<pb::Change> = all;
    let pizza = add_to(
        &channel,
        PROJECT,
        vec![message("My favourite food is pizza.", "alice")],
        vec![],
    )
    .await;
    seen.extend(until(&mut stream, |c| c.kind() == K::FeatureAdded).await);
    assert_eq!(seen[0].kind(), K::EpisodeAdded);
    assert_eq!(seen[0].episode_uid, pizza[0]);
    assert_eq!(
        seen[0].episode.as_ref().unwrap().content,
        "My favourite food is pizza."
    );
    let added = seen.last().unwrap().clone();
    let feature = added.feature.as_ref().expect("the feature as it is now");
    assert_eq!(
        (feature.feature_name.as_str(), feature.value.as_str()),
        ("favourite food", "pizza")
    );
    assert_eq!(added.feature_id, feature.id);
    add_to(
        &channel,
        PROJECT,
        vec![message("Actually my favourite food is sushi.", "alice")],
        vec![],
    )
    .await;
    seen.extend(until(&mut stream, |c| c.kind() == K::FeatureUpdated).await);
    assert_eq!(seen.last().unwrap().feature_id, added.feature_id);
    add_to(
        &channel,
        PROJECT,
        vec![message("I no longer have a favourite food.", "alice")],
        vec![],
    )
    .await;
    seen.extend(until(&mut stream, |c| c.kind() == K::FeatureDeleted).await);
    assert_eq!(seen.last().unwrap().feature_id, added.feature_id);
    assert!(
        seen.last().unwrap().feature.is_none(),
        "deleted: no feature"
    );
    // Three messages over a window of two: the summary was written.
    if !seen.iter().any(|c| c.kind() == K::SummaryReplaced) {
        seen.extend(until(&mut stream, |c| c.kind() == K::SummaryReplaced).await);
    }
    let summary = seen
        .iter()
        .find(|c| c.kind() == K::SummaryReplaced)
        .unwrap();
    assert!(summary.summary.starts_with("summary of"), "{summary:?}");

    // A feature added, updated and deleted by hand.
    let mut semantic = SemanticServiceClient::new(channel.clone());
    let set_id = semantic
        .get_set_id(pb::GetSetIdRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .set_id;
    let manual = semantic
        .add_feature(pb::AddFeatureRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            set_id,
            category_name: "profile".into(),
            tag: "preferences".into(),
            feature: "favourite tea".into(),
            value: "green".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .feature_id;
    semantic
        .update_feature(pb::UpdateFeatureRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            feature_id: manual.clone(),
            value: Some("black".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    MemoryServiceClient::new(channel.clone())
        .delete_semantic_memories(pb::DeleteSemanticMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            feature_ids: vec![manual.clone()],
        })
        .await
        .unwrap();
    let by_hand = until(&mut stream, |c| {
        c.kind() == K::FeatureDeleted && c.feature_id == manual
    })
    .await;
    let by_hand: Vec<&pb::Change> = by_hand.iter().filter(|c| c.feature_id == manual).collect();
    assert_eq!(
        by_hand.iter().map(|c| c.kind()).collect::<Vec<_>>(),
        [K::FeatureAdded, K::FeatureUpdated, K::FeatureDeleted]
    );
    seen.extend(by_hand.into_iter().cloned());

    // Episodes deleted by a client, by forgetting a subject and by retention.
    let [first, bob, short]: [String; 3] = add_to(
        &channel,
        PROJECT,
        vec![
            message("one", "ada"),
            message("bob's note", "bob"),
            pb::MemoryMessage {
                expires_at: Some(prost_types::Timestamp {
                    seconds: chrono::Utc::now().timestamp() + 1,
                    nanos: 0,
                }),
                ..message("short-lived", "ada")
            },
        ],
        vec![pb::MemoryType::Episodic as i32],
    )
    .await
    .try_into()
    .unwrap();
    let added = until(&mut stream, |c| c.episode_uid == short).await;
    assert_eq!(
        uids(&added[added.len() - 3..]),
        [first.clone(), bob.clone(), short.clone()]
    );
    MemoryServiceClient::new(channel.clone())
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            episode_ids: vec![first.clone()],
        })
        .await
        .unwrap();
    LifecycleServiceClient::new(channel.clone())
        .forget_subject(pb::ForgetSubjectRequest {
            org_id: ORG.into(),
            subject: "bob".into(),
            project_ids: vec![PROJECT.into()],
            dry_run: false,
        })
        .await
        .unwrap();
    // The sweep may come before either (the short-lived one expires within a second and
    // the sweeper runs every 0.3 s): each deletion is told by its episode, not its place.
    let gone = std::cell::RefCell::new(HashSet::new());
    let deletions = until(&mut stream, |c| {
        if c.kind() == K::EpisodeDeleted {
            gone.borrow_mut().insert(c.episode_uid.clone());
        }
        [&first, &bob, &short]
            .iter()
            .all(|uid| gone.borrow().contains(*uid))
    })
    .await;
    let deleted: Vec<&pb::Change> = deletions
        .iter()
        .filter(|c| c.kind() == K::EpisodeDeleted)
        .collect();
    assert_eq!(deleted.len(), 3, "each deleted once: {deletions:?}");
    let by_client = deleted.iter().find(|c| c.episode_uid == first).unwrap();
    assert!(by_client.episode.is_none(), "{by_client:?}");
    seen.extend(added);
    seen.extend(deletions);
    assert_ordered(&seen);

    // The project deleted: the last change, then the stream ends.
    ProjectServiceClient::new(channel.clone())
        .delete_project(pb::DeleteProjectRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
        })
        .await
        .unwrap();
    let last = until(&mut stream, |c| c.kind() == K::ProjectDeleted).await;
    assert_eq!(last.last().unwrap().kind(), K::ProjectDeleted);
    let end = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("the stream ends");
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[tokio::test]
async fn a_client_resumes_from_its_last_cursor_without_gap_or_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &["--embedder", "none"]);
    let channel = connect(&server).await;
    create(&channel, None, PROJECT).await;
    create(&channel, None, "other").await;
    let before = add(&channel, &["old"]).await;

    // An empty cursor starts at the head: what was there before is not sent.
    let mut stream = watch(&channel, "").await;
    let first = add(&channel, &["a", "b", "c", "d", "e"]).await;
    let read = take(&mut stream, 3).await;
    assert_eq!(kinds(&read), [K::EpisodeAdded; 3]);
    assert_eq!(uids(&read), first[..3]);
    assert!(!uids(&read).contains(&before[0]));
    let cursor = read[2].cursor.clone();
    drop(stream);

    let second = add(&channel, &["f", "g"]).await;
    let mut resumed = watch(&channel, &cursor).await;
    let rest = take(&mut resumed, 4).await;
    assert_eq!(uids(&rest), [&first[3..], &second[..]].concat());
    assert_ordered(&[read, rest].concat());
    quiet(&mut resumed).await;

    // Cursors that are not this project's are refused plainly.
    let garbage = watch_as(&channel, None, PROJECT, "not a cursor")
        .await
        .unwrap_err();
    assert_eq!(garbage.code(), Code::InvalidArgument, "{garbage:?}");
    let foreign = watch_as(&channel, None, "other", &cursor)
        .await
        .unwrap_err();
    assert_eq!(foreign.code(), Code::InvalidArgument, "{foreign:?}");
    let missing = watch_as(&channel, None, "nowhere", "").await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    // A project deleted and created again is another project: its old cursors too.
    ProjectServiceClient::new(channel.clone())
        .delete_project(pb::DeleteProjectRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
        })
        .await
        .unwrap();
    create(&channel, None, PROJECT).await;
    let earlier = watch_as(&channel, None, PROJECT, &cursor)
        .await
        .unwrap_err();
    assert_eq!(earlier.code(), Code::InvalidArgument, "{earlier:?}");
}

#[tokio::test]
async fn a_pruned_cursor_is_out_of_range_naming_one_that_works() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        dir.path(),
        &["--embedder", "none", "--change-feed-retention", "1"],
    );
    let channel = connect(&server).await;
    create(&channel, None, PROJECT).await;
    let mut stream = watch(&channel, "").await;
    add(&channel, &["a", "b", "c"]).await;
    let old = take(&mut stream, 3).await;
    drop(stream);
    // Past the retention and a pruning or two.
    tokio::time::sleep(Duration::from_millis(4000)).await;

    let status = watch_as(&channel, None, PROJECT, &old[0].cursor)
        .await
        .map(|_| ())
        .err()
        .or(None);
    // The error may come with the answer or as the stream's first message.
    let status = match status {
        Some(status) => status,
        None => {
            let mut stream = watch(&channel, &old[0].cursor).await;
            stream.message().await.unwrap_err()
        }
    };
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    use tonic_types::StatusExt;
    let info = status.get_details_error_info().expect("an ErrorInfo");
    let oldest = info.metadata["resume_after"].clone();
    assert!(status.message().contains(&oldest), "{}", status.message());
    assert!(oldest > old[0].cursor);

    let mut resumed = watch(&channel, &oldest).await;
    let new = add(&channel, &["d"]).await;
    let changes = until(&mut resumed, |c| c.episode_uid == new[0]).await;
    assert!(changes.iter().all(|c| c.cursor > oldest));
}

#[tokio::test]
async fn a_change_written_through_one_replica_streams_from_another() {
    let dir = tempfile::tempdir().unwrap();
    let a = ServerProcess::start(dir.path(), &["--embedder", "none"]);
    let b = ServerProcess::start(dir.path(), &["--embedder", "none"]);
    let (to_a, to_b) = (connect(&a).await, connect(&b).await);
    create(&to_a, None, PROJECT).await;
    let mut on_b = watch(&to_b, "").await;
    let mut on_a = watch(&to_a, "").await;
    let mut written = Vec::new();
    for i in 0..5 {
        written.extend(add(&to_a, &[&format!("note {i}")]).await);
    }
    let from_b = take(&mut on_b, 5).await;
    assert_eq!(uids(&from_b), written);
    let from_a = take(&mut on_a, 5).await;
    assert_eq!(
        from_a.iter().map(|c| &c.cursor).collect::<Vec<_>>(),
        from_b.iter().map(|c| &c.cursor).collect::<Vec<_>>(),
        "both replicas name a change alike"
    );
    // A cursor from A resumes on B.
    let more = add(&to_b, &["from b"]).await;
    let mut resumed = watch(&to_b, &from_a[2].cursor).await;
    let rest = take(&mut resumed, 3).await;
    assert_eq!(uids(&rest), [&written[3..], &more[..]].concat());
}

#[tokio::test]
async fn streams_obey_the_orgs_key_and_the_per_key_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        dir.path(),
        &[
            "--auth",
            "--embedder",
            "none",
            "--max-change-streams-per-key",
            "2",
        ],
    );
    let acme = create_key(dir.path(), &["--org", ORG]);
    let rival = create_key(dir.path(), &["--org", "rival"]);
    let channel = connect(&server).await;
    create(&channel, Some(&acme), PROJECT).await;

    let refused = watch_as(&channel, Some(&rival), PROJECT, "")
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let anonymous = watch_as(&channel, None, PROJECT, "").await.unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");

    let one = watch_as(&channel, Some(&acme), PROJECT, "").await.unwrap();
    let _two = watch_as(&channel, Some(&acme), PROJECT, "").await.unwrap();
    let third = watch_as(&channel, Some(&acme), PROJECT, "")
        .await
        .unwrap_err();
    assert_eq!(third.code(), Code::ResourceExhausted, "{third:?}");
    assert!(third.message().contains("--max-change-streams-per-key"));
    // Other calls of the key are not held up by its streams.
    let listed = MemoryServiceClient::new(channel.clone())
        .list_memories(with_key(
            pb::ListMemoriesRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                ..Default::default()
            },
            Some(&acme),
        ))
        .await;
    assert!(listed.is_ok(), "{listed:?}");
    // A stream closed gives its place back.
    drop(one);
    let mut again = None;
    for _ in 0..50 {
        match watch_as(&channel, Some(&acme), PROJECT, "").await {
            Ok(stream) => {
                again = Some(stream);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(again.is_some(), "the closed stream's place came back");
}

/// The server's resident memory (kB).
fn rss_kb(server: &ServerProcess) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        dir.path(),
        &[
            "--embedder",
            "none",
            "--watch-send-timeout",
            "1",
            "--max-change-streams-per-key",
            "1",
        ],
    );
    let channel = connect(&server).await;
    create(&channel, None, PROJECT).await;
    let mut stalled = watch(&channel, "").await;
    let big = "x".repeat(20_000);
    let before = rss_kb(&server);
    for _ in 0..8 {
        let contents: Vec<&str> = (0..100).map(|_| big.as_str()).collect();
        add(&channel, &contents).await;
    }
    // Far more than the transport's windows hold: the server waits, then gives up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = rss_kb(&server).saturating_sub(before);
    assert!(grown < 200_000, "the server grew by {grown} kB");
    // The place is free again: the stalled stream no longer holds it.
    let mut fresh = None;
    for _ in 0..50 {
        match watch_as(&channel, None, PROJECT, "").await {
            Ok(stream) => {
                fresh = Some(stream);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(fresh.is_some(), "the cut-off stream gave its place back");
    // Reading now: what was in flight, then the reason.
    let mut received = 0;
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(10), stalled.message()).await {
            Ok(Ok(Some(_))) => received += 1,
            Ok(Ok(None)) => panic!("ended without a status after {received} changes"),
            Ok(Err(status)) => break status,
            Err(_) => panic!("neither changes nor a status after {received} changes"),
        }
    };
    assert!(received < 800, "all {received} changes were buffered");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("too slowly"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn a_draining_server_ends_its_streams_with_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &["--embedder", "none"]);
    let channel = connect(&server).await;
    create(&channel, None, PROJECT).await;
    let mut stream = watch(&channel, "").await;
    let added = add(&channel, &["before the drain"]).await;
    let last = next(&mut stream).await;
    assert_eq!(last.episode_uid, added[0]);
    let stopping = tokio::spawn(server.terminate_async());
    let end = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("the stream ends during the drain");
    let status = end.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("another replica"), "{status:?}");
    assert!(stopping.await.unwrap().success());
}

/// One Server-Sent Event: its id, event name and JSON data.
#[derive(Debug)]
struct SseEvent {
    id: String,
    event: String,
    data: serde_json::Value,
}

/// Reads events off a `text/event-stream` response (comments skipped).
struct SseReader {
    response: reqwest::Response,
    buffer: String,
}

impl SseReader {
    async fn next(&mut self) -> SseEvent {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent {
                    id: String::new(),
                    event: String::new(),
                    data: serde_json::Value::Null,
                };
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        event.id = v.trim().into();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event.event = v.trim().into();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim());
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                event.data = serde_json::from_str(&data).unwrap();
                return event;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .expect("an event within 10 s")
                .unwrap()
                .expect("the event stream ended");
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

async fn sse(rest: &str, project: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!(
        "{rest}/api/v2/memories/changes?org_id={ORG}&project_id={project}"
    ));
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn server_sent_events_carry_the_same_changes_and_resume_with_last_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        dir.path(),
        &["--embedder", "none", "--rest-listen", "127.0.0.1:0"],
    );
    let rest = server.rest_url();
    let channel = connect(&server).await;
    create(&channel, None, PROJECT).await;
    let mut grpc = watch(&channel, "").await;
    let response = sse(&rest, PROJECT, None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut events = SseReader {
        response,
        buffer: String::new(),
    };
    let first = add(&channel, &["a", "b", "c"]).await;
    let from_grpc = take(&mut grpc, 3).await;
    let mut read = Vec::new();
    for _ in 0..3 {
        read.push(events.next().await);
    }
    for ((event, change), uid) in read.iter().zip(&from_grpc).zip(&first) {
        assert_eq!(
            event.id, change.cursor,
            "the same cursor on both transports"
        );
        assert_eq!(event.event, "episode_added");
        assert_eq!(event.data["kind"], "episode_added");
        assert_eq!(event.data["episode_uid"], uid.as_str());
        assert!(
            event.data["episode"]["content"].is_string(),
            "{:?}",
            event.data
        );
    }
    drop(events);

    // Resumed as a browser's EventSource does, after the second event.
    let more = add(&channel, &["d"]).await;
    let resumed = sse(&rest, PROJECT, Some(&read[1].id)).await;
    assert_eq!(resumed.status(), 200);
    let mut resumed = SseReader {
        response: resumed,
        buffer: String::new(),
    };
    let again = [resumed.next().await, resumed.next().await];
    assert_eq!(again[0].data["episode_uid"], first[2].as_str());
    assert_eq!(again[1].data["episode_uid"], more[0].as_str());

    // Errors before the stream starts are the gateway's JSON errors.
    let bad = sse(&rest, PROJECT, Some("garbage")).await;
    assert_eq!(bad.status(), 422);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert!(
        body["detail"]["message"]
            .as_str()
            .unwrap()
            .contains("after")
    );
    let missing = sse(&rest, "nowhere", None).await;
    assert_eq!(missing.status(), 404);
}
