//! Two `memmachine serve` processes over one store, as replicas behind a load balancer
//! run: what one acknowledges the other serves at once (each keeps its in-memory indexes
//! current from the store's change feed), keys are shared, and queued embeddings are
//! claimed, so they are done once between them and a replica killed mid-batch leaves
//! its batch to the other. Run on SQLite (two processes on one file) and on PostgreSQL
//! (a database of the test server).
//!
//! sqlite-only: chooses its stores itself (both backends).

use std::collections::HashMap;
use std::time::Duration;

use crate::common;
use crate::common::ServerProcess;
use crate::common::calls;
use crate::common::embeddings::{Script, recording_embeddings};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::Code;
use tonic::transport::Channel;

/// A store two replicas share: the arguments that point a server at it.
struct Shared {
    dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Shared {
    /// Two processes on one SQLite file.
    async fn sqlite() -> Option<Shared> {
        Some(Shared {
            dir: tempfile::tempdir().unwrap(),
            args: Vec::new(),
        })
    }

    /// A new database on the test PostgreSQL server (skipped without one).
    async fn postgres() -> Option<Shared> {
        let url = common::postgres::fresh_database().await?;
        Some(Shared {
            dir: tempfile::tempdir().unwrap(),
            args: vec!["--store".into(), url],
        })
    }

    fn start(&self, extra: &[&str]) -> ServerProcess {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        ServerProcess::start(self.dir.path(), &args)
    }

    fn location(&self) -> memmachine::store::StoreLocation {
        let store = self.args.iter().skip_while(|a| *a != "--store").nth(1);
        memmachine::store::StoreLocation::parse(
            Some(self.dir.path().to_path_buf()),
            store.map(String::as_str),
        )
        .unwrap()
    }
}

async fn connect(server: &ServerProcess) -> Channel {
    Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn add(channel: &Channel, contents: &[String]) -> Vec<String> {
    let messages = contents
        .iter()
        .map(|content| pb::MemoryMessage {
            content: content.clone(),
            producer: "ada".into(),
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
        .unwrap()
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.uid)
        .collect()
}

async fn listed(channel: &Channel) -> Vec<String> {
    MemoryServiceClient::new(channel.clone())
        .list_memories(pb::ListMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            page_size: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodes
        .into_iter()
        .map(|e| e.content)
        .collect()
}

async fn found(channel: &Channel, query: &str) -> Result<Vec<String>, tonic::Status> {
    let response = MemoryServiceClient::new(channel.clone())
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            query: query.into(),
            top_k: Some(50),
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(response
        .episodic_memory
        .map(|e| {
            e.long_term_memory
                .into_iter()
                .filter_map(|m| m.episode)
                .map(|e| e.content)
                .collect()
        })
        .unwrap_or_default())
}

async fn writes_through_one_are_served_by_the_other(shared: Shared) {
    let (a, b) = (shared.start(&[]), shared.start(&[]));
    let (a, b) = (connect(&a).await, connect(&b).await);
    calls::create_project(&a, None, "acme", "notes")
        .await
        .unwrap();
    assert!(calls::get_project(&b, None, "acme", "notes").await.is_ok());
    // B's index of the project is loaded (and empty) before A writes: B catches up.
    assert!(found(&b, "anything").await.unwrap().is_empty());
    let uids = add(&a, &["the launch code is 0000".into()]).await;
    assert_eq!(
        found(&b, "launch code").await.unwrap(),
        ["the launch code is 0000"]
    );
    assert_eq!(calls::count(&b, None, "acme").await.unwrap(), 1);
    assert_eq!(listed(&b).await, ["the launch code is 0000"]);
    // Many writes through A, each seen by the next read on B.
    for i in 0..20 {
        let message = format!("zebra sighting number{i}");
        add(&a, std::slice::from_ref(&message)).await;
        let hits = found(&b, &format!("number{i}")).await.unwrap();
        assert!(hits.contains(&message), "B sees A's write {i}: {hits:?}");
    }
    // A delete through B is gone on A.
    MemoryServiceClient::new(b.clone())
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            episode_ids: uids,
        })
        .await
        .unwrap();
    assert!(found(&a, "launch code").await.unwrap().is_empty());
    assert_eq!(calls::count(&a, None, "acme").await.unwrap(), 20);
    // A project deleted through A is gone on B, and one made again under the same name
    // starts empty there (B's cached index of the old one is not reused).
    ProjectServiceClient::new(a.clone())
        .delete_project(pb::DeleteProjectRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
        })
        .await
        .unwrap();
    let gone = calls::get_project(&b, None, "acme", "notes")
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    assert_eq!(found(&b, "zebra").await.unwrap_err().code(), Code::NotFound);
    calls::create_project(&a, None, "acme", "notes")
        .await
        .unwrap();
    assert!(found(&b, "zebra").await.unwrap().is_empty());
}

async fn keys_are_shared_and_revocation_is_seen_at_once(shared: Shared) {
    let (a, b) = (shared.start(&["--auth"]), shared.start(&["--auth"]));
    let (a, b) = (connect(&a).await, connect(&b).await);
    let issued = memmachine::auth::manage::create(
        &shared.location(),
        memmachine_core::model::KeyScope::Org("acme".into()),
        "replicas",
    )
    .await
    .unwrap();
    let key = Some(issued.token.as_str());
    calls::create_project(&a, key, "acme", "notes")
        .await
        .unwrap();
    calls::add(&b, key, "acme").await.unwrap();
    assert_eq!(calls::search(&a, key, "acme").await.unwrap(), 1);
    assert!(
        memmachine::auth::manage::revoke(&shared.location(), &issued.record.id)
            .await
            .unwrap()
    );
    for channel in [&a, &b] {
        let refused = calls::count(channel, key, "acme").await.unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated);
    }
}

