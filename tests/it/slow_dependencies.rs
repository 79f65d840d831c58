//! Slow and failing dependencies, against the real binary over real gRPC.
//!
//! - An embeddings endpoint and a chat endpoint that hang, reset connections (at once, or
//!   in the middle of an answer), answer `429` with `Retry-After: 1`, `500`, or garbage
//!   (a `200` that is not JSON, or JSON of the wrong shape), from the server's start on:
//!   adds are acknowledged and lexical searches answered as promptly as with a healthy
//!   endpoint; hybrid searches answer lexically and dense ones `UNAVAILABLE`, without
//!   waiting on the endpoint; the work stays queued (`/metrics` shows the queues) and
//!   drains once the endpoints are healed; `/metrics` counts the failures by kind and the
//!   log names the endpoint and what it did, never an API key.
//! - A PostgreSQL server (a private one, so the rest of the suite keeps its own) stopped
//!   under load and started again: calls fail with `UNAVAILABLE` while it is down and
//!   succeed again after, from the same memmachine process, and every acknowledged add
//!   is still there.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::child::{Run, Supervised};
use crate::common::paging::collect_pages;
use crate::common::{ServerProcess, free_port};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tonic::Code;
use tonic::transport::Channel;

// ---------------------------------------------------------------------------------------
// A scripted OpenAI-compatible endpoint that fails on demand.

/// How the scripted endpoint answers, from the next request on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Healthy,
    /// Reads the request and never answers (until healed: then the connection is
    /// dropped, as when a hung endpoint is restarted).
    Hang,
    /// Accepts the connection and resets it at once.
    ResetOnAccept,
    /// Starts a `200` answer and resets the connection half-way through its body.
    CutMidResponse,
    /// `429` with `Retry-After: 1`.
    TooManyRequests,
    /// `500`.
    ServerError,
    /// `200` with an HTML body.
    NotJson,
    /// `200` with JSON that is neither embeddings nor a chat completion.
    WrongShape,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    Embeddings,
    Chat,
}

struct FaultyEndpoint {
    /// `http://ADDR/v1`.
    base_url: String,
    /// `ADDR`, as the server's log names it.
    addr: String,
    fault: watch::Sender<Fault>,
    requests: Arc<AtomicUsize>,
    /// Every `Authorization` header received.
    authorizations: Arc<Mutex<HashSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultyEndpoint {
    async fn start(api: Api, fault: Fault) -> FaultyEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (sender, _) = watch::channel(fault);
        let requests = Arc::new(AtomicUsize::new(0));
        let authorizations = Arc::new(Mutex::new(HashSet::new()));
        let task = {
            let (sender, requests, authorizations) =
                (sender.clone(), requests.clone(), authorizations.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    tokio::spawn(serve(
                        stream,
                        api,
                        sender.subscribe(),
                        requests.clone(),
                        authorizations.clone(),
                    ));
                }
            })
        };
        FaultyEndpoint {
            base_url: format!("http://{addr}/v1"),
            addr,
            fault: sender,
            requests,
            authorizations,
            task,
        }
    }

    fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }
}

