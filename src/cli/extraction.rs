//! `memmachine extraction estimate|pause|resume`: a project's extraction backlog with
//! what it will cost, and pausing or resuming its extraction, over
//! `memmachine.v2.UsageService`.

use clap::Subcommand;
use serde_json::json;

use super::connect::Client;
use super::output::{out, print_json, thousands};
use super::usage::{budget_json, budget_lines};
use super::{CliError, ClientArgs};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::usage_service_client::UsageServiceClient;

#[derive(Subcommand, Debug)]
pub enum ExtractionCommand {
    /// The project's (--org, --project) queued messages and what extracting them will
    /// cost (no model is called), with the org's budget
    Estimate,
    /// Hold back the project's extraction: adds go on, its messages stay queued
    Pause,
    /// Let the project's queued messages be extracted again
    Resume,
}

fn estimate_json(r: &pb::EstimateExtractionResponse) -> serde_json::Value {
    let e = r.estimate.clone().unwrap_or_default();
    json!({
        "project_id": e.project_id,
        "paused": e.paused,
        "pending_messages": e.pending_messages,
        "sets": e.sets,
        "max_batch_messages": e.max_batch_messages,
        "batches": e.batches,
        "calls": e.calls,
        "prompt_tokens": e.prompt_tokens,
        "completion_tokens": e.completion_tokens,
        "budget": budget_json(&r.budget.unwrap_or_default()),
        "tokens_left_today": r.tokens_left_today,
    })
}

fn estimate_lines(r: &pb::EstimateExtractionResponse) -> String {
    let e = r.estimate.clone().unwrap_or_default();
    let n = |v: i64| thousands(v.max(0) as u64);
    let mut text = format!(
        "extraction of {}: {}\n{} messages queued in {} sets: {} batches, {} calls\n\
         about {} prompt and {} completion tokens\n{}",
        e.project_id,
        if e.paused { "paused" } else { "running" },
        n(e.pending_messages),
        n(e.sets),
        n(e.batches),
        n(e.calls),
        n(e.prompt_tokens),
        n(e.completion_tokens),
        budget_lines(&r.budget.unwrap_or_default()),
    );
    if let Some(left) = r.tokens_left_today {
        text.push_str(&format!("\n{} tokens left today", n(left)));
    }
    text
}

pub async fn run(client_args: &ClientArgs, command: ExtractionCommand) -> Result<(), CliError> {
    let client = Client::connect(client_args).await?;
    let mut usage = UsageServiceClient::new(client.channel());
    let paused = match command {
        ExtractionCommand::Estimate => {
            let estimate = usage
                .estimate_extraction(client.request(pb::EstimateExtractionRequest {
                    org_id: client.org.clone(),
                    project_id: client.project.clone(),
                }))
                .await?
                .into_inner();
            if client_args.json {
                return print_json(&estimate_json(&estimate));
            }
            return out(estimate_lines(&estimate));
        }
        ExtractionCommand::Pause => true,
        ExtractionCommand::Resume => false,
    };
    let state = usage
        .set_extraction_paused(client.request(pb::SetExtractionPausedRequest {
            org_id: client.org.clone(),
            project_id: client.project.clone(),
            paused,
        }))
        .await?
        .into_inner();
    if client_args.json {
        return print_json(&json!({ "paused": state.paused }));
    }
    out(format!(
        "extraction of {}: {}",
        client.project,
        if state.paused { "paused" } else { "running" }
    ))
}
