//! `memmachine-locomo`: retrieval recall of the real server on LoCoMo, over gRPC.
//!
//! For each ranking mode it starts a fresh `memmachine serve` (the executable next to
//! this one, with `--server-args` appended), creates one project per conversation
//! (org `locomo`, project `<sample_id>-<mode>`, `config.reranker = <mode>`), ingests
//! every turn with `AddMemories`, then asks every question of categories 1-4 with
//! `SearchMemories` in its own conversation's project and scores recall@k of the
//! evidence turns as `/work/shared/data/README.md` defines it. See BENCHMARKS.md.
//!
//! Run: `cargo run --release --bin memmachine-locomo -- --modes lexical`

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::NaiveDateTime;
use clap::Parser;
use memmachine::pb;
use memmachine::pb::memory_service_client::MemoryServiceClient;
use memmachine::pb::project_service_client::ProjectServiceClient;
use serde_json::json;
use tonic::transport::Endpoint;

mod support;

use support::Result;
use support::latencies::Latencies;
use support::server::Server;

const ORG: &str = "locomo";
/// How long the server may take to report its listening address (a local embedder may
/// load a model first).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);
/// The cut-offs recall is reported at (those not above `--top-k`).
const RECALL_KS: [usize; 5] = [1, 5, 10, 20, 50];
/// The cut-off of the per-category columns.
const CATEGORY_K: usize = 10;
/// Question categories scored (5, adversarial, has no evidence to retrieve).
const CATEGORIES: [u32; 4] = [1, 2, 3, 4];
/// Format of `session_N_date_time`, e.g. "1:56 pm on 8 May, 2023".
const DATE_FORMAT: &str = "%I:%M %p on %d %B, %Y";

#[derive(Parser, Debug)]
#[command(
    name = "memmachine-locomo",
    about = "Measures retrieval recall of a real memmachine server on LoCoMo over gRPC"
)]
struct Args {
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
    /// Print the results as JSON on stdout instead of tables
    #[arg(long)]
    json: bool,
    /// Server executable [default: `memmachine` next to this executable]
    #[arg(long)]
    server: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------
// Data set

struct Turn {
    dia_id: String,
    speaker: String,
    /// The turn's text, with ` [image: <caption>]` when it shares an image.
    content: String,
    session: u32,
    timestamp: Option<prost_types::Timestamp>,
}

struct Question {
    text: String,
    category: u32,
    /// Distinct evidence ids that name a turn of the conversation, in order.
    evidence: Vec<String>,
}

struct Conversation {
    sample_id: String,
    speaker_a: String,
    speaker_b: String,
    turns: Vec<Turn>,
    /// Questions of categories 1-4 with at least one evidence id naming a turn.
    questions: Vec<Question>,
}

/// What loading left out, reported with the results.
#[derive(Default)]
struct LoadStats {
    /// Evidence ids (after splitting on ';' and trimming) naming no turn.
    dropped_ids: Vec<String>,
    /// Questions of categories 1-4 left with no evidence.
    skipped_questions: usize,
    /// Sessions whose date_time did not parse (their turns carry no timestamp).
    undated_sessions: usize,
}

fn str_field<'a>(value: &'a serde_json::Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_default()
}

fn parse_timestamp(text: &str) -> Option<prost_types::Timestamp> {
    let time = NaiveDateTime::parse_from_str(text.trim(), DATE_FORMAT).ok()?;
    Some(prost_types::Timestamp {
        seconds: time.and_utc().timestamp(),
        nanos: 0,
    })
}

