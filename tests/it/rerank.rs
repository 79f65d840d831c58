//! Rerankers chosen per project (`config.reranker`): the in-process cross-encoder (a
//! BERT sequence-classification model with random weights, built and saved by the test)
//! in the real server binary, and a remote `POST /rerank` endpoint scripted by the test,
//! with its failures (errors, a hang, garbage) answered in the fused order and counted,
//! and its transient errors retried.

use std::time::{Duration, Instant};

use crate::common::rerank::{KEYWORD, keyword_score, scripted_rerank};
use crate::common::{InProcess, ServerProcess, free_port};
use memmachine_domain::rerank::cross_encoder::CrossEncoder;
use memmachine_domain::rerank::random_model::{self, Shape};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

struct Clients {
    projects: ProjectServiceClient<Channel>,
    memory: MemoryServiceClient<Channel>,
}

async fn clients(url: &str) -> Clients {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .expect("connect");
    Clients {
        projects: ProjectServiceClient::new(channel.clone()),
        memory: MemoryServiceClient::new(channel),
    }
}

impl Clients {
    async fn create(&mut self, project: &str, reranker: &str) -> Result<(), tonic::Status> {
        self.projects
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
            .map(drop)
    }

    async fn add(&mut self, project: &str, messages: &[(&str, &str)]) {
        let messages = messages
            .iter()
            .map(|(producer, content)| pb::MemoryMessage {
                content: content.to_string(),
                producer: producer.to_string(),
                ..Default::default()
            })
            .collect();
        self.memory
            .add_memories(pb::AddMemoriesRequest {
                org_id: "o".into(),
                project_id: project.into(),
                types: vec![pb::MemoryType::Episodic as i32],
                messages,
            })
            .await
            .expect("add");
    }

    /// The long-term hits: (`producer: content`, score), best first.
    async fn search(&mut self, project: &str, query: &str, top_k: i32) -> Vec<(String, f64)> {
        self.memory
            .search_memories(pb::SearchMemoriesRequest {
                org_id: "o".into(),
                project_id: project.into(),
                query: query.into(),
                top_k: Some(top_k),
                types: vec![pb::MemoryType::Episodic as i32],
                ..Default::default()
            })
            .await
            .expect("search")
            .into_inner()
            .episodic_memory
            .unwrap()
            .long_term_memory
            .into_iter()
            .map(|hit| {
                let e = hit.episode.unwrap();
                (format!("{}: {}", e.producer_id, e.content), hit.score)
            })
            .collect()
    }
}

fn texts(hits: &[(String, f64)]) -> Vec<&str> {
    hits.iter().map(|(t, _)| t.as_str()).collect()
}

