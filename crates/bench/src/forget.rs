//! `memmachine-bench forget`: what forgetting a subject costs the real server (issue 29).
//! It starts a fresh `memmachine serve` (the executable next to this one), stores one
//! project of `--others` episodes of other people and `--subject-episodes` of the
//! subject (half said by them, half said to them), `--features` features citing the
//! subject's episodes (every tenth also citing someone else's, so it stays with one
//! citation fewer) and as many citing only others', then measures over gRPC on loopback:
//!
//! - search p50/p99 (top_k 10, episodic, one client in a loop) before the forget;
//! - `ForgetSubject` of the subject: its wall time and receipt;
//! - search p50/p99 of the same client while the forget runs, and the ratio.
//!
//! See BENCHMARKS.md ("Forgetting a subject (issue 29)").
//!
//! Run: `cargo build --release --bin memmachine --bin memmachine-bench &&
//! target/release/memmachine-bench forget`

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::lifecycle_service_client::LifecycleServiceClient;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::support;

use support::Result;
use support::latencies::Latencies;
use support::rng::Rng;
use support::server::Server;

const ORG: &str = "forget";
const PROJECT: &str = "p";
const SUBJECT: &str = "subject-0";
const WORDS: &[&str] = &[
    "apple", "river", "mountain", "coffee", "train", "garden", "violin", "market", "winter",
    "doctor", "python", "soccer", "paris", "letter", "bridge", "cookie", "sunset", "rocket",
    "forest", "museum", "pepper", "guitar", "island", "candle", "dragon", "harbor", "tennis",
    "yellow", "silver", "planet", "summer", "ticket",
];

#[derive(Parser, Debug)]
#[command(about = "Measures forgetting a subject among many others on a real memmachine server")]
pub struct Args {
    /// Episodes of other people
    #[arg(long, default_value_t = 100_000)]
    others: usize,
    /// Episodes of the subject (half said by them, half to them)
    #[arg(long, default_value_t = 10_000)]
    subject_episodes: usize,
    /// Features citing the subject's episodes (and as many citing only others')
    #[arg(long, default_value_t = 1_000)]
    features: usize,
    /// Searches measured before the forget
    #[arg(long, default_value_t = 300)]
    searches: usize,
    /// Extra `memmachine serve` flags, e.g. "--store postgres://..." (space separated)
    #[arg(long, default_value = "--embedder none")]
    serve_args: String,
}

fn sentence(rng: &mut Rng, who: &str) -> String {
    let words: Vec<&str> = (0..8).map(|_| WORDS[rng.below(WORDS.len())]).collect();
    format!("{who} said {}", words.join(" "))
}

async fn add(channel: &Channel, messages: Vec<pb::MemoryMessage>) -> Result<Vec<String>> {
    let response = MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            messages,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(response.results.into_iter().map(|r| r.uid).collect())
}

async fn search(channel: &Channel, rng: &mut Rng) -> Result<Duration> {
    let query = format!(
        "{} {}",
        WORDS[rng.below(WORDS.len())],
        WORDS[rng.below(WORDS.len())]
    );
    let started = Instant::now();
    MemoryServiceClient::new(channel.clone())
        .search_memories(pb::SearchMemoriesRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            query,
            top_k: Some(10),
            types: vec![pb::MemoryType::Episodic as i32],
            ..Default::default()
        })
        .await?;
    Ok(started.elapsed())
}

async fn feature(channel: &Channel, set_id: &str, i: usize, citations: Vec<String>) -> Result<()> {
    SemanticServiceClient::new(channel.clone())
        .add_feature(pb::AddFeatureRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            set_id: set_id.into(),
            category_name: "notes".into(),
            tag: "facts".into(),
            feature: format!("fact {i}"),
            value: format!("value {i}"),
            citations,
            ..Default::default()
        })
        .await?;
    Ok(())
}

fn summary(name: &str, l: &Latencies) -> String {
    format!(
        "{name}: {} searches, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        l.len(),
        l.percentile(50.0),
        l.percentile(99.0),
        l.max()
    )
}

pub fn main(args: Args) -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(measure(args))
}

