//! The embedding workers over real gRPC, against a real local HTTP server that speaks the
//! OpenAI embeddings protocol: a text the model refuses is set aside without blocking the
//! queue, and an embeddings endpoint that hangs holds up only its own projects.
//!
//! sqlite-only: reads the queue in the SQLite file itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use crate::common::embeddings::{Script, scripted_embeddings};
use crate::common::{InProcess, free_port};
use memmachine::config::EmbedderKind;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

/// A server embedding through the scripted endpoint: the server, the endpoint's request
/// count and the server's metrics URL.
async fn server(script: Script) -> (InProcess, Arc<AtomicUsize>, String) {
    let (url, requests) = scripted_embeddings(script).await;
    let metrics = free_port();
    let server = InProcess::start_with(|config| {
        config.embedder.kind = Some(EmbedderKind::Openai);
        config.embedder.base_url = Some(memmachine_core::urls::SecretUrl::new(url));
        config.embedder.model = Some("scripted".into());
        config.metrics_listen = Some(metrics);
    })
    .await;
    (server, requests, format!("http://{metrics}/metrics"))
}

async fn create(channel: &Channel, project: &str, embedder: &str) {
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: "acme".into(),
            project_id: project.into(),
            config: Some(pb::ProjectConfig {
                embedder: embedder.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
}

async fn add(channel: &Channel, project: &str, texts: &[&str]) {
    MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: "acme".into(),
            project_id: project.into(),
            messages: texts
                .iter()
                .map(|text| pb::MemoryMessage {
                    content: text.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// (episodes with a vector, episodes still queued) of `project`, read from the database.
fn vectors_and_queue(server: &InProcess, project: &str) -> (i64, i64) {
    let db = rusqlite::Connection::open(server.data_dir.path().join("memmachine.db")).unwrap();
    let count = |table: &str| -> i64 {
        db.query_row(
            &format!(
                "SELECT COUNT(*) FROM {table} t JOIN episodes e ON e.id = t.episode
                 JOIN projects p ON p.id = e.project WHERE p.project_id = ?1"
            ),
            [project],
            |row| row.get(0),
        )
        .unwrap()
    };
    (count("embeddings"), count("embedding_queue"))
}

/// Waits up to 20 s for `project` to reach `want`; returns what it last saw.
async fn wait_for(server: &InProcess, project: &str, want: (i64, i64)) -> (i64, i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = vectors_and_queue(server, project);
        if seen == want || tokio::time::Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_refused_text_is_set_aside_and_the_queue_goes_on() {
    let (server, requests, metrics) = server(Script::RefusePoison).await;
    let channel = server.channel().await;
    create(&channel, "notes", "").await;
    add(
        &channel,
        "notes",
        &[
            "alpha note",
            "POISON far too long",
            "beta note",
            "gamma note",
        ],
    )
    .await;
    assert_eq!(wait_for(&server, "notes", (3, 0)).await, (3, 0));
    // Found out in a handful of calls, not one per episode: the batch, a check that the
    // embedder works, then halves.
    let calls = requests.load(Ordering::SeqCst);
    assert!(calls <= 8, "{calls} requests");
    let scraped = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
    let refused = scraped
        .lines()
        .find(|line| line.starts_with("memmachine_embedding_refused_total{"))
        .unwrap_or_else(|| panic!("no refusals counted in {scraped}"));
    assert!(refused.ends_with(" 1"), "{refused}");

    // Later episodes are embedded as usual.
    add(&channel, "notes", &["delta note"]).await;
    assert_eq!(wait_for(&server, "notes", (4, 0)).await, (4, 0));

    // The refused episode is still stored and found by its words.
    let found = MemoryServiceClient::new(channel.clone())
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            query: "POISON".into(),
            top_k: Some(5),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let text = format!("{found:?}");
    assert!(text.contains("POISON far too long"), "{text}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_hanging_embedder_holds_up_only_its_own_projects() {
    let (server, requests, _) = server(Script::HangAfterStartUp).await;
    let channel = server.channel().await;
    create(&channel, "remote", "").await;
    create(&channel, "local", "hash").await;
    // The remote project's episodes are queued first, and its endpoint never answers.
    add(&channel, "remote", &["one", "two"]).await;
    // The remote worker is stuck on them.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while requests.load(Ordering::SeqCst) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the remote endpoint was not asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    add(&channel, "local", &["three", "four"]).await;
    assert_eq!(wait_for(&server, "local", (2, 0)).await, (2, 0));
    assert_eq!(vectors_and_queue(&server, "remote"), (0, 2));
    server.stop().await.unwrap();
}

/// Workers belong to the server that queues their episodes: once it is gone, they stop
/// and let go of the store.
#[tokio::test]
async fn workers_stop_when_their_queue_is_dropped() {
    use memmachine_domain::embed::registry::Embedders;
    use memmachine_domain::episodic::embedding::{EmbeddingQueue, spawn_workers};
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn memmachine::store::Store> =
        Arc::new(memmachine::store::sqlite::SqliteStore::open(dir.path()).unwrap());
    let embedders = Embedders::new(None, None);
    let queue = EmbeddingQueue::default();
    let metrics = Arc::new(memmachine_domain::metrics::Metrics::new());
    spawn_workers(
        store.clone(),
        &embedders,
        &queue,
        metrics,
        Duration::from_secs(120),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        Arc::strong_count(&store),
        2,
        "the hash worker holds the store"
    );
    drop(queue);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&store) > 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(Arc::strong_count(&store), 1, "the worker let go");
}
