//! `memmachine-bench locomo`: retrieval recall of the real server on LoCoMo, over gRPC.
//!
//! For each ranking mode it starts a fresh `memmachine serve` (the executable next to
//! this one, with `--server-args` appended), creates one project per conversation
//! (org `locomo`, project `<sample_id>-<mode>`, `config.reranker = <mode>`), ingests
//! every turn with `AddMemories`, then asks every question of categories 1-4 with
//! `SearchMemories` in its own conversation's project and scores recall@k of the
//! evidence turns as `/work/shared/data/README.md` defines it. See BENCHMARKS.md.
//!
//! Run: `cargo run --release -p memmachine-bench -- locomo --modes lexical`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use serde_json::json;
use tonic::transport::Endpoint;

use crate::support;

use support::Result;
use support::latencies::Latencies;
use support::locomo::{self, CATEGORIES, Conversation, LoadStats, RecallSums, recall_at};
use support::server::{EmbedWait, Server};
use support::stage_split::{self, StageSplit};

const ORG: &str = "locomo";
/// How long the server may take to report its listening address (a local embedder may
/// load a model first).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);
/// The cut-offs recall is reported at (those not above `--top-k`).
const RECALL_KS: [usize; 5] = [1, 5, 10, 20, 50];
/// The cut-off of the per-category columns.
const CATEGORY_K: usize = 10;

#[derive(Parser, Debug)]
#[command(about = "Measures retrieval recall of a real memmachine server on LoCoMo over gRPC")]
pub struct Args {
    /// LoCoMo data set (a JSON list of conversations with questions)
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Ranking modes, comma separated; each gets a fresh server and is sent as
    /// `ProjectConfig.reranker` of every project
    #[arg(long, value_delimiter = ',', default_value = "lexical,dense,hybrid")]
    modes: Vec<String>,
    /// Extra arguments for `memmachine serve`, split on whitespace (no quoting), e.g.
    /// "--embedder local --model-dir .tools/models/all-MiniLM-L6-v2"
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    server_args: String,
    /// Conversations to use, from the first [default: all]
    #[arg(long)]
    conversations: Option<usize>,
    /// Only these conversations, by position in the file, e.g. `0-4` (the split ranking
    /// parameters are chosen on) or `5-9` (the split they are checked on); applied
    /// after --conversations
    #[arg(long, value_parser = parse_range)]
    conversation_range: Option<(usize, usize)>,
    /// top_k of every search; recall is reported at 1, 5, 10, 20 and 50 (those ≤ top_k)
    #[arg(long, default_value_t = 50)]
    top_k: i32,
    /// Messages per AddMemories call
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// In every mode but `lexical`, wait up to this many seconds after ingest until the
    /// server has embedded every turn (it logs "embedding queue drained embedded=N";
    /// the bench sums N); 0 skips the wait
    #[arg(long, default_value_t = 600)]
    embed_wait_secs: u64,
    /// Keep each mode's server data in DIR/<mode> and reuse it on later runs: a
    /// project already holding its conversation is not ingested (or embedded) again,
    /// so runs that vary only how the server ranks take seconds
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// In every mode but `lexical`, a further fixed pause after that wait, in seconds
    #[arg(long, default_value_t = 0)]
    settle_secs: u64,
    /// Diagnostic: store each turn as "<speaker>: <text>" (the document format of the
    /// data README's reference figures) instead of the bare text
    #[arg(long)]
    speaker_prefix: bool,
    /// Diagnostic: leave out the ` [image: <caption>]` suffix of turns sharing an image
    #[arg(long)]
    no_captions: bool,
    /// Set every project's `participant_aware` episodic option to this (the server
    /// default is on): off embeds questions with the participants' names and ranks
    /// their turns like any other
    #[arg(long)]
    participant_aware: Option<bool>,
    /// Print the results as JSON on stdout instead of tables
    #[arg(long)]
    json: bool,
    /// Server executable [default: `memmachine` next to this executable]
    #[arg(long)]
    server: Option<PathBuf>,
    /// The servers' `--store` (e.g. postgres://postgres@127.0.0.1:5432/locomo): as with
    /// --data-dir, projects already holding their conversation are reused
    #[arg(long)]
    store: Option<String>,
}

