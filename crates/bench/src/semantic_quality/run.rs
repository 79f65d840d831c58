//! One run: the server started, the conversations added, the wait, the census and the
//! questions, and what they gave.

use std::path::Path;
use std::time::{Duration, Instant};

use tonic::transport::Endpoint;

use super::conversations::{Project, add_turns, create_project, stored_turns};
use super::features::feature_stats;
use super::options::{Args, embedder, redact, server_args};
use super::outcome::Run;
use super::questions::ask;
use super::wait::{Drain, scrape, wait_for_drain, wait_for_feature_vectors};
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
        args.reuse.as_deref().or(args.keep_data.as_deref()),
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
    let projects = if args.reuse.is_some() {
        reuse(conversations, &channel, &server, &mut result).await?
    } else {
        let first_add = Instant::now();
        let projects = add(args, conversations, &channel, &server, &mut result).await?;
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
        projects
    };

    for (conversation, project) in conversations.iter().zip(&projects) {
        let (stats, listed) = feature_stats(&channel, conversation, project, &server).await?;
        result.sets.extend(stats);
        result.listed.push(listed);
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

/// Creates the projects and adds the turns; the projects with their uid → `dia_id` maps.
async fn add(
    args: &Args,
    conversations: &[Conversation],
    channel: &tonic::transport::Channel,
    server: &Server,
    result: &mut Run,
) -> Result<Vec<Project>> {
    let mut projects = Vec::new();
    let sets_per_turn = 1 + usize::from(args.project_category);
    let first_add = Instant::now();
    for conversation in conversations {
        let id = create_project(args, channel, conversation, server).await?;
        let dia = add_turns(args, channel, conversation, &id, server).await?;
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
    Ok(projects)
}

/// `--reuse`: the projects as stored, their uid → `dia_id` maps from their episodes;
/// refused when a turn of the selection is missing (another selection was kept).
async fn reuse(
    conversations: &[Conversation],
    channel: &tonic::transport::Channel,
    server: &Server,
    result: &mut Run,
) -> Result<Vec<Project>> {
    let mut projects = Vec::new();
    for conversation in conversations {
        let id = conversation.sample_id.clone();
        let dia = stored_turns(channel, &id, server).await?;
        let stored: std::collections::HashSet<&str> = dia.values().map(String::as_str).collect();
        let missing = conversation
            .turns
            .iter()
            .filter(|t| !stored.contains(t.dia_id.as_str()))
            .count();
        if missing > 0 {
            return Err(format!(
                "--reuse: project {id} lacks {missing} of the {} turns selected (it holds {}): \
                 give the kept run's --conversation-ids and --turns",
                conversation.turns.len(),
                stored.len()
            )
            .into());
        }
        if stored.len() > conversation.turns.len() {
            eprintln!(
                "   warning: project {id} holds {} turns, {} selected: features may cite the others",
                stored.len(),
                conversation.turns.len()
            );
        }
        result.turns += conversation.turns.len();
        projects.push(Project { id, dia });
    }
    result.drain = Drain {
        complete: true,
        ..Default::default()
    };
    eprintln!(
        "   reused {}: {} turns stored, nothing added, no wait",
        server.data_dir.display(),
        result.turns
    );
    Ok(projects)
}
