//! `memmachine-semantic-quality`: how well semantic memory, distilled by a real language
//! model, finds the evidence of LoCoMo questions, beside episodic memory, and what the
//! distillation cost (model calls, tokens, time) and made (features, duplicates,
//! citations). Issue 32, item 3.
//!
//! # What it does
//!
//! 1. Starts `memmachine serve` (the executable next to this one, or `--server`) on a
//!    fresh temporary data directory with the language model of the command line
//!    (`--llm-base-url`, `--llm-model`, `--llm-timeout`; the key of `--llm-api-key` or
//!    `OPENAI_API_KEY` reaches the server as `MEMMACHINE_LLM_API_KEY`, the only way it
//!    takes one), or with `--scripted`: the scripted chat model of `support/chat.rs`,
//!    served from this process (synthetic answers: its recall means nothing, it proves
//!    the plumbing). The server talks to the endpoint directly and handles one that
//!    refuses `response_format` json_schema (llama-cpp-python's server answers 500): it
//!    tries json_object with the schema, json_object, then no format, and remembers the
//!    first that works. The embedder is `--embedder` [default: `local` with `--model-dir`
//!    (`.tools/models/all-MiniLM-L6-v2`) when that directory exists, else `hash`]. The
//!    server gets `--semantic-trigger-messages 20 --semantic-trigger-age 2` (a set is
//!    distilled in batches of 20 messages, the rest after 2 s), `--semantic-lease 3600`
//!    (a slow model must not lose its claim), `--llm-max-calls-per-minute 0`,
//!    `--short-term-window 0` (no short-term summaries, which call the model too; turn
//!    them on with `--summaries`), Prometheus metrics on a free loopback port, then
//!    `--server-args`. Every one of those has its own option here: do not repeat one in
//!    `--server-args` (the server refuses a flag given twice).
//! 2. Creates one project per conversation (org `locomo`, project `<sample_id>`, ranking
//!    `--reranker`, default `hybrid`) and adds its turns in order with `AddMemories`,
//!    `types: [EPISODIC, SEMANTIC]`, 100 per call, exactly as `memmachine-locomo` adds
//!    them (content `text [image: caption]`, producer the speaker, role `user`, the
//!    session date as timestamp, `dia_id` in metadata). The uid each turn gets back is
//!    mapped to its `dia_id`: features cite episodes by uid. Each turn is queued for its
//!    speaker's user set, whose default category `profile` the model distils. The
//!    project's (and org's) set has no category by default, so nothing is distilled into
//!    it; `--project-category` gives the project set a category `events` (prompt in
//!    [`PROJECT_CATEGORY_PROMPT`]) before the adds, and then every turn is queued for it
//!    too (twice the extraction calls).
//! 3. Waits until the server's `memmachine_semantic_queue_depth` is 0 (every queued
//!    message ingested or failed; `messages_ingested` + `messages_failed` events are
//!    shown against the messages queued), printing progress every `--progress-secs`,
//!    for at most `--max-wait` seconds after the first add; then for the episodes' and
//!    the features' vectors. A wait that runs out is reported (`incomplete`) and the
//!    questions are asked of what was distilled by then.
//! 4. Asks every question of categories 1-4 in its own conversation's project, three
//!    ways, each with `top_k` `--top-k` (default 20):
//!    - `SearchFeatures` with an empty `set_metadata`: the server then ranks, with one
//!      score, the features of every set the project sees, i.e. both speakers' user sets,
//!      the project's set and the org's (`set_metadata` `{producer_id: X}` would select
//!      the org and project sets and X's user set only: two calls and a merge of their
//!      scores, which the empty selection does in the server);
//!    - `SearchMemories`, types `[EPISODIC]`: the ranking `memmachine-locomo` measures;
//!    - `SearchMemories`, types `[EPISODIC, SEMANTIC]`: the server does not merge the
//!      two: it answers `episodic_memory.long_term_memory` (top_k episodes) beside
//!      `semantic_memory` (top_k features, the same ranking as SearchFeatures),
//!      separately.
//!
//! # The figures
//!
//! Recall is scored as `/work/shared/data/README.md` defines it and `memmachine-locomo`
//! computes it (`support/locomo.rs`: evidence split on ';' and trimmed, ids naming no
//! turn dropped, questions left with none skipped; per question the fraction of its
//! evidence turns among the first k; averaged over questions). The ranked lists:
//!
//! - **episodic**: the `dia_id`s of the long-term episodes in rank order;
//! - **semantic, k turns**: the features' citations (episode uids mapped to `dia_id`s;
//!   a feature's own citations oldest first, as the server lists them) in feature rank
//!   order, each turn once (first occurrence kept); k counts distinct turns;
//! - **semantic, k features**: every turn cited by the top k features, however many
//!   (a feature may cite many turns, so this is not a budget of k turns);
//! - **combined, response order**: episodes then features' citations, as the answer
//!   lists them: it equals episodic whenever top_k episodes come back;
//! - **combined, interleaved**: episode 1, feature 1's citations, episode 2, feature 2's
//!   citations, ..., each turn once; k counts distinct turns (one k-turn budget shared);
//! - **combined, all returned**: every turn of the answer (top_k episodes and all
//!   citations of top_k features), no cut; the mean count of those turns is shown.
//!
//! Cost and product, from the server's Prometheus metrics at the end:
//!
//! - model calls by purpose (`memmachine_llm_calls_total{purpose,outcome}`), prompt and
//!   completion tokens (`memmachine_llm_{prompt,completion}_tokens_total`, as the
//!   endpoint counts them), each per 100 turns added; mean seconds per call
//!   (`memmachine_llm_call_seconds` sum / count);
//! - seconds per batch: from the first add until the queue drained, over the batches
//!   applied (`batch_applied` events), and over those applied or failed (the workers
//!   distil up to 4 sets at once, so this is wall time per batch, not a call's
//!   latency); batches retried (`batch_retried`: the model failed
//!   or could not be reached, the batch stays queued with backoff), failed
//!   (`batch_failed`: answers still invalid after the corrections; their messages count
//!   as `messages_failed`), invalid answers (`invalid_answers`: each answer that did not
//!   parse or validate, corrections included), commands applied and consolidations;
//! - features per set (ListMemories SEMANTIC, every page), the share citing at least one
//!   turn, mean turns cited per feature, and the duplicate rates. A feature duplicates
//!   another of its set when an earlier-listed one has the same normalised `(tag,
//!   feature name)` (`dup name`), the same normalised value (`dup value`), or either
//!   (`dup any`); normalised is lower-cased, every run of characters other than letters
//!   and digits one space, trimmed. The rate is duplicates / features (a group of three
//!   equal ones counts two).
//!
//! What the server does that the figures show: a command that names no message cites
//! every message of its batch (up to 20 turns), and a consolidation gives each feature
//! it writes the citations of every feature it replaced, so a feature may cite many
//! turns ("turns cited per feature"; "k features" then counts many turns per feature).
//! The model calls are counted per call the server makes: the endpoint may have been
//! sent a call up to 4 times (its client retries 5xx and timeouts within a call).
//!
//! `--dump-features FILE` writes every feature as a JSON line (conversation, set, set
//! label, category, tag, feature, value, cited `dia_id`s); `--json FILE` the figures;
//! `--metrics-dump FILE` the server's last /metrics text.
//!
//! # Usage
//!
//! ```text
//! cargo build --release --bin memmachine --bin memmachine-semantic-quality
//! # plumbing, with the scripted model:
//! target/release/memmachine-semantic-quality --scripted --conversations 1
//! # a local OpenAI-compatible server (llama.cpp, vLLM, Ollama...):
//! target/release/memmachine-semantic-quality --llm-base-url http://127.0.0.1:18080/v1 \
//!     --llm-model smollm2 --conversations 1 --max-wait 1800
//! # OpenAI (key from OPENAI_API_KEY):
//! target/release/memmachine-semantic-quality --llm-base-url https://api.openai.com/v1 \
//!     --llm-model gpt-4o-mini --conversations 2 --dump-features /tmp/features.jsonl
//! ```
//!
//! The results table at the end is markdown, naming the model, the endpoint (without
//! user info or query), the conversations and the wall time.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use memmachine::pb;
use memmachine::pb::memory_service_client::MemoryServiceClient;
use memmachine::pb::project_service_client::ProjectServiceClient;
use memmachine::pb::semantic_service_client::SemanticServiceClient;
use serde_json::json;
use tonic::transport::{Channel, Endpoint};

