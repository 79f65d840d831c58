//! `memmachine-bench load`: a load generator for a memmachine server over gRPC.
//!
//! N clients over C connections make a weighted mix of calls (AddMemories,
//! SearchMemories lexical / hybrid / dense, ListMemories, DeleteEpisodicMemories), as
//! fast as they can or at a fixed total rate (open loop), for a duration and/or a number
//! of calls, after a warm-up that is not counted. It starts its own server (the
//! `memmachine` next to it, fresh data directory) or targets `--addr`. Before the run
//! it preloads LoCoMo turns into the projects searched; deletes remove only episodes
//! this run added, so searches keep meaning something. It reports per kind of call the
//! count, throughput, latency percentiles and errors by status code, the server's CPU,
//! and its memory, descriptors and threads sampled over the run. See BENCHMARKS.md.
//!
//! Run: `cargo run --release -p memmachine-bench -- load --duration 10 --mix lexical=1`

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use serde_json::{Value, json};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Endpoint;

use crate::support;

use support::api_key::{ApiKey, Link};
use support::call_stats::{CallStats, Summary};
use support::cpu::{CpuMeter, CpuUse, opt_secs};
use support::latencies::Latencies;
use support::locomo::{self, ContentFormat};
use support::mix::{Kind, Mix};
use support::process_sample::{ProcessSample, or_na};
use support::rng::Rng;
use support::schedule::Schedule;
use support::server::Server;
use support::{BoxError, Result};

const ORG: &str = "memmachine-load";
/// How long the server may take to be ready (a local embedder loads its model first).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);
/// Messages per AddMemories call of the preload.
const PRELOAD_BATCH: usize = 100;
const SEED: u64 = 0x6c6f_6164_6765_6e00;
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Parser, Debug)]
#[command(
    about = "Load generator for a memmachine server over gRPC: a weighted mix of calls \
             from concurrent clients, as fast as possible or at a fixed rate"
)]
pub struct Args {
    /// Concurrent clients
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Connections (HTTP/2) the clients are spread over [default: one per client]
    #[arg(long)]
    connections: Option<usize>,
    /// Weighted mix of calls: add, lexical, hybrid, dense (searches in projects of that
    /// ranking mode), list, delete (of episodes this run added)
    #[arg(long, default_value = "add=1,lexical=8,list=1,delete=1", value_parser = Mix::parse)]
    mix: Mix,
    /// Calls per second over all clients, scheduled by time (latency counts from when a
    /// call was due); 0: as fast as possible
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Seconds to measure, after the warm-up
    #[arg(long)]
    duration: Option<f64>,
    /// Calls to measure, after the warm-up
    #[arg(long)]
    max_ops: Option<u64>,
    /// Seconds of the same load before measuring, not counted
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Threads the generator's clients run on (0: one per core). One thread costs the
    /// generator less CPU per call, leaving more of a small machine to the server.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// A running server (http://HOST:PORT) instead of one of our own; MEMMACHINE_API_KEY,
    /// when set, is sent as a bearer key
    #[arg(long)]
    addr: Option<String>,
    /// With --addr: the server's pid, to sample its CPU, memory, descriptors and threads
    #[arg(long)]
    server_pid: Option<u32>,
    /// Extra arguments for our own `memmachine serve`, split on whitespace, e.g.
    /// "--embedder local --model-dir .tools/models/all-MiniLM-L6-v2"
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    server_args: String,
    /// Server executable [default: `memmachine` next to this executable]
    #[arg(long)]
    server: Option<PathBuf>,
    /// LoCoMo turns (recycled with a few extra words past the 5,882 there are) added to
    /// each ranking mode's projects before the run, split between them
    #[arg(long, default_value_t = 5882)]
    preload: usize,
    /// Projects per ranking mode searched (lists and adds go to any of them)
    #[arg(long, default_value_t = 1)]
    projects: usize,
    /// With hybrid or dense in the mix and our own server: wait up to this many seconds
    /// for the preload to be embedded (0: do not wait)
    #[arg(long, default_value_t = 900)]
    embed_wait_secs: u64,
    /// LoCoMo data set (a JSON list of conversations with questions)
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// top_k of every search
    #[arg(long, default_value_t = 10)]
    top_k: i32,
    /// page_size of every ListMemories
    #[arg(long, default_value_t = 50)]
    page_size: i32,
    /// Messages per AddMemories call (a delete removes one add's episodes)
    #[arg(long, default_value_t = 1)]
    add_batch: usize,
    /// Seconds between samples of the server process (memory, descriptors, threads)
    #[arg(long, default_value_t = 10.0)]
    sample_secs: f64,
    /// Seconds before a call is given up (counted as DEADLINE_EXCEEDED)
    #[arg(long, default_value_t = 30.0)]
    call_timeout: f64,
    /// Seed of the clients' choices (kinds, projects, questions)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the report as JSON to this file
    #[arg(long)]
    json: Option<PathBuf>,
}

