//! `memmachine usage` (an org's language-model and embedder usage, and its budget) and
//! `memmachine budget set` (an org's daily token budget; an admin key) over
//! `memmachine.v2.UsageService`.

use clap::{Args, Subcommand};
use serde_json::json;

use super::connect::Client;
use super::output::{Table, out, print_json, thousands, time};
use super::{CliError, ClientArgs};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::usage_service_client::UsageServiceClient;

#[derive(Args, Debug)]
pub struct UsageArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// From this time (RFC 3339); default: the start of the current UTC day
    #[arg(long)]
    pub since: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum BudgetCommand {
    /// Sets the org's (--org) daily language-model token budget; 0 is unlimited
    Set {
        #[arg(long)]
        daily_tokens: i64,
    },
}

/// Whether `--project` (or MEMMACHINE_PROJECT) was given: `ClientArgs` defaults it to
/// universal, and usage without it covers every project of the org.
fn project_given() -> bool {
    std::env::var_os("MEMMACHINE_PROJECT").is_some()
        || std::env::args_os().any(|a| {
            let a = a.to_string_lossy();
            a == "--project" || a.starts_with("--project=")
        })
}

fn usage_client(client: &Client) -> UsageServiceClient<tonic::transport::Channel> {
    UsageServiceClient::new(client.channel())
}

fn purpose_name(purpose: i32) -> &'static str {
    match pb::UsagePurpose::try_from(purpose) {
        Ok(pb::UsagePurpose::Extraction) => "extraction",
        Ok(pb::UsagePurpose::Consolidation) => "consolidation",
        Ok(pb::UsagePurpose::Summary) => "summary",
        Ok(pb::UsagePurpose::Embedding) => "embedding",
        _ => "unspecified",
    }
}

pub(super) fn budget_lines(budget: &pb::Budget) -> String {
    let limit = if budget.daily_tokens == 0 {
        "unlimited".to_string()
    } else {
        thousands(budget.daily_tokens as u64)
    };
    let mut text = format!(
        "budget: {limit} tokens a day, {} used today",
        thousands(budget.used_today.max(0) as u64)
    );
    if budget.paused_until.is_some() {
        text.push_str(&format!(
            "\nsemantic ingestion paused until {}",
            time(&budget.paused_until)
        ));
    }
    text
}

pub(super) fn budget_json(budget: &pb::Budget) -> serde_json::Value {
    json!({
        "daily_tokens": budget.daily_tokens,
        "used_today": budget.used_today,
        "paused_until": budget.paused_until.as_ref().map(|_| time(&budget.paused_until)),
    })
}

pub async fn run(args: UsageArgs) -> Result<(), CliError> {
    let client = Client::connect(&args.client).await?;
    let since = match &args.since {
        None => None,
        Some(text) => {
            let t = chrono::DateTime::parse_from_rfc3339(text).map_err(|e| {
                CliError::Usage(format!("--since {text:?} is not an RFC 3339 time: {e}"))
            })?;
            Some(prost_types::Timestamp {
                seconds: t.timestamp(),
                nanos: t.timestamp_subsec_nanos() as i32,
            })
        }
    };
    let project_id = project_given().then(|| client.project.clone());
    let report = usage_client(&client)
        .get_usage(client.request(pb::GetUsageRequest {
            org_id: client.org.clone(),
            project_id,
            since,
        }))
        .await?
        .into_inner();
    let budget = report.budget.unwrap_or_default();
    if args.client.json {
        let usage: Vec<_> = report
            .usage
            .iter()
            .map(|f| {
                json!({
                    "purpose": purpose_name(f.purpose),
                    "calls": f.calls,
                    "prompt_tokens": f.prompt_tokens,
                    "completion_tokens": f.completion_tokens,
                })
            })
            .collect();
        return print_json(&json!({ "usage": usage, "budget": budget_json(&budget) }));
    }
    let mut table = Table::new(&["PURPOSE", "CALLS", "PROMPT TOKENS", "COMPLETION TOKENS"]);
    for f in &report.usage {
        table.row(vec![
            purpose_name(f.purpose).to_string(),
            thousands(f.calls.max(0) as u64),
            thousands(f.prompt_tokens.max(0) as u64),
            thousands(f.completion_tokens.max(0) as u64),
        ]);
    }
    table.print()?;
    out(budget_lines(&budget))
}

pub async fn budget(client_args: &ClientArgs, command: BudgetCommand) -> Result<(), CliError> {
    let client = Client::connect(client_args).await?;
    let BudgetCommand::Set { daily_tokens } = command;
    let budget = usage_client(&client)
        .set_budget(client.request(pb::SetBudgetRequest {
            org_id: client.org.clone(),
            daily_tokens,
        }))
        .await?
        .into_inner()
        .budget
        .unwrap_or_default();
    if client_args.json {
        return print_json(&budget_json(&budget));
    }
    out(budget_lines(&budget))
}
