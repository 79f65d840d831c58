//! Store round trips per search (`memmachine_store_round_trips`): a search on a warm
//! project reads the store once, whatever its ranking, filter or window; a change made
//! since is still seen. Runs on PostgreSQL too (`MEMMACHINE_TEST_BACKEND=postgres`).

use std::time::Duration;

use crate::common::{InProcess, free_port};
use memmachine::config::EmbedderKind;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

/// The value of the sample whose line starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

struct Scrape {
    url: String,
}

impl Scrape {
    async fn text(&self) -> String {
        reqwest::get(&self.url).await.unwrap().text().await.unwrap()
    }

    /// Searches recorded, and their round trips summed.
    async fn searches(&self) -> (f64, f64) {
        let text = self.text().await;
        let of = |suffix: &str| {
            sample(
                &text,
                &format!("memmachine_store_round_trips_{suffix}{{operation=\"search\"}}"),
            )
            .unwrap_or(0.0)
        };
        (of("count"), of("sum"))
    }

    /// Waits until every episode has its vector.
    async fn embedded(&self) {
        for _ in 0..200 {
            if sample(&self.text().await, "memmachine_embedding_queue_depth") == Some(0.0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the embedding queue never drained");
    }
}

async fn create(channel: &Channel, project: &str, reranker: &str) {
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: "o".into(),
            project_id: project.into(),
            description: String::new(),
            config: Some(pb::ProjectConfig {
                embedder: String::new(),
                reranker: reranker.into(),
            }),
        })
        .await
        .unwrap();
}

async fn add(channel: &Channel, project: &str, texts: &[&str]) {
    let messages = texts
        .iter()
        .enumerate()
        .map(|(i, text)| pb::MemoryMessage {
            content: (*text).into(),
            producer: if i % 2 == 0 { "ann" } else { "bob" }.into(),
            ..Default::default()
        })
        .collect();
    MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: "o".into(),
            project_id: project.into(),
            messages,
            types: vec![pb::MemoryType::Episodic as i32],
        })
        .await
        .unwrap();
}

async fn search(
    channel: &Channel,
    project: &str,
    query: &str,
    filter: &str,
    expand_context: i32,
) -> pb::EpisodicSearchResult {
    MemoryServiceClient::new(channel.clone())
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "o".into(),
            project_id: project.into(),
            query: query.into(),
            top_k: Some(3),
            filter: filter.into(),
            expand_context,
            types: vec![pb::MemoryType::Episodic as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodic_memory
        .unwrap()
}

const TURNS: &[&str] = &[
    "I adopted a dog named Rex last spring",
    "what breed is Rex",
    "a beagle, he loves the park",
    "we ran the Boston marathon together",
    "my sister lives in Lisbon",
    "the launch code is 0000",
];

/// Round trips of one more search like `search(..)`, after a first one warmed it.
async fn warm_trips(
    scrape: &Scrape,
    channel: &Channel,
    project: &str,
    filter: &str,
    expand: i32,
) -> f64 {
    search(channel, project, "Rex the dog", filter, expand).await;
    let (count, sum) = scrape.searches().await;
    let found = search(channel, project, "Rex the dog", filter, expand).await;
    assert!(!found.long_term_memory.is_empty(), "{project} {filter:?}");
    let (count_after, sum_after) = scrape.searches().await;
    assert_eq!(count_after, count + 1.0, "one search recorded");
    sum_after - sum
}

#[tokio::test]
async fn a_search_on_a_warm_project_reads_the_store_once() {
    let metrics_addr = free_port();
    let server = InProcess::start_with(|config| {
        config.metrics_listen = Some(metrics_addr);
        config.embedder.kind = Some(EmbedderKind::Hash);
    })
    .await;
    let scrape = Scrape {
        url: format!("http://{metrics_addr}/metrics"),
    };
    let channel = server.channel().await;
    for ranking in ["lexical", "hybrid", "dense"] {
        create(&channel, ranking, ranking).await;
        add(&channel, ranking, TURNS).await;
    }
    scrape.embedded().await;
    for ranking in ["lexical", "hybrid", "dense"] {
        let plain = warm_trips(&scrape, &channel, ranking, "", 0).await;
        assert_eq!(plain, 1.0, "{ranking}");
        // A filter narrows the recent window through the index: still one read.
        let filtered = warm_trips(&scrape, &channel, ranking, "producer_id = 'ann'", 0).await;
        assert_eq!(filtered, 1.0, "{ranking} filtered");
        // Neighbours are read once the hits are known: one read more.
        let expanded = warm_trips(&scrape, &channel, ranking, "", 2).await;
        assert!(expanded <= 2.0, "{ranking} expanded: {expanded}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_warm_search_sees_what_was_written_since() {
    let server = InProcess::start().await;
    let channel = server.channel().await;
    create(&channel, "p", "lexical").await;
    add(&channel, "p", TURNS).await;
    let porto = |found: &pb::EpisodicSearchResult| {
        found.long_term_memory.iter().any(|hit| {
            hit.episode
                .as_ref()
                .is_some_and(|e| e.content.contains("Porto"))
        })
    };
    let first = search(&channel, "p", "Lisbon sister Porto", "", 0).await;
    assert!(!first.long_term_memory.is_empty() && !porto(&first));
    add(&channel, "p", &["my sister moved from Lisbon to Porto"]).await;
    let second = search(&channel, "p", "Lisbon sister Porto", "", 0).await;
    assert!(porto(&second), "the new turn is ranked: {second:?}");
    assert!(
        second
            .short_term_memory
            .iter()
            .any(|e| e.content.contains("Porto")),
        "the recent window holds the new turn"
    );
    // A changed configuration is seen too: the project's row is checked by the read.
    ProjectServiceClient::new(channel.clone())
        .update_episodic_memory_config(pb::UpdateEpisodicMemoryConfigRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            long_term_memory_enabled: Some(false),
            ..Default::default()
        })
        .await
        .unwrap();
    let off = search(&channel, "p", "Lisbon sister Porto", "", 0).await;
    assert!(off.long_term_memory.is_empty(), "{off:?}");
    server.stop().await.unwrap();
}
