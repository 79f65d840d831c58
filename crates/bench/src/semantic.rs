//! `memmachine-bench semantic`: measures semantic memory on the real server over gRPC on
//! loopback, with a scripted OpenAI-compatible chat model served from this process
//! (`support/chat.rs`: it answers at once, so what is measured is the server).
//!
//! It starts `memmachine serve` (the executable next to this one) with `--embedder
//! none`, the scripted model and Prometheus metrics, and measures on the LoCoMo turns:
//!
//! 1. acknowledged ingest with `types: [MEMORY_TYPE_SEMANTIC]` (and, in a second fresh
//!    server, with `[MEMORY_TYPE_EPISODIC]` for comparison);
//! 2. model calls per 100 messages, by purpose, from the scripted model's counters;
//! 3. messages distilled per second end to end: from the first add until the server's
//!    `memmachine_semantic_events_total{event="messages_ingested"}` reaches the number
//!    of messages;
//! 4. `SearchFeatures` latency over 10,000 features added by hand to a fresh project.
//!
//! See BENCHMARKS.md, "Semantic memory".
//!
//! Run: `cargo run --release -p memmachine-bench -- semantic`

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::support;
// Self-contained parts of `support`, included by path (support/mod.rs is shared with the
// other benchmarks).

use chat::{ChatCounts, Purpose, ScriptedChat};
use cpu::{CpuMeter, CpuUse, opt_secs};
use prometheus::Exposition;
use support::latencies::Latencies;
use support::locomo;
use support::metrics as prometheus;
use support::server::Server;
use support::{BoxError, Result};
use support::{chat, cpu};

const ORG: &str = "bench";
const PROJECT: &str = "locomo";
/// The project of the feature-search phase, in an org of its own (a change to any set
/// of an org moves the org's semantic version, which rebuilds its projects' indexes).
const FEATURE_ORG: &str = "bench-features";
const FEATURE_PROJECT: &str = "features";
const FEATURE_CATEGORY: &str = "facts";
/// Tags of the hand-made features, in turn.
const FEATURE_TAGS: [&str; 7] = [
    "preferences",
    "biography",
    "relationships",
    "work and skills",
    "plans",
    "health",
    "communication style",
];
/// The counter polled until the queue is drained.
const INGESTED: &str = "memmachine_semantic_events_total";
/// How long the server may take to report its listening address.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the model must stay uncalled after the drain for the counts to be final
/// (summaries run in the background).
const SETTLE: Duration = Duration::from_secs(3);
/// Seed of the generator that varies recycled turns in the hand-made features.
const SEED: u64 = 0x6d65_6d6d_6163_6869;

