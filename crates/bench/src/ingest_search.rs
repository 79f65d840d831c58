//! `memmachine-bench ingest-search`: measures the real server over gRPC on loopback.
//!
//! For each corpus size it starts a fresh `memmachine serve` (the executable next to this
//! one) on an ephemeral port with an empty data directory, ingests that many episodes
//! built from the LoCoMo conversations with concurrent `AddMemories` calls, then runs
//! sequential `SearchMemories` calls with the LoCoMo questions, unfiltered and filtered,
//! and prints throughput and latency percentiles. See BENCHMARKS.md.
//!
//! Run: `cargo run --release -p memmachine-bench -- ingest-search --sizes 10000,100000`

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Endpoint;

use crate::support;

use support::api_key::{ApiKey, Link};
use support::corpus::{Corpus, load_corpus, message};
use support::cpu::{CpuMeter, opt_secs};
use support::latencies::Latencies;
use support::rng::Rng;
use support::server::Server;
use support::{BoxError, Result};

const ORG: &str = "bench";
const PROJECT: &str = "locomo";
/// How long the server may take to report its listening address.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
use support::corpus::SEED;

#[derive(Parser, Debug)]
#[command(about = "Benchmarks a real memmachine server over gRPC on loopback")]
pub struct Args {
    /// LoCoMo data set (a JSON list of conversations with questions)
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Corpus sizes in episodes, comma separated; a fresh server and data dir per size
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    sizes: Vec<usize>,
    /// Messages per AddMemories call
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Concurrent AddMemories client tasks (sharing one channel)
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// SearchMemories calls per search pass (LoCoMo questions, cycled)
    #[arg(long, default_value_t = 2000)]
    queries: usize,
    /// Untimed SearchMemories calls before each search pass
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// top_k of every search
    #[arg(long, default_value_t = 10)]
    top_k: i32,
    /// Filter of the second search pass [default: producer_id = '<first speaker>']
    #[arg(long)]
    filter: Option<String>,
    /// Extra arguments for `memmachine serve`, split on whitespace (no quoting), e.g.
    /// "--embedder hash"
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    server_args: String,
    /// `ProjectConfig.reranker` of the project (lexical, dense, hybrid) [default: the
    /// server's]
    #[arg(long, default_value = "")]
    reranker: String,
    /// Run the server with --auth and send an (admin) API key on every call, to measure
    /// what authentication costs
    #[arg(long)]
    auth: bool,
    /// With an embedder: how long to wait after ingest for every episode to be
    /// embedded before searching (0: do not wait)
    #[arg(long, default_value_t = 0)]
    embed_wait_secs: u64,
    /// Server executable [default: `memmachine` next to this executable]
    #[arg(long)]
    server: Option<PathBuf>,
    /// The server's `--store` (e.g. postgres://postgres@127.0.0.1:5432/bench); the
    /// project is deleted and made again for each size [default: SQLite in a fresh
    /// data dir]
    #[arg(long)]
    store: Option<String>,
    /// After the searches, start a second server over the same store and measure how
    /// soon it serves what the first acknowledges (catch-up), and what loading the
    /// project's index costs it (time, memory)
    #[arg(long)]
    replica: bool,
    /// Writes (each followed by searches on the replica until it is found) in the
    /// catch-up measurement
    #[arg(long, default_value_t = 200)]
    catch_up_rounds: usize,
}

