//! Idempotent adds (issue 30 item 3) over the real binary: a message whose
//! idempotency key the project stored within the window answers the original uid and is
//! not stored again, over gRPC, REST and v1; within a batch; per project; after the
//! window; across a restart; under concurrent adds; and when the server dies between
//! the add's commit and its answer (`MEMMACHINE_TEST_ABORT_AFTER_ADD`, debug builds).
#![allow(deprecated)] // the v1 client stubs are deprecated, as the protos say

use std::time::Duration;

use crate::common::ServerProcess;
use memmachine_proto::v1;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

const ORG: &str = "idem";

async fn client(server: &ServerProcess) -> MemoryServiceClient<Channel> {
    MemoryServiceClient::connect(server.url()).await.unwrap()
}

async fn create(server: &ServerProcess, project: &str) {
    ProjectServiceClient::connect(server.url())
        .await
        .unwrap()
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

fn message(content: &str, key: &str) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content: content.into(),
        idempotency_key: key.into(),
        ..Default::default()
    }
}

async fn add(
    c: &mut MemoryServiceClient<Channel>,
    project: &str,
    messages: Vec<pb::MemoryMessage>,
) -> Result<Vec<(String, bool)>, tonic::Status> {
    Ok(c.add_memories(pb::AddMemoriesRequest {
        org_id: ORG.into(),
        project_id: project.into(),
        messages,
        ..Default::default()
    })
    .await?
    .into_inner()
    .results
    .into_iter()
    .map(|r| (r.uid, r.duplicate))
    .collect())
}