fn load(args: &Args) -> Result<(Vec<Conversation>, LoadStats)> {
    let path = args.locomo.as_path();
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    let samples: serde_json::Value = serde_json::from_str(&text)?;
    let samples = samples
        .as_array()
        .ok_or("the LoCoMo file is not a JSON list")?;
    let mut stats = LoadStats::default();
    let mut conversations = Vec::new();
    for (index, sample) in samples
        .iter()
        .enumerate()
        .take(args.conversations.unwrap_or(usize::MAX))
    {
        let sample_id = sample["sample_id"]
            .as_str()
            .map_or_else(|| format!("conv-{index}"), str::to_string);
        let conversation = &sample["conversation"];
        let sessions_map = conversation
            .as_object()
            .ok_or_else(|| format!("{sample_id} has no conversation"))?;
        // session_N keys in numeric order (serde_json sorts object keys as strings).
        let mut sessions: Vec<(u32, &Vec<serde_json::Value>)> = sessions_map
            .iter()
            .filter_map(|(key, value)| {
                let n = key.strip_prefix("session_")?.parse().ok()?;
                Some((n, value.as_array()?))
            })
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        let mut turns = Vec::new();
        for (n, session) in sessions {
            let date = str_field(conversation, &format!("session_{n}_date_time"));
            let timestamp = parse_timestamp(date);
            if timestamp.is_none() {
                stats.undated_sessions += 1;
                eprintln!("warning: {sample_id} session {n}: cannot parse date {date:?}");
            }
            for turn in session {
                let speaker = str_field(turn, "speaker");
                let mut content = str_field(turn, "text").to_string();
                if args.speaker_prefix {
                    content = format!("{speaker}: {content}");
                }
                if let Some(caption) = turn["blip_caption"].as_str()
                    && !args.no_captions
                {
                    content.push_str(&format!(" [image: {caption}]"));
                }
                turns.push(Turn {
                    dia_id: str_field(turn, "dia_id").to_string(),
                    speaker: speaker.to_string(),
                    content,
                    session: n,
                    timestamp,
                });
            }
        }
        let known: HashSet<&str> = turns.iter().map(|t| t.dia_id.as_str()).collect();
        let mut questions = Vec::new();
        for qa in sample["qa"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let category = qa["category"].as_u64().unwrap_or(0) as u32;
            if !CATEGORIES.contains(&category) {
                continue;
            }
            let mut evidence: Vec<String> = Vec::new();
            let entries = qa["evidence"].as_array().map(Vec::as_slice);
            for entry in entries
                .unwrap_or_default()
                .iter()
                .filter_map(|e| e.as_str())
            {
                for id in entry.split(';').map(str::trim) {
                    if !known.contains(id) {
                        stats.dropped_ids.push(format!("{sample_id}:{id:?}"));
                    } else if !evidence.iter().any(|e| e == id) {
                        evidence.push(id.to_string());
                    }
                }
            }
            if evidence.is_empty() {
                stats.skipped_questions += 1;
                continue;
            }
            questions.push(Question {
                text: str_field(qa, "question").to_string(),
                category,
                evidence,
            });
        }
        conversations.push(Conversation {
            sample_id,
            speaker_a: str_field(conversation, "speaker_a").to_string(),
            speaker_b: str_field(conversation, "speaker_b").to_string(),
            turns,
            questions,
        });
    }
    if conversations.is_empty() {
        return Err(format!("no conversations in {}", path.display()).into());
    }
    Ok((conversations, stats))
}

impl Conversation {
    fn project_id(&self, mode: &str) -> String {
        format!("{}-{mode}", self.sample_id)
    }

    /// The other speaker of the conversation (empty if `speaker` is neither).
    fn listener(&self, speaker: &str) -> &str {
        if speaker == self.speaker_a {
            &self.speaker_b
        } else if speaker == self.speaker_b {
            &self.speaker_a
        } else {
            ""
        }
    }