/// `candidates` (fused order) stably sorted by `score`, cut to `top_k`.
fn reranked(candidates: &[(String, f64)], scores: &[f32], top_k: usize) -> Vec<(String, f64)> {
    let mut ranked: Vec<(String, f64)> = candidates
        .iter()
        .zip(scores)
        .map(|((t, _), s)| (t.clone(), f64::from(*s)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked.truncate(top_k);
    ranked
}

const DOG_MESSAGES: [(&str, &str); 10] = [
    ("Caroline", "my dog loves the dog park and every dog there"),
    ("Melanie", "we walked the dog to the lake"),
    ("Caroline", "the golden retriever puppy is a good dog"),
    (
        "Melanie",
        "the kids went hiking in the mountain with the dog",
    ),
    ("Caroline", "dog"),
    ("Melanie", "I read a book about a dog who went to school"),
    (
        "Caroline",
        "coffee in the morning then a walk with my dog on the beach",
    ),
    ("Melanie", "pottery class, then dinner, then the dog walk"),
    ("Caroline", "revenue grew strongly this quarter"),
    ("Melanie", "the dog dog dog dog"),
];

#[tokio::test]
async fn the_cross_encoder_orders_hits_by_its_scores() {
    let model = tempfile::tempdir().unwrap();
    random_model::write(model.path(), Shape::tiny(), 11).unwrap();
    let data = tempfile::tempdir().unwrap();
    let dir = model.path().to_str().unwrap();
    let server = ServerProcess::start(
        data.path(),
        &["--reranker-model-dir", dir, "--embedder", "none"],
    );
    let mut c = clients(&server.url()).await;
    c.create("plain", "").await.unwrap();
    c.create("ranked", "cross-encoder").await.unwrap();
    for project in ["plain", "ranked"] {
        c.add(project, &DOG_MESSAGES).await;
    }
    let query = "where did they walk the dog?";
    // The candidates: the fused (here lexical) ranking, as the unreranked project ranks.
    let candidates = c.search("plain", query, 50).await;
    assert!(candidates.len() >= 8, "{candidates:?}");
    let documents: Vec<String> = candidates.iter().map(|(t, _)| t.clone()).collect();
    let scores = CrossEncoder::load(model.path())
        .unwrap()
        .score_blocking(query, &documents)
        .unwrap();
    let expected = reranked(&candidates, &scores, 4);

    let hits = c.search("ranked", query, 4).await;
    assert_eq!(texts(&hits), texts(&expected), "scores {scores:?}");
    for ((text, got), (_, want)) in hits.iter().zip(&expected) {
        assert!(
            (got - want).abs() < 1e-4,
            "{text}: score {got}, model says {want}"
        );
    }
    // Not the fused order: reranking changed what the top 4 are, or their order.
    let fused = c.search("plain", query, 4).await;
    assert_ne!(texts(&hits), texts(&fused));
    drop(server);
}

#[tokio::test]
async fn a_reranker_the_server_does_not_offer_is_invalid() {
    let server = InProcess::start().await;
    let mut c = clients(&server.url).await;
    let err = c.create("p", "cross-encoder").await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let message = err.message();
    assert!(message.contains("config.reranker"), "{message}");
    assert!(message.contains("lexical, dense, hybrid"), "{message}");
    assert!(message.contains("--reranker-model-dir"), "{message}");
    c.create("p", "hybrid").await.unwrap();
    server.stop().await.unwrap();
}

/// `producer: content` of the zebra project's episodes: BM25 ranks them by "garden",
/// the endpoint by "zebra".
const ZEBRA_MESSAGES: [(&str, &str); 6] = [
    ("user", "garden garden garden tips for spring"),
    ("user", "a zebra zebra zebra walked into the garden"),
    ("user", "the garden has one zebra"),
    ("user", "zebra zebra in a garden"),
    ("user", "garden of roses"),
    ("user", "garden party with a zebra cake"),
];

/// The value of the sample whose line starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test]
async fn a_remote_reranker_reorders_retries_and_falls_back() {
    let (url, requests) = scripted_rerank().await;
    let metrics_addr = free_port();
    let rest_addr = free_port();
    let server = InProcess::start_with(|config| {
        config.metrics_listen = Some(metrics_addr);
        config.rest_listen = Some(rest_addr);
        config.reranker.base_url = Some(memmachine_core::urls::SecretUrl::new(url.clone()));
        config.reranker.model = Some("test-reranker".into());
        // The whole budget of a rerank, retries included: room for three attempts and
        // their backoff on a busy machine, and what a hanging reranker costs a search.
        config.reranker.timeout = Duration::from_secs(3);
    })
    .await;
    let mut c = clients(&server.url).await;
    c.create("plain", "").await.unwrap();
    c.create("ranked", "remote").await.unwrap();
    for project in ["plain", "ranked"] {
        c.add(project, &ZEBRA_MESSAGES).await;
    }
    let by_keyword = |candidates: &[(String, f64)], top_k| {
        let scores: Vec<f32> = candidates.iter().map(|(t, _)| keyword_score(t)).collect();
        reranked(candidates, &scores, top_k)
    };

    // Reranked by the endpoint's scores, in either answer shape.
    for query in ["garden", "garden tei"] {
        let candidates = c.search("plain", query, 50).await;
        let hits = c.search("ranked", query, 3).await;
        assert_eq!(hits, by_keyword(&candidates, 3), "{query}");
        assert_eq!(
            texts(&hits)[0],
            "user: a zebra zebra zebra walked into the garden"
        );
        assert_ne!(
            texts(&hits),
            texts(&candidates[..3]),
            "the fused order differs"
        );
    }
    {
        let requests = requests.lock().unwrap();
        let first = &requests[0];
        assert_eq!(first["query"], "garden");
        assert_eq!(first["model"], "test-reranker");
        let documents: Vec<&str> = first["documents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        assert_eq!(
            documents.len(),
            ZEBRA_MESSAGES.len(),
            "every candidate is sent"
        );
        assert!(
            documents.contains(&"user: the garden has one zebra"),
            "{documents:?}"
        );
        assert_eq!(first["top_n"], ZEBRA_MESSAGES.len());
    }
    let count = |query: &str| {
        let requests = requests.lock().unwrap();
        requests.iter().filter(|r| r["query"] == query).count()
    };

    // Failures: the search succeeds, in the fused order, cut to top_k.
    for (query, attempts) in [
        ("garden fail500", 3),
        ("garden garbage", 1),
        ("garden hang", 1),
    ] {
        let started = Instant::now();
        let fused = c.search("plain", query, 3).await;
        let hits = c.search("ranked", query, 3).await;
        assert_eq!(hits, fused, "{query}");
        // (A hang may see a retry start as the time runs out.)
        let sent = count(query);
        assert!(
            sent == attempts || (query.ends_with("hang") && sent <= 2),
            "{query}: {sent} requests sent"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{query}");
    }
    // One 429 or 500, then an answer: retried, reranked.
    for query in ["garden flaky429", "garden flaky500"] {
        let candidates = c.search("plain", query, 50).await;
        let hits = c.search("ranked", query, 3).await;
        assert_eq!(hits, by_keyword(&candidates, 3), "{query}");
        assert_eq!(count(query), 2, "{query}");
    }

    let text = reqwest::get(format!("http://{metrics_addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        sample(
            &text,
            "memmachine_rerank_failures_total{reranker=\"remote\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "memmachine_rerank_duration_seconds_count{reranker=\"remote\"}"
        ),
        Some(4.0),
        "{text}"
    );

    // The configuration API lists it with the ranking modes.
    let resources: serde_json::Value =
        reqwest::get(format!("http://{rest_addr}/api/v2/config/resources"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let names: Vec<&str> = resources["rerankers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["lexical", "dense", "hybrid", "remote"],
        "{resources}"
    );
    assert_eq!(
        resources["rerankers"][3]["provider"],
        "remote:test-reranker"
    );
    assert!(KEYWORD == "zebra");
    server.stop().await.unwrap();
}

/// Latency of one rerank of 20 and of 50 chat turns (8 to 30 words) with a model of
/// ms-marco-MiniLM-L-6-v2's size (random weights: the cost is the same).
#[test]
#[ignore = "measures only: cargo test --test it -- --ignored rerank::cross_encoder_latency --nocapture"]
fn cross_encoder_latency() {
    let model = tempfile::tempdir().unwrap();
    random_model::write(model.path(), Shape::minilm_l6(), 1).unwrap();
    let encoder = CrossEncoder::load(model.path()).unwrap();
    let words: Vec<&str> = "I went hiking with my friends last weekend and we saw a lake at \
         the mountain then talked about my new job painting class and adopted a dog"
        .split_whitespace()
        .collect();
    let turns: Vec<String> = (0..50)
        .map(|i| {
            let n = 8 + (i * 7) % 23;
            let turn: Vec<&str> = (0..n).map(|j| words[(i + j * 3) % words.len()]).collect();
            format!("Caroline: {}", turn.join(" "))
        })
        .collect();
    let query = "What did Caroline do last weekend?";
    encoder.score_blocking(query, &turns).unwrap(); // warm up
    for candidates in [20, 50] {
        let documents = &turns[..candidates];
        let mut times: Vec<Duration> = (0..30)
            .map(|_| {
                let started = Instant::now();
                encoder.score_blocking(query, documents).unwrap();
                started.elapsed()
            })
            .collect();
        times.sort();
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        println!(
            "rerank of {candidates} candidates, MiniLM-L6 size, {} threads: p50 {:?}, p99 {:?}",
            std::thread::available_parallelism().map_or(1, |n| n.get()),
            at(0.5),
            at(0.99),
        );
    }
}