#[derive(Parser, Debug)]
#[command(
    about = "Benchmarks semantic memory on a real memmachine server, with a scripted chat model"
)]
pub struct Args {
    /// LoCoMo data set (a JSON list of conversations with questions)
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Messages per AddMemories call
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Concurrent AddMemories client tasks (sharing one channel)
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// --semantic-trigger-messages of the server
    #[arg(long, default_value_t = 20)]
    trigger_messages: usize,
    /// --semantic-trigger-age of the server, in seconds
    #[arg(long, default_value_t = 1.0)]
    trigger_age: f64,
    /// Longest wait, from the first add, for every message to be distilled
    #[arg(long, default_value_t = 600)]
    drain_timeout_secs: u64,
    /// How often the server's metrics are read while waiting for the drain, in ms
    #[arg(long, default_value_t = 50)]
    poll_ms: u64,
    /// Features added by hand for the search phase
    #[arg(long, default_value_t = 10_000)]
    features: usize,
    /// Concurrent AddFeature client tasks
    #[arg(long, default_value_t = 8)]
    feature_concurrency: usize,
    /// SearchFeatures calls (LoCoMo questions, cycled)
    #[arg(long, default_value_t = 2000)]
    queries: usize,
    /// Untimed SearchFeatures calls before the timed ones
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// top_k of every SearchFeatures
    #[arg(long, default_value_t = 10)]
    top_k: i32,
    /// Extra arguments for `memmachine serve`, split on whitespace (no quoting), e.g.
    /// "--consolidation-threshold 50"
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    server_args: String,
    /// Write the semantic server's /metrics, as read after the drain, to this file
    #[arg(long)]
    metrics_dump: Option<PathBuf>,
    /// Server executable [default: `memmachine` next to this executable]
    #[arg(long)]
    server: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------
// Corpus

struct Corpus {
    /// Every LoCoMo turn as a message, conversation after conversation.
    messages: Vec<pb::MemoryMessage>,
    conversations: usize,
    speakers: usize,
    questions: Vec<String>,
    /// Every word of every turn, lowercased, to vary recycled features with.
    words: Vec<String>,
}

fn load_corpus(path: &Path) -> Result<Corpus> {
    // The turn's text as it is (no captions), like memmachine-bench ingest-search.
    let format = locomo::ContentFormat {
        speaker_prefix: false,
        captions: false,
    };
    let (conversations, _) = locomo::load(path, None, format)?;
    let messages: Vec<pb::MemoryMessage> = conversations
        .iter()
        .flat_map(|c| c.add_requests(ORG, PROJECT, usize::MAX))
        .flat_map(|r| r.messages)
        .filter(|m| !m.content.trim().is_empty())
        .collect();
    let mut speakers: Vec<&str> = messages.iter().map(|m| m.producer.as_str()).collect();
    speakers.sort_unstable();
    speakers.dedup();
    let questions: Vec<String> = conversations
        .iter()
        .flat_map(|c| c.questions.iter().map(|q| q.text.clone()))
        .filter(|q| !q.trim().is_empty())
        .collect();
    let words = messages
        .iter()
        .flat_map(|m| m.content.split_whitespace())
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| w.len() > 2)
        .collect();
    if messages.is_empty() || questions.is_empty() {
        return Err(format!("no turns or no questions in {}", path.display()).into());
    }
    Ok(Corpus {
        speakers: speakers.len(),
        conversations: conversations.len(),
        messages,
        questions,
        words,
    })
}

/// The turns as AddMemories calls of `batch` messages of memory type `kind`.
fn add_requests(
    corpus: &Corpus,
    batch: usize,
    kind: pb::MemoryType,
) -> Vec<pb::AddMemoriesRequest> {
    corpus
        .messages
        .chunks(batch.max(1))
        .map(|chunk| pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            types: vec![kind as i32],
            messages: chunk.to_vec(),
        })
        .collect()
}

