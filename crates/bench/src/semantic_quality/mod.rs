//! `memmachine-bench semantic-quality`: how well semantic memory, distilled by a real language
//! model, finds the evidence of LoCoMo questions, beside episodic memory, and what the
//! distillation cost (model calls, tokens, time) and made (features, duplicates,
//! citations). Issue 32, item 3.
//!
//! # What it does
//!
//! 1. Starts `memmachine serve` (the executable next to this one, or `--server`) on a fresh
//!    temporary data directory (`--keep-data`, `--reuse`: see below) with the language
//!    model of the command line (`--llm-base-url`, `--llm-model`, `--llm-timeout`; the key
//!    of `--llm-api-key` or `OPENAI_API_KEY` reaches the server as
//!    `MEMMACHINE_LLM_API_KEY`, the only way it takes one), or with `--scripted`: the
//!    scripted chat model of `support/chat.rs`, served from this process (synthetic
//!    answers: its recall means nothing, it proves the plumbing). The server talks to the
//!    endpoint directly and handles one that refuses `response_format` json_schema
//!    (llama-cpp-python's server answers 500): it tries json_object with the schema,
//!    json_object, then no format, and remembers the first that works. The embedder is
//!    `--embedder` [default: `local` with `--model-dir` (`.tools/models/all-MiniLM-L6-v2`)
//!    when that directory exists, else `hash`]. The server gets
//!    `--semantic-trigger-messages 20 --semantic-trigger-age 2` (a set is distilled in
//!    batches of 20 messages, the rest after 2 s), `--semantic-lease 3600` (a slow model
//!    must not lose its claim), `--llm-max-calls-per-minute 0`, `--short-term-window 0` (no
//!    short-term summaries, which call the model too; turn them on with `--summaries`),
//!    Prometheus metrics on a free loopback port, then `--server-args`. Every one of those
//!    has its own option here: do not repeat one in `--server-args` (the server refuses a
//!    flag given twice).
//! 2. Creates one project per conversation (org `locomo`, project `<sample_id>`, ranking
//!    `--reranker`, default `hybrid`) and adds its turns in order with `AddMemories`,
//!    `types: [EPISODIC, SEMANTIC]`, 100 per call, exactly as `memmachine-bench locomo` adds
//!    them (content `text [image: caption]`, producer the speaker, role `user`, the
//!    session date as timestamp, `dia_id` in metadata). The uid each turn gets back is
//!    mapped to its `dia_id`: features cite episodes by uid. Each turn is queued for its
//!    speaker's user set, whose default category `profile` the model distils. The
//!    project's (and org's) set has no category by default, so nothing is distilled into
//!    it; `--project-category` gives the project set a category `events` (prompt in
//!    [`conversations::PROJECT_CATEGORY_PROMPT`]) before the adds, and then every turn
//!    is queued for it too (twice the extraction calls). With `--turns N` only the
//!    first N turns of each conversation are added, in order (default: all), so that a
//!    slow model (a 1.5B model on 2 CPU cores takes about a minute per call) can be
//!    compared on a prefix; see step 4 for the questions.
//! 3. Waits until the server's `memmachine_semantic_queue_depth` is 0 (every queued
//!    message ingested or failed; `messages_ingested` + `messages_failed` events are
//!    shown against the messages queued), printing progress every `--progress-secs`,
//!    for at most `--max-wait` seconds after the first add; then for the episodes' and
//!    the features' vectors. A wait that runs out is reported (`incomplete`) and the
//!    questions are asked of what was distilled by then.
//! 4. Asks every question of categories 1-4 in its own conversation's project (with
//!    `--turns N`, only those all of whose evidence, after the clean-up below, lies in
//!    the first N turns: how many that leaves is printed), four ways, each with `top_k`
//!    `--top-k` (default 20):
//!    - `SearchFeatures` with an empty `set_metadata`: the server then ranks, with one
//!      score, the features of every set the project sees, i.e. both speakers' user sets,
//!      the project's set and the org's (`set_metadata` `{producer_id: X}` would select
//!      the org and project sets and X's user set only: two calls and a merge of their
//!      scores, which the empty selection does in the server);
//!    - `SearchMemories`, types `[EPISODIC]`: the ranking `memmachine-bench locomo` measures;
//!    - `SearchMemories`, types `[EPISODIC, SEMANTIC]`: the server does not merge the
//!      two: it answers `episodic_memory.long_term_memory` (top_k episodes) beside
//!      `semantic_memory` (top_k features, the same ranking as SearchFeatures),
//!      separately;
//!    - the same with `rank_together`: the server's one ranking of episodes and the
//!      episodes features cite (`ranked`).
//!
//! # The figures
//!
//! Recall is scored as `/work/shared/data/README.md` defines it and `memmachine-bench locomo`
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
//! - **combined, server-ranked**: the `ranked` answer in its order, an episode its
//!   turn, a feature its cited turns (oldest first), each turn once; k counts distinct
//!   turns;
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
//! Against the facts LoCoMo annotates (`observation` → `session_N_observation` →
//! speaker → `[fact, evidence]`; evidence a string or a list, split on ';' and ',',
//! trimmed, ids naming no turn dropped, facts left with none dropped; with `--turns N`
//! only the facts all of whose evidence lies in the first N turns), every feature of the
//! conversation's project (every set) rendered as `"<feature name>: <value>"`:
//!
//! - a feature **matches** a fact when it cites at least one of the fact's evidence
//!   turns and the cosine of the two texts' all-MiniLM-L6-v2 vectors (the local
//!   embedder's crate, loaded in this process from `--model-dir`) is at least
//!   `--fact-threshold` (default 0.5: paraphrases a model writes of a fact score above
//!   it, a fact beside another fact's feature mostly below; BENCHMARKS.md shows the
//!   pairs). The tag is left out: it names a category of the prompt (`preferences`,
//!   `hobbies`), not the fact, and would pull every feature of a tag toward each other
//!   and toward facts that use the word;
//! - **fact recall**: facts matched by some feature / facts counted; **fact recall, text
//!   only**: facts with some feature as similar, whatever it cites (the gap is what
//!   citation accuracy costs);
//! - **precision** (the issue's rule): features that match a fact or cite a turn that is
//!   evidence of some fact counted / features; **precision, matching**: features that
//!   match a fact / features;
//! - **semantic dup**: features whose text has a cosine of at least 0.9 with an
//!   earlier-listed feature of their set / features;
//! - **fact recall over turns**: for each prefix of P turns (every 20, or a multiple of
//!   20 that keeps 10 rows), the facts all of whose evidence lies within the first P
//!   turns of their conversation, matched by the features citing only turns within
//!   them (summed over conversations): what extraction of the first P turns would have
//!   found, as far as citations tell.
//!
//! Without the model those figures are reported as not scored.
//!
//! What the server does that the figures show: a command that names no message cites
//! every message of its batch (up to 20 turns), and a consolidation gives each feature
//! it writes the citations of every feature it replaced, so a feature may cite many
//! turns ("turns cited per feature"; "k features" then counts many turns per feature).
//! The model calls are counted per call the server makes: the endpoint may have been
//! sent a call up to 4 times (its client retries 5xx and timeouts within a call).
//!
//! `--dump-features FILE` writes every feature as a JSON line (conversation, set, set
//! label, category, tag, feature, value, cited `dia_id`s, the most similar fact with its
//! speaker, evidence and similarity, and whether the feature matches a fact); `--json
//! FILE` the figures; `--metrics-dump FILE` the server's last /metrics text.
//!
//! `--keep-data DIR` runs the server on DIR (new or empty) and leaves it there;
//! `--reuse DIR` starts the server on such a directory, adds nothing and waits for
//! nothing, maps uids to `dia_id`s from the stored episodes' metadata (ListMemories
//! EPISODIC), and asks the questions and computes every figure again: search and
//! fusion can be tuned without a slow model's distillation. It wants the kept run's
//! conversations and `--turns` (a selected turn missing from a project is an error);
//! the model calls and events it reports are its own (none).
//!
//! # Usage
//!
//! ```text
//! cargo build --release --bin memmachine --bin memmachine-bench
//! # plumbing, with the scripted model:
//! target/release/memmachine-bench semantic-quality --scripted --conversations 1
//! # a local OpenAI-compatible server (llama.cpp, vLLM, Ollama...):
//! target/release/memmachine-bench semantic-quality --llm-base-url http://127.0.0.1:18080/v1 \
//!     --llm-model smollm2 --conversations 1 --max-wait 1800
//! # OpenAI (key from OPENAI_API_KEY):
//! target/release/memmachine-bench semantic-quality --llm-base-url https://api.openai.com/v1 \
//!     --llm-model gpt-4o-mini --conversations 2 --dump-features /tmp/features.jsonl
//! # a slow local model, on the first 100 turns of two conversations:
//! target/release/memmachine-bench semantic-quality --llm-base-url http://127.0.0.1:18080/v1 \
//!     --llm-model qwen2.5-1.5b --conversations 2 --turns 100 --max-wait 14400
//! ```
//!
//! The results table at the end is markdown, naming the model, the endpoint (without
//! user info or query), the conversations, the turns used, the questions scored and the
//! wall time.
//!
//! # Layout
//!
//! [`options`]: the command line, the server's arguments; [`conversations`]: loading,
//! projects and adds; [`wait`]: waiting for distillation and vectors, with progress;
//! [`questions`]: the searches per question; [`scoring`]: the ranked lists and their
//! recall; [`features`]: the census of features (counts, duplicates, citations);
//! [`observations`]: LoCoMo's annotated facts; [`facts`]: the features against them;
//! [`cost`]: model calls, tokens and events from the metrics; [`run`]: one run, start
//! to end; [`report`] and [`report_json`]: the results as markdown and as JSON. The
//! server, LoCoMo and the scripted model are the benches' shared `support`.

