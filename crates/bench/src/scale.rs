//! `memmachine-bench scale`: what a large project, or many projects, cost the real
//! server (issue 15). For each size it starts a fresh `memmachine serve` (the
//! executable next to this one) and measures, over gRPC on loopback:
//!
//! - ingest: acknowledged episodes/s (concurrent `AddMemories` of 100), and the time
//!   until every vector is stored (the hash embedder, so no model cost);
//! - search p50/p99 (top_k 10, LoCoMo questions), lexical or hybrid;
//! - the server's resident memory (from /proc) and the data directory's size;
//! - start-up: a restarted server over the same data, until its first search answers.
//!
//! `--recall` also measures, in this process over the same vectors, HNSW recall@10
//! against the exact f32 scan, and the int8 scan with and without exact rescoring.
//! See BENCHMARKS.md ("A million episodes and ten thousand projects").
//!
//! Run: `cargo run --release -p memmachine-bench -- scale --sizes 10000,100000`

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use memmachine_domain::embed::hash::HashEmbedder;
use memmachine_domain::retrieval::ann::{self, AnnIndex};
use memmachine_domain::retrieval::rescore::{self, Hit};
use memmachine_domain::retrieval::{dense, quantized};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

use crate::support;

use support::corpus::{Corpus, SEED, load_corpus, message};
use support::latencies::Latencies;
use support::rng::Rng;
use support::server::Server;
use support::{BoxError, Result};

const ORG: &str = "scale";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(600);
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Ranking {
    Lexical,
    Hybrid,
}

impl Ranking {
    fn name(self) -> &'static str {
        match self {
            Ranking::Lexical => "lexical",
            Ranking::Hybrid => "hybrid",
        }
    }
}

#[derive(Parser, Debug)]
#[command(about = "Measures one large project, or many small ones, on a real memmachine server")]
pub struct Args {
    /// LoCoMo data set
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Episodes of the one project, comma separated (a fresh server for each); ignored
    /// with --projects
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    sizes: Vec<usize>,
    /// Projects (each of --per-project episodes) instead of one project per size,
    /// comma separated: e.g. 1,10000
    #[arg(long, value_delimiter = ',')]
    projects: Vec<usize>,
    /// Episodes of each project with --projects
    #[arg(long, default_value_t = 100)]
    per_project: usize,
    /// Rankings to measure, a fresh server for each (lexical: `--embedder none`;
    /// hybrid: the hash embedder of --dimensions)
    #[arg(long, value_delimiter = ',', default_value = "lexical,hybrid")]
    rankings: Vec<Ranking>,
    /// Vector length of the hash embedder
    #[arg(long, default_value_t = 384)]
    dimensions: usize,
    /// Messages per AddMemories call
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Concurrent AddMemories tasks (sharing one channel)
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Timed SearchMemories calls per pass
    #[arg(long, default_value_t = 2000)]
    queries: usize,
    /// Untimed calls before each pass
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    #[arg(long, default_value_t = 10)]
    top_k: usize,
    /// Longest wait for vectors to be stored, and for the vector graph
    #[arg(long, default_value_t = 3600)]
    wait_secs: u64,
    /// Also measure recall@10 in this process (single project only)
    #[arg(long)]
    recall: bool,
    /// Queries of the recall measurement
    #[arg(long, default_value_t = 200)]
    recall_queries: usize,
    /// Candidates a graph insertion walks (USearch's `ef_construction`) in the recall
    /// measurement, one graph per value [default: the server's]
    #[arg(long, value_delimiter = ',')]
    graph_expansion_add: Vec<usize>,
    /// Only the recall measurement (no server)
    #[arg(long)]
    recall_only: bool,
    /// Skip the restart (start-up time) measurement
    #[arg(long)]
    no_restart: bool,
    /// Extra `memmachine serve` arguments, split on whitespace
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    server_args: String,
    /// Server executable [default: `memmachine` next to this executable]
    #[arg(long)]
    server: Option<PathBuf>,
}

/// The shape of one run: `projects` projects of `per_project` episodes.
#[derive(Debug, Clone, Copy)]
struct Shape {
    projects: usize,
    per_project: usize,
}