/// SplitMix64: small, seeded, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Hand-made feature `i`: from turn `i mod turns`, its first 3 words as the name and the
/// rest (at most 40 words) as the value; copies after the first get 3 to 6 words drawn
/// from the whole corpus appended, so the values differ.
fn feature_request(
    corpus: &Corpus,
    set_id: &str,
    i: usize,
    rng: &mut Rng,
) -> pb::AddFeatureRequest {
    let turn = &corpus.messages[i % corpus.messages.len()];
    let words: Vec<&str> = turn.content.split_whitespace().collect();
    let split = words.len().min(3);
    let feature = words[..split].join(" ");
    let mut value = words[split..words.len().min(split + 40)].join(" ");
    if value.is_empty() {
        value = feature.clone();
    }
    if i >= corpus.messages.len() {
        for _ in 0..3 + rng.below(4) {
            value.push(' ');
            value.push_str(&corpus.words[rng.below(corpus.words.len())]);
        }
    }
    pb::AddFeatureRequest {
        org_id: FEATURE_ORG.into(),
        project_id: FEATURE_PROJECT.into(),
        set_id: set_id.to_string(),
        category_name: FEATURE_CATEGORY.into(),
        tag: FEATURE_TAGS[i % FEATURE_TAGS.len()].into(),
        feature,
        value,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------
// Measurements

struct IngestResult {
    messages: usize,
    wall: Duration,
    batches: Latencies,
    cpu: CpuUse,
}

impl IngestResult {
    fn rate(&self) -> f64 {
        self.messages as f64 / self.wall.as_secs_f64()
    }
}

/// From the first add until the server reported every message distilled.
struct DrainResult {
    /// From the first add.
    wall: Duration,
    /// From the last acknowledgement.
    after_ack: Duration,
    /// `messages_ingested` when the last add was acknowledged.
    ingested_at_ack: f64,
    ingested: f64,
    failed: f64,
    /// CPU over the drain (from the last acknowledgement).
    cpu: CpuUse,
    /// The model's counts when the drain was seen, and once it fell quiet.
    at_drain: ChatCounts,
    settled: ChatCounts,
    /// The server's metrics, read once the model fell quiet.
    metrics: Exposition,
    /// Features ListMemories(SEMANTIC) pages through.
    features_listed: usize,
    /// Metric reads while waiting, and their mean time.
    polls: usize,
    poll_mean_ms: f64,
}

struct SearchResult {
    features: usize,
    add_wall: Duration,
    adds: Latencies,
    /// The first search after the adds (it builds the project's index).
    first: Duration,
    wall: Duration,
    calls: Latencies,
    mean_hits: f64,
    empty: usize,
    cpu: CpuUse,
}

struct SemanticRun {
    server_args: Vec<String>,
    ingest: IngestResult,
    drain: DrainResult,
    search: SearchResult,
}

async fn connect(server: &Server) -> Result<Channel> {
    Endpoint::from_shared(format!("http://{}", server.addr))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|err| server.error("cannot connect", err))
}

async fn create_project(channel: Channel, org: &str, project: &str, server: &Server) -> Result<()> {
    ProjectServiceClient::new(channel)
        .create_project(pb::CreateProjectRequest {
            org_id: org.into(),
            project_id: project.into(),
            description: "memmachine-bench semantic".into(),
            config: None,
        })
        .await
        .map_err(|err| server.error("CreateProject failed", err))?;
    Ok(())
}

/// The server's arguments: no embedder, the scripted model, the triggers, metrics on
/// `metrics_port`, then the caller's.
fn server_args(args: &Args, chat: &ScriptedChat, metrics_port: u16) -> Vec<String> {
    let mut list: Vec<String> = [
        "--embedder",
        "none",
        "--llm-base-url",
        &chat.base_url(),
        "--llm-model",
        "scripted",
        "--llm-max-calls-per-minute",
        "0",
        "--semantic-trigger-messages",
        &args.trigger_messages.to_string(),
        "--semantic-trigger-age",
        &args.trigger_age.to_string(),
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    list.extend(args.server_args.split_whitespace().map(str::to_string));
    list
}

/// Sends the requests from `concurrency` tasks sharing `channel`; checks that every
/// message got a uid.
async fn ingest(
    channel: Channel,
    requests: Vec<pb::AddMemoriesRequest>,
    concurrency: usize,
    server: &Server,
) -> Result<IngestResult> {
    let messages: usize = requests.iter().map(|r| r.messages.len()).sum();
    let queue = Arc::new(Mutex::new(requests.into_iter()));
    let cpu = CpuMeter::start(server.pid());
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency.max(1) {
        let queue = queue.clone();
        let mut client = MemoryServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let Some(request) = queue.lock().expect("queue lock").next() else {
                    break;
                };
                let expected = request.messages.len();
                let sent = Instant::now();
                let response = client.add_memories(request).await?.into_inner();
                latencies.push(sent.elapsed());
                if response.results.len() != expected {
                    return Err(format!(
                        "AddMemories returned {} uids for {expected} messages",
                        response.results.len()
                    )
                    .into());
                }
            }
            Ok::<_, BoxError>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        match task.await? {
            Ok(mut part) => latencies.append(&mut part),
            Err(err) => return Err(server.error("AddMemories failed", err)),
        }
    }
    let wall = started.elapsed();
    Ok(IngestResult {
        messages,
        wall,
        batches: Latencies::new(latencies),
        cpu: cpu.stop(),
    })
}

async fn episode_count(channel: Channel, server: &Server) -> Result<i64> {
    Ok(ProjectServiceClient::new(channel)
        .get_episode_count(pb::GetEpisodeCountRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
        })
        .await
        .map_err(|err| server.error("GetEpisodeCount failed", err))?
        .into_inner()
        .count)
}

/// (messages ingested, messages failed) as the server counts them.
fn distilled(metrics: &Exposition) -> (f64, f64) {
    (
        metrics.sum(INGESTED, &[("event", "messages_ingested")]),
        metrics.sum(INGESTED, &[("event", "messages_failed")]),
    )
}