/// `A-B` (inclusive) or `A`.
fn parse_range(text: &str) -> std::result::Result<(usize, usize), String> {
    let (a, b) = text.split_once('-').unwrap_or((text, text));
    let number = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|e| format!("{text:?}: {e}"))
    };
    let (a, b) = (number(a)?, number(b)?);
    if a > b {
        return Err(format!("{text:?}: the first is after the last"));
    }
    Ok((a, b))
}

// ---------------------------------------------------------------------------------------
// Measurements

struct ModeResult {
    mode: String,
    /// The wait for embeddings (modes other than lexical, unless disabled).
    embed_wait: Option<EmbedWait>,
    turns: usize,
    ingest_wall: Duration,
    overall: RecallSums,
    by_category: BTreeMap<u32, RecallSums>,
    latencies: Latencies,
    /// Each search's time by stage, as the server reports it.
    split: StageSplit,
    /// Mean long-term hits per question.
    mean_hits: f64,
    /// Questions with fewer than top_k hits.
    short: usize,
    /// Hits without a `dia_id` in their metadata.
    unmapped: usize,
}

impl ModeResult {
    fn ingest_rate(&self) -> f64 {
        self.turns as f64 / self.ingest_wall.as_secs_f64()
    }
}

async fn episode_count(
    projects: &mut ProjectServiceClient<tonic::transport::Channel>,
    project_id: &str,
    server: &Server,
) -> Result<i64> {
    Ok(projects
        .get_episode_count(pb::GetEpisodeCountRequest {
            org_id: ORG.into(),
            project_id: project_id.into(),
        })
        .await
        .map_err(|err| server.error("GetEpisodeCount failed", err))?
        .into_inner()
        .count)
}