impl Shape {
    fn episodes(self) -> usize {
        self.projects * self.per_project
    }

    fn label(self) -> String {
        if self.projects == 1 {
            format!("1 x {}", self.per_project)
        } else {
            format!("{} x {}", self.projects, self.per_project)
        }
    }
}

fn project_id(p: usize) -> String {
    format!("p{p:05}")
}

struct RunResult {
    shape: Shape,
    ranking: Ranking,
    ingest_secs: f64,
    /// From the first add until every vector was stored (hybrid).
    vectors_secs: Option<f64>,
    first_search_ms: f64,
    graph_secs: Option<f64>,
    search: Latencies,
    rss: u64,
    rss_peak: u64,
    disk: u64,
    restart_ms: Option<f64>,
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with(field))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .unwrap_or(0)
}

async fn connect(server: &Server) -> Result<Channel> {
    server.channel().await
}

fn search_request(project: usize, query: &str, top_k: usize) -> pb::SearchMemoriesRequest {
    pb::SearchMemoriesRequest {
        org_id: ORG.into(),
        project_id: project_id(project),
        query: query.to_string(),
        top_k: Some(top_k as i32),
        types: vec![pb::MemoryType::Episodic as i32],
        ..Default::default()
    }
}

/// Creates the projects, `concurrency` at a time.
async fn create_projects(channel: &Channel, shape: Shape, ranking: Ranking) -> Result<()> {
    let next = Arc::new(Mutex::new(0..shape.projects));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (next, mut client) = (next.clone(), ProjectServiceClient::new(channel.clone()));
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(p) = next.lock().expect("lock").next() else {
                    return Ok::<_, BoxError>(());
                };
                client
                    .create_project(pb::CreateProjectRequest {
                        org_id: ORG.into(),
                        project_id: project_id(p),
                        description: String::new(),
                        config: Some(pb::ProjectConfig {
                            embedder: String::new(),
                            reranker: ranking.name().into(),
                        }),
                    })
                    .await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Every AddMemories request, built before timing: project by project, episode `i` of
/// project `p` is corpus message `p * per_project + i`.
fn requests(corpus: &Corpus, shape: Shape, batch: usize) -> Vec<pb::AddMemoriesRequest> {
    let mut rng = Rng::new(SEED);
    let mut out = Vec::new();
    for p in 0..shape.projects {
        let first = p * shape.per_project;
        for start in (0..shape.per_project).step_by(batch.max(1)) {
            let end = (start + batch).min(shape.per_project);
            out.push(pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: project_id(p),
                types: vec![pb::MemoryType::Episodic as i32],
                messages: (first + start..first + end)
                    .map(|i| message(corpus, i, &mut rng))
                    .collect(),
            });
        }
    }
    out
}

