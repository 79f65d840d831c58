//! One run: the server started, the conversations added, the wait, the census and the
//! questions, and what they gave.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use tonic::transport::Endpoint;

use super::conversations::{Project, add_turns, create_project};
use super::features::feature_stats;
use super::options::{Args, embedder, redact, server_args};
use super::outcome::Run;
use super::questions::ask;
use super::wait::{scrape, wait_for_drain, wait_for_feature_vectors};
use crate::support::Result;
use crate::support::locomo::Conversation;
use crate::support::metrics::{self as prometheus, Exposition};
use crate::support::server::Server;

/// How long the server may take to report its listening address (a local embedder may
/// load a model first).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(300);

#[allow(clippy::too_many_arguments)]
pub async fn run(
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