impl Args {
    fn check(&self) -> Result<()> {
        if self.duration.is_none() && self.max_ops.is_none() {
            return Err(
                "refusing an unbounded run: give --duration SECS and/or --max-ops N".into(),
            );
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if self.duration.is_some_and(|d| !positive(d)) {
            return Err("--duration must be a positive number of seconds".into());
        }
        if self.max_ops == Some(0) {
            return Err("--max-ops must be at least 1".into());
        }
        if !self.rate.is_finite() || self.rate < 0.0 {
            return Err("--rate must be 0 (as fast as possible) or a positive rate".into());
        }
        if !self.warmup.is_finite() || self.warmup < 0.0 {
            return Err("--warmup must be 0 or more seconds".into());
        }
        if !positive(self.sample_secs) || !positive(self.call_timeout) {
            return Err("--sample-secs and --call-timeout must be positive".into());
        }
        if self.clients == 0 || self.connections == Some(0) || self.projects == 0 {
            return Err("--clients, --connections and --projects must be at least 1".into());
        }
        if self.add_batch == 0 {
            return Err("--add-batch must be at least 1".into());
        }
        if self.addr.is_some() && !self.server_args.trim().is_empty() {
            return Err("--server-args is for our own server; it cannot apply with --addr".into());
        }
        if self.addr.is_none() && self.server_pid.is_some() {
            return Err("--server-pid is for --addr; our own server's pid is known".into());
        }
        Ok(())
    }

    fn connections(&self) -> usize {
        self.connections.unwrap_or(self.clients)
    }
}

// ---------------------------------------------------------------------------------------
// Corpus

struct Turn {
    speaker: String,
    listener: String,
    content: String,
    dia_id: String,
    session: u32,
    timestamp: Option<prost_types::Timestamp>,
}

struct Corpus {
    turns: Vec<Turn>,
    questions: Vec<String>,
    /// Words of every turn, to vary recycled turns with.
    words: Vec<String>,
}

fn load_corpus(path: &Path) -> Result<Corpus> {
    let (conversations, _) = locomo::load(path, None, ContentFormat::default())?;
    let mut turns = Vec::new();
    let mut questions = Vec::new();
    for conversation in &conversations {
        for turn in conversation
            .turns
            .iter()
            .filter(|t| !t.content.trim().is_empty())
        {
            turns.push(Turn {
                speaker: turn.speaker.clone(),
                listener: conversation.listener(&turn.speaker).to_string(),
                content: turn.content.clone(),
                dia_id: turn.dia_id.clone(),
                session: turn.session,
                timestamp: turn.timestamp,
            });
        }
        questions.extend(conversation.questions.iter().map(|q| q.text.clone()));
    }
    if turns.is_empty() || questions.is_empty() {
        return Err(format!("no turns or no questions in {}", path.display()).into());
    }
    let words = locomo::vocabulary(turns.iter().map(|t| t.content.as_str()));
    Ok(Corpus {
        turns,
        questions,
        words,
    })
}

impl Corpus {
    /// Episode `i`: turn `i mod turns`; copies after the first end with 3 to 6 words
    /// drawn from the corpus (seeded by `i`), so a large project is not all duplicates.
    fn message(&self, i: usize) -> pb::MemoryMessage {
        let turn = &self.turns[i % self.turns.len()];
        let mut content = turn.content.clone();
        if i >= self.turns.len() {
            let mut rng = Rng::new(SEED ^ i as u64);
            let extra: Vec<&str> = (0..3 + rng.below(4))
                .map(|_| self.words[rng.below(self.words.len())].as_str())
                .collect();
            content = format!("{content} ({})", extra.join(" "));
        }
        pb::MemoryMessage {
            expires_at: None,
            content,
            producer: turn.speaker.clone(),
            produced_for: turn.listener.clone(),
            timestamp: turn.timestamp,
            role: "user".into(),
            metadata: HashMap::from([
                ("dia_id".to_string(), turn.dia_id.clone()),
                ("session".to_string(), turn.session.to_string()),
            ]),
            episode_type: pb::EpisodeType::Message as i32,
            ..Default::default()
        }
    }
}

// ---------------------------------------------------------------------------------------
// Projects

struct Project {
    id: String,
    /// `ProjectConfig.reranker`; empty: the server's default.
    ranking: &'static str,
    preloaded: usize,
    /// Episodes added by this run's calls (refills included) and deleted by them.
    added: AtomicI64,
    deleted: AtomicI64,
}

/// `--projects` projects for each ranking mode searched (one set of the server's
/// default when the mix searches nothing), each preloaded with its share of episodes.
fn plan_projects(args: &Args) -> Vec<Project> {
    let mut rankings = args.mix.rankings();
    if rankings.is_empty() {
        rankings.push("");
    }
    let mut projects = Vec::new();
    for ranking in rankings {
        for k in 0..args.projects {
            let share = args.preload * (k + 1) / args.projects - args.preload * k / args.projects;
            let name = if ranking.is_empty() {
                "default"
            } else {
                ranking
            };
            projects.push(Project {
                id: format!("{name}-{k}"),
                ranking,
                preloaded: share,
                added: AtomicI64::new(0),
                deleted: AtomicI64::new(0),
            });
        }
    }
    projects
}

/// Makes each project afresh (an earlier run's is deleted) and preloads it.
async fn create_and_preload(
    link: &Link,
    links: &[Link],
    projects: &[Project],
    corpus: &Corpus,
) -> Result<Duration> {
    let mut admin = ProjectServiceClient::new(link.clone());
    for project in projects {
        match admin
            .delete_project(pb::DeleteProjectRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
            })
            .await
        {
            Ok(_) => eprintln!("   deleted an earlier run's project {}", project.id),
            Err(status) if status.code() == tonic::Code::NotFound => {}
            Err(status) => return Err(format!("DeleteProject {}: {status}", project.id).into()),
        }
        admin
            .create_project(pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                description: "memmachine-bench load".into(),
                config: Some(pb::ProjectConfig {
                    // Lexical projects are not embedded: a lexical run measures BM25 alone.
                    embedder: if project.ranking == "lexical" {
                        "none".into()
                    } else {
                        String::new()
                    },
                    reranker: project.ranking.into(),
                }),
            })
            .await
            .map_err(|status| format!("CreateProject {}: {status}", project.id))?;
    }
    // The same first episodes in every ranking mode: one project's share after another.
    let mut requests = Vec::new();
    let mut offsets: HashMap<&str, usize> = HashMap::new();
    for project in projects {
        let offset = offsets.entry(project.ranking).or_insert(0);
        let range = *offset..*offset + project.preloaded;
        *offset += project.preloaded;
        for start in range.clone().step_by(PRELOAD_BATCH) {
            requests.push(pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                types: vec![pb::MemoryType::Episodic as i32],
                messages: (start..(start + PRELOAD_BATCH).min(range.end))
                    .map(|i| corpus.message(i))
                    .collect(),
            });
        }
    }
    let started = Instant::now();
    let queue = Arc::new(Mutex::new(requests.into_iter()));
    let mut tasks = Vec::new();
    for link in links {
        let queue = queue.clone();
        let mut client = MemoryServiceClient::new(link.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let next = queue.lock().map_err(|_| "queue lock poisoned")?.next();
                let Some(request) = next else { break };
                let project = request.project_id.clone();
                client
                    .add_memories(request)
                    .await
                    .map_err(|status| format!("preload AddMemories into {project}: {status}"))?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

// ---------------------------------------------------------------------------------------
// The clients

/// What the clients share.
struct Shared {
    corpus: Corpus,
    projects: Vec<Project>,
    /// Indexes into `projects` of each search kind's projects.
    by_kind: HashMap<Kind, Vec<usize>>,
    /// Episodes added by this run and not yet deleted: (project, uids of one add).
    deletable: Mutex<Vec<(usize, Vec<String>)>>,
    /// The next episode number an add takes (after the preload's).
    next_episode: AtomicU64,
    /// Calls finished so far, and how many failed (warm-up included): for the samples.
    finished: AtomicU64,
    failed: AtomicU64,
    /// Latencies of the calls finished since the last sample: each sample's p50/p99,
    /// so that a soak shows whether latency holds steady.
    recent: Mutex<Vec<Duration>>,
    top_k: i32,
    page_size: i32,
    add_batch: usize,
}

/// What one client measured.
#[derive(Default)]
struct ClientResult {
    calls: BTreeMap<Kind, CallStats>,
    /// At a fixed rate: how late each counted call started after it was due.
    start_lag: Vec<Duration>,
    deletes: DeleteTally,
}

#[derive(Default, Clone, Copy)]
struct DeleteTally {
    /// Episodes asked to be deleted, and the server's `deleted_count`s.
    requested: u64,
    deleted: u64,
    /// Deletes answered with a `deleted_count` other than the ids sent.
    mismatches: u64,
    /// Adds made (untimed) because nothing of this run was left to delete.
    refills: u64,
}

impl DeleteTally {
    fn add(&mut self, other: DeleteTally) {
        self.requested += other.requested;
        self.deleted += other.deleted;
        self.mismatches += other.mismatches;
        self.refills += other.refills;
    }
}

struct Client {
    memories: MemoryServiceClient<Link>,
    shared: Arc<Shared>,
    rng: Rng,
    /// Each project's next ListMemories page.
    pages: HashMap<usize, String>,
    mix: Mix,
}

impl Client {
    async fn run(mut self, schedule: Arc<Schedule>) -> ClientResult {
        let mut result = ClientResult::default();
        while let Some(slot) = schedule.next().await {
            let kind = self.mix.pick(self.rng.next_u64());
            let started = Instant::now();
            let (outcome, untimed) = self.call(kind, &mut result.deletes).await;
            // Latency from when the call was due; an untimed refill before a delete is
            // the generator's work, not the server's answer to the delete.
            let latency = slot.due.elapsed().saturating_sub(untimed);
            self.shared.finished.fetch_add(1, Ordering::Relaxed);
            self.shared.recent.lock().unwrap().push(latency);
            if outcome.is_err() {
                self.shared.failed.fetch_add(1, Ordering::Relaxed);
            }
            if slot.counted {
                result
                    .calls
                    .entry(kind)
                    .or_default()
                    .record(latency, outcome);
                if schedule.paced() {
                    result
                        .start_lag
                        .push(started.saturating_duration_since(slot.due));
                }
            }
        }
        result
    }

    fn project(&mut self, candidates: Option<&[usize]>) -> usize {
        match candidates {
            Some(list) if !list.is_empty() => list[self.rng.below(list.len())],
            _ => self.rng.below(self.shared.projects.len()),
        }
    }

    /// Makes one call of `kind`; its outcome and the time spent on untimed work.
    async fn call(
        &mut self,
        kind: Kind,
        deletes: &mut DeleteTally,
    ) -> (std::result::Result<(), tonic::Code>, Duration) {
        let shared = self.shared.clone();
        match kind {
            Kind::Add => {
                let project = self.project(None);
                let outcome = self.add(project).await.map(|uids| {
                    if let Ok(mut deletable) = shared.deletable.lock() {
                        deletable.push((project, uids));
                    }
                });
                (outcome, Duration::ZERO)
            }
            Kind::Lexical | Kind::Hybrid | Kind::Dense => {
                let project = self.project(shared.by_kind.get(&kind).map(Vec::as_slice));
                let query = &shared.corpus.questions[self.rng.below(shared.corpus.questions.len())];
                let request = pb::SearchMemoriesRequest {
                    org_id: ORG.into(),
                    project_id: shared.projects[project].id.clone(),
                    query: query.clone(),
                    top_k: Some(shared.top_k),
                    types: vec![pb::MemoryType::Episodic as i32],
                    ..Default::default()
                };
                let outcome = self.memories.search_memories(request).await;
                (outcome.map(|_| ()).map_err(|s| s.code()), Duration::ZERO)
            }
            Kind::List => {
                let project = self.project(None);
                let request = pb::ListMemoriesRequest {
                    org_id: ORG.into(),
                    project_id: shared.projects[project].id.clone(),
                    r#type: pb::MemoryType::Episodic as i32,
                    page_size: Some(shared.page_size),
                    page_token: self.pages.remove(&project).unwrap_or_default(),
                    ..Default::default()
                };
                match self.memories.list_memories(request).await {
                    Ok(response) => {
                        let token = response.into_inner().next_page_token;
                        // After the last page, start again from the first.
                        if !token.is_empty() {
                            self.pages.insert(project, token);
                        }
                        (Ok(()), Duration::ZERO)
                    }
                    Err(status) => (Err(status.code()), Duration::ZERO),
                }
            }
            Kind::Delete => self.delete(deletes).await,
        }
    }

    /// Adds `--add-batch` episodes to `project`; their uids.
    async fn add(&mut self, project: usize) -> std::result::Result<Vec<String>, tonic::Code> {
        let shared = &self.shared;
        let first = shared
            .next_episode
            .fetch_add(shared.add_batch as u64, Ordering::Relaxed) as usize;
        let request = pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: shared.projects[project].id.clone(),
            types: vec![pb::MemoryType::Episodic as i32],
            messages: (first..first + shared.add_batch)
                .map(|i| shared.corpus.message(i))
                .collect(),
        };
        let response = self
            .memories
            .add_memories(request)
            .await
            .map_err(|s| s.code())?;
        let uids: Vec<String> = response
            .into_inner()
            .results
            .into_iter()
            .map(|r| r.uid)
            .collect();
        shared.projects[project]
            .added
            .fetch_add(uids.len() as i64, Ordering::Relaxed);
        Ok(uids)
    }

    /// Deletes the episodes of one earlier add of this run, chosen at random; when none
    /// is left, first adds some (untimed) so the delete has something of ours to remove.
    async fn delete(
        &mut self,
        tally: &mut DeleteTally,
    ) -> (std::result::Result<(), tonic::Code>, Duration) {
        let mut untimed = Duration::ZERO;
        let (project, uids) = match self.take_deletable() {
            Some(victim) => victim,
            None => {
                let refill = Instant::now();
                let project = self.project(None);
                let added = self.add(project).await;
                untimed = refill.elapsed();
                match added {
                    Ok(uids) => {
                        tally.refills += 1;
                        (project, uids)
                    }
                    Err(code) => return (Err(code), untimed),
                }
            }
        };
        let requested = uids.len() as u64;
        let request = pb::DeleteEpisodicMemoriesRequest {
            org_id: ORG.into(),
            project_id: self.shared.projects[project].id.clone(),
            episode_ids: uids,
        };
        match self.memories.delete_episodic_memories(request).await {
            Ok(response) => {
                let deleted = response.into_inner().deleted_count.max(0) as u64;
                tally.requested += requested;
                tally.deleted += deleted;
                tally.mismatches += u64::from(deleted != requested);
                self.shared.projects[project]
                    .deleted
                    .fetch_add(deleted as i64, Ordering::Relaxed);
                (Ok(()), untimed)
            }
            Err(status) => (Err(status.code()), untimed),
        }
    }

    fn take_deletable(&mut self) -> Option<(usize, Vec<String>)> {
        let mut deletable = self.shared.deletable.lock().ok()?;
        if deletable.is_empty() {
            return None;
        }
        let i = self.rng.below(deletable.len());
        Some(deletable.swap_remove(i))
    }
}

// ---------------------------------------------------------------------------------------
// A run

/// Where the load goes, and the server process when we know it.
struct Target {
    /// Our own server (dropped, so stopped, at the end).
    own: Option<Server>,
    url: String,
    pid: Option<u32>,
    key: ApiKey,
}

fn start_target(args: &Args) -> Result<Target> {
    if let Some(addr) = &args.addr {
        let url = if addr.contains("://") {
            addr.clone()
        } else {
            format!("http://{addr}")
        };
        if !url.starts_with("http://") {
            return Err(
                format!("--addr {addr:?}: only plaintext http://HOST:PORT is supported").into(),
            );
        }
        return Ok(Target {
            own: None,
            url,
            pid: args.server_pid,
            key: ApiKey::from_env()?,
        });
    }
    let executable = match &args.server {
        Some(path) => path.clone(),
        None => memmachine_testkit::server::server_bin(),
    };
    if !executable.is_file() {
        return Err(format!(
            "no server executable at {}; build it with \
             `cargo build --release --bin memmachine --bin memmachine-bench` (or give --addr)",
            executable.display()
        )
        .into());
    }
    let server_args: Vec<String> = args
        .server_args
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let server = Server::start(
        &executable,
        "memmachine-load",
        None,
        &server_args,
        STARTUP_TIMEOUT,
    )?;
    let key = if server_args.iter().any(|a| a == "--auth")
        && std::env::var_os("MEMMACHINE_API_KEY").is_none()
    {
        ApiKey::create_admin(&executable, &server.data_dir, "memmachine-load")?
    } else {
        ApiKey::from_env()?
    };
    eprintln!(
        "server pid {} on {}, data dir {}",
        server.pid(),
        server.addr,
        server.data_dir.display()
    );
    Ok(Target {
        url: format!("http://{}", server.addr),
        pid: Some(server.pid()),
        own: Some(server),
        key,
    })
}

struct Sample {
    process: Option<ProcessSample>,
    at_secs: f64,
    label: &'static str,
    /// Calls finished and failed so far (warm-up included).
    finished: u64,
    failed: u64,
    /// Latencies of the calls finished since the previous sample.
    interval: Latencies,
}

impl Sample {
    fn take(pid: Option<u32>, started: Instant, label: &'static str, shared: &Shared) -> Sample {
        let at_secs = started.elapsed().as_secs_f64();
        Sample {
            process: pid.map(|pid| ProcessSample::take(pid, at_secs)),
            at_secs,
            label,
            finished: shared.finished.load(Ordering::Relaxed),
            failed: shared.failed.load(Ordering::Relaxed),
            interval: Latencies::new(std::mem::take(&mut *shared.recent.lock().unwrap())),
        }
    }

    fn to_json(&self) -> Value {
        let mut value = self.process.as_ref().map_or_else(
            || json!({ "at_secs": self.at_secs }),
            ProcessSample::to_json,
        );
        value["label"] = json!(self.label);
        value["calls_finished"] = json!(self.finished);
        value["calls_failed"] = json!(self.failed);
        value["interval_calls"] = json!(self.interval.len());
        value["interval_p50_ms"] = json!(self.interval.percentile(50.0));
        value["interval_p99_ms"] = json!(self.interval.percentile(99.0));
        value
    }
}

struct Report {
    wall: Duration,
    kinds: Vec<(Kind, Summary)>,
    total: Summary,
    start_lag: Latencies,
    unsent: u64,
    deletes: DeleteTally,
    cpu: Option<CpuUse>,
    samples: Vec<Sample>,
    counts: Vec<ProjectCount>,
    preload_secs: f64,
    embed_wait_secs: Option<f64>,
}

async fn run(args: &Args) -> Result<(Report, Target)> {
    let corpus = load_corpus(&args.locomo)?;
    eprintln!(
        "corpus: {} LoCoMo turns, {} questions",
        corpus.turns.len(),
        corpus.questions.len()
    );
    let target = start_target(args)?;
    let timeout = Duration::from_secs_f64(args.call_timeout);
    let mut links = Vec::new();
    for _ in 0..args.connections() {
        let channel = Endpoint::from_shared(target.url.clone())?
            .tcp_nodelay(true)
            .timeout(timeout)
            .connect()
            .await
            .map_err(|err| format!("cannot connect to {}: {err}", target.url))?;
        links.push(InterceptedService::new(channel, target.key.clone()));
    }
    let projects = plan_projects(args);
    eprintln!(
        "preloading {} episodes into each of {} ranking mode(s), {} project(s) each",
        args.preload,
        projects.len() / args.projects,
        args.projects
    );
    let preload = create_and_preload(&links[0], &links, &projects, &corpus)
        .await
        .map_err(|err| own_error(&target, "preload failed", err))?;
    eprintln!("   preload took {:.1} s", preload.as_secs_f64());
    let embedded_modes = projects
        .iter()
        .filter(|p| matches!(p.ranking, "hybrid" | "dense"))
        .count()
        / args.projects;
    let mut embed_wait_secs = None;
    if embedded_modes > 0 && args.preload > 0 && args.embed_wait_secs > 0 {
        match &target.own {
            Some(server) => {
                let wait = server
                    .wait_for_embeddings(
                        (args.preload * embedded_modes) as u64,
                        args.embed_wait_secs,
                    )
                    .await;
                embed_wait_secs = Some(wait.waited.as_secs_f64());
            }
            None => eprintln!(
                "   note: with --addr the server's log is not ours to read, so the run does not \
                 wait for the preload to be embedded"
            ),
        }
    }

    let mut by_kind: HashMap<Kind, Vec<usize>> = HashMap::new();
    for (i, project) in projects.iter().enumerate() {
        for kind in [Kind::Lexical, Kind::Hybrid, Kind::Dense] {
            if kind.ranking() == Some(project.ranking) {
                by_kind.entry(kind).or_default().push(i);
            }
        }
    }
    let shared = Arc::new(Shared {
        next_episode: AtomicU64::new(args.preload as u64),
        corpus,
        projects,
        by_kind,
        deletable: Mutex::new(Vec::new()),
        finished: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        recent: Mutex::default(),
        top_k: args.top_k,
        page_size: args.page_size,
        add_batch: args.add_batch,
    });

    let started = Instant::now();
    let schedule = Arc::new(Schedule::new(
        started,
        Duration::from_secs_f64(args.warmup),
        args.duration.map(Duration::from_secs_f64),
        args.rate,
        args.max_ops,
    ));
    let mut samples = vec![Sample::take(target.pid, started, "start", &shared)];
    let mut clients = Vec::new();
    for i in 0..args.clients {
        let client = Client {
            memories: MemoryServiceClient::new(links[i % links.len()].clone()),
            shared: shared.clone(),
            rng: Rng::new(args.seed.wrapping_mul(1_000_003).wrapping_add(i as u64)),
            pages: HashMap::new(),
            mix: args.mix.clone(),
        };
        clients.push(tokio::spawn(client.run(schedule.clone())));
    }
    let all_done = futures::future::join_all(clients);
    tokio::pin!(all_done);
    // Sample the server while the clients run: at the end of the warm-up, then every
    // --sample-secs.
    let measure_start = schedule.measure_start();
    let mut cpu = None;
    let mut next_sample = measure_start;
    let results = loop {
        tokio::select! {
            results = &mut all_done => break results,
            () = tokio::time::sleep_until(next_sample.into()) => {
                if cpu.is_none() {
                    cpu = target.pid.map(CpuMeter::start);
                    samples.push(Sample::take(target.pid, started, "measure", &shared));
                } else {
                    samples.push(Sample::take(target.pid, started, "sample", &shared));
                }
                next_sample += Duration::from_secs_f64(args.sample_secs);
            }
        }
    };
    let wall = measure_start.elapsed();
    let cpu = cpu.map(|meter| meter.stop());
    samples.push(Sample::take(target.pid, started, "end", &shared));

    let mut calls: BTreeMap<Kind, CallStats> = BTreeMap::new();
    let mut start_lag = Vec::new();
    let mut deletes = DeleteTally::default();
    for result in results {
        let result = result.map_err(|err| format!("a client task failed: {err}"))?;
        for (kind, stats) in result.calls {
            calls.entry(kind).or_default().merge(stats);
        }
        start_lag.extend(result.start_lag);
        deletes.add(result.deletes);
    }
    let mut total = CallStats::default();
    let mut kinds = Vec::new();
    for (kind, _) in args.mix.weights() {
        let stats = calls.remove(kind).unwrap_or_default();
        kinds.push((*kind, stats.summary(wall)));
        total.merge(stats);
    }
    let total = total.summary(wall);
    let unsent = schedule.unsent(total.count as u64);

    let counts = count_episodes(&links[0], &shared.projects)
        .await
        .map_err(|err| own_error(&target, "GetEpisodeCount failed", err))?;
    Ok((
        Report {
            wall,
            kinds,
            total,
            start_lag: Latencies::new(start_lag),
            unsent,
            deletes,
            cpu,
            samples,
            counts,
            preload_secs: preload.as_secs_f64(),
            embed_wait_secs,
        },
        target,
    ))
}

/// A project's episodes as this run expects them and as the server counts them.
struct ProjectCount {
    id: String,
    preloaded: usize,
    added: i64,
    deleted: i64,
    expected: i64,
    counted: i64,
}

/// Each project's episodes as this run expects them and as the server counts them.
async fn count_episodes(link: &Link, projects: &[Project]) -> Result<Vec<ProjectCount>> {
    let mut admin = ProjectServiceClient::new(link.clone());
    let mut counts = Vec::new();
    for project in projects {
        let added = project.added.load(Ordering::Relaxed);
        let deleted = project.deleted.load(Ordering::Relaxed);
        let counted = admin
            .get_episode_count(pb::GetEpisodeCountRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
            })
            .await
            .map_err(|status| format!("{}: {status}", project.id))?
            .into_inner()
            .count;
        counts.push(ProjectCount {
            id: project.id.clone(),
            preloaded: project.preloaded,
            added,
            deleted,
            expected: project.preloaded as i64 + added - deleted,
            counted,
        });
    }
    Ok(counts)
}