mod support;

use support::Result;
use support::chat::ScriptedChat;
use support::locomo::{self, CATEGORIES, Conversation, RecallSums, recall_at};
use support::metrics::{self as prometheus, Exposition};
use support::server::Server;

const ORG: &str = "locomo";
/// How long the server may take to report its listening address (a local embedder may
/// load a model first).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);
/// The cut-offs recall is reported at (those not above `--top-k`).
const RECALL_KS: [usize; 3] = [5, 10, 20];
/// The cut-off of the per-category table.
const CATEGORY_K: usize = 10;
/// The purposes the server labels model calls with.
const PURPOSES: [&str; 3] = ["extraction", "consolidation", "summary"];
/// Outcomes of a model call.
const OUTCOMES: [&str; 3] = ["ok", "unavailable", "failed"];
const EVENTS: &str = "memmachine_semantic_events_total";
/// The project set's category with `--project-category`.
const PROJECT_CATEGORY: &str = "events";
/// Its prompt.
const PROJECT_CATEGORY_PROMPT: &str = "Extract what happened in the conversation \
    and when: events, activities, plans and decisions of either speaker, with the people, \
    places and dates involved (use the message timestamps to date them). One event per \
    feature, with a short feature name (\"charity race\", \"trip to Paris\") and a concise \
    value saying who, what and when.";
/// How long the features' embedding count must stay still for the vectors to be done.
const EMBED_SETTLE: Duration = Duration::from_secs(3);

#[derive(Parser, Debug)]
#[command(
    name = "memmachine-semantic-quality",
    about = "Measures semantic memory's recall on LoCoMo with a real (or scripted) language \
             model, beside episodic recall, and what distillation cost and made"
)]
struct Args {
    /// LoCoMo data set (a JSON list of conversations with questions)
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    locomo: PathBuf,
    /// Conversations to use: this many, after --skip (ignored with --conversation-ids)
    #[arg(long, default_value_t = 2)]
    conversations: usize,
    /// Conversations to leave out first
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// The conversations to use, by sample id (e.g. conv-26,conv-30)
    #[arg(long, value_delimiter = ',')]
    conversation_ids: Vec<String>,
    /// OpenAI-compatible chat endpoint, e.g. http://127.0.0.1:18080/v1
    #[arg(long, required_unless_present = "scripted")]
    llm_base_url: Option<String>,
    /// Model name sent to --llm-base-url
    #[arg(long, required_unless_present = "scripted")]
    llm_model: Option<String>,
    /// The endpoint's API key (given to the server as MEMMACHINE_LLM_API_KEY)
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    llm_api_key: Option<String>,
    /// Seconds one model call may take (the server's --llm-timeout)
    #[arg(long, default_value_t = 300.0)]
    llm_timeout: f64,
    /// Use the scripted chat model served from this process instead of an endpoint
    #[arg(long, conflicts_with_all = ["llm_base_url", "llm_model"])]
    scripted: bool,
    /// The server's --embedder [default: local with --model-dir if it exists, else hash]
    #[arg(long)]
    embedder: Option<String>,
    /// The local embedder's model directory
    #[arg(long, default_value = ".tools/models/all-MiniLM-L6-v2")]
    model_dir: PathBuf,
    /// The server's --semantic-trigger-messages (a set's batch size)
    #[arg(long, default_value_t = 20)]
    trigger_messages: usize,
    /// The server's --semantic-trigger-age, in seconds
    #[arg(long, default_value_t = 2.0)]
    trigger_age: f64,
    /// The server's --semantic-lease, in seconds
    #[arg(long, default_value_t = 3600.0)]
    semantic_lease: f64,
    /// Keep the server's short-term summaries (model calls of purpose `summary`)
    #[arg(long)]
    summaries: bool,
    /// Give each project's set a category `events` so turns are distilled into it too
    #[arg(long)]
    project_category: bool,
    /// Every project's ranking (ProjectConfig.reranker)
    #[arg(long, default_value = "hybrid")]
    reranker: String,
    /// top_k of every search
    #[arg(long, default_value_t = 20)]
    top_k: i32,
    /// Messages per AddMemories call
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Longest wait, in seconds from the first add, for the semantic queue to drain
    #[arg(long, default_value_t = 3600)]
    max_wait: u64,
    /// Seconds between progress lines while waiting
    #[arg(long, default_value_t = 10)]
    progress_secs: u64,
    /// Longest wait, in seconds, for the episodes' vectors once the queue drained
    #[arg(long, default_value_t = 600)]
    embed_wait_secs: u64,
    /// Extra arguments for `memmachine serve`, split on whitespace (no quoting)
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    server_args: String,
    /// Server executable [default: `memmachine` next to this executable]
    #[arg(long)]
    server: Option<PathBuf>,
    /// Write the figures as JSON to this file
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write every feature as a JSON line to this file
    #[arg(long)]
    dump_features: Option<PathBuf>,
    /// Write the server's last /metrics text to this file
    #[arg(long)]
    metrics_dump: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------
// Ranked lists and scoring

/// The `dia_id`s of `uids` that name a turn (mapped by `dia`), appended to `out` unless
/// already there; counts those naming none in `unmapped`.
fn push_cited(
    out: &mut Vec<String>,
    seen: &mut HashSet<String>,
    uids: &[String],
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) {
    for uid in uids {
        match dia.get(uid) {
            Some(id) => {
                if seen.insert(id.clone()) {
                    out.push(id.clone());
                }
            }
            None => *unmapped += 1,
        }
    }
}

/// The features' cited turns in feature rank order, each once.
fn cited_turns(
    features: &[pb::SemanticFeature],
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) -> Vec<String> {
    let (mut out, mut seen) = (Vec::new(), HashSet::new());
    for feature in features {
        push_cited(&mut out, &mut seen, &feature.citations, dia, unmapped);
    }
    out
}

/// The turns of a SearchMemories answer: its episodes' `dia_id`s in rank order.
fn episode_turns(response: &pb::SearchMemoriesResponse) -> Vec<String> {
    response
        .episodic_memory
        .as_ref()
        .map(|m| {
            m.long_term_memory
                .iter()
                .filter_map(|s| s.episode.as_ref()?.metadata.get("dia_id").cloned())
                .collect()
        })
        .unwrap_or_default()
}

/// Episode 1, feature 1's citations, episode 2, feature 2's citations..., each turn once.
fn interleave(
    episodes: &[String],
    features: &[pb::SemanticFeature],
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) -> Vec<String> {
    let (mut out, mut seen) = (Vec::new(), HashSet::new());
    for i in 0..episodes.len().max(features.len()) {
        if let Some(id) = episodes.get(i)
            && seen.insert(id.clone())
        {
            out.push(id.clone());
        }
        if let Some(feature) = features.get(i) {
            push_cited(&mut out, &mut seen, &feature.citations, dia, unmapped);
        }
    }
    out
}

/// Episodes, then the features' citations, each turn once.
fn response_order(
    episodes: &[String],
    features: &[pb::SemanticFeature],
    dia: &HashMap<String, String>,
    unmapped: &mut usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for id in episodes {
        if seen.insert(id.clone()) {
            out.push(id.clone());
        }
    }
    for feature in features {
        push_cited(&mut out, &mut seen, &feature.citations, dia, unmapped);
    }
    out
}

/// Recall of `evidence` among every turn cited by the top k features, for each k.
fn recall_by_features(
    evidence: &[String],
    features: &[pb::SemanticFeature],
    dia: &HashMap<String, String>,
    ks: &[usize],
) -> Vec<f64> {
    let mut ignored = 0;
    ks.iter()
        .map(|&k| {
            let top = &features[..k.min(features.len())];
            let cited = cited_turns(top, dia, &mut ignored);
            recall_at(evidence, &cited, &[usize::MAX])[0]
        })
        .collect()
}

/// Recall sums of one ranked list, overall and by category.
#[derive(Clone, Default)]
struct Scores {
    overall: RecallSums,
    by_category: BTreeMap<u32, RecallSums>,
}

impl Scores {
    fn add(&mut self, category: u32, recalls: &[f64]) {
        self.overall.add(recalls);
        self.by_category.entry(category).or_default().add(recalls);
    }
}

/// The ranked lists scored, in the order they are reported.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum List {
    Episodic,
    SemanticTurns,
    SemanticFeatures,
    CombinedResponse,
    CombinedInterleaved,
    CombinedAll,
}