async fn run_mode(
    args: &Args,
    conversations: &[Conversation],
    executable: &Path,
    extra_args: &[String],
    ks: &[usize],
    mode: &str,
) -> Result<ModeResult> {
    let keep = args.data_dir.as_ref().map(|dir| dir.join(mode));
    if let Some(dir) = &keep {
        std::fs::create_dir_all(dir)?;
    }
    let server = Server::start(
        executable,
        &format!("memmachine-locomo-{mode}"),
        keep.as_deref(),
        extra_args,
        STARTUP_TIMEOUT,
    )?;
    eprintln!(
        "== mode {mode}: server pid {} on {}, data dir {}",
        server.pid(),
        server.addr,
        server.data_dir.display()
    );
    let channel = Endpoint::from_shared(format!("http://{}", server.addr))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|err| server.error("cannot connect", err))?;
    let mut projects = ProjectServiceClient::new(channel.clone());
    let mut memories = MemoryServiceClient::new(channel);

    // Ingest: one project per conversation, batches in conversation order.
    let mut ingest_wall = Duration::ZERO;
    let (mut turns, mut reused) = (0, 0);
    for conversation in conversations {
        let project_id = format!("{}-{mode}", conversation.sample_id);
        let created = projects
            .create_project(pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
                description: format!("LoCoMo {} ({mode})", conversation.sample_id),
                config: Some(pb::ProjectConfig {
                    embedder: String::new(),
                    reranker: mode.to_string(),
                }),
            })
            .await;
        match created {
            Ok(_) => {}
            Err(status)
                if status.code() == tonic::Code::AlreadyExists
                    && (keep.is_some() || args.store.is_some()) =>
            {
                let count = episode_count(&mut projects, &project_id, &server).await?;
                if count == conversation.turns.len() as i64 {
                    reused += 1;
                    continue;
                }
                return Err(format!(
                    "{ORG}/{project_id} in {} holds {count} episodes, not the conversation's \
                     {}: use another --data-dir",
                    server.data_dir.display(),
                    conversation.turns.len()
                )
                .into());
            }
            Err(status) => return Err(server.error("CreateProject failed", status)),
        }
        let requests = conversation.add_requests(ORG, &project_id, args.batch);
        let started = Instant::now();
        for request in requests {
            let expected = request.messages.len();
            let response = memories
                .add_memories(request)
                .await
                .map_err(|err| server.error("AddMemories failed", err))?
                .into_inner();
            if response.results.len() != expected {
                return Err(format!(
                    "AddMemories returned {} uids for {expected} messages",
                    response.results.len()
                )
                .into());
            }
        }
        ingest_wall += started.elapsed();
        let count = episode_count(&mut projects, &project_id, &server).await?;
        if count != conversation.turns.len() as i64 {
            return Err(format!(
                "{ORG}/{project_id} holds {count} episodes, expected {}",
                conversation.turns.len()
            )
            .into());
        }
        turns += conversation.turns.len();
    }
    eprintln!(
        "   ingest: {turns} msgs in {:.2} s = {:.0} msg/s",
        ingest_wall.as_secs_f64(),
        turns as f64 / ingest_wall.as_secs_f64()
    );
    if reused > 0 {
        eprintln!(
            "   reused {reused} ingested conversations from {}",
            server.data_dir.display()
        );
    }
    let mut embed_wait = None;
    if mode != "lexical" && turns > 0 {
        if args.embed_wait_secs > 0 {
            embed_wait = Some(
                server
                    .wait_for_embeddings(turns as u64, args.embed_wait_secs)
                    .await,
            );
        }
        if args.settle_secs > 0 {
            eprintln!("   settling for {} s", args.settle_secs);
            tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;
        }
    }

    if let Some(on) = args.participant_aware {
        for conversation in conversations {
            projects
                .update_episodic_memory_config(pb::UpdateEpisodicMemoryConfigRequest {
                    org_id: ORG.into(),
                    project_id: format!("{}-{mode}", conversation.sample_id),
                    participant_aware: Some(on),
                    ..Default::default()
                })
                .await
                .map_err(|err| server.error("UpdateEpisodicMemoryConfig failed", err))?;
        }
    }

    // Questions, each in its own conversation's project.
    let mut overall = RecallSums::default();
    let mut by_category: BTreeMap<u32, RecallSums> = BTreeMap::new();
    let mut latencies = Vec::new();
    let mut split = StageSplit::default();
    let (mut hits, mut short, mut unmapped) = (0usize, 0usize, 0usize);
    for conversation in conversations {
        let project_id = format!("{}-{mode}", conversation.sample_id);
        for question in &conversation.questions {
            let request = pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                types: vec![pb::MemoryType::Episodic as i32],
                ..Default::default()
            };
            let mut request = tonic::Request::new(request);
            stage_split::ask(&mut request);
            let sent = Instant::now();
            let response = memories
                .search_memories(request)
                .await
                .map_err(|err| server.error("SearchMemories failed", err))?;
            let elapsed = sent.elapsed();
            latencies.push(elapsed);
            split.add(response.metadata(), elapsed);
            let response = response.into_inner();
            let long_term = response
                .episodic_memory
                .map(|m| m.long_term_memory)
                .unwrap_or_default();
            hits += long_term.len();
            short += usize::from(long_term.len() < args.top_k as usize);
            let ranked: Vec<String> = long_term
                .into_iter()
                .filter_map(|scored| {
                    let id = scored.episode?.metadata.remove("dia_id");
                    unmapped += usize::from(id.is_none());
                    id
                })
                .collect();
            let recalls = recall_at(&question.evidence, &ranked, ks);
            overall.add(&recalls);
            by_category
                .entry(question.category)
                .or_default()
                .add(&recalls);
        }
    }
    let latencies = Latencies::new(latencies);
    drop(server);
    let result = ModeResult {
        mode: mode.to_string(),
        embed_wait,
        turns,
        ingest_wall,
        mean_hits: hits as f64 / overall.questions.max(1) as f64,
        short,
        unmapped,
        overall,
        by_category,
        latencies,
        split,
    };
    eprintln!(
        "   {} questions: recall@{CATEGORY_K} {:.3}; query p50 {:.2} ms p99 {:.2} ms",
        result.overall.questions,
        ks.iter()
            .position(|&k| k == CATEGORY_K)
            .map_or(f64::NAN, |i| result.overall.mean(i)),
        result.latencies.percentile(50.0),
        result.latencies.percentile(99.0)
    );
    Ok(result)
}

// ---------------------------------------------------------------------------------------
// Report

/// How turns were turned into episode content.
fn content_format(args: &Args) -> &'static str {
    match (args.speaker_prefix, args.no_captions) {
        (false, false) => "text [image: caption]",
        (false, true) => "text",
        (true, false) => "speaker: text [image: caption]",
        (true, true) => "speaker: text",
    }
}

/// LoCoMo's name of a question category.
fn category_name(category: u32) -> &'static str {
    match category {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        _ => "other",
    }
}

