//! Semantic memory against a real language model: llama-cpp-python's OpenAI-compatible
//! server (built from PyPI by `scripts/setup-test-tools.sh` into `.tools/llama-venv`)
//! running SmolLM2-135M-Instruct (`.tools/models/`), the smallest real chat model at
//! hand. The server learns that this endpoint refuses `json_schema` (with a `500`) and
//! asks for `json_object` with a schema, which llama.cpp turns into a grammar.
//!
//! The model's wording is its own, so the assertions are about properties and facts:
//! features appear in the speaker's profile, each cites messages of that speaker in this
//! project, one states a fact Alice gave citing the message that gave it, a summary is
//! written, and saying the same things again stores none of them twice.
//!
//! sqlite-only: runs alone, last, in scripts/test.sh.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::child::Supervised;
use crate::common::{self, InProcess};
use crate::external_clients::tool;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType};
use tonic::transport::Channel;

const MODEL: &str = ".tools/models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// How long one round of extraction (or the summary) may take: ten times the slowest
/// whole test (llama's start included) of five runs beside a full `scripts/test.sh` on
/// two cores, 17.5 s (AMD EPYC, AVX-512 but the AVX2 build; BENCHMARKS.md).
const INGEST_BOUND: Duration = Duration::from_secs(180);

/// A llama-cpp-python server on a free loopback port, killed when dropped.
struct LlamaServer {
    child: Supervised,
    url: String,
}