/// `err`, with our own server's last log lines when there is one.
fn own_error(target: &Target, what: &str, err: impl std::fmt::Display) -> BoxError {
    match &target.own {
        Some(server) => server.error(what, err),
        None => format!("{what}: {err}").into(),
    }
}

// ---------------------------------------------------------------------------------------
// Output

fn describe_rate(args: &Args) -> String {
    if args.rate > 0.0 {
        format!("at {} calls/s (open loop)", args.rate)
    } else {
        "as fast as possible".into()
    }
}

fn print_report(args: &Args, target: &Target, report: &Report) {
    let server = match (&target.own, &args.addr) {
        (Some(_), _) => format!("own server, args {:?}", args.server_args),
        (None, Some(addr)) => format!("server at {addr}"),
        (None, None) => String::new(),
    };
    println!();
    println!(
        "memmachine-bench load: {} clients over {} connections, mix {}, {}, {:.1} s measured after \
         {:.1} s warm-up; {server}; preload {} episodes into {} project(s) per ranking mode",
        args.clients,
        args.connections(),
        args.mix,
        describe_rate(args),
        report.wall.as_secs_f64(),
        args.warmup,
        args.preload,
        args.projects
    );
    println!();
    println!("| kind | count | ops/s | p50 ms | p90 ms | p99 ms | max ms | errors |");
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    let row = |name: &str, s: &Summary| {
        let l = &s.latencies;
        println!(
            "| {name} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            s.count,
            s.ops_per_sec,
            l.percentile(50.0),
            l.percentile(90.0),
            l.percentile(99.0),
            l.max(),
            s.errors_text()
        );
    };
    for (kind, summary) in &report.kinds {
        row(kind.name(), summary);
    }
    row("total", &report.total);
    println!();
    print!("wall {:.2} s", report.wall.as_secs_f64());
    if let Some(cpu) = &report.cpu {
        let secs = report.wall.as_secs_f64();
        print!(
            "; server CPU {} s ({:.2} cores); load generator CPU {} s",
            opt_secs(cpu.server),
            cpu.server.unwrap_or(0.0) / secs,
            opt_secs(cpu.client)
        );
        let top: Vec<String> = cpu
            .threads
            .iter()
            .take(4)
            .map(|(name, s)| format!("{name} {s:.2}"))
            .collect();
        print!(" (server threads: {})", top.join(", "));
    }
    println!();
    if args.rate > 0.0 {
        println!(
            "start lag behind schedule: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; due but never \
             sent: {}",
            report.start_lag.percentile(50.0),
            report.start_lag.percentile(99.0),
            report.start_lag.max(),
            report.unsent
        );
    }
    if args.mix.contains(Kind::Delete) {
        let d = report.deletes;
        println!(
            "deletes (warm-up included): {} episodes asked, {} deleted, {} answers with another \
             count; {} refill adds",
            d.requested, d.deleted, d.mismatches, d.refills
        );
    }
    println!(
        "preload {:.1} s{}",
        report.preload_secs,
        report.embed_wait_secs.map_or_else(String::new, |s| format!(
            ", then {s:.1} s waiting for embeddings"
        ))
    );
    println!();
    println!("| project | preloaded | added | deleted | expected | server counts |");
    println!("|---|---:|---:|---:|---:|---:|");
    for c in &report.counts {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            c.id, c.preloaded, c.added, c.deleted, c.expected, c.counted
        );
    }
    if report.samples.iter().any(|s| s.process.is_some()) {
        println!();
        println!(
            "| t s | phase | RSS MiB | open fds | threads | CPU s | calls done | failed | \
             p50 / p99 ms since the last |"
        );
        println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
        for s in &report.samples {
            let p = s.process.as_ref();
            println!(
                "| {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.at_secs,
                s.label,
                p.and_then(|p| p.rss_bytes)
                    .map_or_else(|| "n/a".into(), |b| format!("{:.1}", b as f64 / MIB)),
                or_na(p.and_then(|p| p.open_fds)),
                or_na(p.and_then(|p| p.threads)),
                opt_secs(p.and_then(|p| p.cpu_seconds)),
                s.finished,
                s.failed,
                if s.interval.is_empty() {
                    "n/a".to_string()
                } else {
                    format!(
                        "{:.2} / {:.2}",
                        s.interval.percentile(50.0),
                        s.interval.percentile(99.0)
                    )
                }
            );
        }
    }
}