impl Drop for FaultyEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection: one request, answered as the current fault says, then closed.
async fn serve(
    mut stream: TcpStream,
    api: Api,
    mut fault: watch::Receiver<Fault>,
    requests: Arc<AtomicUsize>,
    authorizations: Arc<Mutex<HashSet<String>>>,
) {
    if *fault.borrow() == Fault::ResetOnAccept {
        reset(stream);
        return;
    }
    let Some((headers, body)) = read_request(&mut stream).await else {
        return;
    };
    requests.fetch_add(1, Ordering::SeqCst);
    if let Some(auth) = header(&headers, "authorization") {
        authorizations.lock().unwrap().insert(auth);
    }
    let current = *fault.borrow_and_update();
    let error = |message: &str| json!({"error": {"message": message, "type": "scripted"}});
    let (status, extra, content_type, body) = match current {
        Fault::Hang => {
            let _ = tokio::time::timeout(
                Duration::from_secs(600),
                fault.wait_for(|f| *f != Fault::Hang),
            )
            .await;
            return;
        }
        Fault::ResetOnAccept => return reset(stream),
        Fault::CutMidResponse => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                        content-length: 4096\r\nconnection: close\r\n\r\n";
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream
                .write_all(br#"{"object":"list","data":[{"index":0,"embedding":[0.6,"#)
                .await;
            let _ = stream.flush().await;
            return reset(stream);
        }
        Fault::TooManyRequests => (
            "429 Too Many Requests",
            "retry-after: 1\r\n",
            "application/json",
            error("Rate limit reached, retry after 1 second").to_string(),
        ),
        Fault::ServerError => (
            "500 Internal Server Error",
            "",
            "application/json",
            error("The server had an error while processing your request").to_string(),
        ),
        Fault::NotJson => (
            "200 OK",
            "",
            "text/html",
            "<html><body><h1>Welcome to nginx!</h1></body></html>".to_string(),
        ),
        Fault::WrongShape => (
            "200 OK",
            "",
            "application/json",
            json!({"object": "list", "results": [{"score": 0.5}]}).to_string(),
        ),
        Fault::Healthy => (
            "200 OK",
            "",
            "application/json",
            healthy_answer(api, &body).to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         {extra}connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Closes with a TCP reset instead of an orderly shutdown.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// The request's header lines and body (by `content-length`); `None` if the client
/// went away first.
async fn read_request(stream: &mut TcpStream) -> Option<(Vec<String>, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let headers: Vec<String> = head.lines().map(str::to_string).collect();
    let length: usize = header(&headers, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    Some((headers, buffer[head_end..head_end + length].to_vec()))
}

fn header(headers: &[String], name: &str) -> Option<String> {
    headers.iter().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_string())
    })
}

/// What a working endpoint answers: a vector per input, or a chat completion adding one
/// feature per message (and a plain summary when asked for one).
fn healthy_answer(api: Api, body: &[u8]) -> Value {
    let request: Value = serde_json::from_slice(body).unwrap_or_default();
    match api {
        Api::Embeddings => {
            let inputs = request["input"].as_array().cloned().unwrap_or_default();
            let data: Vec<Value> = (0..inputs.len())
                .map(|i| json!({"object": "embedding", "index": i, "embedding": [0.6, 0.8, 0.0, 0.0]}))
                .collect();
            json!({"object": "list", "data": data, "model": request["model"],
                   "usage": {"prompt_tokens": inputs.len(), "total_tokens": inputs.len()}})
        }
        Api::Chat => {
            let user: String = request["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n\n");
            let content = match user.split("## New messages\n").nth(1) {
                Some(messages) if user.contains("## Current features") => {
                    extraction_answer(messages)
                }
                _ => "The speakers talked about their pets.".to_string(),
            };
            json!({
                "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
                "model": request["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            })
        }
    }
}

/// `{"commands": [...]}` adding one feature per numbered message, named by its text.
fn extraction_answer(messages: &str) -> String {
    let mut commands = Vec::new();
    let mut number = 0u64;
    for line in messages.lines().filter(|l| !l.is_empty()) {
        match line.strip_prefix('[').and_then(|rest| rest.split_once(']')) {
            Some((n, _)) => number = n.parse().unwrap_or(0),
            None => commands.push(json!({
                "command": "add", "tag": "preferences", "feature": line,
                "value": "stated", "messages": [number],
            })),
        }
    }
    json!({ "commands": commands }).to_string()
}

// ---------------------------------------------------------------------------------------
// gRPC calls and /metrics.

const ORG: &str = "acme";
const EMBEDDER_KEY: &str = "sk-embedder-secret-5f1d0c";
const LLM_KEY: &str = "sk-llm-secret-9a2b7e";
/// Longest an add or a lexical search may take while a dependency fails: generous (a
/// loaded machine), and far below any retry or timeout of the clients.
const PROMPT: Duration = Duration::from_secs(1);
/// The longest any search may take while a dependency fails: the server's own bound on
/// waiting for a query's vector (2 s), and slack.
const SEARCH_BOUND: Duration = Duration::from_millis(3500);

fn request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(Duration::from_secs(30));
    request
}

async fn connect(server: &ServerProcess) -> Channel {
    Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn create(channel: &Channel, project: &str, reranker: &str) {
    ProjectServiceClient::new(channel.clone())
        .create_project(request(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            config: Some(pb::ProjectConfig {
                embedder: String::new(),
                reranker: reranker.into(),
            }),
            ..Default::default()
        }))
        .await
        .unwrap_or_else(|status| panic!("creating {project}: {status:?}"));
}

async fn add(channel: &Channel, project: &str, content: &str) -> Result<String, tonic::Status> {
    let response = MemoryServiceClient::new(channel.clone())
        .add_memories(request(pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            messages: vec![pb::MemoryMessage {
                content: content.into(),
                producer: "alice".into(),
                role: "user".into(),
                ..Default::default()
            }],
            ..Default::default()
        }))
        .await?;
    Ok(response.into_inner().results.remove(0).uid)
}

/// The contents of the long-term hits of a search.
async fn search(
    channel: &Channel,
    project: &str,
    query: &str,
) -> Result<Vec<String>, tonic::Status> {
    let response = MemoryServiceClient::new(channel.clone())
        .search_memories(request(pb::SearchMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            query: query.into(),
            top_k: Some(50),
            ..Default::default()
        }))
        .await?
        .into_inner();
    Ok(response
        .episodic_memory
        .map(|e| {
            e.long_term_memory
                .into_iter()
                .filter_map(|s| s.episode.map(|e| e.content))
                .collect()
        })
        .unwrap_or_default())
}

async fn features(channel: &Channel, project: &str) -> Result<usize, tonic::Status> {
    Ok(MemoryServiceClient::new(channel.clone())
        .list_memories(request(pb::ListMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            r#type: pb::MemoryType::Semantic as i32,
            page_size: Some(1000),
            ..Default::default()
        }))
        .await?
        .into_inner()
        .features
        .len())
}