/// Waits until the model has not been called for `SETTLE` (at most a minute).
async fn settle(chat: &ScriptedChat) -> ChatCounts {
    let started = Instant::now();
    let mut last = chat.counts();
    let mut quiet_since = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = chat.counts();
        if now != last {
            last = now;
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= SETTLE {
            break;
        }
    }
    last
}

/// Every feature ListMemories(SEMANTIC) returns, page after page.
async fn list_features(channel: Channel, server: &Server) -> Result<usize> {
    let mut client = MemoryServiceClient::new(channel);
    let (mut count, mut token) = (0, String::new());
    loop {
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                r#type: pb::MemoryType::Semantic as i32,
                page_size: Some(1000),
                page_token: token,
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("ListMemories failed", err))?
            .into_inner();
        count += page.features.len();
        if page.next_page_token.is_empty() {
            return Ok(count);
        }
        token = page.next_page_token;
    }
}

/// Semantic ingest, its drain and feature search, in one fresh server.
async fn run_semantic(args: &Args, corpus: &Corpus, executable: &Path) -> Result<SemanticRun> {
    let chat = ScriptedChat::start().await?;
    let metrics_port = prometheus::free_port()?;
    let server_args = server_args(args, &chat, metrics_port);
    let server = Server::start(
        executable,
        "memmachine-semantic-bench",
        None,
        &server_args,
        STARTUP_TIMEOUT,
    )?;
    let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    eprintln!(
        "== semantic: server pid {} on {}, metrics {metrics_url}, scripted model {}",
        server.pid(),
        server.addr,
        chat.base_url()
    );
    let http = reqwest::Client::new();
    // The counter appears once it has been counted: until then it reads as 0.
    prometheus::scrape(&http, &metrics_url)
        .await
        .map_err(|err| server.error("cannot read the server's metrics", err))?;
    let channel = connect(&server).await?;
    create_project(channel.clone(), ORG, PROJECT, &server).await?;

    let total = corpus.messages.len() as f64;
    let requests = add_requests(corpus, args.batch, pb::MemoryType::Semantic);
    let started = Instant::now();
    let ingest = ingest(channel.clone(), requests, args.concurrency, &server).await?;
    let drain_cpu = CpuMeter::start(server.pid());
    let acked = Instant::now();
    let (ingested_at_ack, _) = distilled(&prometheus::scrape(&http, &metrics_url).await?);
    eprintln!(
        "   semantic ingest: {} msgs acknowledged in {:.2} s = {:.0} msg/s; {ingested_at_ack} \
         distilled by then",
        ingest.messages,
        ingest.wall.as_secs_f64(),
        ingest.rate()
    );

    let limit = Duration::from_secs(args.drain_timeout_secs);
    let (mut polls, mut poll_time) = (0usize, Duration::ZERO);
    let (ingested, failed) = loop {
        let sent = Instant::now();
        let metrics = prometheus::scrape(&http, &metrics_url)
            .await
            .map_err(|err| server.error("cannot read the server's metrics", err))?;
        polls += 1;
        poll_time += sent.elapsed();
        let (ingested, failed) = distilled(&metrics);
        if ingested + failed >= total {
            break (ingested, failed);
        }
        if started.elapsed() >= limit {
            return Err(server.error(
                "the semantic queue did not drain",
                format!(
                    "{ingested} of {total} messages distilled ({failed} failed) after {} s; \
                     model calls {:?}; metric families {:?}",
                    limit.as_secs(),
                    chat.counts(),
                    metrics.families
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
    };
    let drained = Instant::now();
    let cpu = drain_cpu.stop();
    let at_drain = chat.counts();
    eprintln!(
        "   drained: {ingested} messages distilled ({failed} failed) {:.2} s after the first add \
         = {:.0} msg/s; {} model calls",
        (drained - started).as_secs_f64(),
        ingested / (drained - started).as_secs_f64(),
        at_drain.total_calls()
    );
    let settled = settle(&chat).await;
    let metrics_text = http.get(&metrics_url).send().await?.text().await?;
    if let Some(path) = &args.metrics_dump {
        std::fs::write(path, &metrics_text)?;
    }
    let metrics = Exposition::parse(&metrics_text);
    let episodes = episode_count(channel.clone(), &server).await?;
    if episodes != corpus.messages.len() as i64 {
        return Err(format!(
            "the project holds {episodes} episodes, expected {}",
            corpus.messages.len()
        )
        .into());
    }
    let features_listed = list_features(channel.clone(), &server).await?;
    let drain = DrainResult {
        wall: drained - started,
        after_ack: drained - acked,
        ingested_at_ack,
        ingested,
        failed,
        cpu,
        at_drain,
        settled,
        metrics,
        features_listed,
        polls,
        poll_mean_ms: poll_time.as_secs_f64() * 1000.0 / polls.max(1) as f64,
    };

    let search = feature_search(channel, corpus, args, &server).await?;
    eprintln!(
        "   feature search over {} features: p50 {:.2} ms p99 {:.2} ms",
        search.features,
        search.calls.percentile(50.0),
        search.calls.percentile(99.0)
    );
    drop(server);
    Ok(SemanticRun {
        server_args,
        ingest,
        drain,
        search,
    })
}

/// Adds `args.features` features by hand to a fresh project's set, then times
/// SearchFeatures with the LoCoMo questions.
async fn feature_search(
    channel: Channel,
    corpus: &Corpus,
    args: &Args,
    server: &Server,
) -> Result<SearchResult> {
    create_project(channel.clone(), FEATURE_ORG, FEATURE_PROJECT, server).await?;
    let mut semantic = SemanticServiceClient::new(channel.clone());
    let set_id = semantic
        .get_set_id(pb::GetSetIdRequest {
            org_id: FEATURE_ORG.into(),
            project_id: FEATURE_PROJECT.into(),
            ..Default::default()
        })
        .await
        .map_err(|err| server.error("GetSetId failed", err))?
        .into_inner()
        .set_id;
    semantic
        .add_category(pb::AddCategoryRequest {
            org_id: FEATURE_ORG.into(),
            project_id: FEATURE_PROJECT.into(),
            set_id: set_id.clone(),
            category_name: FEATURE_CATEGORY.into(),
            prompt: "Facts the speakers state about themselves.".into(),
            description: "memmachine-bench semantic features".into(),
        })
        .await
        .map_err(|err| server.error("AddCategory failed", err))?;

    let mut rng = Rng(SEED);
    let requests: Vec<pb::AddFeatureRequest> = (0..args.features)
        .map(|i| feature_request(corpus, &set_id, i, &mut rng))
        .collect();
    let queue = Arc::new(Mutex::new(requests.into_iter()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.feature_concurrency.max(1) {
        let queue = queue.clone();
        let mut client = SemanticServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let Some(request) = queue.lock().expect("queue lock").next() else {
                    break;
                };
                let sent = Instant::now();
                client.add_feature(request).await?;
                latencies.push(sent.elapsed());
            }
            Ok::<_, BoxError>(latencies)
        }));
    }
    let mut adds = Vec::new();
    for task in tasks {
        match task.await? {
            Ok(mut part) => adds.append(&mut part),
            Err(err) => return Err(server.error("AddFeature failed", err)),
        }
    }
    let add_wall = started.elapsed();
    eprintln!(
        "   {} features added in {:.2} s = {:.0}/s",
        adds.len(),
        add_wall.as_secs_f64(),
        adds.len() as f64 / add_wall.as_secs_f64()
    );

    let request = |query: &str| pb::SearchFeaturesRequest {
        org_id: FEATURE_ORG.into(),
        project_id: FEATURE_PROJECT.into(),
        query: query.to_string(),
        top_k: Some(args.top_k),
        ..Default::default()
    };
    let questions = &corpus.questions;
    // Warm up on the tail of the question list, which the timed pass reaches last; the
    // first call builds the index.
    let mut first = Duration::ZERO;
    for (i, query) in questions
        .iter()
        .rev()
        .cycle()
        .take(args.warmup.max(1))
        .enumerate()
    {
        let sent = Instant::now();
        semantic
            .search_features(request(query))
            .await
            .map_err(|err| server.error("SearchFeatures failed", err))?;
        if i == 0 {
            first = sent.elapsed();
        }
    }
    let mut latencies = Vec::with_capacity(args.queries);
    let (mut hits, mut empty) = (0usize, 0usize);
    let cpu = CpuMeter::start(server.pid());
    let started = Instant::now();
    for query in questions.iter().cycle().take(args.queries) {
        let request = request(query);
        let sent = Instant::now();
        let found = semantic
            .search_features(request)
            .await
            .map_err(|err| server.error("SearchFeatures failed", err))?
            .into_inner()
            .features
            .len();
        latencies.push(sent.elapsed());
        hits += found;
        empty += usize::from(found == 0);
    }
    let wall = started.elapsed();
    Ok(SearchResult {
        features: adds.len(),
        add_wall,
        adds: Latencies::new(adds),
        first,
        wall,
        calls: Latencies::new(latencies),
        mean_hits: hits as f64 / args.queries.max(1) as f64,
        empty,
        cpu: cpu.stop(),
    })
}

/// Episodic-only ingest in a fresh server started the same way.
async fn run_episodic(args: &Args, corpus: &Corpus, executable: &Path) -> Result<IngestResult> {
    let chat = ScriptedChat::start().await?;
    let server_args = server_args(args, &chat, prometheus::free_port()?);
    let server = Server::start(
        executable,
        "memmachine-semantic-bench-episodic",
        None,
        &server_args,
        STARTUP_TIMEOUT,
    )?;
    eprintln!(
        "== episodic: server pid {} on {}",
        server.pid(),
        server.addr
    );
    let channel = connect(&server).await?;
    create_project(channel.clone(), ORG, PROJECT, &server).await?;
    let requests = add_requests(corpus, args.batch, pb::MemoryType::Episodic);
    let result = ingest(channel.clone(), requests, args.concurrency, &server).await?;
    let episodes = episode_count(channel, &server).await?;
    if episodes != corpus.messages.len() as i64 {
        return Err(format!(
            "the project holds {episodes} episodes, expected {}",
            corpus.messages.len()
        )
        .into());
    }
    eprintln!(
        "   episodic ingest: {} msgs in {:.2} s = {:.0} msg/s",
        result.messages,
        result.wall.as_secs_f64(),
        result.rate()
    );
    Ok(result)
}

// ---------------------------------------------------------------------------------------
// Report

fn threads(cpu: &CpuUse) -> String {
    let list: Vec<String> = cpu
        .threads
        .iter()
        .take(4)
        .map(|(name, secs)| format!("{name} {secs:.2}"))
        .collect();
    list.join(", ")
}

fn print_report(args: &Args, corpus: &Corpus, run: &SemanticRun, episodic: &IngestResult) {
    let n = corpus.messages.len();
    let per100 = |calls: u64| calls as f64 * 100.0 / n as f64;
    println!();
    println!(
        "memmachine-bench semantic: {n} LoCoMo turns ({} conversations, {} speakers), {} \
         questions; batch {}, concurrency {}; server args: {}",
        corpus.conversations,
        corpus.speakers,
        corpus.questions.len(),
        args.batch,
        args.concurrency,
        run.server_args.join(" ")
    );
    println!();
    println!("Acknowledged ingest (AddMemories):");
    println!();
    println!("| types | msg/s | wall s | add p50/p99/max ms | server CPU s | bench CPU s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, r) in [("SEMANTIC", &run.ingest), ("EPISODIC", episodic)] {
        println!(
            "| {name} | {:.0} | {:.3} | {:.1} / {:.1} / {:.1} | {} | {} |",
            r.rate(),
            r.wall.as_secs_f64(),
            r.batches.percentile(50.0),
            r.batches.percentile(99.0),
            r.batches.max(),
            opt_secs(r.cpu.server),
            opt_secs(r.cpu.client)
        );
    }

    let d = &run.drain;
    println!();
    println!(
        "Distillation (scripted model, answers at once; trigger {} messages or {} s):",
        args.trigger_messages, args.trigger_age
    );
    println!(
        "  {:.0} messages distilled ({:.0} failed) in {:.2} s from the first add = {:.0} msg/s; \
         {:.0} were done when the last add was acknowledged, the rest took {:.2} s more",
        d.ingested,
        d.failed,
        d.wall.as_secs_f64(),
        d.ingested / d.wall.as_secs_f64(),
        d.ingested_at_ack,
        d.after_ack.as_secs_f64()
    );
    let m = &d.metrics;
    let event = |e: &str| m.sum(INGESTED, &[("event", e)]);
    println!(
        "  server events: {:.0} batches applied ({:.1} messages each), {:.0} commands applied, \
         {:.0} invalid answers, {:.0} batches failed, {:.0} consolidations",
        event("batch_applied"),
        d.ingested / event("batch_applied").max(1.0),
        event("commands_applied"),
        event("invalid_answers"),
        event("batch_failed"),
        event("consolidated")
    );
    println!(
        "  features: the model asked for {} adds; ListMemories(SEMANTIC) lists {} (a fact said \
         again cites instead of copying)",
        d.settled.adds, d.features_listed
    );
    println!(
        "  CPU s during the drain (after the last ack): server {} ({}), bench {} (scripted \
         model and metric reads: {} reads, {:.1} ms each)",
        opt_secs(d.cpu.server),
        threads(&d.cpu),
        opt_secs(d.cpu.client),
        d.polls,
        d.poll_mean_ms
    );
    println!();
    println!("Model calls (scripted model's counters; server's llm_call_seconds by purpose):");
    println!();
    println!(
        "| purpose | calls at drain | calls settled | per 100 msgs | request KiB (mean) | \
         server-side s (sum) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for purpose in Purpose::ALL {
        let calls = d.settled.calls(purpose);
        if calls == 0 && purpose == Purpose::Other {
            continue;
        }
        let seconds = m.sum(
            "memmachine_llm_call_seconds_sum",
            &[("purpose", purpose.as_str())],
        );
        println!(
            "| {} | {} | {calls} | {:.2} | {:.1} | {seconds:.2} |",
            purpose.as_str(),
            d.at_drain.calls(purpose),
            per100(calls),
            d.settled.bytes(purpose) as f64 / 1024.0 / calls.max(1) as f64
        );
    }
    println!(
        "  {:.1} messages shown per extraction call; {:.0} features shown per consolidation call; \
         {} corrections, {} malformed requests; the server counted {:.0} calls",
        d.settled.extraction_messages as f64 / d.settled.calls(Purpose::Extraction).max(1) as f64,
        d.settled.consolidation_features as f64
            / d.settled.calls(Purpose::Consolidation).max(1) as f64,
        d.settled.corrections,
        d.settled.malformed,
        m.sum("memmachine_llm_calls_total", &[])
    );

    let s = &run.search;
    println!();
    println!(
        "Feature search ({} features added by hand to one set: {:.2} s = {:.0}/s with {} \
         clients, add p50/p99 {:.1} / {:.1} ms; {} queries, top_k {}, lexical):",
        s.features,
        s.add_wall.as_secs_f64(),
        s.features as f64 / s.add_wall.as_secs_f64(),
        args.feature_concurrency,
        s.adds.percentile(50.0),
        s.adds.percentile(99.0),
        s.calls.len(),
        args.top_k
    );
    println!();
    println!("| features | p50 ms | p99 ms | mean ms | max ms | q/s | first call ms |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.1} |",
        s.features,
        s.calls.percentile(50.0),
        s.calls.percentile(99.0),
        s.calls.mean(),
        s.calls.max(),
        s.calls.len() as f64 / s.wall.as_secs_f64(),
        s.first.as_secs_f64() * 1000.0
    );
    println!(
        "  {:.1} hits/query, {} empty; server CPU s {} ({}), bench {}",
        s.mean_hits,
        s.empty,
        opt_secs(s.cpu.server),
        threads(&s.cpu),
        opt_secs(s.cpu.client)
    );
}

pub fn main(args: Args) -> Result<()> {
    let executable = match &args.server {
        Some(path) => path.clone(),
        None => memmachine_testkit::server::server_bin(),
    };
    if !executable.is_file() {
        return Err(format!(
            "no server executable at {}; build it with \
             `cargo build --release --bin memmachine --bin memmachine-bench`",
            executable.display()
        )
        .into());
    }
    let corpus = load_corpus(&args.locomo)?;
    eprintln!(
        "corpus: {} turns, {} questions, {} words; server {}",
        corpus.messages.len(),
        corpus.questions.len(),
        corpus.words.len(),
        executable.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let semantic = runtime.block_on(run_semantic(&args, &corpus, &executable))?;
    let episodic = runtime.block_on(run_episodic(&args, &corpus, &executable))?;
    print_report(&args, &corpus, &semantic, &episodic);
    Ok(())
}