/// All AddMemories requests for `size` episodes, built before timing starts.
fn add_requests(corpus: &Corpus, size: usize, batch: usize) -> Vec<pb::AddMemoriesRequest> {
    let mut rng = Rng::new(SEED);
    (0..size)
        .step_by(batch)
        .map(|start| pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            types: vec![pb::MemoryType::Episodic as i32],
            messages: (start..(start + batch).min(size))
                .map(|i| message(corpus, i, &mut rng))
                .collect(),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The server process

/// A running `memmachine serve` with its own data directory; both go away on drop.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// Measurements

struct IngestResult {
    messages: usize,
    wall: Duration,
    batches: Latencies,
    server_cpu: Option<f64>,
    client_cpu: Option<f64>,
}

struct SearchResult {
    wall: Duration,
    calls: Latencies,
    /// Mean long-term hits per query.
    mean_hits: f64,
    empty: usize,
    server_cpu: Option<f64>,
}

struct SizeResult {
    size: usize,
    ingest: IngestResult,
    search: SearchResult,
    filtered: SearchResult,
    db_bytes: u64,
    replica: Option<ReplicaResult>,
}

async fn ingest(
    channel: Link,
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
    let used = cpu.stop();
    let (server_cpu, client_cpu) = (used.server, used.client);
    Ok(IngestResult {
        messages,
        wall,
        batches: Latencies::new(latencies),
        server_cpu,
        client_cpu,
    })
}

async fn search(
    channel: Link,
    questions: &[String],
    args: &Args,
    filter: &str,
    server: &Server,
) -> Result<SearchResult> {
    let mut client = MemoryServiceClient::new(channel);
    let request = |query: &str| pb::SearchMemoriesRequest {
        org_id: ORG.into(),
        project_id: PROJECT.into(),
        query: query.to_string(),
        top_k: Some(args.top_k),
        filter: filter.to_string(),
        types: vec![pb::MemoryType::Episodic as i32],
        ..Default::default()
    };
    // Warm up on the tail of the question list, which the timed pass reaches last.
    for query in questions.iter().rev().cycle().take(args.warmup) {
        client
            .search_memories(request(query))
            .await
            .map_err(|err| server.error("SearchMemories failed", err))?;
    }
    let mut latencies = Vec::with_capacity(args.queries);
    let (mut hits, mut empty) = (0usize, 0usize);
    let cpu = CpuMeter::start(server.pid());
    let started = Instant::now();
    for query in questions.iter().cycle().take(args.queries) {
        let request = request(query);
        let sent = Instant::now();
        let response = client
            .search_memories(request)
            .await
            .map_err(|err| server.error("SearchMemories failed", err))?
            .into_inner();
        latencies.push(sent.elapsed());
        let found = response
            .episodic_memory
            .map_or(0, |m| m.long_term_memory.len());
        hits += found;
        empty += usize::from(found == 0);
    }
    let wall = started.elapsed();
    let server_cpu = cpu.stop().server;
    Ok(SearchResult {
        wall,
        calls: Latencies::new(latencies),
        mean_hits: hits as f64 / args.queries.max(1) as f64,
        empty,
        server_cpu,
    })
}

async fn run_size(
    args: &Args,
    corpus: &Corpus,
    executable: &Path,
    filter: &str,
    size: usize,
) -> Result<SizeResult> {
    let requests = add_requests(corpus, size, args.batch.max(1));
    let mut extra_args: Vec<String> = args
        .server_args
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if args.auth {
        extra_args.push("--auth".into());
    }
    if let Some(store) = &args.store {
        extra_args.extend(["--store".to_string(), store.clone()]);
    }
    let server = Server::start(
        executable,
        &format!("memmachine-bench-{size}"),
        None,
        &extra_args,
        STARTUP_TIMEOUT,
    )?;
    eprintln!(
        "== {size} episodes: server pid {} on {}, data dir {}",
        server.pid(),
        server.addr,
        server.data_dir.display()
    );
    let channel = Endpoint::from_shared(format!("http://{}", server.addr))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|err| server.error("cannot connect", err))?;
    let key = if args.auth {
        ApiKey::create_admin(executable, &server.data_dir, "memmachine-bench")?
    } else {
        ApiKey::default()
    };
    let channel = InterceptedService::new(channel, key.clone());
    let mut projects = ProjectServiceClient::new(channel.clone());
    // A shared store may hold an earlier run's project.
    match projects
        .delete_project(pb::DeleteProjectRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
        })
        .await
    {
        Ok(_) => eprintln!("   deleted an earlier run's project"),
        Err(status) if status.code() == tonic::Code::NotFound => {}
        Err(err) => return Err(server.error("DeleteProject failed", err)),
    }
    projects
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            description: "memmachine-bench ingest-search LoCoMo corpus".into(),
            config: Some(pb::ProjectConfig {
                embedder: String::new(),
                reranker: args.reranker.clone(),
            }),
        })
        .await
        .map_err(|err| server.error("CreateProject failed", err))?;

    let ingest = ingest(channel.clone(), requests, args.concurrency, &server).await?;
    let count = projects
        .get_episode_count(pb::GetEpisodeCountRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
        })
        .await
        .map_err(|err| server.error("GetEpisodeCount failed", err))?
        .into_inner()
        .count;
    if count != size as i64 {
        return Err(format!("the project holds {count} episodes, expected {size}").into());
    }
    eprintln!(
        "   ingest: {} msgs in {:.2} s = {:.0} msg/s",
        ingest.messages,
        ingest.wall.as_secs_f64(),
        ingest.messages as f64 / ingest.wall.as_secs_f64()
    );
    if args.embed_wait_secs > 0 {
        server
            .wait_for_embeddings(size as u64, args.embed_wait_secs)
            .await;
    }
    let db_bytes = dir_bytes(&server.data_dir);
    if let Some(url) = args.store.as_deref().filter(|s| s.starts_with("postgres")) {
        // Fresh tables have no statistics until autovacuum's next look (up to a minute
        // away); search in the steady state an operator's database is in.
        analyze(url).await?;
    }
    if args.embed_wait_secs > 0 && size >= GRAPH_MIN {
        // The first read loads the project's index and starts its vector graph, which
        // is built off the read path: measure steady state, with the graph in place.
        let mut memories = MemoryServiceClient::new(channel.clone());
        memories
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                query: "warm up".into(),
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("SearchMemories failed", err))?;
        match server
            .wait_for_graphs(1, Duration::from_secs(args.embed_wait_secs))
            .await
        {
            Some(waited) => eprintln!(
                "   vector graph built {:.1} s after the first search",
                waited.as_secs_f64()
            ),
            None => eprintln!("   warning: no vector graph reported; searches scan"),
        }
    }

    let unfiltered = search(channel.clone(), &corpus.questions, args, "", &server).await?;
    eprintln!(
        "   search: p50 {:.2} ms p99 {:.2} ms",
        unfiltered.calls.percentile(50.0),
        unfiltered.calls.percentile(99.0)
    );
    let filtered = search(channel.clone(), &corpus.questions, args, filter, &server).await?;
    eprintln!(
        "   filtered search: p50 {:.2} ms p99 {:.2} ms",
        filtered.calls.percentile(50.0),
        filtered.calls.percentile(99.0)
    );
    let replica = if args.replica {
        // No budget for warming up: the project's index loads on the first search,
        // which measures that load and the memory it takes.
        let mut replica_args = extra_args.clone();
        replica_args.extend(["--index-memory".to_string(), "0".to_string()]);
        let replica = Server::start(
            executable,
            "memmachine-bench-replica",
            Some(&server.data_dir),
            &replica_args,
            STARTUP_TIMEOUT,
        )?;
        let replica_channel = Endpoint::from_shared(format!("http://{}", replica.addr))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|err| replica.error("cannot connect", err))?;
        let replica_channel = InterceptedService::new(replica_channel, key.clone());
        Some(measure_replica(args, channel, replica_channel, &replica).await?)
    } else {
        None
    };
    drop(server);
    Ok(SizeResult {
        size,
        ingest,
        search: unfiltered,
        filtered,
        db_bytes,
        replica,
    })
}