async fn ingest(
    channel: &Channel,
    requests: Vec<pb::AddMemoriesRequest>,
    concurrency: usize,
) -> Result<Duration> {
    let queue = Arc::new(Mutex::new(requests.into_iter()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (queue, mut client) = (queue.clone(), MemoryServiceClient::new(channel.clone()));
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(request) = queue.lock().expect("lock").next() else {
                    return Ok::<_, BoxError>(());
                };
                let expected = request.messages.len();
                let answer = client.add_memories(request).await?.into_inner();
                if answer.results.len() != expected {
                    return Err("AddMemories returned too few uids".into());
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// Timed searches over random projects (the LoCoMo questions in order).
async fn search_pass(
    channel: &Channel,
    corpus: &Corpus,
    shape: Shape,
    args: &Args,
) -> Result<Latencies> {
    let mut client = MemoryServiceClient::new(channel.clone());
    let mut rng = Rng::new(SEED ^ 0x5eed);
    let questions = corpus.questions.iter().cycle();
    for query in corpus.questions.iter().rev().cycle().take(args.warmup) {
        let p = rng.below(shape.projects);
        client
            .search_memories(search_request(p, query, args.top_k))
            .await?;
    }
    let mut latencies = Vec::with_capacity(args.queries);
    // A small project may share no word with a question; a pass without any hit means
    // the index is not being searched.
    let mut empty = 0;
    for query in questions.take(args.queries) {
        let request = search_request(rng.below(shape.projects), query, args.top_k);
        let sent = Instant::now();
        let answer = client.search_memories(request).await?.into_inner();
        latencies.push(sent.elapsed());
        if answer
            .episodic_memory
            .is_none_or(|m| m.long_term_memory.is_empty())
        {
            empty += 1;
        }
    }
    if empty == latencies.len() {
        return Err("no search found anything".into());
    }
    if empty > 0 {
        println!("   {empty} of {} searches found nothing", latencies.len());
    }
    Ok(Latencies::new(latencies))
}

/// One search of every project (loading its index), `concurrency` at a time.
async fn touch_every_project(channel: &Channel, shape: Shape, top_k: usize) -> Result<()> {
    let next = Arc::new(Mutex::new(0..shape.projects));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let (next, mut client) = (next.clone(), MemoryServiceClient::new(channel.clone()));
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(p) = next.lock().expect("lock").next() else {
                    return Ok::<_, BoxError>(());
                };
                client
                    .search_memories(search_request(p, "what did they talk about", top_k))
                    .await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

fn server_args(args: &Args, ranking: Ranking) -> Vec<String> {
    let mut extra: Vec<String> = match ranking {
        Ranking::Lexical => vec!["--embedder".into(), "none".into()],
        Ranking::Hybrid => vec![
            "--embedder".into(),
            "hash".into(),
            "--embedder-dimensions".into(),
            args.dimensions.to_string(),
        ],
    };
    extra.extend(args.server_args.split_whitespace().map(str::to_string));
    extra
}

async fn run(
    args: &Args,
    corpus: &Corpus,
    executable: &Path,
    shape: Shape,
    ranking: Ranking,
) -> Result<RunResult> {
    let label = shape.label();
    let data_dir = std::env::temp_dir().join(format!(
        "memmachine-scale-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&data_dir)?;
    let result = measure(args, corpus, executable, shape, ranking, &data_dir).await;
    let _ = std::fs::remove_dir_all(&data_dir);
    result.map_err(|err| format!("{label} {}: {err}", ranking.name()).into())
}

async fn measure(
    args: &Args,
    corpus: &Corpus,
    executable: &Path,
    shape: Shape,
    ranking: Ranking,
    data_dir: &Path,
) -> Result<RunResult> {
    let extra = server_args(args, ranking);
    let requests = requests(corpus, shape, args.batch);
    let server = Server::start(
        executable,
        "memmachine-scale",
        Some(data_dir),
        &extra,
        STARTUP_TIMEOUT,
    )?;
    eprintln!(
        "== {} episodes ({}), {}: server pid {}, data dir {}",
        shape.episodes(),
        shape.label(),
        ranking.name(),
        server.pid(),
        data_dir.display()
    );
    let channel = connect(&server).await?;
    create_projects(&channel, shape, ranking)
        .await
        .map_err(|e| server.error("CreateProject failed", e))?;
    let started = Instant::now();
    let ingest_wall = ingest(&channel, requests, args.concurrency)
        .await
        .map_err(|e| server.error("AddMemories failed", e))?;
    let ingest_secs = ingest_wall.as_secs_f64();
    eprintln!(
        "   ingest: {} episodes in {ingest_secs:.1} s = {:.0}/s acknowledged",
        shape.episodes(),
        shape.episodes() as f64 / ingest_secs
    );
    let vectors_secs = match ranking {
        Ranking::Lexical => None,
        Ranking::Hybrid => {
            let wait = server
                .wait_for_embeddings(shape.episodes() as u64, args.wait_secs)
                .await;
            if !wait.complete {
                return Err("not every vector was stored in time".into());
            }
            Some(started.elapsed().as_secs_f64())
        }
    };
    let disk = dir_bytes(data_dir);
    // The first search loads the project's index (the server keeps none until asked).
    let first = Instant::now();
    if shape.projects == 1 {
        MemoryServiceClient::new(channel.clone())
            .search_memories(search_request(0, "what did they talk about", args.top_k))
            .await
            .map_err(|e| server.error("SearchMemories failed", e))?;
    } else {
        touch_every_project(&channel, shape, args.top_k)
            .await
            .map_err(|e| server.error("SearchMemories failed", e))?;
    }
    let first_search_ms = first.elapsed().as_secs_f64() * 1e3;
    eprintln!("   first search (index load): {first_search_ms:.0} ms");
    let graph_secs = if ranking == Ranking::Hybrid && shape.per_project >= GRAPH_MIN {
        match server
            .wait_for_graphs(1, Duration::from_secs(args.wait_secs))
            .await
        {
            Some(waited) => Some(waited.as_secs_f64() + first_search_ms / 1e3),
            None => return Err("no vector graph was built in time".into()),
        }
    } else {
        None
    };
    // The graph's segment is written once it is built: later than this.
    let graph_done = std::time::SystemTime::now() - Duration::from_secs(1);
    let search = search_pass(&channel, corpus, shape, args)
        .await
        .map_err(|e| server.error("SearchMemories failed", e))?;
    let (rss, rss_peak) = (
        proc_status_kib(server.pid(), "VmRSS:") * 1024,
        proc_status_kib(server.pid(), "VmHWM:") * 1024,
    );
    eprintln!(
        "   search p50 {:.2} ms p99 {:.2} ms; RSS {:.0} MiB (peak {:.0}); disk {:.0} MiB",
        search.percentile(50.0),
        search.percentile(99.0),
        rss as f64 / MIB,
        rss_peak as f64 / MIB,
        disk as f64 / MIB
    );
    // The restart reads the projects' segments (SQLite: beside the database): they
    // are written in the background after the load, and again once the graph is built.
    if !args.no_restart && shape.per_project >= SEGMENT_MIN {
        let wanted = if graph_secs.is_some() {
            Some(graph_done)
        } else {
            None
        };
        let waited = wait_for_segments(data_dir, shape.projects, wanted, args.wait_secs).await;
        eprintln!("   segments written: {waited}");
    }
    drop(channel);
    drop(server);
    let restart_ms = if args.no_restart {
        None
    } else {
        // From starting the process until a search of the (last) project answers.
        let spawned = Instant::now();
        let server = Server::start(
            executable,
            "memmachine-scale",
            Some(data_dir),
            &extra,
            STARTUP_TIMEOUT,
        )?;
        let channel = connect(&server).await?;
        MemoryServiceClient::new(channel)
            .search_memories(search_request(
                shape.projects - 1,
                "what did they talk about",
                args.top_k,
            ))
            .await
            .map_err(|e| server.error("SearchMemories after restart failed", e))?;
        let ms = spawned.elapsed().as_secs_f64() * 1e3;
        eprintln!("   restart until the first search answered: {ms:.0} ms");
        eprintln!(
            "   RSS after the restart: {:.0} MiB (before it: {:.0} MiB)",
            (proc_status_kib(server.pid(), "VmRSS:") * 1024) as f64 / MIB,
            rss as f64 / MIB
        );
        Some(ms)
    };
    Ok(RunResult {
        shape,
        ranking,
        ingest_secs,
        vectors_secs,
        first_search_ms,
        graph_secs,
        search,
        rss,
        rss_peak,
        disk,
        restart_ms,
    })
}

/// Episodes from which a project's index is saved as a segment.
const SEGMENT_MIN: usize = memmachine_domain::retrieval::segment::WRITE_MIN_EPISODES;

/// Waits until `projects` segments are in the SQLite store's segment directory, none
/// being written, and (`after`) one written since then; says what it saw.
async fn wait_for_segments(
    data_dir: &std::path::Path,
    projects: usize,
    after: Option<std::time::SystemTime>,
    limit_secs: u64,
) -> String {
    let dir = data_dir.join("memmachine.db.index");
    let deadline = Instant::now() + Duration::from_secs(limit_secs);
    loop {
        let files: Vec<(String, std::time::SystemTime, u64)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let e = e.ok()?;
                let meta = e.metadata().ok()?;
                Some((
                    e.file_name().to_string_lossy().into_owned(),
                    meta.modified().ok()?,
                    meta.len(),
                ))
            })
            .collect();
        let done = files.iter().filter(|f| f.0.ends_with(".seg")).count() >= projects
            && !files.iter().any(|f| f.0.ends_with(".tmp"))
            && after.is_none_or(|t| files.iter().any(|f| f.1 >= t));
        if done || Instant::now() > deadline {
            let bytes: u64 = files.iter().map(|f| f.2).sum();
            return format!(
                "{} files, {:.0} MiB, complete: {done}",
                files.len(),
                bytes as f64 / MIB
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Vectors from which a project gets a vector graph (the server's `ANN_MIN_VECTORS`).
const GRAPH_MIN: usize = memmachine_domain::retrieval::ann::ANN_MIN_VECTORS;

// ---------------------------------------------------------------------------------------
// Recall, in process

struct Recall {
    size: usize,
    expansion_add: usize,
    hnsw: f64,
    hnsw_rescored: f64,
    int8: f64,
    int8_rescored: f64,
    build_secs: f64,
}

/// Recall@k of `found` against the exact ranking, counting ties at the cut: a found id
/// whose exact similarity reaches the k-th best counts (the hash embedder's sparse
/// vectors tie often, and which of equals the scan keeps is arbitrary).
fn recall_at(
    found: &[i64],
    exact: &[(i64, f32)],
    all: &[Vec<f32>],
    query: &[f32],
    k: usize,
) -> f64 {
    let Some(&(_, kth)) = exact.get(k.min(exact.len()).saturating_sub(1)) else {
        return 1.0;
    };
    let good = found
        .iter()
        .take(k)
        .filter(|id| dense::dot(&all[**id as usize], query) >= kth - 1e-6)
        .count();
    good as f64 / k.min(exact.len()) as f64
}

/// Recall of one graph per `--graph-expansion-add` value over the same vectors.
fn measure_recall(corpus: &Corpus, size: usize, args: &Args) -> Result<Vec<Recall>> {
    let embedder = HashEmbedder::new(args.dimensions);
    let mut rng = Rng::new(SEED);
    let started = Instant::now();
    let vectors: Vec<Vec<f32>> = (0..size)
        .map(|i| {
            let m = message(corpus, i, &mut rng);
            embedder.embed_one(&format!("{}: {}", m.producer, m.content))
        })
        .collect();
    let coded: Vec<(Vec<i8>, f32)> = vectors.iter().map(|v| quantized::quantized(v)).collect();
    let items: Vec<(i64, &[i8])> = coded
        .iter()
        .enumerate()
        .map(|(i, (codes, _))| (i as i64, codes.as_slice()))
        .collect();
    eprintln!(
        "   recall {size}: {} vectors embedded in {:.1} s; building the graph",
        size,
        started.elapsed().as_secs_f64()
    );
    let expansions = match args.graph_expansion_add.as_slice() {
        [] => vec![ann::EXPANSION_ADD],
        values => values.to_vec(),
    };
    let mut recalls = Vec::new();
    for expansion_add in expansions {
        let built = Instant::now();
        let ann = AnnIndex::build(args.dimensions, &items, size, 2, expansion_add)?;
        let build_secs = built.elapsed().as_secs_f64();
        let k = args.top_k;
        let wanted = rescore::candidates(k);
        let (mut hnsw, mut hnsw_rescored, mut int8, mut int8_rescored) = (0.0, 0.0, 0.0, 0.0);
        let queries: Vec<Vec<f32>> = corpus
            .questions
            .iter()
            .take(args.recall_queries)
            .map(|q| embedder.embed_one(q))
            .collect();
        let exact_of = |ids: &[Hit]| -> HashMap<i64, Vec<f32>> {
            ids.iter()
                .map(|h| (h.handle, vectors[h.handle as usize].clone()))
                .collect()
        };
        for query in &queries {
            let exact = dense::top_k(
                vectors
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (i as i64, v.as_slice())),
                query,
                k,
            );
            let graph: Vec<Hit> = ann
                .search(&quantized::quantized(query).0, wanted, None)?
                .into_iter()
                .map(|(id, sim)| Hit::dense(id, sim))
                .collect();
            let scan: Vec<Hit> = dense::top_k_scored(
                coded
                    .iter()
                    .enumerate()
                    .map(|(i, (codes, scale))| (i as i64, quantized::dot(codes, *scale, query))),
                wanted,
            )
            .into_iter()
            .map(|(id, sim)| Hit::dense(id, sim))
            .collect();
            let ids = |hits: &[Hit]| hits.iter().map(|h| h.handle).collect::<Vec<_>>();
            hnsw += recall_at(&ids(&graph), &exact, &vectors, query, k);
            int8 += recall_at(&ids(&scan), &exact, &vectors, query, k);
            let g = rescore::rescore(graph.clone(), &exact_of(&graph), query, k);
            hnsw_rescored += recall_at(&ids(&g), &exact, &vectors, query, k);
            let s = rescore::rescore(scan.clone(), &exact_of(&scan), query, k);
            int8_rescored += recall_at(&ids(&s), &exact, &vectors, query, k);
        }
        let n = queries.len().max(1) as f64;
        recalls.push(Recall {
            size,
            expansion_add,
            hnsw: hnsw / n,
            hnsw_rescored: hnsw_rescored / n,
            int8: int8 / n,
            int8_rescored: int8_rescored / n,
            build_secs,
        });
    }
    Ok(recalls)
}

// ---------------------------------------------------------------------------------------

fn print_report(args: &Args, results: &[RunResult], recalls: &[Recall]) {
    println!();
    println!(
        "memmachine-bench scale: top_k {}, {} queries per pass, batch {} x {} concurrent, \
         hash embedder {} dimensions for hybrid; server args {:?}",
        args.top_k, args.queries, args.batch, args.concurrency, args.dimensions, args.server_args
    );
    println!();
    println!(
        "| projects x episodes | ranking | ingest ack/s | all vectors stored s | first search ms | \
         graph built s | search p50 / p99 / mean ms | RSS MiB (peak) | disk MiB | restart to first search ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let opt = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
        };
        println!(
            "| {} | {} | {:.0} | {} | {:.0} | {} | {:.2} / {:.2} / {:.2} | {:.0} ({:.0}) | {:.0} | {} |",
            r.shape.label(),
            r.ranking.name(),
            r.shape.episodes() as f64 / r.ingest_secs,
            opt(r.vectors_secs, 1),
            r.first_search_ms,
            opt(r.graph_secs, 1),
            r.search.percentile(50.0),
            r.search.percentile(99.0),
            r.search.mean(),
            r.rss as f64 / MIB,
            r.rss_peak as f64 / MIB,
            r.disk as f64 / MIB,
            opt(r.restart_ms, 0),
        );
    }
    if !recalls.is_empty() {
        println!();
        println!(
            "| vectors | expansion_add | HNSW recall@{k} | HNSW + rescoring | int8 scan recall@{k} | int8 scan + rescoring | graph build s |",
            k = args.top_k
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        for r in recalls {
            println!(
                "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.1} |",
                r.size,
                r.expansion_add,
                r.hnsw,
                r.hnsw_rescored,
                r.int8,
                r.int8_rescored,
                r.build_secs
            );
        }
    }
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
    let shapes: Vec<Shape> = if args.projects.is_empty() {
        args.sizes
            .iter()
            .map(|&n| Shape {
                projects: 1,
                per_project: n,
            })
            .collect()
    } else {
        args.projects
            .iter()
            .map(|&p| Shape {
                projects: p,
                per_project: args.per_project,
            })
            .collect()
    };
    if shapes.iter().any(|s| s.episodes() == 0) {
        return Err("sizes, projects and --per-project must be positive".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (mut results, mut recalls) = (Vec::new(), Vec::new());
    for &shape in &shapes {
        if !args.recall_only {
            for &ranking in &args.rankings {
                results.push(runtime.block_on(run(&args, &corpus, &executable, shape, ranking))?);
            }
        }
        if (args.recall || args.recall_only) && shape.projects == 1 {
            recalls.extend(measure_recall(&corpus, shape.per_project, &args)?);
        }
    }
    print_report(&args, &results, &recalls);
    Ok(())
}
