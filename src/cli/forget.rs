//! `memmachine forget --subject S [--projects P,...] [--dry-run]` and
//! `memmachine forget receipt ID`: forgetting a subject with a receipt.

use clap::{Args, Subcommand};
use serde_json::json;

use super::connect::Client;
use super::output::{out, print_json};
use super::{CliError, ClientArgs};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::lifecycle_service_client::LifecycleServiceClient;

#[derive(Args, Debug)]
#[command(subcommand_negates_reqs = true)]
pub struct ForgetArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The producer / recipient id to forget, with the user sets keyed on it
    #[arg(long, required = true)]
    pub subject: Option<String>,
    /// Only these projects of the org (repeat or comma-separate) [default: every project]
    /// (`--project` names the one project of the other commands)
    #[arg(long, value_delimiter = ',')]
    pub projects: Vec<String>,
    /// Count what would be removed; remove nothing, keep no receipt
    #[arg(long)]
    pub dry_run: bool,
    #[command(subcommand)]
    pub command: Option<ForgetCommand>,
}

#[derive(Subcommand, Debug)]
pub enum ForgetCommand {
    /// Show the receipt of a past forget
    Receipt {
        /// The receipt id a forget printed
        id: String,
    },
}

pub async fn run(args: ForgetArgs) -> Result<(), CliError> {
    if let Some(ForgetCommand::Receipt { id }) = args.command {
        let connected = Client::connect(&args.client).await?;
        let receipt = lifecycle(&connected)
            .get_forget_receipt(connected.request(pb::GetForgetReceiptRequest {
                org_id: connected.org.clone(),
                receipt_id: id,
            }))
            .await?
            .into_inner()
            .receipt
            .unwrap_or_default();
        return show(&receipt, args.client.json);
    }
    let client = Client::connect(&args.client).await?;
    let receipt = lifecycle(&client)
        .forget_subject(client.request(pb::ForgetSubjectRequest {
            org_id: client.org.clone(),
            subject: args.subject.unwrap_or_default(),
            project_ids: args.projects,
            dry_run: args.dry_run,
        }))
        .await?
        .into_inner()
        .receipt
        .unwrap_or_default();
    show(&receipt, args.client.json)
}

fn lifecycle(client: &Client) -> LifecycleServiceClient<tonic::transport::Channel> {
    client.lifecycle()
}

fn show(receipt: &pb::ForgetReceipt, as_json: bool) -> Result<(), CliError> {
    let lines: Vec<serde_json::Value> = receipt
        .projects
        .iter()
        .map(|p| {
            json!({
                "project_id": p.project_id,
                "episodes_deleted": p.episodes_deleted,
                "features_deleted": p.features_deleted,
                "citations_removed": p.citations_removed,
                "summaries_deleted": p.summaries_deleted,
                "sets_deleted": p.sets_deleted,
            })
        })
        .collect();
    if as_json {
        return print_json(&json!({
            "receipt_id": receipt.receipt_id,
            "org_id": receipt.org_id,
            "subject": receipt.subject,
            "dry_run": receipt.dry_run,
            "completed_at": receipt.completed_at.map(|t| t.seconds),
            "projects": lines,
        }));
    }
    let head = if receipt.dry_run {
        format!("dry run: forgetting {:?} would remove", receipt.subject)
    } else {
        format!(
            "forgot {:?} (receipt {})",
            receipt.subject, receipt.receipt_id
        )
    };
    out(head)?;
    for p in &receipt.projects {
        out(format!(
            "  {}: {} episodes, {} features, {} citations, {} summaries, {} sets",
            p.project_id,
            p.episodes_deleted,
            p.features_deleted,
            p.citations_removed,
            p.summaries_deleted,
            p.sets_deleted
        ))?;
    }
    Ok(())
}
