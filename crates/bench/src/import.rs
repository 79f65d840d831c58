//! `memmachine-bench import`: acknowledged ingest throughput of `ImportMemories` (client
//! streams of batches) against concurrent unary `AddMemories`, on a fresh `memmachine
//! serve` (the executable next to this one) per run, with LoCoMo-built messages as
//! `memmachine-bench ingest-search` sends them. See BENCHMARKS.md ("Streams: import").
//!
//! Run: `cargo run --release -p memmachine-bench -- import --messages 1000000`

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::support;

use support::corpus::{Corpus, SEED, load_corpus, message};
use support::cpu::CpuMeter;
use support::rng::Rng;
use support::server::Server;
use support::{BoxError, Result};

const ORG: &str = "bench";
const PROJECT: &str = "import";
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Parser, Debug)]
#[command(about = "ImportMemories vs AddMemories throughput")]
pub struct Args {
    /// LoCoMo file the messages are built from
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Messages per run
    #[arg(long, default_value_t = 1_000_000)]
    messages: usize,
    /// Batch sizes to run, each with both ways
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    batches: Vec<usize>,
    /// Ways to run: import, unary
    #[arg(long, value_delimiter = ',', default_value = "import,unary")]
    modes: Vec<String>,
    /// Concurrent import streams
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Concurrent unary callers (memmachine-bench ingest-search's default)
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// `--store URL` for the server (default: SQLite under a fresh data directory)
    #[arg(long)]
    store: Option<String>,
    /// More server arguments, space separated
    #[arg(long, default_value = "--embedder none", allow_hyphen_values = true)]
    server_args: String,
    /// The server executable [default: `memmachine` next to this one]
    #[arg(long)]
    server: Option<PathBuf>,
}

/// The run's batches, built before the clock starts.
fn batches(corpus: &Corpus, size: usize, batch: usize) -> Vec<Vec<pb::MemoryMessage>> {
    let mut rng = Rng::new(SEED);
    (0..size)
        .step_by(batch)
        .map(|start| {
            (start..(start + batch).min(size))
                .map(|i| message(corpus, i, &mut rng))
                .collect()
        })
        .collect()
}

/// `n` streams, each importing every `n`-th batch.
async fn import(
    channel: Channel,
    batches: Vec<Vec<pb::MemoryMessage>>,
    streams: usize,
) -> Result<u64> {
    let streams = streams.max(1);
    let mut parts: Vec<Vec<pb::ImportMemoriesRequest>> = vec![Vec::new(); streams];
    for (i, messages) in batches.into_iter().enumerate() {
        parts[i % streams].push(pb::ImportMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            types: vec![pb::MemoryType::Episodic as i32],
            messages,
        });
    }
    let mut tasks = Vec::new();
    for part in parts {
        let mut client =
            MemoryServiceClient::new(channel.clone()).max_encoding_message_size(usize::MAX);
        tasks.push(tokio::spawn(async move {
            let answer = client
                .import_memories(futures::stream::iter(part))
                .await?
                .into_inner();
            if let Some(err) = answer.first_error {
                return Err::<u64, BoxError>(format!("import stopped: {err:?}").into());
            }
            Ok(answer.messages as u64)
        }));
    }
    let mut stored = 0;
    for task in tasks {
        stored += task.await??;
    }
    Ok(stored)
}

/// `concurrency` callers taking batches from one queue.
async fn unary(
    channel: Channel,
    batches: Vec<Vec<pb::MemoryMessage>>,
    concurrency: usize,
) -> Result<u64> {
    let queue = Arc::new(Mutex::new(batches.into_iter()));
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let queue = queue.clone();
        let mut client = MemoryServiceClient::new(channel.clone());
        tasks.push(tokio::spawn(async move {
            let mut stored = 0u64;
            loop {
                let Some(messages) = queue.lock().expect("queue lock").next() else {
                    break;
                };
                let answer = client
                    .add_memories(pb::AddMemoriesRequest {
                        org_id: ORG.into(),
                        project_id: PROJECT.into(),
                        types: vec![pb::MemoryType::Episodic as i32],
                        messages,
                    })
                    .await?
                    .into_inner();
                stored += answer.results.len() as u64;
            }
            Ok::<u64, BoxError>(stored)
        }));
    }
    let mut stored = 0;
    for task in tasks {
        stored += task.await??;
    }
    Ok(stored)
}

async fn run(
    args: &Args,
    executable: &std::path::Path,
    corpus: &Corpus,
    mode: &str,
    batch: usize,
) -> Result<()> {
    let batches = batches(corpus, args.messages, batch);
    let mut extra: Vec<String> = args
        .server_args
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if let Some(store) = &args.store {
        extra.extend(["--store".to_string(), store.clone()]);
    }
    let server = Server::start(
        executable,
        "memmachine-import-bench",
        None,
        &extra,
        STARTUP_TIMEOUT,
    )?;
    let channel = Endpoint::from_shared(format!("http://{}", server.addr))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|err| server.error("cannot connect", err))?;
    let mut projects = ProjectServiceClient::new(channel.clone());
    // A shared store may hold an earlier run's project.
    let _ = projects
        .delete_project(pb::DeleteProjectRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
        })
        .await;
    projects
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            description: "memmachine-bench import".into(),
            config: None,
        })
        .await
        .map_err(|err| server.error("CreateProject failed", err))?;
    let cpu = CpuMeter::start(server.pid());
    let started = Instant::now();
    let stored = match mode {
        "import" => import(channel, batches, args.streams).await,
        "unary" => unary(channel, batches, args.concurrency).await,
        other => return Err(format!("unknown mode {other:?} (import, unary)").into()),
    }
    .map_err(|err| server.error(mode, err))?;
    let wall = started.elapsed();
    let used = cpu.stop();
    let ways = match mode {
        "import" => format!("{} stream(s)", args.streams),
        _ => format!("{} callers", args.concurrency),
    };
    println!(
        "{mode:6} batch {batch:5} {ways:12}: {stored} msgs in {:.2} s = {:.0} msg/s; CPU s server {:.2} client {:.2}",
        wall.as_secs_f64(),
        stored as f64 / wall.as_secs_f64(),
        used.server.unwrap_or(f64::NAN),
        used.client.unwrap_or(f64::NAN),
    );
    let top: Vec<String> = used
        .threads
        .iter()
        .take(4)
        .map(|(name, secs)| format!("{name} {secs:.2}"))
        .collect();
    println!("       server threads: {}", top.join(", "));
    if stored != args.messages as u64 {
        return Err(format!("{stored} of {} messages acknowledged", args.messages).into());
    }
    Ok(())
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    for &batch in &args.batches {
        for mode in &args.modes {
            runtime.block_on(run(&args, &executable, &corpus, mode, batch))?;
        }
    }
    Ok(())
}
