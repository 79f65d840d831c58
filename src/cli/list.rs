//! `memmachine list` (and `features list`): a page of episodes or features, or all.

use clap::Args;
use serde_json::json;

use super::connect::Client;
use super::output::{episode_json, episode_table, feature_json, feature_table, print_json};
use super::search::SetSelection;
use super::{CliError, ClientArgs};
use memmachine_proto::v2 as pb;

/// The paging and filter flags of a listing.
#[derive(Args, Debug, Clone)]
pub struct Paging {
    /// A filter expression, e.g. "m.topic = 'pets'"
    #[arg(long, default_value = "")]
    pub filter: String,
    /// Items per page (1 to 1,000) [default: 100]
    #[arg(long)]
    pub page_size: Option<i32>,
    /// Every page, not only the first
    #[arg(long, conflicts_with = "page_token")]
    pub all: bool,
    /// Start at this page (the token a previous page printed)
    #[arg(long)]
    pub page_token: Option<String>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub paging: Paging,
    /// Semantic features instead of episodes
    #[arg(long)]
    pub semantic: bool,
    #[command(flatten)]
    pub sets: SetSelection,
}

pub async fn run(args: ListArgs) -> Result<(), CliError> {
    let client = Client::connect(&args.client).await?;
    list(
        &client,
        args.client.json,
        &args.paging,
        args.semantic,
        &args.sets,
    )
    .await
}

pub async fn list(
    client: &Client,
    json: bool,
    paging: &Paging,
    semantic: bool,
    sets: &SetSelection,
) -> Result<(), CliError> {
    let memory_type = if semantic {
        pb::MemoryType::Semantic
    } else {
        pb::MemoryType::Episodic
    };
    let mut episodes = Vec::new();
    let mut features = Vec::new();
    let mut page_token = paging.page_token.clone().unwrap_or_default();
    let next = loop {
        let page = client
            .memory()
            .list_memories(client.request(pb::ListMemoriesRequest {
                as_of: None,
                org_id: client.org.clone(),
                project_id: client.project.clone(),
                r#type: memory_type as i32,
                page_size: paging.page_size,
                page_token,
                filter: paging.filter.clone(),
                set_metadata: sets.metadata(),
            }))
            .await?
            .into_inner();
        episodes.extend(page.episodes);
        features.extend(page.features);
        if !paging.all || page.next_page_token.is_empty() {
            break page.next_page_token;
        }
        page_token = page.next_page_token;
    };
    if json {
        let items = if semantic {
            json!({ "features": features.iter().map(feature_json).collect::<Vec<_>>() })
        } else {
            json!({ "episodes": episodes.iter().map(episode_json).collect::<Vec<_>>() })
        };
        let mut value = items;
        value["next_page_token"] = next.into();
        return print_json(&value);
    }
    if semantic {
        feature_table(&features, false).print()?;
    } else {
        episode_table(&episodes).print()?;
    }
    if !next.is_empty() {
        // On stderr, so the table on stdout stays clean for tools.
        eprintln!("more: --page-token {next} (or --all)");
    }
    Ok(())
}