    fn add_requests(&self, mode: &str, batch: usize) -> Vec<pb::AddMemoriesRequest> {
        self.turns
            .chunks(batch.max(1))
            .map(|chunk| pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: self.project_id(mode),
                types: vec![pb::MemoryType::Episodic as i32],
                messages: chunk
                    .iter()
                    .map(|turn| pb::MemoryMessage {
                        content: turn.content.clone(),
                        producer: turn.speaker.clone(),
                        produced_for: self.listener(&turn.speaker).to_string(),
                        timestamp: turn.timestamp,
                        role: "user".into(),
                        metadata: HashMap::from([
                            ("dia_id".to_string(), turn.dia_id.clone()),
                            ("session".to_string(), turn.session.to_string()),
                        ]),
                        episode_type: pb::EpisodeType::Message as i32,
                    })
                    .collect(),
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// Measurements

/// Sums of per-question recall at each cut-off, and the number of questions.
#[derive(Clone, Default)]
struct RecallSums {
    questions: usize,
    sums: Vec<f64>,
}

impl RecallSums {
    fn add(&mut self, recalls: &[f64]) {
        if self.sums.is_empty() {
            self.sums = vec![0.0; recalls.len()];
        }
        for (sum, r) in self.sums.iter_mut().zip(recalls) {
            *sum += r;
        }
        self.questions += 1;
    }

    /// Mean recall at the `i`-th cut-off.
    fn mean(&self, i: usize) -> f64 {
        if self.questions == 0 {
            return f64::NAN;
        }
        self.sums.get(i).copied().unwrap_or(f64::NAN) / self.questions as f64
    }
}

/// Recall of `evidence` in the first `k` of `ranked`, for each `k` of `ks`.
fn recall_at(evidence: &[String], ranked: &[String], ks: &[usize]) -> Vec<f64> {
    ks.iter()
        .map(|&k| {
            let top = &ranked[..k.min(ranked.len())];
            let found = evidence.iter().filter(|id| top.contains(id)).count();
            found as f64 / evidence.len() as f64
        })
        .collect()
}

struct ModeResult {
    mode: String,
    /// The wait for embeddings (modes other than lexical, unless disabled).
    embed_wait: Option<EmbedWait>,
    turns: usize,
    ingest_wall: Duration,
    overall: RecallSums,
    by_category: BTreeMap<u32, RecallSums>,
    latencies: Latencies,
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

/// How long after ingest the server took to report every turn embedded.
#[derive(Clone, Copy)]
struct EmbedWait {
    waited: Duration,
    /// Episodes reported embedded when the wait ended.
    embedded: u64,
    complete: bool,
}

/// Waits until the server has reported `expected` episodes embedded, at most `limit_secs`.
async fn wait_for_embeddings(server: &Server, expected: u64, limit_secs: u64) -> EmbedWait {
    let started = Instant::now();
    let limit = Duration::from_secs(limit_secs);
    loop {
        let embedded = server.embedded();
        let complete = embedded >= expected;
        if complete || started.elapsed() >= limit {
            let waited = started.elapsed();
            if complete {
                eprintln!(
                    "   embeddings: {embedded} of {expected} turns embedded; waited {:.1} s \
                     after ingest",
                    waited.as_secs_f64()
                );
            } else {
                eprintln!(
                    "   warning: only {embedded} of {expected} turns reported embedded after \
                     {limit_secs} s (is an embedder configured? see --embed-wait-secs)"
                );
            }
            return EmbedWait {
                waited,
                embedded,
                complete,
            };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn run_mode(
    args: &Args,
    conversations: &[Conversation],
    executable: &Path,
    extra_args: &[String],
    ks: &[usize],
    mode: &str,
) -> Result<ModeResult> {
    let server = Server::start(
        executable,
        &format!("memmachine-locomo-{mode}"),
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
    let mut turns = 0;
    for conversation in conversations {
        let project_id = conversation.project_id(mode);
        projects
            .create_project(pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
                description: format!("LoCoMo {} ({mode})", conversation.sample_id),
                config: Some(pb::ProjectConfig {
                    embedder: String::new(),
                    reranker: mode.to_string(),
                }),
            })
            .await
            .map_err(|err| server.error("CreateProject failed", err))?;
        let requests = conversation.add_requests(mode, args.batch);
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
        let count = projects
            .get_episode_count(pb::GetEpisodeCountRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
            })
            .await
            .map_err(|err| server.error("GetEpisodeCount failed", err))?
            .into_inner()
            .count;
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
    let mut embed_wait = None;
    if mode != "lexical" {
        if args.embed_wait_secs > 0 {
            embed_wait =
                Some(wait_for_embeddings(&server, turns as u64, args.embed_wait_secs).await);
        }
        if args.settle_secs > 0 {
            eprintln!("   settling for {} s", args.settle_secs);
            tokio::time::sleep(Duration::from_secs(args.settle_secs)).await;
        }
    }

    // Questions, each in its own conversation's project.
    let mut overall = RecallSums::default();
    let mut by_category: BTreeMap<u32, RecallSums> = BTreeMap::new();
    let mut latencies = Vec::new();
    let (mut hits, mut short, mut unmapped) = (0usize, 0usize, 0usize);
    for conversation in conversations {
        let project_id = conversation.project_id(mode);
        for question in &conversation.questions {
            let request = pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                types: vec![pb::MemoryType::Episodic as i32],
                ..Default::default()
            };
            let sent = Instant::now();
            let response = memories
                .search_memories(request)
                .await
                .map_err(|err| server.error("SearchMemories failed", err))?
                .into_inner();
            latencies.push(sent.elapsed());
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
        "memmachine-locomo: {} conversations, {turns} turns, {questions} questions \
         (categories 1-4; {} skipped with no evidence naming a turn, {} evidence ids \
         dropped); top_k {}, EPISODIC; content: {}; server args: {:?}",
        conversations.len(),
        stats.skipped_questions,
        stats.dropped_ids.len(),
        args.top_k,
        content_format(args),
        args.server_args
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
        "turns": conversations.iter().map(|c| c.turns.len()).sum::<usize>(),
        "questions": conversations.iter().map(|c| c.questions.len()).sum::<usize>(),
        "skipped_questions": stats.skipped_questions,
        "dropped_evidence_ids": stats.dropped_ids,
        "top_k": args.top_k,
        "server_args": args.server_args,
        "embed_wait_secs": args.embed_wait_secs,
        "settle_secs": args.settle_secs,
        "content": content_format(args),
        "modes": modes,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
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
        None => std::env::current_exe()?.with_file_name("memmachine"),
    };
    if !executable.is_file() {
        return Err(format!(
            "no server executable at {}; build it with \
             `cargo build --release --bin memmachine --bin memmachine-locomo`",
            executable.display()
        )
        .into());
    }
    let extra_args: Vec<String> = args
        .server_args
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let (conversations, stats) = load(&args)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_session_dates() {
        let ts = parse_timestamp("1:56 pm on 8 May, 2023").expect("parses");
        let expected = chrono::NaiveDate::from_ymd_opt(2023, 5, 8)
            .and_then(|d| d.and_hms_opt(13, 56, 0))
            .expect("valid")
            .and_utc()
            .timestamp();
        assert_eq!(ts.seconds, expected);
        assert!(parse_timestamp("12:09 am on 13 September, 2023").is_some());
        assert!(parse_timestamp("not a date").is_none());
    }

    #[test]
    fn recall_counts_evidence_in_the_top_k() {
        let ids = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let evidence = ids(&["D1:2", "D3:4"]);
        let ranked = ids(&["D1:1", "D3:4", "D9:9", "D1:2"]);
        assert_eq!(
            recall_at(&evidence, &ranked, &[1, 2, 4, 50]),
            [0.0, 0.5, 1.0, 1.0]
        );
    }
}