fn print_tables(
    args: &Args,
    conversations: &[Conversation],
    stats: &LoadStats,
    ks: &[usize],
    results: &[ModeResult],
) {
    let questions: usize = conversations.iter().map(|c| c.questions.len()).sum();
    let turns: usize = conversations.iter().map(|c| c.turns.len()).sum();
    let category_index = ks.iter().position(|&k| k == CATEGORY_K);
    println!();
    println!(
        "memmachine-bench locomo: {} conversations, {turns} turns, {questions} questions \
         (categories 1-4; {} skipped with no evidence naming a turn, {} evidence ids \
         dropped); top_k {}, EPISODIC; content: {}; server args: {:?}; participant_aware: {}",
        conversations.len(),
        stats.skipped_questions,
        stats.dropped_ids.len(),
        args.top_k,
        content_format(args),
        args.server_args,
        args.participant_aware
            .map_or("server default", |on| if on { "on" } else { "off" })
    );
    println!();
    let mut header = String::from("| mode |");
    let mut rule = String::from("|---|");
    for k in ks {
        header.push_str(&format!(" R@{k} |"));
        rule.push_str("---:|");
    }
    if category_index.is_some() {
        for c in CATEGORIES {
            header.push_str(&format!(" cat {c} R@{CATEGORY_K} (n) |"));
            rule.push_str("---:|");
        }
    }
    header.push_str(" ingest msg/s | query p50 / p99 ms |");
    rule.push_str("---:|---:|");
    println!("{header}");
    println!("{rule}");
    for r in results {
        let mut row = format!("| {} |", r.mode);
        for i in 0..ks.len() {
            row.push_str(&format!(" {:.3} |", r.overall.mean(i)));
        }
        if let Some(i) = category_index {
            for c in CATEGORIES {
                let sums = r.by_category.get(&c).cloned().unwrap_or_default();
                row.push_str(&format!(" {:.3} ({}) |", sums.mean(i), sums.questions));
            }
        }
        row.push_str(&format!(
            " {:.0} | {:.2} / {:.2} |",
            r.ingest_rate(),
            r.latencies.percentile(50.0),
            r.latencies.percentile(99.0)
        ));
        println!("{row}");
    }
    println!();
    println!("Per category:");
    println!();
    let mut header = String::from("| mode | category (n) |");
    let mut rule = String::from("|---|---|");
    for k in ks {
        header.push_str(&format!(" R@{k} |"));
        rule.push_str("---:|");
    }
    println!("{header}");
    println!("{rule}");
    for r in results {
        for c in CATEGORIES {
            let sums = r.by_category.get(&c).cloned().unwrap_or_default();
            let mut row = format!(
                "| {} | {} {} ({}) |",
                r.mode,
                c,
                category_name(c),
                sums.questions
            );
            for i in 0..ks.len() {
                row.push_str(&format!(" {:.3} |", sums.mean(i)));
            }
            println!("{row}");
        }
    }
    println!();
    println!(
        "Where a search's time goes (the server's `server-timing`; transport = client less server):"
    );
    println!();
    println!("| mode | part | p50 ms | p99 ms |");
    println!("|---|---|---:|---:|");
    for r in results {
        for (part, p50, p99) in r.split.percentiles() {
            println!("| {} | {part} | {p50:.3} | {p99:.3} |", r.mode);
        }
        if r.split.missing > 0 {
            println!(
                "| {} | searches without timing | {} | |",
                r.mode, r.split.missing
            );
        }
    }
    println!();
    println!("Details:");
    for r in results {
        println!(
            "  {}: ingest {} msgs in {:.2} s; {} queries, {:.1} hits/query, {} with fewer \
             than {} hits, {} hits without dia_id",
            r.mode,
            r.turns,
            r.ingest_wall.as_secs_f64(),
            r.latencies.len(),
            r.mean_hits,
            r.short,
            args.top_k,
            r.unmapped
        );
        if let Some(wait) = r.embed_wait {
            println!(
                "  {}: {} of {} turns reported embedded {:.1} s after ingest{}",
                r.mode,
                wait.embedded,
                r.turns,
                wait.waited.as_secs_f64(),
                if wait.complete {
                    ""
                } else {
                    " (gave up waiting)"
                }
            );
        }
    }
    if !stats.dropped_ids.is_empty() {
        println!(
            "  evidence ids naming no turn (dropped): {}",
            stats.dropped_ids.join(", ")
        );
    }
}