async fn count(channel: &Channel, project: &str) -> Result<i64, tonic::Status> {
    Ok(ProjectServiceClient::new(channel.clone())
        .get_episode_count(request(pb::GetEpisodeCountRequest {
            org_id: ORG.into(),
            project_id: project.into(),
        }))
        .await?
        .into_inner()
        .count)
}

async fn timed<T>(call: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = call.await;
    (out, started.elapsed())
}

async fn scrape(url: &str) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

/// The sum of the samples of `name` whose labels include `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = match series.find('{') {
                Some(i) => (&series[..i], &series[i..]),
                None => (series, ""),
            };
            let matches = metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            if matches {
                value.parse::<f64>().ok()
            } else {
                None
            }
        })
        .sum()
}

fn log_lines(server: &ServerProcess) -> Vec<String> {
    server.log.lock().unwrap().clone()
}

fn max(latencies: &[Duration]) -> Duration {
    latencies.iter().copied().max().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Faulty endpoints.

const HYBRID: &str = "hybrid";
const DENSE: &str = "dense";
const LEXICAL: &str = "lexical";

#[derive(Default, Debug)]
struct Latencies {
    adds: Vec<Duration>,
    lexical: Vec<Duration>,
    hybrid: Vec<Duration>,
    dense: Vec<Duration>,
}

/// One round of calls: an add to each project (when `adding`), then a search of each.
/// Every add and the lexical search must succeed; the hybrid and dense ones are
/// returned for the caller to judge.
async fn round(
    channel: &Channel,
    n: usize,
    adding: bool,
    lat: &mut Latencies,
    acknowledged: &mut Vec<(String, String)>,
) -> (
    Result<Vec<String>, tonic::Status>,
    Result<Vec<String>, tonic::Status>,
) {
    if adding {
        for project in [HYBRID, DENSE, LEXICAL] {
            let content = format!("I walk my golden retriever number {n} every morning");
            let (uid, took) = timed(add(channel, project, &content)).await;
            let uid = uid.unwrap_or_else(|s| panic!("add to {project}: {s:?}"));
            lat.adds.push(took);
            acknowledged.push((project.to_string(), uid));
        }
    }
    let (found, took) = timed(search(channel, LEXICAL, "golden retriever")).await;
    let found = found.unwrap_or_else(|s| panic!("lexical search: {s:?}"));
    assert!(!found.is_empty(), "the lexical search found nothing");
    lat.lexical.push(took);
    let (hybrid, took) = timed(search(channel, HYBRID, "golden retriever")).await;
    lat.hybrid.push(took);
    let (dense, took) = timed(search(channel, DENSE, "golden retriever")).await;
    lat.dense.push(took);
    (hybrid, dense)
}

async fn survives(fault: Fault) {
    let embeddings = FaultyEndpoint::start(Api::Embeddings, fault).await;
    let chat = FaultyEndpoint::start(Api::Chat, fault).await;
    let metrics_addr = free_port();
    let metrics = format!("http://{metrics_addr}/metrics");
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = [
        "--embedder",
        "openai",
        "--embedder-base-url",
        &embeddings.base_url,
        "--embedder-model",
        "scripted",
        "--llm-base-url",
        &chat.base_url,
        "--llm-model",
        "scripted",
        "--llm-timeout",
        "1",
        "--llm-max-calls-per-minute",
        "0",
        "--semantic-trigger-messages",
        "1",
        "--semantic-trigger-age",
        "0",
        "--metrics-listen",
        &metrics_addr.to_string(),
    ]
    .map(str::to_string)
    .to_vec();
    let started = Instant::now();
    let server = {
        let path = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ServerProcess::start_env(
                &path,
                &args,
                &[
                    ("MEMMACHINE_EMBEDDER_API_KEY", EMBEDDER_KEY),
                    ("MEMMACHINE_LLM_API_KEY", LLM_KEY),
                ],
            )
        })
        .await
        .unwrap()
    };
    let startup = started.elapsed();
    assert!(
        log_lines(&server).iter().any(|l| l.contains(common::READY)),
        "{fault:?}: the server is not serving after {startup:?}: {:#?}",
        log_lines(&server)
    );
    // The start-up probe of the endpoint must not hold the server up for long.
    assert!(
        startup < Duration::from_secs(15),
        "{fault:?}: took {startup:?} to start"
    );
    let channel = connect(&server).await;
    create(&channel, HYBRID, "").await;
    create(&channel, DENSE, "dense").await;
    create(&channel, LEXICAL, "lexical").await;

    // The endpoints fail: everything that does not need them goes on as usual.
    let mut lat = Latencies::default();
    let mut acknowledged = Vec::new();
    let mut degraded = 0;
    let fault_began = Instant::now();
    let mut n = 0;
    let scraped = loop {
        let (hybrid, dense) = round(&channel, n, n < 4, &mut lat, &mut acknowledged).await;
        n += 1;
        match hybrid {
            // Answered lexically: the episodes are found by their words.
            Ok(found) => {
                assert!(
                    !found.is_empty(),
                    "{fault:?}: the hybrid search found nothing"
                );
                degraded += 1;
            }
            Err(status) => panic!("{fault:?}: hybrid search: {status:?}"),
        }
        match dense {
            Err(status) if status.code() == Code::Unavailable => {}
            other => panic!("{fault:?}: dense search while the embedder fails: {other:?}"),
        }
        let scraped = scrape(&metrics).await;
        let llm_failures = sample(&scraped, "memmachine_llm_calls_total", &[])
            - sample(&scraped, "memmachine_llm_calls_total", &[("outcome", "ok")]);
        let embed_failures = sample(&scraped, "memmachine_embedding_failures_total", &[]);
        let queued = sample(&scraped, "memmachine_embedding_queue_depth", &[]);
        let semantic_queued = sample(&scraped, "memmachine_semantic_queue_depth", &[]);
        if n >= 6
            && llm_failures > 0.0
            && embed_failures > 0.0
            && queued >= acknowledged.len() as f64
            && semantic_queued >= acknowledged.len() as f64
        {
            break scraped;
        }
        assert!(
            fault_began.elapsed() < Duration::from_secs(25),
            "{fault:?}: after {:?}, the failures or the queued work do not show in /metrics \
             (llm failures {llm_failures}, embedding failures {embed_failures}, embedding \
             queue {queued}, semantic queue {semantic_queued}, {} acknowledged):\n{scraped}",
            fault_began.elapsed(),
            acknowledged.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let fault_phase = fault_began.elapsed();

    // /metrics says what failed, by kind.
    let failure_kind = match fault {
        Fault::NotJson | Fault::WrongShape => "failed",
        _ => "unavailable",
    };
    assert!(
        sample(
            &scraped,
            "memmachine_llm_calls_total",
            &[("purpose", "extraction"), ("outcome", failure_kind)]
        ) > 0.0,
        "{fault:?}: {scraped}"
    );
    assert!(
        sample(
            &scraped,
            "memmachine_embedding_failures_total",
            &[("embedder", "openai:scripted"), ("kind", "unavailable")]
        ) + sample(
            &scraped,
            "memmachine_embedding_failures_total",
            &[("embedder", "openai:scripted"), ("kind", failure_kind)]
        ) > 0.0,
        "{fault:?}: {scraped}"
    );
    assert_eq!(
        sample(
            &scraped,
            "memmachine_grpc_requests_total",
            &[("code", "INTERNAL")]
        ),
        0.0,
        "{fault:?}: {scraped}"
    );

    // Healed: the queued work is done.
    embeddings.set(Fault::Healthy);
    chat.set(Fault::Healthy);
    let healed = Instant::now();
    let per_project = acknowledged.len() / 3;
    loop {
        let scraped = scrape(&metrics).await;
        let queued = sample(&scraped, "memmachine_embedding_queue_depth", &[]);
        let semantic_queued = sample(&scraped, "memmachine_semantic_queue_depth", &[]);
        let mut done = queued == 0.0 && semantic_queued == 0.0;
        for project in [HYBRID, DENSE, LEXICAL] {
            done &= features(&channel, project).await.unwrap() >= per_project;
        }
        done &= search(&channel, DENSE, "golden retriever")
            .await
            .is_ok_and(|found| found.len() == per_project);
        if done {
            break;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "{fault:?}: the queues did not drain after healing (embedding queue {queued}, \
             semantic queue {semantic_queued}):\n{scraped}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drained = healed.elapsed();
    for project in [HYBRID, DENSE, LEXICAL] {
        assert_eq!(
            count(&channel, project).await.unwrap(),
            per_project as i64,
            "{fault:?}: {project}"
        );
    }

    // The baseline: the same calls against healthy endpoints.
    let mut baseline = Latencies::default();
    for i in 0..5 {
        let (hybrid, dense) =
            round(&channel, 100 + i, true, &mut baseline, &mut acknowledged).await;
        hybrid.unwrap_or_else(|s| panic!("{fault:?}: healthy hybrid search: {s:?}"));
        dense.unwrap_or_else(|s| panic!("{fault:?}: healthy dense search: {s:?}"));
    }
    eprintln!(
        "{fault:?}: started in {startup:?}; fault phase {fault_phase:?} ({n} rounds, {degraded} \
         hybrid searches answered lexically); drained {drained:?} after healing;\n  \
         max latency while failing: add {:?}, lexical {:?}, hybrid {:?}, dense {:?}\n  \
         max latency when healthy: add {:?}, lexical {:?}, hybrid {:?}, dense {:?}",
        max(&lat.adds),
        max(&lat.lexical),
        max(&lat.hybrid),
        max(&lat.dense),
        max(&baseline.adds),
        max(&baseline.lexical),
        max(&baseline.hybrid),
        max(&baseline.dense),
    );
    let bound = |healthy: &[Duration]| PROMPT.max(max(healthy) * 5);
    for (what, failing, healthy) in [
        ("add", &lat.adds, &baseline.adds),
        ("lexical search", &lat.lexical, &baseline.lexical),
    ] {
        for took in failing {
            assert!(
                *took < bound(healthy),
                "{fault:?}: a {what} took {took:?} while the endpoints failed \
                 (at most {:?} when healthy)",
                max(healthy)
            );
        }
    }
    // Hybrid and dense searches wait for the endpoint at most the server's bound, and
    // then not at all until it answers again (or a few seconds pass).
    for (what, failing) in [("hybrid", &lat.hybrid), ("dense", &lat.dense)] {
        let slow = failing.iter().filter(|t| **t >= PROMPT).count();
        assert!(
            max(failing) < SEARCH_BOUND && slow * 4 <= failing.len(),
            "{fault:?}: {what} searches while the endpoints failed: {failing:?}"
        );
    }

    // The log says what happened: the endpoints by address, why, and the fallback.
    let log = log_lines(&server);
    let warned = |needle: &str| {
        log.iter()
            .any(|l| l.contains(" WARN ") && l.contains(needle))
    };
    assert!(
        warned(&embeddings.addr) || warned("openai:scripted"),
        "{fault:?}: no warning names the embeddings endpoint: {log:#?}"
    );
    assert!(
        warned(&chat.addr),
        "{fault:?}: no warning names the chat endpoint: {log:#?}"
    );
    let why = match fault {
        Fault::Hang => "within",
        Fault::ResetOnAccept | Fault::CutMidResponse => "request failed",
        Fault::TooManyRequests => "429",
        Fault::ServerError => "500",
        Fault::NotJson | Fault::WrongShape => "not an OpenAI",
        Fault::Healthy => unreachable!(),
    };
    assert!(warned(why), "{fault:?}: no warning says {why:?}: {log:#?}");
    assert!(
        warned("answering lexically"),
        "{fault:?}: no warning says hybrid searches answered lexically: {log:#?}"
    );
    // The keys were sent, and never logged.
    assert!(
        embeddings
            .authorizations
            .lock()
            .unwrap()
            .contains(&format!("Bearer {EMBEDDER_KEY}")),
        "{fault:?}: the embedder key was not sent"
    );
    assert!(
        chat.authorizations
            .lock()
            .unwrap()
            .contains(&format!("Bearer {LLM_KEY}")),
        "{fault:?}: the model key was not sent"
    );
    for line in &log {
        assert!(
            !line.contains(EMBEDDER_KEY) && !line.contains(LLM_KEY),
            "{fault:?}: a key in the log: {line}"
        );
    }
    assert!(embeddings.requests.load(Ordering::SeqCst) > 0 || fault == Fault::ResetOnAccept);
    let mut server = server;
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server exited"
    );
    server.terminate_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_hang() {
    survives(Fault::Hang).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_reset_connections() {
    survives(Fault::ResetOnAccept).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_cut_answers_short() {
    survives(Fault::CutMidResponse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_answer_429_with_retry_after() {
    survives(Fault::TooManyRequests).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_answer_500() {
    survives(Fault::ServerError).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_answer_html() {
    survives(Fault::NotJson).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_answer_json_of_the_wrong_shape() {
    survives(Fault::WrongShape).await;
}

// ---------------------------------------------------------------------------------------
// PostgreSQL stopped and started again under load.

/// A PostgreSQL server of this test's own (the suite's is shared by the other test
/// binaries, which stopping it would break), made with the binaries
/// `scripts/postgres.sh` installs, on a free port, in a temporary directory. The
/// postmaster is the test's own child (not daemonised by pg_ctl), so it dies with the
/// test process and is killed when dropped, whatever happened.
struct PrivatePostgres {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    port: u16,
    postmaster: Mutex<Option<Supervised>>,
}

impl PrivatePostgres {
    /// `pgserver/pginstall/bin` of the venv `scripts/postgres.sh` made: `.tools/pg`, or
    /// (as root, when the user postgres cannot reach `.tools/`) one under
    /// `/var/tmp/memmachine-pg-*/`.
    fn bin_dir() -> Option<PathBuf> {
        let mut venvs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/pg")];
        if let Ok(entries) = std::fs::read_dir("/var/tmp") {
            venvs.extend(
                entries
                    .flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with("memmachine-pg-")
                    })
                    .map(|e| e.path().join("pg")),
            );
        }
        venvs.into_iter().find_map(|venv| {
            std::fs::read_dir(venv.join("lib"))
                .ok()?
                .flatten()
                .map(|lib| lib.path().join("site-packages/pgserver/pginstall/bin"))
                .find(|bin| bin.join("postgres").is_file())
        })
    }

    fn as_root() -> bool {
        Command::new("id")
            .arg("-u")
            .try_run()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
    }

    /// Runs a PostgreSQL program as a user it accepts (`postgres` when we are root).
    fn run(&self, program: &str, args: &[&str]) -> std::process::Output {
        let program = self.bin.join(program);
        let output = if Self::as_root() {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&program)
                .args(args)
                .try_run()
        } else {
            Command::new(&program).args(args).try_run()
        };
        output.unwrap_or_else(|err| panic!("running {}: {err}", program.display()))
    }

    fn check(&self, program: &str, args: &[&str]) {
        let out = self.run(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A new cluster (trust authentication, loopback only, no fsync: a test server),
    /// started.
    fn start_new(bin: PathBuf) -> PrivatePostgres {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        if Self::as_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            let status = Command::new("chown")
                .arg("postgres:")
                .arg(&data)
                .run()
                .status;
            assert!(status.success(), "chown postgres: {}", data.display());
        }
        let port = free_port().port();
        let pg = PrivatePostgres {
            _dir: dir,
            data,
            bin,
            port,
            postmaster: Mutex::new(None),
        };
        let data = pg.data.to_str().unwrap().to_string();
        pg.check(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--auth-local=trust",
                "--auth-host=trust",
                "--no-instructions",
            ],
        );
        pg.start();
        pg
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the postmaster in the foreground and waits until it accepts connections.
    fn start(&self) {
        let postgres = self.bin.join("postgres");
        let mut command = if Self::as_root() {
            // setpriv execs in place (runuser would fork, and its child outlive it), and
            // sets the death signal again after the change of user clears it.
            let mut command = Command::new("setpriv");
            command
                .args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
                .args(["--pdeathsig", "SIGKILL", "--"])
                .arg(postgres);
            command
        } else {
            Command::new(postgres)
        };
        // Commits are durable (what was acknowledged must survive the restart); fsync
        // is not needed for that, as the machine does not go down.
        command
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.data)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        let mut postmaster = Supervised::spawn("postgres (private)", &mut command, None);
        postmaster
            .wait_for_stderr("accept connections", Duration::from_secs(60), |lines| {
                lines
                    .iter()
                    .any(|l| l.contains("ready to accept connections"))
                    .then_some(())
            })
            .unwrap_or_else(|report| panic!("{report}"));
        *self.postmaster.lock().unwrap() = Some(postmaster);
    }

    /// Fast shutdown: sessions are ended, as in a restart for maintenance.
    fn stop(&self) {
        let data = self.data.to_str().unwrap();
        self.check("pg_ctl", &["-D", data, "-m", "fast", "-w", "stop"]);
        if let Some(mut postmaster) = self.postmaster.lock().unwrap().take() {
            let _ = postmaster.wait();
        }
    }
}

/// One call of the load: what it was, when it started and ended, how it came out.
#[derive(Debug, Clone)]
struct Call {
    what: &'static str,
    started: Instant,
    ended: Instant,
    code: Code,
    /// The uid of an acknowledged add.
    uid: Option<String>,
}

/// Adds and searches, one after another, until `stop`.
async fn load(
    channel: Channel,
    worker: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<Call> {
    let mut calls = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let added = add(
            &channel,
            "notes",
            &format!("load {worker} note {n} about the harbour"),
        )
        .await;
        calls.push(Call {
            what: "add",
            started,
            ended: Instant::now(),
            code: added.as_ref().map_or_else(|s| s.code(), |_| Code::Ok),
            uid: added.ok(),
        });
        let started = Instant::now();
        let found = search(&channel, "notes", "harbour").await;
        calls.push(Call {
            what: "search",
            started,
            ended: Instant::now(),
            code: found.map_or_else(|s| s.code(), |_| Code::Ok),
            uid: None,
        });
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    calls
}

async fn list_uids(channel: &Channel) -> HashSet<String> {
    collect_pages(async |token| {
        let page = MemoryServiceClient::new(channel.clone())
            .list_memories(request(pb::ListMemoriesRequest {
                org_id: ORG.into(),
                project_id: "notes".into(),
                page_size: Some(1000),
                page_token: token,
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        (
            page.episodes.into_iter().map(|e| e.uid),
            page.next_page_token,
        )
    })
    .await
    .into_iter()
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_under_load() {
    // Its server is on a PostgreSQL of its own, whichever backend the pass is for: the
    // PostgreSQL pass of scripts/test.sh would only run it again.
    if common::postgres::base_url().is_none() || common::postgres::servers_on_postgres() {
        return;
    }
    let bin = PrivatePostgres::bin_dir()
        .expect("no PostgreSQL binaries: scripts/postgres.sh install puts them in .tools/pg");
    let pg = Arc::new(
        tokio::task::spawn_blocking(move || PrivatePostgres::start_new(bin))
            .await
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    // Lexical only: this is about the store (and the vector functions of the wheel's
    // pgvector die of SIGILL on some CPUs, taking the whole server with them).
    let server = {
        let (path, url) = (dir.path().to_path_buf(), pg.url());
        tokio::task::spawn_blocking(move || {
            ServerProcess::start(&path, &["--store", &url, "--embedder", "none"])
        })
        .await
        .unwrap()
    };
    let pid = server.child.id();
    let channel = connect(&server).await;
    create(&channel, "notes", "").await;

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|worker| tokio::spawn(load(channel.clone(), worker, stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Down for longer than a call waits for a connection (10 s), then up again.
    let stopping = Instant::now();
    {
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || pg.stop())
            .await
            .unwrap();
    }
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let restarting = Instant::now();
    {
        let pg = pg.clone();
        tokio::task::spawn_blocking(move || pg.start())
            .await
            .unwrap();
    }
    let restarted = Instant::now();

    // Calls succeed again, from the same process.
    let deadline = restarted + Duration::from_secs(20);
    let recovered = loop {
        let started = Instant::now();
        let status = match add(&channel, "notes", "after the restart").await {
            Ok(_) => break started,
            Err(status) => status,
        };
        assert!(
            Instant::now() < deadline,
            "no call succeeded 20 s after the restart (the last: {status:?}); the server's \
             log:\n{}",
            log_lines(&server).join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let mut calls = Vec::new();
    for worker in workers {
        calls.extend(worker.await.unwrap());
    }
    let mut server = server;
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server exited"
    );
    assert_eq!(server.child.id(), pid);

    let show = |calls: &[&Call]| {
        calls
            .iter()
            .map(|c| {
                format!(
                    "{} {:?} at {:+.2}s took {:.2}s",
                    c.what,
                    c.code,
                    c.started.duration_since(stopping).as_secs_f64(),
                    (c.ended - c.started).as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let failed: Vec<&Call> = calls.iter().filter(|c| c.code != Code::Ok).collect();
    eprintln!("failed calls, from the stop:\n{}", show(&failed));
    eprintln!(
        "postgres down {:.1}s: {} calls, {} failed, recovered {:.2}s after the restart began",
        (restarting - stopping).as_secs_f64(),
        calls.len(),
        failed.len(),
        recovered
            .saturating_duration_since(restarting)
            .as_secs_f64()
    );
    // Only UNAVAILABLE (retry), and within a bounded time (the pool's 10 s wait).
    for call in &failed {
        assert_eq!(call.code, Code::Unavailable, "{}", show(&failed));
        assert!(
            call.ended - call.started < Duration::from_secs(12),
            "{}",
            show(&failed)
        );
    }
    // While it was down, calls failed: none ended well between the stop and the restart
    // (one begun meanwhile waits up to 10 s for a connection, and may get it once the
    // database is back).
    let during: Vec<&Call> = calls
        .iter()
        .filter(|c| c.ended > stopped && c.ended <= restarting)
        .collect();
    assert!(
        !during.is_empty() && during.iter().all(|c| c.code == Code::Unavailable),
        "calls while PostgreSQL was down:\n{}",
        show(&during)
    );
    // Once back, every call succeeds.
    let after: Vec<&Call> = calls.iter().filter(|c| c.started >= recovered).collect();
    assert!(
        !after.is_empty() && after.iter().all(|c| c.code == Code::Ok),
        "calls after PostgreSQL came back:\n{}",
        show(&after)
    );
    // Every acknowledged add is there.
    let stored = list_uids(&channel).await;
    let acknowledged: Vec<&String> = calls.iter().filter_map(|c| c.uid.as_ref()).collect();
    let lost: Vec<&&String> = acknowledged
        .iter()
        .filter(|uid| !stored.contains(**uid))
        .collect();
    assert!(lost.is_empty(), "acknowledged adds lost: {lost:?}");
    assert!(
        acknowledged.len() > 10,
        "{} adds acknowledged",
        acknowledged.len()
    );
    server.terminate_async().await;
}