use crate::support;

mod conversations;
mod cost;
mod facts;
mod features;
mod observations;
mod options;
mod outcome;
mod questions;
mod report;
mod report_json;
mod run;
mod scoring;
mod wait;

use std::time::Instant;

use conversations::select;
use facts::{DUPLICATE_THRESHOLD, Thresholds};
pub use options::Args;
use options::redact;
use report::{Context, print_report};
use report_json::write_json;
use run::run;
use scoring::RECALL_KS;
use support::Result;
use support::chat::ScriptedChat;

pub fn main(args: Args) -> Result<()> {
    let started = Instant::now();
    args.check()?;
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
    let selection = select(&args)?;
    let conversations = &selection.conversations;
    eprintln!(
        "LoCoMo: {} ({}; {} evidence ids naming no turn dropped); server {}",
        selection.ids(),
        selection.scope(),
        selection.dropped.len(),
        executable.display()
    );
    if selection.questions() == 0 {
        eprintln!("   warning: no question has all its evidence within the turns used");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (mut result, model, endpoint) = runtime.block_on(async {
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
            conversations,
            &executable,
            &ks,
            &base_url,
            &model,
            started,
        )
        .await?;
        Ok::<_, support::BoxError>((result, model, redact(&base_url)))
    })?;
    let thresholds = Thresholds {
        fact: args.fact_threshold,
        duplicate: DUPLICATE_THRESHOLD,
    };
    result.facts = Some(facts::evaluate(
        &args.model_dir,
        conversations,
        &selection.facts,
        &result.listed,
        thresholds,
    ));
    if let Some(path) = &args.dump_features {
        let scores = result.facts.as_ref().and_then(|f| f.as_deref().ok());
        features::dump(
            path,
            conversations,
            &result.listed,
            &selection.facts,
            scores,
        )?;
    }
    let cx = Context {
        args: &args,
        selection: &selection,
        ks: &ks,
        model,
        endpoint,
    };
    print_report(&cx, &result);
    if !selection.dropped.is_empty() {
        println!();
        println!(
            "Evidence ids naming no turn (dropped): {}",
            selection.dropped.join(", ")
        );
    }
    if !selection.dropped_fact_ids.is_empty() {
        println!();
        println!(
            "Fact evidence ids naming no turn (dropped): {}",
            selection.dropped_fact_ids.join(", ")
        );
    }
    if let Some(path) = &args.json {
        write_json(path, &cx, &result)?;
    }
    Ok(())
}