/// What a second replica costs and how soon it sees the first's writes.
struct ReplicaResult {
    /// The first search, which loads the project's index from the store.
    cold_search: Duration,
    /// Resident memory the loaded index added, and the server's own estimate of it.
    rss_added: Option<u64>,
    index_estimate: u64,
    /// From a write's acknowledgement by the first server to the first search of the
    /// replica that finds it.
    catch_up: Latencies,
}

async fn measure_replica(
    args: &Args,
    primary: Link,
    replica: Link,
    server: &Server,
) -> Result<ReplicaResult> {
    let mut primary_memories = MemoryServiceClient::new(primary);
    let mut memories = MemoryServiceClient::new(replica);
    let search = |query: String| pb::SearchMemoriesRequest {
        org_id: ORG.into(),
        project_id: PROJECT.into(),
        query,
        top_k: Some(args.top_k),
        ..Default::default()
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = server.rss_bytes();
    let started = Instant::now();
    memories
        .search_memories(search("what did they talk about".into()))
        .await
        .map_err(|err| server.error("replica search failed", err))?;
    let cold_search = started.elapsed();
    let rss_added = rss_before
        .zip(server.rss_bytes())
        .map(|(before, after)| after.saturating_sub(before));
    let mut catch_up = Vec::with_capacity(args.catch_up_rounds);
    for round in 0..args.catch_up_rounds {
        let token = format!("replicatoken{round}x");
        primary_memories
            .add_memories(pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                messages: vec![pb::MemoryMessage {
                    content: format!("a note carrying {token}"),
                    producer: "bench".into(),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await?;
        let acknowledged = Instant::now();
        loop {
            let found = memories
                .search_memories(search(token.clone()))
                .await?
                .into_inner()
                .episodic_memory
                .is_some_and(|m| {
                    m.long_term_memory.iter().any(|hit| {
                        hit.episode
                            .as_ref()
                            .is_some_and(|e| e.content.contains(&token))
                    })
                });
            if found {
                break;
            }
            if acknowledged.elapsed() > Duration::from_secs(10) {
                return Err(format!("the replica did not find write {round} within 10 s").into());
            }
        }
        catch_up.push(acknowledged.elapsed());
    }
    let catch_up = Latencies::new(catch_up);
    eprintln!(
        "   replica: cold search {:.1} ms, index {:.1} MiB RSS ({:.1} MiB estimated), \
         catch-up p50 {:.2} ms p99 {:.2} ms",
        cold_search.as_secs_f64() * 1e3,
        rss_added.unwrap_or(0) as f64 / MIB,
        server.index_bytes() as f64 / MIB,
        catch_up.percentile(50.0),
        catch_up.percentile(99.0)
    );
    Ok(ReplicaResult {
        cold_search,
        rss_added,
        index_estimate: server.index_bytes(),
        catch_up,
    })
}

const MIB: f64 = 1024.0 * 1024.0;

/// `ANALYZE` on the PostgreSQL store at `url`.
async fn analyze(url: &str) -> Result<()> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query("ANALYZE").execute(&mut conn).await?;
    conn.close().await?;
    eprintln!("   ANALYZE done");
    Ok(())
}
/// Vectors from which a project gets a vector graph (the server's `ANN_MIN_VECTORS`).
const GRAPH_MIN: usize = 20_000;

fn print_report(args: &Args, corpus: &Corpus, filter: &str, results: &[SizeResult]) {
    println!();
    println!(
        "memmachine-bench ingest-search: {} LoCoMo turns, {} questions; batch {}, concurrency {}, {} queries \
         per pass (top_k {}, EPISODIC), filter: {filter}; reranker: {:?}; server args: {:?}; \
         auth: {}",
        corpus.turns.len(),
        corpus.questions.len(),
        args.batch,
        args.concurrency,
        args.queries,
        args.top_k,
        args.reranker,
        args.server_args,
        args.auth
    );
    println!();
    println!(
        "| size | ingest msg/s | add p50/p99 ms | search p50/p99/mean ms | search q/s | \
         filtered p50/p99/mean ms | filtered q/s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for r in results {
        let row = |s: &SearchResult| {
            (
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    s.calls.percentile(50.0),
                    s.calls.percentile(99.0),
                    s.calls.mean()
                ),
                format!("{:.0}", s.calls.len() as f64 / s.wall.as_secs_f64()),
            )
        };
        let (search, search_qps) = row(&r.search);
        let (filtered, filtered_qps) = row(&r.filtered);
        println!(
            "| {} | {:.0} | {:.1} / {:.1} | {search} | {search_qps} | {filtered} | {filtered_qps} |",
            r.size,
            r.ingest.messages as f64 / r.ingest.wall.as_secs_f64(),
            r.ingest.batches.percentile(50.0),
            r.ingest.batches.percentile(99.0),
        );
    }
    println!();
    println!("Details:");
    for r in results {
        let i = &r.ingest;
        println!(
            "  {}: ingest {} msgs in {:.2} s ({} batches, max {:.1} ms); CPU s server {} / \
             bench {}; database {:.1} MiB",
            r.size,
            i.messages,
            i.wall.as_secs_f64(),
            i.batches.len(),
            i.batches.max(),
            opt_secs(i.server_cpu),
            opt_secs(i.client_cpu),
            r.db_bytes as f64 / (1024.0 * 1024.0)
        );
        if let Some(replica) = &r.replica {
            println!(
                "  {}: replica: first search (loads the index) {:.1} ms; index {:.1} MiB \
                 resident ({:.1} MiB estimated); catch-up p50 {:.2} ms, p99 {:.2} ms, max \
                 {:.2} ms over {} writes",
                r.size,
                replica.cold_search.as_secs_f64() * 1e3,
                replica.rss_added.unwrap_or(0) as f64 / MIB,
                replica.index_estimate as f64 / MIB,
                replica.catch_up.percentile(50.0),
                replica.catch_up.percentile(99.0),
                replica.catch_up.max(),
                replica.catch_up.len()
            );
        }
        for (name, s) in [("search", &r.search), ("filtered", &r.filtered)] {
            println!(
                "  {}: {name:>8} {} calls in {:.2} s, max {:.2} ms, {:.1} hits/query, {} empty; \
                 server CPU s {}",
                r.size,
                s.calls.len(),
                s.wall.as_secs_f64(),
                s.calls.max(),
                s.mean_hits,
                s.empty,
                opt_secs(s.server_cpu)
            );
        }
    }
}

pub fn main(args: Args) -> Result<()> {
    if args.sizes.is_empty() || args.sizes.contains(&0) {
        return Err("--sizes must list positive sizes".into());
    }
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
    let filter = args
        .filter
        .clone()
        .unwrap_or_else(|| format!("producer_id = '{}'", corpus.first_speaker.replace('\'', "")));
    eprintln!(
        "corpus: {} turns, {} questions, {} words; server {}",
        corpus.turns.len(),
        corpus.questions.len(),
        corpus.words.len(),
        executable.display()
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut results = Vec::new();
    for &size in &args.sizes {
        results.push(runtime.block_on(run_size(&args, &corpus, &executable, &filter, size))?);
    }
    print_report(&args, &corpus, &filter, &results);
    Ok(())
}