impl LlamaServer {
    async fn start() -> LlamaServer {
        let python = tool(
            "MEMMACHINE_TEST_LLAMA_PYTHON",
            ".tools/llama-venv/bin/python",
        );
        let model = tool("MEMMACHINE_TEST_CHAT_MODEL", MODEL);
        let port = common::free_port().port();
        let child = Supervised::spawn(
            "llama-cpp-python's server",
            Command::new(python)
                .args(["-m", "llama_cpp.server", "--host", "127.0.0.1"])
                .args(["--port", &port.to_string(), "--n_ctx", "4096"])
                .arg("--model")
                .arg(model)
                .stdin(Stdio::null())
                .stdout(Stdio::null()),
            Some("MEMMACHINE_TEST_LLAMA_LOG"),
        );
        let mut server = LlamaServer {
            child,
            url: format!("http://127.0.0.1:{port}/v1"),
        };
        let started = Instant::now();
        let http = reqwest::Client::new();
        loop {
            let models = http.get(format!("{}/models", server.url)).send().await;
            if models.is_ok_and(|r| r.status().is_success()) {
                return server;
            }
            server.child.assert_running();
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "llama-cpp-python's server did not answer within 120 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn said(content: &str, producer: &str, role: &str) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content: content.into(),
        producer: producer.into(),
        role: role.into(),
        ..Default::default()
    }
}

/// A short conversation: what Alice says about herself, and an assistant's replies.
fn conversation() -> Vec<pb::MemoryMessage> {
    vec![
        said(
            "Hi! I'm Alice, I work as a nurse at the city hospital.",
            "alice",
            "user",
        ),
        said(
            "Nice to meet you, Alice. How can I help?",
            "assistant",
            "assistant",
        ),
        said("I have a golden retriever named Max.", "alice", "user"),
        said("Max sounds lovely.", "assistant", "assistant"),
        said(
            "I live in Denver and I love hiking in the mountains.",
            "alice",
            "user",
        ),
        said("I'm allergic to peanuts.", "alice", "user"),
    ]
}

async fn add(
    memory: &mut MemoryServiceClient<Channel>,
    messages: Vec<pb::MemoryMessage>,
) -> Vec<String> {
    memory
        .add_memories(pb::AddMemoriesRequest {
            org_id: "acme".into(),
            project_id: "chat".into(),
            types: vec![MemoryType::Episodic as i32, MemoryType::Semantic as i32],
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

async fn features(memory: &mut MemoryServiceClient<Channel>) -> Vec<pb::SemanticFeature> {
    memory
        .list_memories(pb::ListMemoriesRequest {
            org_id: "acme".into(),
            project_id: "chat".into(),
            r#type: MemoryType::Semantic as i32,
            page_size: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .features
}

/// The server's metrics text.
async fn metrics(at: std::net::SocketAddr) -> String {
    reqwest::get(format!("http://{at}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits until `messages` more messages were ingested or given up on than `before`;
/// fails at once if the model's server dies.
async fn wait_ingested(
    llama: &mut LlamaServer,
    at: std::net::SocketAddr,
    before: f64,
    messages: usize,
) -> String {
    let done = |text: &str| {
        sample(
            text,
            "memmachine_semantic_events_total{event=\"messages_ingested\"}",
        ) + sample(
            text,
            "memmachine_semantic_events_total{event=\"messages_failed\"}",
        )
    };
    let started = Instant::now();
    loop {
        let text = metrics(at).await;
        if done(&text) >= before + messages as f64 {
            eprintln!("{messages} messages ingested in {:?}", started.elapsed());
            return text;
        }
        llama.child.assert_running();
        assert!(
            started.elapsed() < INGEST_BOUND,
            "semantic ingestion did not finish within {INGEST_BOUND:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Lower-case letters and digits only: how "the same value" is told.
fn normalised(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

// Its pace is the model's: it runs alone, after the rest of the suite (scripts/test.sh).
#[ignore = "runs alone, after the others: cargo test --test it -- --ignored real_model::"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_model_builds_a_cited_profile_and_a_summary_without_duplicates() {
    let mut llama = LlamaServer::start().await;
    let metrics_at = common::free_port();
    let url = llama.url.clone();
    let server = InProcess::start_with(move |config| {
        config.llm.base_url = Some(memmachine_core::urls::SecretUrl::new(url));
        config.llm.model = Some("smollm2".into());
        config.llm.max_calls_per_minute = None;
        config.llm.timeout = Duration::from_secs(120);
        config.metrics_listen = Some(metrics_at);
        // Extraction starts once four messages wait; each is a call of its own (the
        // default --semantic-batch-messages).
        config.ingest.trigger_messages = 4;
        config.ingest.trigger_age = Duration::from_millis(500);
        config.limits.short_term_window = 3;
    })
    .await;
    let channel = server.channel().await;
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: "acme".into(),
            project_id: "chat".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut memory = MemoryServiceClient::new(channel);

    let sent = conversation();
    let uids = add(&mut memory, sent.clone()).await;
    let alice: HashSet<&String> = uids
        .iter()
        .zip(&sent)
        .filter(|(_, m)| m.producer == "alice")
        .map(|(uid, _)| uid)
        .collect();
    let text = wait_ingested(&mut llama, metrics_at, 0.0, alice.len()).await;
    assert_eq!(
        sample(
            &text,
            "memmachine_semantic_events_total{event=\"messages_failed\"}"
        ),
        0.0,
        "the model's answers were usable:\n{text}"
    );
    let first = features(&mut memory).await;
    // What the model made of it, for whoever reads a failure.
    for f in &first {
        eprintln!("feature [{}] {} = {}", f.tag, f.feature_name, f.value);
    }
    assert!(!first.is_empty(), "the model extracted no feature:\n{text}");
    for feature in &first {
        assert!(!feature.feature_name.trim().is_empty(), "{feature:?}");
        assert!(!feature.value.trim().is_empty(), "{feature:?}");
        assert!(!feature.citations.is_empty(), "uncited: {feature:?}");
        // Cited from what Alice said, in this project; the assistant's lines are only
        // context.
        for cited in &feature.citations {
            assert!(alice.contains(cited), "{cited} is not Alice's: {feature:?}");
        }
        assert!(
            feature.set_id.starts_with("mem_user_set_"),
            "not in a user's profile: {feature:?}"
        );
    }
    // Facts, not just well-formed features: one of what Alice said is in a feature that
    // cites the message saying it (a small model finds some, not all).
    let facts = [
        ("nurse", 0),
        ("max", 2),
        ("denver", 4),
        ("hiking", 4),
        ("peanut", 5),
    ];
    let found: Vec<&str> = facts
        .iter()
        .filter(|(word, at)| {
            first
                .iter()
                .any(|f| f.value.to_lowercase().contains(word) && f.citations.contains(&uids[*at]))
        })
        .map(|(word, _)| *word)
        .collect();
    assert!(
        !found.is_empty(),
        "no feature states a fact of Alice's with its message: {first:#?}"
    );
    eprintln!("facts found: {found:?}");
    // The endpoint's format was learnt from its refusal, not retried as an outage.
    assert!(
        text.contains("memmachine_llm_calls_total{purpose=\"extraction\",outcome=\"ok\"}"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "memmachine_semantic_events_total{event=\"batch_retried\"}"
        ),
        0.0,
        "{text}"
    );

    // A summary of what left the short-term window.
    let started = Instant::now();
    let summary = loop {
        let found = memory
            .search_memories(pb::SearchMemoriesRequest {
                org_id: "acme".into(),
                project_id: "chat".into(),
                query: "Alice".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .episodic_memory
            .unwrap()
            .episode_summary;
        if !found.is_empty() && found.iter().any(|s| !s.trim().is_empty()) {
            break found;
        }
        llama.child.assert_running();
        assert!(started.elapsed() < INGEST_BOUND, "no summary was written");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        summary.iter().all(|s| !s.contains("<think>")),
        "{summary:?}"
    );

    // The same facts said again: nothing is stored twice.
    let before = sample(
        &metrics(metrics_at).await,
        "memmachine_semantic_events_total{event=\"messages_ingested\"}",
    );
    let again: Vec<pb::MemoryMessage> =
        sent.into_iter().filter(|m| m.producer == "alice").collect();
    let repeated = again.len();
    add(&mut memory, again).await;
    wait_ingested(&mut llama, metrics_at, before, repeated).await;
    let second = features(&mut memory).await;
    // Each fact (tag, name and value, as the server matches them) is stored once.
    let mut facts = HashSet::new();
    for feature in &second {
        let fact = (
            feature.set_id.clone(),
            feature.tag.clone(),
            normalised(&feature.feature_name),
            normalised(&feature.value),
        );
        assert!(
            facts.insert(fact),
            "stored twice: {feature:?} in {second:#?}"
        );
    }
    drop(llama);
}
