//! `memmachine delete UID...` (episodes) and `delete --features ID...`.

use clap::Args;
use serde_json::json;

use super::connect::Client;
use super::output::{out, print_json};
use super::{CliError, ClientArgs};
use memmachine_proto::v2 as pb;

#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Episode uids (or feature ids with --features)
    #[arg(required = true, num_args = 1..)]
    pub ids: Vec<String>,
    /// The ids are semantic features, not episodes
    #[arg(long)]
    pub features: bool,
}

pub async fn run(args: DeleteArgs) -> Result<(), CliError> {
    let client = Client::connect(&args.client).await?;
    delete(&client, args.client.json, args.ids, args.features).await
}

pub async fn delete(
    client: &Client,
    json: bool,
    ids: Vec<String>,
    features: bool,
) -> Result<(), CliError> {
    let (org_id, project_id) = (client.org.clone(), client.project.clone());
    let deleted = if features {
        client
            .memory()
            .delete_semantic_memories(client.request(pb::DeleteSemanticMemoriesRequest {
                org_id,
                project_id,
                feature_ids: ids,
            }))
            .await?
            .into_inner()
            .deleted_count
    } else {
        client
            .memory()
            .delete_episodic_memories(client.request(pb::DeleteEpisodicMemoriesRequest {
                org_id,
                project_id,
                episode_ids: ids,
            }))
            .await?
            .into_inner()
            .deleted_count
    };
    if json {
        return print_json(&json!({ "deleted_count": deleted }));
    }
    let what = match (features, deleted) {
        (true, 1) => "feature",
        (true, _) => "features",
        (false, 1) => "episode",
        (false, _) => "episodes",
    };
    out(format!("deleted {deleted} {what}"))
}
