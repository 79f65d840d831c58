//! Retention (issue 29): a message's `expires_at` and a project's `episode_retention`.
//! An expired episode is never returned (search, list, get by id; gRPC and REST), even
//! before the sweeper ran; the sweeper deletes it with what derives from it (a
//! feature's citation of it), and two replicas on one store sweep each episode once.
//! Backend-generic: `MEMMACHINE_TEST_BACKEND=postgres` runs the servers on PostgreSQL.

use std::time::Duration;

use crate::common::calls::create_project;
use crate::common::{InProcess, ServerProcess, free_port};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;

const ORG: &str = "acme";
const PROJECT: &str = "notes";
const DAY: i64 = 86_400;

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn at(seconds: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds, nanos: 0 }
}

fn message(content: &str, timestamp: Option<i64>, expires_at: Option<i64>) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content: content.into(),
        producer: "ada".into(),
        timestamp: timestamp.map(at),
        expires_at: expires_at.map(at),
        ..Default::default()
    }
}

async fn add(
    channel: &Channel,
    messages: Vec<pb::MemoryMessage>,
) -> Result<Vec<String>, tonic::Status> {
    let added = MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            messages,
            types: vec![pb::MemoryType::Episodic as i32],
        })
        .await?;
    Ok(added
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.uid)
        .collect())
}