/// A runtime setting changed through one replica's `/api/v2/config` is applied by the
/// other within its reload period (`runtime_settings::RELOAD_EVERY`, a second).
async fn settings_changed_through_one_are_applied_by_the_other(shared: Shared) {
    let rest = ["--rest-listen", "127.0.0.1:0"];
    let (a, b) = (shared.start(&rest), shared.start(&rest));
    let http = reqwest::Client::new();
    let short_term = |server: &ServerProcess| {
        format!(
            "{}/api/v2/config/memory/episodic/short_term",
            server.rest_url()
        )
    };
    let put = http
        .put(short_term(&a))
        .json(&serde_json::json!({"message_capacity": 18}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200, "{}", put.text().await.unwrap());
    let started = std::time::Instant::now();
    loop {
        let shown: serde_json::Value = http
            .get(short_term(&b))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if shown["message_capacity"] == 18 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the other replica still shows {shown}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And it applies it: three recent episodes (18 characters), though the flag's window
    // is 20.
    let b = connect(&b).await;
    calls::create_project(&b, None, "acme", "notes")
        .await
        .unwrap();
    let contents: Vec<String> = (0..5).map(|i| format!("note {i}")).collect();
    add(&b, &contents).await;
    let found = MemoryServiceClient::new(b)
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            query: "note".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let short = found.episodic_memory.unwrap().short_term_memory;
    assert_eq!(short.len(), 3, "{short:?}");
}

/// How many times each of these texts was embedded (as "producer: content").
fn embedded(texts: &common::embeddings::Texts, markers: &[String]) -> HashMap<String, usize> {
    let texts = texts.lock().unwrap();
    markers
        .iter()
        .map(|m| {
            let wanted = format!("ada: {m}");
            (m.clone(), texts.iter().filter(|t| **t == wanted).count())
        })
        .collect()
}

async fn wait_embedded(
    texts: &common::embeddings::Texts,
    markers: &[String],
    servers: &mut [&mut ServerProcess],
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while embedded(texts, markers).values().any(|n| *n == 0) {
        for server in servers.iter_mut() {
            server.child.assert_running();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every episode was embedded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn embedder_args(url: &str, lease: &str) -> Vec<String> {
    [
        "--embedder",
        "openai",
        "--embedder-base-url",
        url,
        "--embedder-model",
        "scripted",
        "--embedding-lease",
        lease,
    ]
    .map(str::to_string)
    .to_vec()
}

async fn queued_embeddings_are_done_once_between_them(shared: Shared) {
    let (url, _, texts) = recording_embeddings(Script::Slow(Duration::from_millis(50))).await;
    let args = embedder_args(&url, "30");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut a_process, mut b_process) = (shared.start(&args), shared.start(&args));
    let (a, b) = (connect(&a_process).await, connect(&b_process).await);
    calls::create_project(&a, None, "acme", "notes")
        .await
        .unwrap();
    let markers: Vec<String> = (0..400).map(|i| format!("embedded once {i}")).collect();
    // Both replicas take writes (and so wake their workers) at the same time.
    let writes = markers.chunks(20).enumerate().map(|(i, chunk)| {
        let channel = if i % 2 == 0 { a.clone() } else { b.clone() };
        let chunk = chunk.to_vec();
        async move { add(&channel, &chunk).await }
    });
    futures::future::join_all(writes).await;
    wait_embedded(&texts, &markers, &mut [&mut a_process, &mut b_process]).await;
    // Time for a second embedding, if the claims let one happen.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let twice: Vec<_> = embedded(&texts, &markers)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(twice.is_empty(), "embedded more than once: {twice:?}");
}

async fn a_replica_killed_mid_batch_leaves_its_batch_to_the_other(shared: Shared) {
    let (url, requests, texts) = recording_embeddings(Script::Slow(Duration::from_secs(1))).await;
    let args = embedder_args(&url, "2");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a_process = shared.start(&args);
    let (a, mut b_process) = (connect(&a_process).await, shared.start(&args));
    calls::create_project(&a, None, "acme", "notes")
        .await
        .unwrap();
    let markers: Vec<String> = (0..256).map(|i| format!("left behind {i}")).collect();
    let before = requests.load(std::sync::atomic::Ordering::SeqCst);
    add(&a, &markers).await;
    // A has claimed a batch and is embedding it: kill it there.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while requests.load(std::sync::atomic::Ordering::SeqCst) == before {
        assert!(tokio::time::Instant::now() < deadline, "A never embedded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a_process.kill();
    // B embeds everything, A's leased batch included once its lease has run out.
    wait_embedded(&texts, &markers, &mut [&mut b_process]).await;
}

macro_rules! replica_tests {
    ($backend:ident, $shared:expr) => {
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn writes_through_one_are_served_by_the_other() {
                let Some(shared) = $shared.await else { return };
                super::writes_through_one_are_served_by_the_other(shared).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn keys_are_shared_and_revocation_is_seen_at_once() {
                let Some(shared) = $shared.await else { return };
                super::keys_are_shared_and_revocation_is_seen_at_once(shared).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn settings_changed_through_one_are_applied_by_the_other() {
                let Some(shared) = $shared.await else { return };
                super::settings_changed_through_one_are_applied_by_the_other(shared).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn queued_embeddings_are_done_once_between_them() {
                let Some(shared) = $shared.await else { return };
                super::queued_embeddings_are_done_once_between_them(shared).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_replica_killed_mid_batch_leaves_its_batch_to_the_other() {
                let Some(shared) = $shared.await else { return };
                super::a_replica_killed_mid_batch_leaves_its_batch_to_the_other(shared).await;
            }
        }
    };
}

replica_tests!(sqlite, Shared::sqlite());
replica_tests!(postgres, Shared::postgres());