async fn measure(args: Args) -> Result<()> {
    let executable: PathBuf = memmachine_testkit::server::server_bin();
    let serve_args: Vec<String> = args
        .serve_args
        .split_whitespace()
        .map(String::from)
        .collect();
    let server = Server::start(
        &executable,
        "memmachine-forget-bench",
        None,
        &serve_args,
        Duration::from_secs(600),
    )?;
    let channel = Endpoint::from_shared(format!("http://{}", server.addr))?
        .connect()
        .await?;
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            ..Default::default()
        })
        .await?;

    // The subject's episodes spread evenly among the others', in batches of 1,000.
    let total = args.others + args.subject_episodes;
    let every = (total / args.subject_episodes.max(1)).max(1);
    let mut rng = Rng::new(29);
    let (mut subject_uids, mut other_uids) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let mut batch = Vec::with_capacity(1000);
    let mut kinds = Vec::with_capacity(1000);
    let mut theirs_so_far = 0;
    for i in 0..total {
        let theirs = i % every == 0 && theirs_so_far < args.subject_episodes;
        theirs_so_far += usize::from(theirs);
        let message = if theirs && theirs_so_far % 2 == 0 {
            pb::MemoryMessage {
                content: sentence(&mut rng, SUBJECT),
                producer: SUBJECT.into(),
                ..Default::default()
            }
        } else if theirs {
            pb::MemoryMessage {
                content: sentence(&mut rng, "assistant"),
                producer: "assistant".into(),
                produced_for: SUBJECT.into(),
                ..Default::default()
            }
        } else {
            let who = format!("user-{}", rng.below(5000));
            pb::MemoryMessage {
                content: sentence(&mut rng, &who),
                producer: who,
                ..Default::default()
            }
        };
        batch.push(message);
        kinds.push(theirs);
        if batch.len() == 1000 || i + 1 == total {
            let uids = add(&channel, std::mem::take(&mut batch)).await?;
            for (uid, theirs) in uids.into_iter().zip(kinds.drain(..)) {
                if theirs {
                    subject_uids.push(uid);
                } else {
                    other_uids.push(uid);
                }
            }
        }
    }
    println!(
        "stored {} episodes ({} of the subject) in {:.1} s",
        total,
        subject_uids.len(),
        started.elapsed().as_secs_f64()
    );

    let set_id = SemanticServiceClient::new(channel.clone())
        .get_set_id(pb::GetSetIdRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .set_id;
    SemanticServiceClient::new(channel.clone())
        .add_category(pb::AddCategoryRequest {
            org_id: ORG.into(),
            project_id: PROJECT.into(),
            set_id: set_id.clone(),
            category_name: "notes".into(),
            prompt: "notes".into(),
            ..Default::default()
        })
        .await?;
    let per = (subject_uids.len() / args.features.max(1)).max(1);
    for i in 0..args.features {
        let mut citations: Vec<String> = subject_uids
            .iter()
            .skip(i * per)
            .take(per)
            .cloned()
            .collect();
        if i % 10 == 0 {
            citations.push(other_uids[rng.below(other_uids.len())].clone());
        }
        feature(&channel, &set_id, i, citations).await?;
        let bystander = vec![other_uids[rng.below(other_uids.len())].clone()];
        feature(&channel, &set_id, args.features + i, bystander).await?;
    }

    // Search before: warmed up, then measured.
    for _ in 0..20 {
        search(&channel, &mut rng).await?;
    }
    let mut before = Vec::with_capacity(args.searches);
    for _ in 0..args.searches {
        before.push(search(&channel, &mut rng).await?);
    }
    let before = Latencies::new(before);

    // Search during: one client in a loop until the forget answers.
    let done = Arc::new(AtomicBool::new(false));
    let searcher = {
        let (channel, done) = (channel.clone(), done.clone());
        tokio::spawn(async move {
            let mut rng = Rng::new(7);
            let mut during = Vec::new();
            while !done.load(Ordering::Relaxed) {
                match search(&channel, &mut rng).await {
                    Ok(took) => during.push(took),
                    Err(err) => eprintln!("search failed during the forget: {err}"),
                }
            }
            during
        })
    };
    let started = Instant::now();
    let receipt = LifecycleServiceClient::new(channel.clone())
        .forget_subject(pb::ForgetSubjectRequest {
            org_id: ORG.into(),
            subject: SUBJECT.into(),
            project_ids: vec![PROJECT.into()],
            dry_run: false,
        })
        .await?
        .into_inner()
        .receipt
        .ok_or("no receipt")?;
    let took = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let during = Latencies::new(searcher.await?);

    println!("forget: {:.2} s", took.as_secs_f64());
    for p in &receipt.projects {
        println!(
            "  receipt {}: {} episodes, {} features, {} citations, {} summaries, {} sets",
            p.project_id,
            p.episodes_deleted,
            p.features_deleted,
            p.citations_removed,
            p.summaries_deleted,
            p.sets_deleted
        );
    }
    println!("{}", summary("search before", &before));
    println!("{}", summary("search during", &during));
    println!(
        "ratio during/before: p50 {:.2}x, p99 {:.2}x",
        during.percentile(50.0) / before.percentile(50.0),
        during.percentile(99.0) / before.percentile(99.0)
    );
    Ok(())
}