/// The uids of the project's episodes, in sequence order.
async fn episodes(c: &mut MemoryServiceClient<Channel>, project: &str) -> Vec<String> {
    c.list_memories(pb::ListMemoriesRequest {
        org_id: ORG.into(),
        project_id: project.into(),
        page_size: Some(1000),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .episodes
    .into_iter()
    .map(|e| e.uid)
    .collect()
}

#[tokio::test]
async fn a_stored_key_answers_its_original_uid_over_grpc_rest_and_v1() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &["--rest-listen", "127.0.0.1:0"]);
    create(&server, "p").await;
    create(&server, "q").await;
    let mut c = client(&server).await;

    // gRPC: the same key twice.
    let first = add(&mut c, "p", vec![message("hello", "k1")])
        .await
        .unwrap();
    let again = add(&mut c, "p", vec![message("hello again", "k1")])
        .await
        .unwrap();
    assert!(!first[0].1);
    assert_eq!(again, vec![(first[0].0.clone(), true)]);
    assert_eq!(episodes(&mut c, "p").await, vec![first[0].0.clone()]);

    // Within one batch: the second of a key is a duplicate of the first; no key, no dedup.
    let batch = add(
        &mut c,
        "p",
        vec![
            message("a", "k2"),
            message("b", "k2"),
            message("c", ""),
            message("c", ""),
        ],
    )
    .await
    .unwrap();
    assert_eq!(batch[1], (batch[0].0.clone(), true));
    assert!(!batch[0].1 && !batch[2].1 && !batch[3].1);
    assert_ne!(batch[2].0, batch[3].0);
    assert_eq!(episodes(&mut c, "p").await.len(), 4);

    // Another project does not share keys.
    let other = add(&mut c, "q", vec![message("hello", "k1")])
        .await
        .unwrap();
    assert!(!other[0].1);
    assert_ne!(other[0].0, first[0].0);

    // A deleted episode takes its key with it.
    c.delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
        org_id: ORG.into(),
        project_id: "q".into(),
        episode_ids: vec![other[0].0.clone()],
    })
    .await
    .unwrap();
    let anew = add(&mut c, "q", vec![message("hello", "k1")])
        .await
        .unwrap();
    assert!(!anew[0].1);
    assert_ne!(anew[0].0, other[0].0);

    // A key longer than 256 bytes is the client's mistake, named.
    let status = add(&mut c, "p", vec![message("x", &"k".repeat(257))])
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let fields: Vec<String> = status
        .get_details_bad_request()
        .expect("a BadRequest detail")
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(fields, ["messages[0].idempotency_key"]);
    add(&mut c, "p", vec![message("x", &"k".repeat(256))])
        .await
        .unwrap();

    // REST: the same key twice answers the original uid, flagged.
    let http = reqwest::Client::new();
    let rest = format!("{}/api/v2/memories", server.rest_url());
    let body = serde_json::json!({
        "org_id": ORG, "project_id": "q",
        "messages": [{"content": "over rest", "idempotency_key": "r1"}],
    });
    let mut answers = Vec::new();
    for _ in 0..2 {
        let response = http.post(&rest).json(&body).send().await.unwrap();
        assert!(response.status().is_success(), "{response:?}");
        let json: serde_json::Value = response.json().await.unwrap();
        answers.push(json["results"][0].clone());
    }
    assert_eq!(answers[0]["uid"], answers[1]["uid"]);
    assert_eq!(answers[0]["duplicate"], false);
    assert_eq!(answers[1]["duplicate"], true);
    assert_eq!(episodes(&mut c, "q").await.len(), 2);

    // v1: the key on the episode.
    let mut legacy = v1::memory_service_client::MemoryServiceClient::connect(server.url())
        .await
        .unwrap();
    let ctx = v1::MemoryContext {
        group_id: "g".into(),
        session_id: "s".into(),
        user_id: vec!["ann".into()],
        ..Default::default()
    };
    let mut uuids = Vec::new();
    for content in ["v1 says", "v1 says again"] {
        let uuid = legacy
            .add_episode(v1::AddEpisodeRequest {
                context: Some(ctx.clone()),
                episode: Some(v1::Episode {
                    content: content.into(),
                    idempotency_key: "v1-key".into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .uuid;
        uuids.push(uuid);
    }
    assert_eq!(uuids[0], uuids[1]);
    let listed = legacy
        .list_episodes(v1::ListEpisodesRequest {
            context: Some(ctx),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodes;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].uuid, uuids[0]);
}

#[tokio::test]
async fn a_key_outlives_a_restart_and_stores_anew_after_its_window() {
    let data = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(data.path(), &[]);
    create(&server, "p").await;
    let mut c = client(&server).await;
    let first = add(&mut c, "p", vec![message("hello", "k")]).await.unwrap();
    drop(c);
    assert!(server.terminate().success());

    let mut server = ServerProcess::start(data.path(), &[]);
    let mut c = client(&server).await;
    let again = add(&mut c, "p", vec![message("hello", "k")]).await.unwrap();
    assert_eq!(again, vec![(first[0].0.clone(), true)], "after a restart");
    drop(c);
    assert!(server.terminate().success());

    // A one-second window: the key, stored longer ago than that, no longer counts.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut server = ServerProcess::start(data.path(), &["--idempotency-window", "1"]);
    let mut c = client(&server).await;
    let later = add(&mut c, "p", vec![message("hello", "k")]).await.unwrap();
    assert!(!later[0].1, "after the window the key stores anew");
    assert_ne!(later[0].0, first[0].0);
    let now = add(&mut c, "p", vec![message("hello", "k")]).await.unwrap();
    assert_eq!(
        now,
        vec![(later[0].0.clone(), true)],
        "the new record holds the key"
    );
    assert_eq!(
        episodes(&mut c, "p").await,
        vec![first[0].0.clone(), later[0].0.clone()]
    );
    drop(c);
    server.terminate();
}

#[tokio::test]
async fn concurrent_adds_with_one_key_store_it_once() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]);
    create(&server, "p").await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let mut c = client(&server).await;
        tasks.push(tokio::spawn(async move {
            add(&mut c, "p", vec![message(&format!("racer {i}"), "race")])
                .await
                .unwrap()
                .remove(0)
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let stored: Vec<_> = answers.iter().filter(|(_, dup)| !dup).collect();
    assert_eq!(stored.len(), 1, "{answers:?}");
    assert!(answers.iter().all(|(uid, _)| *uid == stored[0].0));
    let mut c = client(&server).await;
    assert_eq!(episodes(&mut c, "p").await, vec![stored[0].0.clone()]);
}

#[tokio::test]
async fn a_retry_after_a_crash_between_commit_and_answer_answers_the_stored_uid() {
    let data = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start_env(
        data.path(),
        &[],
        &[("MEMMACHINE_TEST_ABORT_AFTER_ADD", "1")],
    );
    create(&server, "p").await;
    let mut c = client(&server).await;
    let request = vec![message("said once", "crash-key"), message("and this", "")];
    let failed = add(&mut c, "p", request.clone()).await.unwrap_err();
    assert!(
        matches!(
            failed.code(),
            Code::Unavailable | Code::Unknown | Code::Internal
        ),
        "{failed:?}"
    );
    let status = server.child.wait().unwrap();
    assert!(!status.success(), "the hook aborts the server");
    assert!(
        server
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("MEMMACHINE_TEST_ABORT_AFTER_ADD")),
        "the server died in the hook"
    );

    let server = ServerProcess::start(data.path(), &[]);
    let mut c = client(&server).await;
    // The keyless message of the lost answer was stored; only the keyed one dedupes.
    let stored = episodes(&mut c, "p").await;
    assert_eq!(stored.len(), 2, "the add committed before the crash");
    let retry = add(&mut c, "p", vec![message("said once", "crash-key")])
        .await
        .unwrap();
    assert_eq!(retry, vec![(stored[0].clone(), true)]);
    assert_eq!(episodes(&mut c, "p").await, stored);
}
