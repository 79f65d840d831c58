//! `memmachine-bench rest`: the REST gateway's added cost against gRPC, in one run on one
//! server: the same LoCoMo turns added one message per call, and the same questions
//! searched, alternately over gRPC and over the gateway (each into its own project), so
//! that both see the same machine at the same moment. See BENCHMARKS.md.
//!
//! Run: `cargo run --release -p memmachine-bench -- rest --messages 2000 --searches 1000`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use serde_json::{Value, json};

use crate::support;

use support::Result;
use support::latencies::Latencies;
use support::locomo;
use support::server::Server;

const ORG: &str = "bench";

#[derive(Parser, Debug)]
#[command(about = "The REST gateway's added latency against gRPC, same server, same data")]
pub struct Args {
    /// LoCoMo file
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Messages added through each transport, one per call
    #[arg(long, default_value_t = 2000)]
    messages: usize,
    /// Searches through each transport
    #[arg(long, default_value_t = 1000)]
    searches: usize,
    /// Server arguments for the embedder (hash: the index and transport, not a model)
    #[arg(long, default_value = "hash")]
    embedder: String,
    /// `memmachine` executable [default: next to this one]
    #[arg(long)]
    server: Option<PathBuf>,
}

pub fn main(args: Args) -> Result<()> {
    let executable = match &args.server {
        Some(path) => path.clone(),
        None => memmachine_testkit::server::server_bin(),
    };
    let (conversations, _) = locomo::load(&args.locomo, None, locomo::ContentFormat::default())?;
    let mut turns = Vec::new();
    let mut questions = Vec::new();
    for conversation in &conversations {
        for request in conversation.add_requests(ORG, "", 1) {
            turns.extend(request.messages);
        }
        questions.extend(conversation.questions.iter().map(|q| q.text.clone()));
    }
    turns.truncate(args.messages);
    if turns.is_empty() || questions.is_empty() {
        return Err("no turns or questions".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(&args, &executable, &turns, &questions))
}

async fn run(
    args: &Args,
    executable: &std::path::Path,
    turns: &[pb::MemoryMessage],
    questions: &[String],
) -> Result<()> {
    let rest_port = support::metrics::free_port()?;
    let server_args = vec![
        "--rest-listen".to_string(),
        format!("127.0.0.1:{rest_port}"),
        "--embedder".to_string(),
        args.embedder.clone(),
    ];
    let server = Server::start(
        executable,
        "memmachine-rest-bench",
        None,
        &server_args,
        Duration::from_secs(60),
    )?;
    let url = format!("http://{}", server.addr);
    let channel = tonic::transport::Endpoint::from_shared(url)?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut projects = ProjectServiceClient::new(channel.clone());
    let mut memories = MemoryServiceClient::new(channel);
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let base = format!("http://127.0.0.1:{rest_port}/api/v2");
    // The gateway answers once the domain is ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    while http.get(format!("{base}/health")).send().await?.status() != 200 {
        if Instant::now() > deadline {
            return Err("the REST gateway did not become healthy".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for project in ["grpc", "rest"] {
        projects
            .create_project(pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                ..Default::default()
            })
            .await?;
    }
    let rest_post = |path: &str, body: Value| {
        let request = http.post(format!("{base}{path}")).json(&body);
        async move {
            let response = request.send().await?;
            let status = response.status();
            let bytes = response.bytes().await?;
            if !status.is_success() {
                return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)).into());
            }
            Ok::<_, support::BoxError>(bytes.len())
        }
    };

    let (mut add_grpc, mut add_rest) = (Vec::new(), Vec::new());
    for (i, turn) in turns.iter().enumerate() {
        let grpc = async {
            let started = Instant::now();
            memories
                .add_memories(pb::AddMemoriesRequest {
                    org_id: ORG.into(),
                    project_id: "grpc".into(),
                    types: vec![pb::MemoryType::Episodic as i32],
                    messages: vec![turn.clone()],
                })
                .await?;
            Ok::<_, support::BoxError>(started.elapsed())
        };
        let timestamp = turn.timestamp.map_or(Value::Null, |t| json!(t.seconds));
        let body = json!({"org_id": ORG, "project_id": "rest", "types": ["episodic"],
            "messages": [{"content": turn.content, "producer": turn.producer,
                          "produced_for": turn.produced_for, "role": turn.role,
                          "timestamp": timestamp, "metadata": turn.metadata}]});
        let rest = async {
            let started = Instant::now();
            rest_post("/memories", body).await?;
            Ok::<_, support::BoxError>(started.elapsed())
        };
        // Alternate which goes first, so that neither always meets a warm cache.
        if i % 2 == 0 {
            add_grpc.push(grpc.await?);
            add_rest.push(rest.await?);
        } else {
            add_rest.push(rest.await?);
            add_grpc.push(grpc.await?);
        }
    }

    let (mut search_grpc, mut search_rest) = (Vec::new(), Vec::new());
    for i in 0..args.searches {
        let query = &questions[i % questions.len()];
        let grpc = async {
            let started = Instant::now();
            memories
                .search_memories(pb::SearchMemoriesRequest {
                    org_id: ORG.into(),
                    project_id: "grpc".into(),
                    query: query.clone(),
                    top_k: Some(10),
                    types: vec![pb::MemoryType::Episodic as i32],
                    ..Default::default()
                })
                .await?;
            Ok::<_, support::BoxError>(started.elapsed())
        };
        let body = json!({"org_id": ORG, "project_id": "rest", "query": query, "top_k": 10,
                          "types": ["episodic"]});
        let rest = async {
            let started = Instant::now();
            rest_post("/memories/search", body).await?;
            Ok::<_, support::BoxError>(started.elapsed())
        };
        if i % 2 == 0 {
            search_grpc.push(grpc.await?);
            search_rest.push(rest.await?);
        } else {
            search_rest.push(rest.await?);
            search_grpc.push(grpc.await?);
        }
    }

    println!(
        "{} messages added one per call, {} searches (top_k 10, episodic), embedder {}",
        turns.len(),
        args.searches,
        args.embedder
    );
    println!(
        "{:<8} {:<6} {:>9} {:>9} {:>9} {:>9}",
        "call", "via", "p50 ms", "p90 ms", "p99 ms", "mean ms"
    );
    let mut figures = serde_json::Map::new();
    for (call, grpc, rest) in [
        ("add", add_grpc, add_rest),
        ("search", search_grpc, search_rest),
    ] {
        let (grpc, rest) = (Latencies::new(grpc), Latencies::new(rest));
        for (via, l) in [("gRPC", &grpc), ("REST", &rest)] {
            println!(
                "{call:<8} {via:<6} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                l.percentile(50.0),
                l.percentile(90.0),
                l.percentile(99.0),
                l.mean()
            );
        }
        let added = rest.percentile(50.0) - grpc.percentile(50.0);
        println!("{call:<8} added by the gateway at p50: {added:+.3} ms");
        figures.insert(
            call.to_string(),
            json!({
                "grpc": {"p50": grpc.percentile(50.0), "p90": grpc.percentile(90.0), "p99": grpc.percentile(99.0)},
                "rest": {"p50": rest.percentile(50.0), "p90": rest.percentile(90.0), "p99": rest.percentile(99.0)},
                "added_p50_ms": added,
            }),
        );
    }
    println!("{}", Value::Object(figures));
    drop(server);
    Ok(())
}