impl List {
    const ALL: [List; 6] = [
        List::Episodic,
        List::SemanticTurns,
        List::SemanticFeatures,
        List::CombinedResponse,
        List::CombinedInterleaved,
        List::CombinedAll,
    ];

    fn key(self) -> &'static str {
        match self {
            List::Episodic => "episodic",
            List::SemanticTurns => "semantic_k_turns",
            List::SemanticFeatures => "semantic_k_features",
            List::CombinedResponse => "combined_response_order",
            List::CombinedInterleaved => "combined_interleaved",
            List::CombinedAll => "combined_all_returned",
        }
    }

    fn label(self, reranker: &str) -> String {
        match self {
            List::Episodic => format!("episodic {reranker} (SearchMemories EPISODIC), k turns"),
            List::SemanticTurns => "semantic (SearchFeatures), first k distinct cited turns".into(),
            List::SemanticFeatures => {
                "semantic (SearchFeatures), every turn cited by the top k FEATURES".into()
            }
            List::CombinedResponse => {
                "combined (SearchMemories EPISODIC+SEMANTIC), episodes then features, k turns"
                    .into()
            }
            List::CombinedInterleaved => {
                "combined, episode/feature interleaved, first k distinct turns".into()
            }
            List::CombinedAll => {
                "combined, every turn returned (top_k episodes + all citations of top_k features)"
                    .into()
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Features

/// Lower case, runs of characters other than letters and digits as one space, trimmed.
fn normalise(text: &str) -> String {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What one set holds.
#[derive(Debug, Default, Clone)]
struct SetStats {
    conversation: String,
    set_id: String,
    label: String,
    features: usize,
    with_citation: usize,
    citations: usize,
    /// Citations of episodes that are not this conversation's turns.
    unmapped: usize,
    dup_name: usize,
    dup_value: usize,
    dup_any: usize,
}

impl SetStats {
    fn of(
        conversation: &str,
        set_id: &str,
        label: &str,
        features: &[&pb::SemanticFeature],
        dia: &HashMap<String, String>,
    ) -> SetStats {
        let mut stats = SetStats {
            conversation: conversation.into(),
            set_id: set_id.into(),
            label: label.into(),
            features: features.len(),
            ..Default::default()
        };
        let (mut names, mut values) = (HashSet::new(), HashSet::new());
        for f in features {
            stats.with_citation += usize::from(!f.citations.is_empty());
            stats.citations += f.citations.len();
            stats.unmapped += f.citations.iter().filter(|c| !dia.contains_key(*c)).count();
            let name = names.insert((normalise(&f.tag), normalise(&f.feature_name)));
            let value = values.insert(normalise(&f.value));
            stats.dup_name += usize::from(!name);
            stats.dup_value += usize::from(!value);
            stats.dup_any += usize::from(!name || !value);
        }
        stats
    }

    fn rate(&self, n: usize) -> f64 {
        if self.features == 0 {
            f64::NAN
        } else {
            n as f64 / self.features as f64
        }
    }

    fn merge(&mut self, other: &SetStats) {
        self.features += other.features;
        self.with_citation += other.with_citation;
        self.citations += other.citations;
        self.unmapped += other.unmapped;
        self.dup_name += other.dup_name;
        self.dup_value += other.dup_value;
        self.dup_any += other.dup_any;
    }
}

/// A set's label: `user:<producer>`, `project`, `org` or its id.
fn set_label(entry: Option<&pb::SetEntry>, set_id: &str) -> String {
    if let Some(producer) = entry.and_then(|e| e.metadata.get("producer_id")) {
        return format!("user:{producer}");
    }
    if set_id.starts_with("mem_project_set_") {
        "project".into()
    } else if set_id.starts_with("mem_org_set_") {
        "org".into()
    } else {
        set_id.into()
    }
}

// ---------------------------------------------------------------------------------------
// The run

struct Project {
    id: String,
    /// Episode uid → `dia_id`.
    dia: HashMap<String, String>,
}

/// How the wait for the semantic queue ended.
#[derive(Debug, Clone, Copy, Default)]
struct Drain {
    /// From the first add until the queue was seen empty (or the wait ran out).
    wall: Duration,
    complete: bool,
    ingested: f64,
    failed: f64,
    depth: f64,
}

#[derive(Default)]
struct Run {
    turns: usize,
    /// Messages queued for semantic ingestion (one per set a turn lands in).
    queued: usize,
    ingest_wall: Duration,
    drain: Drain,
    embed_wait: Option<support::server::EmbedWait>,
    features_settled: Option<Duration>,
    scores: BTreeMap<List, Scores>,
    questions: usize,
    /// Sums over questions, for means.
    features_returned: usize,
    no_features: usize,
    semantic_turns_at_top_k: usize,
    combined_all_turns: usize,
    unmapped_citations: usize,
    sets: Vec<SetStats>,
    metrics: Exposition,
    /// The server's last warning, when distillation made nothing.
    last_warning: Option<String>,
    wall: Duration,
}

fn progress_line(metrics: &Exposition, queued: usize, elapsed: Duration) -> String {
    let event = |e: &str| metrics.sum(EVENTS, &[("event", e)]);
    let calls = |outcome: &str| metrics.sum("memmachine_llm_calls_total", &[("outcome", outcome)]);
    format!(
        "   [{:>6.0} s] semantic: {:.0} of {queued} messages done ({:.0} ingested, {:.0} failed), \
         queue depth {:.0}; batches {:.0} applied, {:.0} retried, {:.0} failed; {:.0} invalid \
         answers; model calls {:.0} ok, {:.0} unavailable, {:.0} failed",
        elapsed.as_secs_f64(),
        event("messages_ingested") + event("messages_failed"),
        event("messages_ingested"),
        event("messages_failed"),
        metrics.sum("memmachine_semantic_queue_depth", &[]),
        event("batch_applied"),
        event("batch_retried"),
        event("batch_failed"),
        event("invalid_answers"),
        calls("ok"),
        calls("unavailable"),
        calls("failed"),
    )
}

async fn scrape(http: &reqwest::Client, url: &str, server: &Server) -> Result<Exposition> {
    prometheus::scrape(http, url)
        .await
        .map_err(|err| server.error("cannot read the server's metrics", err))
}

/// Waits until the semantic queue is empty, at most `--max-wait` from `started`.
async fn wait_for_drain(
    args: &Args,
    http: &reqwest::Client,
    url: &str,
    server: &Server,
    started: Instant,
    queued: usize,
) -> Result<Drain> {
    let limit = Duration::from_secs(args.max_wait);
    let every = Duration::from_secs(args.progress_secs.max(1));
    let mut last_progress = Instant::now();
    loop {
        let metrics = scrape(http, url, server).await?;
        let ingested = metrics.sum(EVENTS, &[("event", "messages_ingested")]);
        let failed = metrics.sum(EVENTS, &[("event", "messages_failed")]);
        let depth = metrics.sum("memmachine_semantic_queue_depth", &[]);
        let complete = depth == 0.0 || ingested + failed >= queued as f64;
        let out_of_time = started.elapsed() >= limit;
        if complete || out_of_time || last_progress.elapsed() >= every {
            eprintln!("{}", progress_line(&metrics, queued, started.elapsed()));
            last_progress = Instant::now();
        }
        if complete || out_of_time {
            if !complete {
                eprintln!(
                    "   warning: the semantic queue did not drain within --max-wait {} s: \
                     {depth:.0} messages still queued; scoring what was distilled",
                    args.max_wait
                );
            }
            return Ok(Drain {
                wall: started.elapsed(),
                complete,
                ingested,
                failed,
                depth,
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until the server's count of embedded texts stays still for `EMBED_SETTLE` (the
/// features' vectors are made in the background), at most `limit`.
async fn wait_for_feature_vectors(
    http: &reqwest::Client,
    url: &str,
    server: &Server,
    limit: Duration,
) -> Result<Option<Duration>> {
    let started = Instant::now();
    let count = |m: &Exposition| m.sum("memmachine_embedded_texts_total", &[]);
    let mut last = count(&scrape(http, url, server).await?);
    let mut still_since = Instant::now();
    while started.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = count(&scrape(http, url, server).await?);
        if now != last {
            last = now;
            still_since = Instant::now();
        } else if still_since.elapsed() >= EMBED_SETTLE {
            return Ok(Some(started.elapsed()));
        }
    }
    Ok(None)
}

async fn create_project(
    args: &Args,
    channel: &Channel,
    conversation: &Conversation,
    server: &Server,
) -> Result<String> {
    let project_id = conversation.sample_id.clone();
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: project_id.clone(),
            description: format!("LoCoMo {} (semantic quality)", conversation.sample_id),
            config: Some(pb::ProjectConfig {
                embedder: String::new(),
                reranker: args.reranker.clone(),
            }),
        })
        .await
        .map_err(|err| server.error("CreateProject failed", err))?;
    if args.project_category {
        let mut semantic = SemanticServiceClient::new(channel.clone());
        let set_id = semantic
            .get_set_id(pb::GetSetIdRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("GetSetId failed", err))?
            .into_inner()
            .set_id;
        semantic
            .add_category(pb::AddCategoryRequest {
                org_id: ORG.into(),
                project_id: project_id.clone(),
                set_id,
                category_name: PROJECT_CATEGORY.into(),
                prompt: PROJECT_CATEGORY_PROMPT.into(),
                description: "memmachine-semantic-quality: the conversation's events".into(),
            })
            .await
            .map_err(|err| server.error("AddCategory failed", err))?;
    }
    Ok(project_id)
}

/// Adds the conversation's turns, episodic and semantic; the uid → `dia_id` map.
async fn add_turns(
    args: &Args,
    channel: &Channel,
    conversation: &Conversation,
    project_id: &str,
    server: &Server,
) -> Result<HashMap<String, String>> {
    let mut memories = MemoryServiceClient::new(channel.clone());
    let mut dia = HashMap::new();
    for mut request in conversation.add_requests(ORG, project_id, args.batch) {
        request.types = vec![
            pb::MemoryType::Episodic as i32,
            pb::MemoryType::Semantic as i32,
        ];
        let ids: Vec<String> = request
            .messages
            .iter()
            .map(|m| m.metadata.get("dia_id").cloned().unwrap_or_default())
            .collect();
        let results = memories
            .add_memories(request)
            .await
            .map_err(|err| server.error("AddMemories failed", err))?
            .into_inner()
            .results;
        if results.len() != ids.len() {
            return Err(format!(
                "AddMemories returned {} uids for {} messages",
                results.len(),
                ids.len()
            )
            .into());
        }
        for (result, id) in results.into_iter().zip(ids) {
            dia.insert(result.uid, id);
        }
    }
    Ok(dia)
}

/// Every feature of the project's sets, page after page.
async fn list_features(
    channel: &Channel,
    project_id: &str,
    server: &Server,
) -> Result<Vec<pb::SemanticFeature>> {
    let mut client = MemoryServiceClient::new(channel.clone());
    let (mut all, mut token) = (Vec::new(), String::new());
    loop {
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                org_id: ORG.into(),
                project_id: project_id.into(),
                r#type: pb::MemoryType::Semantic as i32,
                page_size: Some(1000),
                page_token: token,
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("ListMemories failed", err))?
            .into_inner();
        all.extend(page.features);
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        token = page.next_page_token;
    }
}

/// Counts the project's features by set, and writes them to `dump` if given.
async fn feature_stats(
    channel: &Channel,
    conversation: &Conversation,
    project: &Project,
    server: &Server,
    dump: Option<&mut std::io::BufWriter<std::fs::File>>,
) -> Result<Vec<SetStats>> {
    let features = list_features(channel, &project.id, server).await?;
    let sets = SemanticServiceClient::new(channel.clone())
        .list_set_ids(pb::ListSetIdsRequest {
            org_id: ORG.into(),
            project_id: project.id.clone(),
            ..Default::default()
        })
        .await
        .map_err(|err| server.error("ListSetIds failed", err))?
        .into_inner()
        .sets;
    let label = |set_id: &str| set_label(sets.iter().find(|s| s.id == set_id), set_id);
    let mut by_set: BTreeMap<String, Vec<&pb::SemanticFeature>> = BTreeMap::new();
    // Every set the project sees, even an empty one.
    for set in &sets {
        by_set.entry(set.id.clone()).or_default();
    }
    for feature in &features {
        by_set
            .entry(feature.set_id.clone())
            .or_default()
            .push(feature);
    }
    if let Some(out) = dump {
        for f in &features {
            let cited: Vec<&str> = f
                .citations
                .iter()
                .map(|c| project.dia.get(c).map_or("?", String::as_str))
                .collect();
            let line = json!({
                "conversation": conversation.sample_id,
                "set_id": f.set_id,
                "set": label(&f.set_id),
                "category": f.category,
                "tag": f.tag,
                "feature": f.feature_name,
                "value": f.value,
                "cited": cited,
            });
            writeln!(out, "{line}")?;
        }
    }
    Ok(by_set
        .iter()
        .map(|(set_id, features)| {
            SetStats::of(
                &conversation.sample_id,
                set_id,
                &label(set_id),
                features,
                &project.dia,
            )
        })
        .collect())
}

/// Asks every question of the conversation three ways and scores the lists.
async fn ask(
    args: &Args,
    channel: &Channel,
    conversation: &Conversation,
    project: &Project,
    ks: &[usize],
    server: &Server,
    run: &mut Run,
) -> Result<()> {
    let mut semantic = SemanticServiceClient::new(channel.clone());
    let mut memories = MemoryServiceClient::new(channel.clone());
    let dia = &project.dia;
    for question in &conversation.questions {
        let features = semantic
            .search_features(pb::SearchFeaturesRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("SearchFeatures failed", err))?
            .into_inner()
            .features;
        let episodic = memories
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                types: vec![pb::MemoryType::Episodic as i32],
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("SearchMemories (episodic) failed", err))?
            .into_inner();
        let both = memories
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.id.clone(),
                query: question.text.clone(),
                top_k: Some(args.top_k),
                types: vec![
                    pb::MemoryType::Episodic as i32,
                    pb::MemoryType::Semantic as i32,
                ],
                ..Default::default()
            })
            .await
            .map_err(|err| server.error("SearchMemories (episodic+semantic) failed", err))?
            .into_inner();

        let evidence = &question.evidence;
        let category = question.category;
        let mut unmapped = 0;
        let semantic_turns = cited_turns(&features, dia, &mut unmapped);
        let both_episodes = episode_turns(&both);
        let both_features = &both.semantic_memory;
        let mut ignored = 0;
        let lists: [(List, Vec<f64>); 6] = [
            (
                List::Episodic,
                recall_at(evidence, &episode_turns(&episodic), ks),
            ),
            (
                List::SemanticTurns,
                recall_at(evidence, &semantic_turns, ks),
            ),
            (
                List::SemanticFeatures,
                recall_by_features(evidence, &features, dia, ks),
            ),
            (
                List::CombinedResponse,
                recall_at(
                    evidence,
                    &response_order(&both_episodes, both_features, dia, &mut ignored),
                    ks,
                ),
            ),
            (
                List::CombinedInterleaved,
                recall_at(
                    evidence,
                    &interleave(&both_episodes, both_features, dia, &mut ignored),
                    ks,
                ),
            ),
            (List::CombinedAll, {
                let all = response_order(&both_episodes, both_features, dia, &mut ignored);
                run.combined_all_turns += all.len();
                recall_at(evidence, &all, &[usize::MAX])
            }),
        ];
        for (list, recalls) in lists {
            run.scores.entry(list).or_default().add(category, &recalls);
        }
        run.questions += 1;
        run.features_returned += features.len();
        run.no_features += usize::from(features.is_empty());
        run.semantic_turns_at_top_k += semantic_turns.len();
        run.unmapped_citations += unmapped;
    }
    Ok(())
}

/// The server's arguments.
fn server_args(args: &Args, base_url: &str, model: &str, metrics_port: u16) -> Vec<String> {
    let mut list: Vec<String> = vec![
        "--llm-base-url".into(),
        base_url.into(),
        "--llm-model".into(),
        model.into(),
        "--llm-timeout".into(),
        args.llm_timeout.to_string(),
        "--llm-max-calls-per-minute".into(),
        "0".into(),
        "--semantic-trigger-messages".into(),
        args.trigger_messages.to_string(),
        "--semantic-trigger-age".into(),
        args.trigger_age.to_string(),
        "--semantic-lease".into(),
        args.semantic_lease.to_string(),
        "--metrics-listen".into(),
        format!("127.0.0.1:{metrics_port}"),
        "--embedder".into(),
        embedder(args),
    ];
    if embedder(args) == "local" {
        list.extend(["--model-dir".into(), args.model_dir.display().to_string()]);
    }
    if !args.summaries {
        list.extend(["--short-term-window".into(), "0".into()]);
    }
    list.extend(args.server_args.split_whitespace().map(str::to_string));
    list
}

/// The embedder: as given, else local when its model directory exists, else hash.
fn embedder(args: &Args) -> String {
    match &args.embedder {
        Some(name) => name.clone(),
        None if args.model_dir.join("config.json").is_file() => "local".into(),
        None => "hash".into(),
    }
}

/// The endpoint without user info, query or fragment (where a key could hide).
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.to_string()
        }
        Err(_) => "<unparsed URL>".into(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    args: &Args,
    conversations: &[Conversation],
    executable: &Path,
    ks: &[usize],
    base_url: &str,
    model: &str,
    started: Instant,
) -> Result<Run> {
    let metrics_port = prometheus::free_port()?;
    let server_args = server_args(args, base_url, model, metrics_port);
    let env: Vec<(&str, &str)> = args
        .llm_api_key
        .as_deref()
        .filter(|k| !k.is_empty() && !args.scripted)
        .map(|k| ("MEMMACHINE_LLM_API_KEY", k))
        .into_iter()
        .collect();
    let server = Server::start_with_env(
        executable,
        "memmachine-semantic-quality",
        None,
        &server_args,
        &env,
        STARTUP_TIMEOUT,
    )?;
    let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    eprintln!(
        "== server pid {} on {}, metrics {metrics_url}, data dir {}\n   server args: {}",
        server.pid(),
        server.addr,
        server.data_dir.display(),
        server_args
            .iter()
            .map(|a| if a == base_url { redact(a) } else { a.clone() })
            .collect::<Vec<_>>()
            .join(" ")
    );
    let http = reqwest::Client::new();
    scrape(&http, &metrics_url, &server).await?;
    let channel = Endpoint::from_shared(format!("http://{}", server.addr))?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|err| server.error("cannot connect", err))?;

    let mut result = Run::default();
    let mut projects = Vec::new();
    let sets_per_turn = 1 + usize::from(args.project_category);
    let first_add = Instant::now();
    for conversation in conversations {
        let id = create_project(args, &channel, conversation, &server).await?;
        let dia = add_turns(args, &channel, conversation, &id, &server).await?;
        result.turns += conversation.turns.len();
        result.queued += conversation
            .turns
            .iter()
            .filter(|t| !t.speaker.is_empty())
            .count()
            * sets_per_turn;
        projects.push(Project { id, dia });
    }
    result.ingest_wall = first_add.elapsed();
    eprintln!(
        "   added {} turns in {:.2} s ({} messages queued for semantic ingestion)",
        result.turns,
        result.ingest_wall.as_secs_f64(),
        result.queued
    );

    result.drain =
        wait_for_drain(args, &http, &metrics_url, &server, first_add, result.queued).await?;
    if embedder(args) != "none" {
        result.embed_wait = Some(
            server
                .wait_for_embeddings(result.turns as u64, args.embed_wait_secs)
                .await,
        );
        result.features_settled =
            wait_for_feature_vectors(&http, &metrics_url, &server, Duration::from_secs(120))
                .await?;
    }

    let mut dump = match &args.dump_features {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => None,
    };
    for (conversation, project) in conversations.iter().zip(&projects) {
        let stats = feature_stats(&channel, conversation, project, &server, dump.as_mut()).await?;
        result.sets.extend(stats);
    }
    if let Some(mut out) = dump {
        out.flush()?;
    }
    eprintln!(
        "   {} features in {} sets; asking the questions",
        result.sets.iter().map(|s| s.features).sum::<usize>(),
        result.sets.len()
    );
    for (conversation, project) in conversations.iter().zip(&projects) {
        ask(
            args,
            &channel,
            conversation,
            project,
            ks,
            &server,
            &mut result,
        )
        .await?;
    }
    let text = http.get(&metrics_url).send().await?.text().await?;
    if let Some(path) = &args.metrics_dump {
        std::fs::write(path, &text)?;
    }
    result.metrics = Exposition::parse(&text);
    result.last_warning = server.last_warning();
    result.wall = started.elapsed();
    drop(server);
    Ok(result)
}