/// The contents found by a long-term search for `query` (and the short-term window).
async fn searched(channel: &Channel, query: &str) -> (Vec<String>, Vec<String>) {
    let found = MemoryServiceClient::new(channel.clone())
        .search_memories(pb::SearchMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            query: query.into(),
            top_k: Some(5),
            expand_context: 2,
            types: vec![pb::MemoryType::Episodic as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodic_memory
        .unwrap_or_default();
    let long = found
        .long_term_memory
        .into_iter()
        .map(|s| s.episode.unwrap().content)
        .collect();
    let short = found
        .short_term_memory
        .into_iter()
        .map(|e| e.content)
        .collect();
    (long, short)
}

async fn listed(channel: &Channel) -> Vec<pb::Episode> {
    MemoryServiceClient::new(channel.clone())
        .list_memories(pb::ListMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            page_size: Some(2),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodes
}

/// Every episode listed, page by page (pages of 2, so an expired one mid-page is seen).
async fn listed_all(channel: &Channel) -> Vec<String> {
    let mut client = MemoryServiceClient::new(channel.clone());
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                page_size: Some(2),
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        all.extend(page.episodes.into_iter().map(|e| e.content));
        if page.next_page_token.is_empty() {
            return all;
        }
        token = page.next_page_token;
    }
}

async fn count(channel: &Channel) -> i64 {
    ProjectServiceClient::new(channel.clone())
        .get_episode_count(pb::GetEpisodeCountRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .count
}

async fn set_retention(
    channel: &Channel,
    seconds: i64,
) -> Result<pb::EpisodicMemoryConfig, tonic::Status> {
    Ok(ProjectServiceClient::new(channel.clone())
        .update_episodic_memory_config(pb::UpdateEpisodicMemoryConfigRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            episode_retention: Some(prost_types::Duration { seconds, nanos: 0 }),
            ..Default::default()
        })
        .await?
        .into_inner()
        .config
        .unwrap())
}

async fn rest(base: &str, path: &str, body: Value) -> Value {
    let response = reqwest::Client::new()
        .post(format!("{base}/api/v2{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(status.is_success(), "{path}: {status} {text}");
    if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

/// Waits (bounded) until `done` holds; the sweeper runs every 200 ms in these tests.
async fn eventually<F: AsyncFnMut() -> bool>(mut done: F, what: &str) {
    for _ in 0..600 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within a minute");
}

/// A server whose sweeper never runs during the test: reads alone must hide.
async fn server_without_sweeps(rest: Option<std::net::SocketAddr>) -> InProcess {
    InProcess::start_with(|config| {
        config.retention.interval = Duration::from_secs(3600);
        config.rest_listen = rest;
    })
    .await
}

#[tokio::test]
async fn expired_messages_are_never_returned_even_before_a_sweep() {
    let rest_addr = free_port();
    let server = server_without_sweeps(Some(rest_addr)).await;
    let base = format!("http://{rest_addr}");
    let channel = server.channel().await;
    create_project(&channel, None, ORG, PROJECT).await.unwrap();
    // Late enough that the reads before it see it on a busy machine (seconds are
    // whole: 4-5 s), soon enough for the test to wait it out.
    let soon = now() + 5;
    let uids = add(
        &channel,
        vec![
            message("the zebra stripes report", None, None),
            message(
                "the zebra expired long ago",
                Some(now() - 10 * DAY),
                Some(now() - DAY),
            ),
            message("the zebra that expires soon", None, Some(soon)),
            message("the zebra kept for a year", None, Some(now() + 365 * DAY)),
        ],
    )
    .await
    .unwrap();
    // Before the near expiry: every unexpired one, with its expiry answered.
    let episodes = listed(&channel).await;
    assert_eq!(episodes.len(), 2, "a page of 2 filled past the expired one");
    assert_eq!(episodes[0].content, "the zebra stripes report");
    assert!(episodes[0].expires_at.is_none());
    assert_eq!(episodes[1].content, "the zebra that expires soon");
    assert_eq!(episodes[1].expires_at, Some(at(soon)));
    let (long, short) = searched(&channel, "zebra").await;
    assert_eq!(long.len(), 3, "{long:?}");
    assert!(!long.iter().any(|c| c.contains("long ago")), "{long:?}");
    assert!(!short.iter().any(|c| c.contains("long ago")), "{short:?}");
    // Once the near one expired too: gone from every read, though still stored.
    while now() <= soon {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let alive = ["the zebra stripes report", "the zebra kept for a year"];
    assert_eq!(listed_all(&channel).await, alive);
    let (long, short) = searched(&channel, "zebra").await;
    let mut long_sorted = long.clone();
    long_sorted.sort();
    assert_eq!(
        long_sorted,
        ["the zebra kept for a year", "the zebra stripes report"]
    );
    assert_eq!(short, alive);
    assert_eq!(count(&channel).await, 4, "not swept yet: hidden by reads");
    // REST: list, search and get by id.
    let project = json!({"org_id": ORG, "project_id": PROJECT});
    let mut list = project.clone();
    list["type"] = json!("episodic");
    let listed = rest(&base, "/memories/list", list).await;
    let contents: Vec<&str> = listed["content"]["episodic_memory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, alive);
    let mut search = project.clone();
    search["query"] = json!("zebra");
    let found = rest(&base, "/memories/search", search).await;
    let text = found.to_string();
    assert!(
        !text.contains("long ago") && !text.contains("expires soon"),
        "{text}"
    );
    assert!(text.contains("kept for a year"), "{text}");
    let mut get = project.clone();
    get["episodic_ids"] = json!(uids);
    let got = rest(&base, "/memories/episodic/get", get).await;
    let missing: Vec<&str> = got["content"]["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(missing, [uids[1].as_str(), uids[2].as_str()]);
    let kept = &got["content"]["episodic_memory"][1];
    assert_eq!(kept["content"], "the zebra kept for a year");
    assert!(kept["expires_at"].is_string(), "{kept}");
    // A REST add takes expires_at too.
    let mut add = project.clone();
    add["messages"] = json!([{"content": "a zebra said over REST", "expires_at": now() - 1}]);
    rest(&base, "/memories", add).await;
    assert_eq!(listed_all(&channel).await, alive);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn retention_hides_old_episodes_and_the_sweeper_deletes_them_and_their_citations() {
    let server = InProcess::start_with(|config| {
        config.retention.interval = Duration::from_millis(200);
    })
    .await;
    let channel = server.channel().await;
    create_project(&channel, None, ORG, PROJECT).await.unwrap();
    let old = add(
        &channel,
        (0..5)
            .map(|i| message(&format!("old note {i}"), Some(now() - 3 * DAY), None))
            .collect(),
    )
    .await
    .unwrap();
    let fresh_uid = add(&channel, vec![message("fresh note", None, None)])
        .await
        .unwrap()
        .remove(0);
    // A feature citing an old episode and the fresh one.
    let mut semantic = SemanticServiceClient::new(channel.clone());
    let set_id = semantic
        .get_set_id(pb::GetSetIdRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            is_org_level: false,
            metadata_tags: vec!["producer_id".into()],
            set_metadata: [("producer_id".to_string(), "ada".to_string())].into(),
        })
        .await
        .unwrap()
        .into_inner()
        .set_id;
    let feature_id = semantic
        .add_feature(pb::AddFeatureRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            set_id,
            category_name: "profile".into(),
            tag: "notes".into(),
            feature: "habit".into(),
            value: "takes notes".into(),
            citations: vec![old[0].clone(), fresh_uid.clone()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .feature_id;
    assert_eq!(count(&channel).await, 6);
    let config = set_retention(&channel, DAY).await.unwrap();
    assert_eq!(
        config.episode_retention,
        Some(prost_types::Duration {
            seconds: DAY,
            nanos: 0
        })
    );
    // Hidden at once (whether or not the sweeper has run yet).
    assert_eq!(listed_all(&channel).await, ["fresh note"]);
    let (long, _) = searched(&channel, "note").await;
    assert_eq!(long, ["fresh note"]);
    let fresh = listed(&channel).await;
    let expected = fresh[0].created_at.unwrap().seconds + DAY;
    assert_eq!(fresh[0].expires_at.unwrap().seconds, expected);
    // Swept: the count goes down, and the feature cites the fresh episode only.
    eventually(async || count(&channel).await == 1, "the sweep").await;
    let feature = semantic
        .get_feature(pb::GetFeatureRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            feature_id,
            load_citations: true,
        })
        .await
        .unwrap()
        .into_inner()
        .feature
        .unwrap();
    assert_eq!(feature.citations, [fresh_uid]);
    // Cleared: nothing expires any more.
    let config = set_retention(&channel, 0).await.unwrap();
    assert_eq!(config.episode_retention, None);
    assert!(listed(&channel).await[0].expires_at.is_none());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn bad_retention_and_expiries_are_invalid_arguments() {
    let rest_addr = free_port();
    let server = server_without_sweeps(Some(rest_addr)).await;
    let channel = server.channel().await;
    create_project(&channel, None, ORG, PROJECT).await.unwrap();
    for seconds in [-1, 200 * 366 * DAY, i64::MAX] {
        let err = set_retention(&channel, seconds).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{seconds}: {err:?}");
        assert!(
            err.message().contains("episode_retention"),
            "{}",
            err.message()
        );
    }
    let err = add(&channel, vec![message("x", Some(now()), Some(now() - 5))])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("messages[0].expires_at"),
        "{}",
        err.message()
    );
    let err = add(&channel, vec![message("x", None, Some(i64::MAX))])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    // REST: retention in seconds; a negative one is refused, a good one read back.
    let base = format!("http://{rest_addr}/api/v2");
    let client = reqwest::Client::new();
    let bad = client
        .post(format!("{base}/memory/episodic/config"))
        .json(&json!({"org_id": ORG, "project_id": PROJECT, "episode_retention_seconds": -3}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422, "{}", bad.text().await.unwrap());
    let good = client
        .post(format!("{base}/memory/episodic/config"))
        .json(&json!({"org_id": ORG, "project_id": PROJECT, "episode_retention_seconds": 3600}))
        .send()
        .await
        .unwrap();
    assert!(good.status().is_success());
    let read = rest(
        &format!("http://{rest_addr}"),
        "/memory/episodic/config/get",
        json!({"org_id": ORG, "project_id": PROJECT}),
    )
    .await;
    assert_eq!(read["episode_retention_seconds"], json!(3600.0));
    server.stop().await.unwrap();
}

/// The total of `deleted=N` the sweeper logged.
fn swept_in_log(server: &ServerProcess) -> u64 {
    server
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|line| line.contains("expired episodes deleted"))
        .filter_map(|line| {
            let rest = line.split("deleted=").nth(1)?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn two_replicas_sweep_each_expired_episode_once() {
    // One data directory: one SQLite file, or (on PostgreSQL) one database.
    let dir = tempfile::tempdir().unwrap();
    let args = ["--retention-sweep-interval", "0.2", "--embedder", "none"];
    let one = ServerProcess::start(dir.path(), &args);
    let other = ServerProcess::start(dir.path(), &args);
    let channel = Channel::from_shared(one.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    create_project(&channel, None, ORG, PROJECT).await.unwrap();
    let expired = 1_200;
    for batch in 0..(expired / 600) {
        let messages = (0..600)
            .map(|i| {
                message(
                    &format!("note {batch}-{i}"),
                    Some(now() - 10),
                    Some(now() - 1),
                )
            })
            .collect();
        add(&channel, messages).await.unwrap();
    }
    add(&channel, vec![message("kept", None, None)])
        .await
        .unwrap();
    let other_channel = Channel::from_shared(other.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    eventually(async || count(&other_channel).await == 1, "the sweep").await;
    // Each episode deleted once between them, and no sweep failed.
    eventually(
        async || swept_in_log(&one) + swept_in_log(&other) == expired as u64,
        "the sweepers' logs",
    )
    .await;
    for server in [&one, &other] {
        let log = server.log.lock().unwrap();
        assert!(
            !log.iter().any(|l| l.contains("retention sweep failed")),
            "{log:#?}"
        );
    }
    assert_eq!(listed_all(&other_channel).await, ["kept"]);
}

#[tokio::test]
async fn export_leaves_expired_episodes_out_and_carries_expiries_and_retention() {
    use memmachine::store::Store;
    use memmachine_core::access::Access;
    use memmachine_core::model::{EpisodicConfigUpdate, ProjectConfig, ProjectKey};
    use memmachine_domain::transfer::{ExportOptions, ImportOptions, export, import};
    use std::sync::Arc;

    async fn open(dir: &std::path::Path) -> Arc<dyn Store> {
        Arc::new(
            memmachine::store::sqlite::SqliteStore::open_async(dir)
                .await
                .unwrap(),
        )
    }
    let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let source = open(from.path()).await;
    let key = Access::system(ProjectKey::parse(ORG, PROJECT).unwrap());
    source
        .create_project(&key, "", &ProjectConfig::default())
        .await
        .unwrap();
    let ten_days = 10 * DAY * 1_000_000;
    source
        .update_episodic_config(
            &key,
            EpisodicConfigUpdate {
                episode_retention_micros: Some(Some(ten_days)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let micros = chrono::Utc::now().timestamp_micros();
    let episode = |content: &str, expires: Option<i64>| memmachine_core::model::NewEpisode {
        uid: uuid::Uuid::new_v4(),
        content: content.into(),
        producer_id: "ada".into(),
        producer_role: String::new(),
        produced_for_id: String::new(),
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: micros - 1_000_000,
        metadata: Default::default(),
        expires_at_micros: expires,
        idempotency: None,
    };
    let later = micros + DAY * 1_000_000;
    let expired = episode("expired", Some(micros - 1));
    source
        .add_episodes(
            &key,
            vec![
                episode("plain", None),
                expired.clone(),
                episode("later", Some(later)),
            ],
            None,
        )
        .await
        .unwrap();
    let mut out = Vec::new();
    export(
        source.as_ref(),
        &ExportOptions::default(),
        &mut out,
        &mut |_| {},
    )
    .await
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        !text.contains("\"expired\"") && !text.contains(&expired.uid.to_string()),
        "{text}"
    );
    let file = from.path().join("export.jsonl");
    std::fs::write(&file, &text).unwrap();
    let target = open(to.path()).await;
    import(
        target.as_ref(),
        &file,
        &ImportOptions { replace: false },
        &mut |_| {},
    )
    .await
    .unwrap();
    let project = target.get_project(&key).await.unwrap().unwrap();
    assert_eq!(project.episodic.episode_retention_micros, Some(ten_days));
    let episodes = target.list_episodes(&key, None, 0, 10).await.unwrap();
    let kept: Vec<(&str, Option<i64>)> = episodes
        .iter()
        .map(|e| (e.content.as_str(), e.expires_at_micros))
        .collect();
    assert_eq!(kept, [("plain", None), ("later", Some(later))]);
}
