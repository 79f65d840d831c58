//! `memmachine-bench feed`: the change feed's figures (issue 30). (a) Latency: two
//! server processes on one store, a watcher on B, adds through A one at a time: add
//! acknowledged -> change received, p50/p99, and the same through B (same replica) for
//! comparison. (b) 1,000 idle watchers on one server: its resident memory before and
//! after, CPU used over an idle spell, and the cross-replica latency with them attached.
//! See BENCHMARKS.md ("Streams: change feed").
//!
//! Run: `cargo run --release -p memmachine-bench -- feed --adds 500`
//! (PostgreSQL: `--store postgres://...`, or MEMMACHINE_TEST_POSTGRES set; each run
//! makes a project of its own)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::change_service_client::ChangeServiceClient;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

use crate::support;

use support::Result;
use support::cpu::cpu_seconds;
use support::latencies::Latencies;
use support::server::Server;

const ORG: &str = "bench";

#[derive(Parser, Debug)]
#[command(about = "Change-feed latency across replicas, and the cost of idle watchers")]
pub struct Args {
    /// Adds measured in each latency run, one message per call, one at a time
    #[arg(long, default_value_t = 500)]
    adds: usize,
    /// Idle watchers attached for part (b)
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// Seconds the idle watchers are left idle while CPU is measured
    #[arg(long, default_value_t = 30)]
    idle_secs: u64,
    /// Store URL both servers share (postgres://...) [default: MEMMACHINE_TEST_POSTGRES
    /// when set, else one SQLite file]
    #[arg(long)]
    store: Option<String>,
    /// Seconds between the servers' looks at other replicas' writes
    #[arg(long, default_value = "0.05")]
    watch_poll_interval: String,
    /// `memmachine` executable [default: next to this one]
    #[arg(long)]
    server: Option<PathBuf>,
}

pub fn main(args: Args) -> Result<()> {
    let executable = match &args.server {
        Some(path) => path.clone(),
        None => memmachine_testkit::server::server_bin(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(&args, &executable))
}

/// This run's project (a shared PostgreSQL database may hold earlier runs').
fn project() -> String {
    format!("feed-{}", std::process::id())
}

async fn connect(server: &Server) -> Result<Channel> {
    server.channel().await
}

/// Waits until the server answers memory calls (its domain is ready).
async fn ready(channel: &Channel) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut projects = ProjectServiceClient::new(channel.clone());
    loop {
        let asked = projects
            .list_projects(pb::ListProjectsRequest {
                org_id: Some(ORG.into()),
                ..Default::default()
            })
            .await;
        match asked {
            Ok(_) => return Ok(()),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(err) => return Err(format!("the server never became ready: {err}").into()),
        }
    }
}

async fn watch(channel: &Channel) -> Result<tonic::Streaming<pb::Change>> {
    Ok(ChangeServiceClient::new(channel.clone())
        .watch_changes(pb::WatchChangesRequest {
            org_id: ORG.into(),
            project_id: project(),
            after: String::new(),
        })
        .await?
        .into_inner())
}

/// `adds` adds through `writer`, one at a time, each timed from its acknowledgement to
/// its change arriving on `stream`.
async fn latency(
    writer: &Channel,
    stream: &mut tonic::Streaming<pb::Change>,
    adds: usize,
) -> Result<Latencies> {
    let mut memories = MemoryServiceClient::new(writer.clone());
    let mut samples = Vec::with_capacity(adds);
    for i in 0..adds {
        let added = memories
            .add_memories(pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: project(),
                types: vec![pb::MemoryType::Episodic as i32],
                messages: vec![pb::MemoryMessage {
                    content: format!("message {i} of the feed benchmark"),
                    producer: "bench".into(),
                    ..Default::default()
                }],
            })
            .await?
            .into_inner();
        let acknowledged = Instant::now();
        let uid = &added.results[0].uid;
        loop {
            let change = tokio::time::timeout(Duration::from_secs(10), stream.message())
                .await
                .map_err(|_| "no change within 10 s")??
                .ok_or("the stream ended")?;
            if &change.episode_uid == uid {
                break;
            }
        }
        samples.push(acknowledged.elapsed());
    }
    Ok(Latencies::new(samples))
}