// ---------------------------------------------------------------------------------------
// Report

struct Context<'a> {
    args: &'a Args,
    conversations: &'a [Conversation],
    ks: &'a [usize],
    model: String,
    endpoint: String,
}

impl Context<'_> {
    fn questions(&self) -> usize {
        self.conversations.iter().map(|c| c.questions.len()).sum()
    }

    fn ids(&self) -> String {
        self.conversations
            .iter()
            .map(|c| c.sample_id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Per-purpose model figures.
struct PurposeFigures {
    purpose: &'static str,
    calls: [f64; 3],
    prompt_tokens: f64,
    completion_tokens: f64,
    seconds_sum: f64,
    seconds_count: f64,
}

fn purpose_figures(m: &Exposition) -> Vec<PurposeFigures> {
    PURPOSES
        .iter()
        .map(|&purpose| PurposeFigures {
            purpose,
            calls: OUTCOMES.map(|outcome| {
                m.sum(
                    "memmachine_llm_calls_total",
                    &[("purpose", purpose), ("outcome", outcome)],
                )
            }),
            prompt_tokens: m.sum(
                "memmachine_llm_prompt_tokens_total",
                &[("purpose", purpose)],
            ),
            completion_tokens: m.sum(
                "memmachine_llm_completion_tokens_total",
                &[("purpose", purpose)],
            ),
            seconds_sum: m.sum("memmachine_llm_call_seconds_sum", &[("purpose", purpose)]),
            seconds_count: m.sum("memmachine_llm_call_seconds_count", &[("purpose", purpose)]),
        })
        .collect()
}

fn fmt3(x: f64) -> String {
    if x.is_nan() {
        "n/a".into()
    } else {
        format!("{x:.3}")
    }
}

fn event(run: &Run, name: &str) -> f64 {
    run.metrics.sum(EVENTS, &[("event", name)])
}

fn total_sets(run: &Run) -> SetStats {
    let mut total = SetStats::default();
    for s in &run.sets {
        total.merge(s);
    }
    total
}

fn print_report(cx: &Context, run: &Run) {
    let args = cx.args;
    let per100 = |x: f64| x * 100.0 / run.turns.max(1) as f64;
    let q = run.questions.max(1) as f64;
    let total = total_sets(run);
    let batches = event(run, "batch_applied");
    let per_batch = |n: f64| {
        if n > 0.0 {
            format!("{:.1}", run.drain.wall.as_secs_f64() / n)
        } else {
            "n/a".into()
        }
    };
    println!();
    println!(
        "## memmachine-semantic-quality: model `{}` at {} ({})",
        cx.model,
        cx.endpoint,
        if args.scripted {
            "scripted: synthetic answers, recall meaningless"
        } else if args.llm_api_key.as_deref().is_some_and(|k| !k.is_empty()) {
            "API key set, not shown"
        } else {
            "no API key"
        }
    );
    println!();
    println!(
        "LoCoMo {} ({} conversation(s), {} turns, {} questions of categories 1-4); embedder \
         {}, ranking {}, top_k {}; batches of {} messages (or after {} s); project category: \
         {}; summaries: {}; wall time {:.0} s (adds {:.1} s, distillation {:.0} s{}).",
        cx.ids(),
        cx.conversations.len(),
        run.turns,
        cx.questions(),
        embedder(args),
        args.reranker,
        args.top_k,
        args.trigger_messages,
        args.trigger_age,
        if args.project_category {
            "events"
        } else {
            "none"
        },
        if args.summaries { "on" } else { "off" },
        run.wall.as_secs_f64(),
        run.ingest_wall.as_secs_f64(),
        run.drain.wall.as_secs_f64(),
        if run.drain.complete {
            String::new()
        } else {
            format!(
                ", INCOMPLETE: stopped by --max-wait with {:.0} messages still queued",
                run.drain.depth
            )
        }
    );
    println!();
    let mut header = String::from("| ranked list |");
    let mut rule = String::from("|---|");
    for k in cx.ks {
        header.push_str(&format!(" R@{k} |"));
        rule.push_str("---:|");
    }
    println!("{header}");
    println!("{rule}");
    for list in List::ALL {
        let Some(scores) = run.scores.get(&list) else {
            continue;
        };
        let mut row = format!("| {} |", list.label(&args.reranker));
        if list == List::CombinedAll {
            let all = fmt3(scores.overall.mean(0));
            for _ in cx.ks {
                row.push_str(&format!(" {all} |"));
            }
        } else {
            for i in 0..cx.ks.len() {
                row.push_str(&format!(" {} |", fmt3(scores.overall.mean(i))));
            }
        }
        println!("{row}");
    }
    println!();
    println!(
        "SearchFeatures returned {:.1} features per question ({} questions with none), citing \
         {:.1} distinct turns; the combined answer held {:.1} distinct turns; {} citations named \
         no turn of the conversation.",
        run.features_returned as f64 / q,
        run.no_features,
        run.semantic_turns_at_top_k as f64 / q,
        run.combined_all_turns as f64 / q,
        run.unmapped_citations
    );
    if let Some(i) = cx.ks.iter().position(|&k| k == CATEGORY_K) {
        println!();
        let mut header = format!("| R@{CATEGORY_K} by category |");
        let mut rule = String::from("|---|");
        let counts = run
            .scores
            .get(&List::Episodic)
            .map(|s| s.by_category.clone())
            .unwrap_or_default();
        for c in CATEGORIES {
            let n = counts.get(&c).map_or(0, |s| s.questions);
            header.push_str(&format!(" {c} {} ({n}) |", category_name(c)));
            rule.push_str("---:|");
        }
        println!("{header}");
        println!("{rule}");
        for list in [
            List::Episodic,
            List::SemanticTurns,
            List::SemanticFeatures,
            List::CombinedInterleaved,
        ] {
            let Some(scores) = run.scores.get(&list) else {
                continue;
            };
            let mut row = format!("| {} |", list.key());
            for c in CATEGORIES {
                let sums = scores.by_category.get(&c).cloned().unwrap_or_default();
                row.push_str(&format!(" {} |", fmt3(sums.mean(i))));
            }
            println!("{row}");
        }
    }

    println!();
    println!(
        "Distillation: {:.0} messages queued, {:.0} ingested, {:.0} failed; {:.0} batches \
         applied ({} s of wall time per batch applied, {} per batch applied or failed), {:.0} \
         retried, {:.0} failed; {:.0} invalid answers; {:.0} commands applied; {:.0} \
         consolidations.",
        run.queued,
        event(run, "messages_ingested"),
        event(run, "messages_failed"),
        batches,
        per_batch(batches),
        per_batch(batches + event(run, "batch_failed")),
        event(run, "batch_retried"),
        event(run, "batch_failed"),
        event(run, "invalid_answers"),
        event(run, "commands_applied"),
        event(run, "consolidated"),
    );
    println!();
    println!(
        "| model calls | ok / unavailable / failed | calls per 100 turns | prompt tokens per \
         100 turns | completion tokens per 100 turns | mean s per call |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for p in purpose_figures(&run.metrics) {
        let calls: f64 = p.calls.iter().sum();
        if calls == 0.0 && p.purpose != "extraction" {
            continue;
        }
        println!(
            "| {} | {:.0} / {:.0} / {:.0} | {:.2} | {:.0} | {:.0} | {} |",
            p.purpose,
            p.calls[0],
            p.calls[1],
            p.calls[2],
            per100(calls),
            per100(p.prompt_tokens),
            per100(p.completion_tokens),
            if p.seconds_count > 0.0 {
                format!("{:.2}", p.seconds_sum / p.seconds_count)
            } else {
                "n/a".into()
            }
        );
    }
    println!();
    println!(
        "| features | set | count | citing ≥1 turn | turns cited per feature | dup name | dup \
         value | dup any |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for s in run.sets.iter().chain(std::iter::once(&total)) {
        let (conversation, label) = if std::ptr::eq(s, &total) {
            ("all", "all sets")
        } else {
            (s.conversation.as_str(), s.label.as_str())
        };
        println!(
            "| {conversation} | {label} | {} | {} | {} | {} | {} | {} |",
            s.features,
            fmt3(s.rate(s.with_citation)),
            if s.features == 0 {
                "n/a".into()
            } else {
                format!("{:.1}", s.citations as f64 / s.features as f64)
            },
            fmt3(s.rate(s.dup_name)),
            fmt3(s.rate(s.dup_value)),
            fmt3(s.rate(s.dup_any)),
        );
    }
    if total.features == 0 {
        println!();
        println!(
            "NO FEATURES were distilled: {:.0} model calls ok, {:.0} unavailable, {:.0} failed; \
             {:.0} batches retried, {:.0} failed, {:.0} invalid answers (see the server's \
             warnings above).",
            run.metrics
                .sum("memmachine_llm_calls_total", &[("outcome", "ok")]),
            run.metrics
                .sum("memmachine_llm_calls_total", &[("outcome", "unavailable")]),
            run.metrics
                .sum("memmachine_llm_calls_total", &[("outcome", "failed")]),
            event(run, "batch_retried"),
            event(run, "batch_failed"),
            event(run, "invalid_answers"),
        );
        if let Some(line) = &run.last_warning {
            println!();
            println!("The server's last warning: {line}");
        }
    }
    if let Some(wait) = run.embed_wait {
        println!();
        println!(
            "Vectors: {} of {} turns reported embedded{}; features' vectors {}.",
            wait.embedded,
            run.turns,
            if wait.complete { "" } else { " (gave up)" },
            match run.features_settled {
                Some(d) => format!("settled {:.1} s after that", d.as_secs_f64()),
                None => "still changing after 120 s".into(),
            }
        );
    }
}

fn category_name(category: u32) -> &'static str {
    match category {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        _ => "other",
    }
}

fn write_json(path: &Path, cx: &Context, run: &Run) -> Result<()> {
    let args = cx.args;
    let recall = |scores: &Scores, list: List| {
        let ks: Vec<String> = if list == List::CombinedAll {
            vec!["all".into()]
        } else {
            cx.ks.iter().map(|k| k.to_string()).collect()
        };
        let map = |sums: &RecallSums| {
            ks.iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), json!(sums.mean(i))))
                .collect::<serde_json::Map<_, _>>()
        };
        json!({
            "label": list.label(&args.reranker),
            "questions": scores.overall.questions,
            "recall": map(&scores.overall),
            "categories": scores.by_category.iter()
                .map(|(c, s)| (c.to_string(), json!({"questions": s.questions, "recall": map(s)})))
                .collect::<serde_json::Map<_, _>>(),
        })
    };
    let lists: serde_json::Map<_, _> = run
        .scores
        .iter()
        .map(|(list, scores)| (list.key().to_string(), recall(scores, *list)))
        .collect();
    let purposes: serde_json::Map<_, _> = purpose_figures(&run.metrics)
        .into_iter()
        .map(|p| {
            (
                p.purpose.to_string(),
                json!({
                    "calls": {"ok": p.calls[0], "unavailable": p.calls[1], "failed": p.calls[2]},
                    "prompt_tokens": p.prompt_tokens,
                    "completion_tokens": p.completion_tokens,
                    "call_seconds_sum": p.seconds_sum,
                    "call_seconds_count": p.seconds_count,
                }),
            )
        })
        .collect();
    let events: serde_json::Map<_, _> = [
        "messages_ingested",
        "messages_failed",
        "batch_applied",
        "batch_retried",
        "batch_failed",
        "invalid_answers",
        "commands_applied",
        "consolidated",
    ]
    .iter()
    .map(|e| (e.to_string(), json!(event(run, e))))
    .collect();
    let sets: Vec<serde_json::Value> = run
        .sets
        .iter()
        .map(|s| {
            json!({
                "conversation": s.conversation,
                "set_id": s.set_id,
                "set": s.label,
                "features": s.features,
                "with_citation": s.with_citation,
                "citations": s.citations,
                "unmapped_citations": s.unmapped,
                "dup_name": s.dup_name,
                "dup_value": s.dup_value,
                "dup_any": s.dup_any,
            })
        })
        .collect();
    let q = run.questions.max(1) as f64;
    let out = json!({
        "model": cx.model,
        "endpoint": cx.endpoint,
        "scripted": args.scripted,
        "conversations": cx.conversations.iter().map(|c| &c.sample_id).collect::<Vec<_>>(),
        "turns": run.turns,
        "questions": run.questions,
        "embedder": embedder(args),
        "reranker": args.reranker,
        "top_k": args.top_k,
        "trigger_messages": args.trigger_messages,
        "trigger_age": args.trigger_age,
        "project_category": args.project_category,
        "summaries": args.summaries,
        "server_args": args.server_args,
        "wall_seconds": run.wall.as_secs_f64(),
        "add_seconds": run.ingest_wall.as_secs_f64(),
        "distillation": {
            "seconds": run.drain.wall.as_secs_f64(),
            "complete": run.drain.complete,
            "queued": run.queued,
            "ingested": run.drain.ingested,
            "failed": run.drain.failed,
            "left_in_queue": run.drain.depth,
        },
        "events": events,
        "model_calls": purposes,
        "recall": lists,
        "features_per_question": run.features_returned as f64 / q,
        "questions_without_features": run.no_features,
        "semantic_turns_per_question": run.semantic_turns_at_top_k as f64 / q,
        "combined_turns_per_question": run.combined_all_turns as f64 / q,
        "unmapped_citations_in_searches": run.unmapped_citations,
        "sets": sets,
        "last_server_warning": run.last_warning,
    });
    std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
    Ok(())
}