fn report_json(args: &Args, target: &Target, report: &Report) -> Value {
    let kinds: serde_json::Map<String, Value> = report
        .kinds
        .iter()
        .map(|(kind, summary)| (kind.name().to_string(), summary.to_json()))
        .collect();
    let finite = |v: f64| v.is_finite().then_some(v);
    let cpu = report.cpu.as_ref();
    let counts_match = report.counts.iter().all(|c| c.counted == c.expected);
    json!({
        "config": {
            "clients": args.clients,
            "connections": args.connections(),
            "mix": args.mix.to_string(),
            "rate": args.rate,
            "duration_secs": args.duration,
            "max_ops": args.max_ops,
            "warmup_secs": args.warmup,
            "preload": args.preload,
            "projects": args.projects,
            "top_k": args.top_k,
            "page_size": args.page_size,
            "add_batch": args.add_batch,
            "server": if target.own.is_some() { json!({ "own": true, "args": args.server_args }) }
                      else { json!({ "own": false, "addr": args.addr }) },
        },
        "wall_secs": report.wall.as_secs_f64(),
        "kinds": kinds,
        "total": report.total.to_json(),
        "schedule": {
            "start_lag_ms": {
                "p50": finite(report.start_lag.percentile(50.0)),
                "p99": finite(report.start_lag.percentile(99.0)),
                "max": finite(report.start_lag.max()),
            },
            "unsent": report.unsent,
        },
        // Warm-up included, as the projects' counts are.
        "deletes": {
            "episodes_requested": report.deletes.requested,
            "episodes_deleted": report.deletes.deleted,
            "count_mismatches": report.deletes.mismatches,
            "refill_adds": report.deletes.refills,
        },
        "server": {
            "pid": target.pid,
            "cpu_seconds": cpu.and_then(|c| c.server),
            "cores": cpu.and_then(|c| c.server).map(|s| s / report.wall.as_secs_f64()),
            "threads_cpu_seconds": cpu.map(|c| c.threads.iter().cloned().collect::<BTreeMap<_, _>>()),
        },
        "load_generator_cpu_seconds": cpu.and_then(|c| c.client),
        "preload_secs": report.preload_secs,
        "embed_wait_secs": report.embed_wait_secs,
        "projects": report.counts.iter().map(|c| json!({
            "id": c.id, "preloaded": c.preloaded, "added": c.added, "deleted": c.deleted,
            "expected": c.expected, "counted": c.counted,
        })).collect::<Vec<_>>(),
        "counts_match": counts_match,
        "samples": report.samples.iter().map(Sample::to_json).collect::<Vec<_>>(),
    })
}

pub fn main(args: Args) -> ExitCode {
    match main_inner(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memmachine-bench load: {err}");
            ExitCode::FAILURE
        }
    }
}

fn main_inner(args: &Args) -> Result<()> {
    args.check()?;
    let runtime = match args.threads {
        0 => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()?,
    };
    let (report, target) = runtime.block_on(run(args))?;
    print_report(args, &target, &report);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report_json(args, &target, &report))?;
        std::fs::write(path, text + "\n")
            .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
        eprintln!("JSON report written to {}", path.display());
    }
    drop(target);
    Ok(())
}