fn report(label: &str, l: &Latencies) {
    println!(
        "{label}: n={} p50={:.2} ms p99={:.2} ms mean={:.2} ms max={:.2} ms",
        l.len(),
        l.percentile(50.0),
        l.percentile(99.0),
        l.mean(),
        l.max()
    );
}

async fn run(args: &Args, executable: &std::path::Path) -> Result<()> {
    let store = args
        .store
        .clone()
        .or_else(|| std::env::var("MEMMACHINE_TEST_POSTGRES").ok());
    let dir = std::env::temp_dir().join(format!("memmachine-feed-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut server_args = vec![
        "--embedder".to_string(),
        "none".to_string(),
        "--watch-poll-interval".to_string(),
        args.watch_poll_interval.clone(),
        "--max-change-streams-per-key".to_string(),
        (args.watchers + 10).to_string(),
    ];
    if let Some(url) = &store {
        server_args.extend(["--store".to_string(), url.clone()]);
    }
    println!(
        "store: {}; poll interval {} s; {} adds per run",
        if store.is_some() {
            "PostgreSQL"
        } else {
            "SQLite (one file, two processes)"
        },
        args.watch_poll_interval,
        args.adds
    );
    let startup = Duration::from_secs(120);
    let a = Server::start(executable, "feed-a", Some(&dir), &server_args, startup)?;
    let b = Server::start(executable, "feed-b", Some(&dir), &server_args, startup)?;
    let (to_a, to_b) = (connect(&a).await?, connect(&b).await?);
    ready(&to_a).await?;
    ready(&to_b).await?;
    ProjectServiceClient::new(to_a.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: project(),
            ..Default::default()
        })
        .await?;

    // (a) Latency, across replicas and on the same one.
    let mut on_b = watch(&to_b).await?;
    let warm = latency(&to_a, &mut on_b, 20.min(args.adds)).await?;
    drop(warm);
    let cross = latency(&to_a, &mut on_b, args.adds).await?;
    report("cross-replica (write on A, watch on B)", &cross);
    let same = latency(&to_b, &mut on_b, args.adds).await?;
    report("same replica (write on B, watch on B)", &same);

    // (b) Idle watchers on B.
    let rss_before = b.rss_bytes().unwrap_or(0);
    let mut idle = Vec::with_capacity(args.watchers);
    // Spread over a few connections, as many clients would be.
    let mut channels = Vec::new();
    for _ in 0..10 {
        channels.push(connect(&b).await?);
    }
    for i in 0..args.watchers {
        let mut stream = watch(&channels[i % channels.len()]).await?;
        // Idle, but they take what arrives (the loaded run writes to them all).
        idle.push(tokio::spawn(async move {
            while let Ok(Some(_)) = stream.message().await {}
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = b.rss_bytes().unwrap_or(0);
    let pid = b.pid().to_string();
    let cpu_start = cpu_seconds(&pid).unwrap_or(0.0);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let cpu_used = cpu_seconds(&pid).unwrap_or(0.0) - cpu_start;
    let wall = started.elapsed().as_secs_f64();
    println!(
        "{} idle watchers on B: RSS {:.1} MiB -> {:.1} MiB (+{:.1} KiB per watcher); \
         CPU {:.3} s over {:.0} s idle ({:.2}% of one core)",
        args.watchers,
        rss_before as f64 / 1048576.0,
        rss_after as f64 / 1048576.0,
        (rss_after.saturating_sub(rss_before)) as f64 / 1024.0 / args.watchers.max(1) as f64,
        cpu_used,
        wall,
        100.0 * cpu_used / wall
    );
    let loaded = latency(&to_a, &mut on_b, args.adds).await?;
    report(
        &format!(
            "cross-replica with {} idle watchers attached",
            args.watchers
        ),
        &loaded,
    );
    for watcher in idle {
        watcher.abort();
    }
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