/// The conversations asked for, and the dropped evidence ids among them.
fn select(args: &Args) -> Result<(Vec<Conversation>, Vec<String>)> {
    let format = locomo::ContentFormat::default();
    let limit = if args.conversation_ids.is_empty() {
        Some(args.skip + args.conversations)
    } else {
        None
    };
    let (all, stats) = locomo::load(&args.locomo, limit, format)?;
    let chosen: Vec<Conversation> = if args.conversation_ids.is_empty() {
        all.into_iter().skip(args.skip).collect()
    } else {
        let mut chosen = Vec::new();
        let mut all: Vec<Option<Conversation>> = all.into_iter().map(Some).collect();
        for id in &args.conversation_ids {
            let found = all
                .iter_mut()
                .find(|c| c.as_ref().is_some_and(|c| &c.sample_id == id))
                .and_then(Option::take)
                .ok_or_else(|| format!("no conversation {id:?} in {}", args.locomo.display()))?;
            chosen.push(found);
        }
        chosen
    };
    if chosen.is_empty() {
        return Err("no conversations selected".into());
    }
    let dropped = stats
        .dropped_ids
        .into_iter()
        .filter(|id| {
            chosen
                .iter()
                .any(|c| id.starts_with(&format!("{}:", c.sample_id)))
        })
        .collect();
    Ok((chosen, dropped))
}