fn print_json(
    args: &Args,
    conversations: &[Conversation],
    stats: &LoadStats,
    ks: &[usize],
    results: &[ModeResult],
) -> Result<()> {
    let recall_map = |sums: &RecallSums| {
        ks.iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), json!(sums.mean(i))))
            .collect::<serde_json::Map<_, _>>()
    };
    let modes: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let categories: serde_json::Map<_, _> = r
                .by_category
                .iter()
                .map(|(c, sums)| {
                    (
                        c.to_string(),
                        json!({"questions": sums.questions, "recall": recall_map(sums)}),
                    )
                })
                .collect();
            json!({
                "mode": r.mode,
                "turns": r.turns,
                "questions": r.overall.questions,
                "recall": recall_map(&r.overall),
                "categories": categories,
                "ingest_seconds": r.ingest_wall.as_secs_f64(),
                "ingest_msgs_per_s": r.ingest_rate(),
                "query_p50_ms": r.latencies.percentile(50.0),
                "query_p99_ms": r.latencies.percentile(99.0),
                "time_split_ms": r.split.percentiles().into_iter().map(|(part, p50, p99)| {
                    (part.to_string(), json!({"p50": p50, "p99": p99}))
                }).collect::<serde_json::Map<_, _>>(),
                "mean_hits": r.mean_hits,
                "queries_with_fewer_than_top_k": r.short,
                "hits_without_dia_id": r.unmapped,
                "embed_wait": r.embed_wait.map(|w| json!({
                    "seconds": w.waited.as_secs_f64(),
                    "embedded": w.embedded,
                    "complete": w.complete,
                })),
            })
        })
        .collect();
    let out = json!({
        "locomo": args.locomo.display().to_string(),
        "conversations": conversations.len(),
        "conversation_range": args.conversation_range,
        "turns": conversations.iter().map(|c| c.turns.len()).sum::<usize>(),
        "questions": conversations.iter().map(|c| c.questions.len()).sum::<usize>(),
        "skipped_questions": stats.skipped_questions,
        "dropped_evidence_ids": stats.dropped_ids,
        "top_k": args.top_k,
        "server_args": args.server_args,
        "participant_aware": args.participant_aware,
        "embed_wait_secs": args.embed_wait_secs,
        "settle_secs": args.settle_secs,
        "content": content_format(args),
        "modes": modes,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

pub fn main(args: Args) -> Result<()> {
    if args.top_k < 1 {
        return Err("--top-k must be at least 1".into());
    }
    if args.modes.is_empty() {
        return Err("--modes must list at least one mode".into());
    }
    for mode in &args.modes {
        if mode.is_empty()
            || !mode
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        {
            return Err(format!("bad mode {mode:?}: use letters, digits, '_' or '-'").into());
        }
    }
    let ks: Vec<usize> = RECALL_KS
        .into_iter()
        .filter(|&k| k <= args.top_k as usize)
        .collect();
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
    let mut extra_args: Vec<String> = args
        .server_args
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if let Some(store) = &args.store {
        extra_args.extend(["--store".to_string(), store.clone()]);
    }
    let format = locomo::ContentFormat {
        speaker_prefix: args.speaker_prefix,
        captions: !args.no_captions,
    };
    let (mut conversations, stats) = locomo::load(&args.locomo, args.conversations, format)?;
    if let Some((first, last)) = args.conversation_range {
        conversations = conversations
            .into_iter()
            .enumerate()
            .filter(|(i, _)| (first..=last).contains(i))
            .map(|(_, c)| c)
            .collect();
        if conversations.is_empty() {
            return Err(
                format!("--conversation-range {first}-{last}: no such conversations").into(),
            );
        }
    }
    eprintln!(
        "LoCoMo: {} conversations, {} turns, {} questions; server {} {}",
        conversations.len(),
        conversations.iter().map(|c| c.turns.len()).sum::<usize>(),
        conversations
            .iter()
            .map(|c| c.questions.len())
            .sum::<usize>(),
        executable.display(),
        extra_args.join(" ")
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut results = Vec::new();
    for mode in &args.modes {
        results.push(runtime.block_on(run_mode(
            &args,
            &conversations,
            &executable,
            &extra_args,
            &ks,
            mode,
        ))?);
    }
    if args.json {
        print_json(&args, &conversations, &stats, &ks, &results)?;
    } else {
        print_tables(&args, &conversations, &stats, &ks, &results);
    }
    Ok(())
}