fn main() -> Result<()> {
    let started = Instant::now();
    let args = Args::parse();
    if !(1..=1000).contains(&args.top_k) {
        return Err("--top-k must be 1 to 1000".into());
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
             `cargo build --release --bin memmachine --bin memmachine-semantic-quality`",
            executable.display()
        )
        .into());
    }
    let (conversations, dropped) = select(&args)?;
    eprintln!(
        "LoCoMo: {} ({} turns, {} questions; {} evidence ids naming no turn dropped); server {}",
        conversations
            .iter()
            .map(|c| c.sample_id.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        conversations.iter().map(|c| c.turns.len()).sum::<usize>(),
        conversations
            .iter()
            .map(|c| c.questions.len())
            .sum::<usize>(),
        dropped.len(),
        executable.display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (result, model, endpoint) = runtime.block_on(async {
        // The scripted model lives as long as the run.
        let scripted = if args.scripted {
            Some(ScriptedChat::start().await?)
        } else {
            None
        };
        let (base_url, model) = match &scripted {
            Some(chat) => (chat.base_url(), "scripted".to_string()),
            None => (
                args.llm_base_url.clone().unwrap_or_default(),
                args.llm_model.clone().unwrap_or_default(),
            ),
        };
        let result = run(
            &args,
            &conversations,
            &executable,
            &ks,
            &base_url,
            &model,
            started,
        )
        .await?;
        Ok::<_, support::BoxError>((result, model, redact(&base_url)))
    })?;
    let cx = Context {
        args: &args,
        conversations: &conversations,
        ks: &ks,
        model,
        endpoint,
    };
    print_report(&cx, &result);
    if !dropped.is_empty() {
        println!();
        println!(
            "Evidence ids naming no turn (dropped): {}",
            dropped.join(", ")
        );
    }
    if let Some(path) = &args.json {
        write_json(path, &cx, &result)?;
    }
    Ok(())
}
