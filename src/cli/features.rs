//! `memmachine features add|get|update|history|search|list|delete|set-id|sets` over
//! `memmachine.v2.SemanticService`. Without a language model this is how features are
//! made: by hand, in a set named by id or selected by its metadata (`--user alice` is
//! alice's profile, whose default category is `profile`).

use clap::{Args, Subcommand};
use serde_json::json;

use super::connect::Client;
use super::list::Paging;
use super::output::{Table, feature_json, feature_table, out, print_json, time};
use super::search::SetSelection;
use super::{CliError, ClientArgs, key_value};
use crate::grpc::convert::proto_struct;
use memmachine_proto::v2 as pb;

/// The set a feature goes to: an id, or the set a selection names.
#[derive(Args, Debug, Clone)]
pub struct SetTarget {
    /// The set's id (as `features set-id` or `features sets` print it)
    #[arg(long, conflicts_with_all = ["user", "set_meta", "org_level"])]
    pub set_id: Option<String>,
    #[command(flatten)]
    pub sets: SetSelection,
    /// The org-level set (shared by the org's projects) of the selection
    #[arg(long)]
    pub org_level: bool,
}

#[derive(Args, Debug)]
pub struct AddFeature {
    #[command(flatten)]
    pub target: SetTarget,
    /// The category (a category of the set; user sets have `profile`)
    #[arg(long, default_value = "profile")]
    pub category: String,
    #[arg(long)]
    pub tag: String,
    /// The feature's name, e.g. "favourite food"
    #[arg(long)]
    pub feature: String,
    #[arg(long)]
    pub value: String,
    /// Metadata KEY=VALUE (repeatable)
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    pub meta: Vec<(String, String)>,
    /// Uids of the episodes the feature comes from (repeatable)
    #[arg(long = "cite", value_name = "UID")]
    pub citations: Vec<String>,
}

#[derive(Args, Debug)]
pub struct UpdateFeature {
    pub id: String,
    #[arg(long)]
    pub category: Option<String>,
    #[arg(long)]
    pub tag: Option<String>,
    #[arg(long)]
    pub feature: Option<String>,
    #[arg(long)]
    pub value: Option<String>,
    /// Replaces the metadata with these KEY=VALUE pairs (repeatable)
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    pub meta: Vec<(String, String)>,
}

#[derive(Subcommand, Debug)]
pub enum FeaturesCommand {
    /// Add a feature to a set (--set-id, or the one --user/--set-meta select; by
    /// default the project's own set); prints its id
    Add(AddFeature),
    /// Show a feature
    Get {
        id: String,
        /// Its citations too
        #[arg(long)]
        citations: bool,
    },
    /// Change a feature's fields (those given)
    Update(UpdateFeature),
    /// A feature's versions, oldest first (the current one last, unless deleted)
    History { id: String },
    /// Rank the features of the selected sets (every set the project sees by default)
    Search {
        #[arg(required = true, num_args = 1..)]
        query: Vec<String>,
        /// How many results (1 to 1,000) [default: 10]
        #[arg(long)]
        top_k: Option<i32>,
        /// Over set_id, category, tag, feature, value, created_at, updated_at and m.*
        #[arg(long, default_value = "")]
        filter: String,
        #[arg(long)]
        score_threshold: Option<f64>,
        #[command(flatten)]
        sets: SetSelection,
    },
    /// List features, a page or --all
    List {
        #[command(flatten)]
        paging: Paging,
        #[command(flatten)]
        sets: SetSelection,
    },
    /// Delete features by id
    Delete {
        #[arg(required = true, num_args = 1..)]
        ids: Vec<String>,
    },
    /// The id of the set --user/--set-meta select (created when missing)
    SetId {
        #[command(flatten)]
        sets: SetSelection,
        #[arg(long)]
        org_level: bool,
    },
    /// The sets the project sees (or those --user/--set-meta select)
    Sets {
        #[command(flatten)]
        sets: SetSelection,
    },
}

pub async fn run(args: &ClientArgs, command: FeaturesCommand) -> Result<(), CliError> {
    let client = Client::connect(args).await?;
    let (org_id, project_id) = (client.org.clone(), client.project.clone());
    match command {
        FeaturesCommand::Add(add) => {
            let set_id = match add.target.set_id.clone() {
                Some(id) => id,
                None => set_id(&client, &add.target.sets, add.target.org_level).await?,
            };
            let feature_id = client
                .semantic()
                .add_feature(client.request(pb::AddFeatureRequest {
                    org_id,
                    project_id,
                    set_id: set_id.clone(),
                    category_name: add.category,
                    tag: add.tag,
                    feature: add.feature,
                    value: add.value,
                    feature_metadata: Some(metadata(&add.meta)),
                    citations: add.citations,
                }))
                .await?
                .into_inner()
                .feature_id;
            if args.json {
                return print_json(&json!({"feature_id": feature_id, "set_id": set_id}));
            }
            out(feature_id)
        }
        FeaturesCommand::Get { id, citations } => {
            let feature = client
                .semantic()
                .get_feature(client.request(pb::GetFeatureRequest {
                    org_id,
                    project_id,
                    feature_id: id,
                    load_citations: citations,
                }))
                .await?
                .into_inner()
                .feature
                .unwrap_or_default();
            if args.json {
                return print_json(&feature_json(&feature));
            }
            let metadata = crate::grpc::convert::json_object(feature.metadata.clone());
            out(format!("id:        {}", feature.id))?;
            out(format!("set:       {}", feature.set_id))?;
            out(format!("category:  {}", feature.category))?;
            out(format!("tag:       {}", feature.tag))?;
            out(format!("feature:   {}", feature.feature_name))?;
            out(format!("value:     {}", feature.value))?;
            out(format!("metadata:  {metadata}"))?;
            out(format!("created:   {}", time(&feature.created_at)))?;
            out(format!("updated:   {}", time(&feature.updated_at)))?;
            if citations {
                out(format!("citations: {}", feature.citations.join(" ")))?;
            }
            Ok(())
        }
        FeaturesCommand::History { id } => {
            let versions = client
                .lifecycle()
                .get_feature_history(client.request(pb::GetFeatureHistoryRequest {
                    org_id,
                    project_id,
                    feature_id: id,
                }))
                .await?
                .into_inner()
                .versions;
            if args.json {
                let versions: Vec<serde_json::Value> = versions
                    .iter()
                    .map(|v| {
                        json!({
                            "category": v.category, "tag": v.tag,
                            "feature_name": v.feature_name, "value": v.value,
                            "citations": v.citations, "valid_from": time(&v.valid_from),
                            "valid_to": v.valid_to.map(|t| time(&Some(t))),
                            "changed_by": change_name(v.changed_by()),
                        })
                    })
                    .collect();
                return print_json(&json!({ "versions": versions }));
            }
            let mut table =
                Table::new(&["VALID FROM", "VALID TO", "BY", "TAG", "FEATURE", "VALUE"]);
            for v in &versions {
                table.row(vec![
                    time(&v.valid_from),
                    v.valid_to
                        .map_or_else(|| "(current)".into(), |t| time(&Some(t))),
                    change_name(v.changed_by()).into(),
                    v.tag.clone(),
                    v.feature_name.clone(),
                    v.value.clone(),
                ]);
            }
            table.print()
        }
        FeaturesCommand::Update(update) => {
            let id = update.id.clone();
            client
                .semantic()
                .update_feature(client.request(pb::UpdateFeatureRequest {
                    org_id,
                    project_id,
                    feature_id: update.id,
                    category_name: update.category,
                    tag: update.tag,
                    feature: update.feature,
                    value: update.value,
                    metadata: (!update.meta.is_empty()).then(|| metadata(&update.meta)),
                }))
                .await?;
            if args.json {
                return print_json(&json!({"updated": id}));
            }
            out(format!("updated feature {id}"))
        }
        FeaturesCommand::Search {
            query,
            top_k,
            filter,
            score_threshold,
            sets,
        } => {
            let features = client
                .semantic()
                .search_features(client.request(pb::SearchFeaturesRequest {
                    as_of: None,
                    org_id,
                    project_id,
                    query: query.join(" "),
                    top_k,
                    filter,
                    score_threshold,
                    set_metadata: sets.metadata(),
                }))
                .await?
                .into_inner()
                .features;
            if args.json {
                return print_json(&json!({
                    "features": features.iter().map(feature_json).collect::<Vec<_>>()
                }));
            }
            feature_table(&features, true).print()
        }
        FeaturesCommand::SetId { sets, org_level } => {
            let id = set_id(&client, &sets, org_level).await?;
            if args.json {
                return print_json(&json!({"set_id": id}));
            }
            out(id)
        }
        FeaturesCommand::Sets { sets } => {
            let sets = client
                .semantic()
                .list_set_ids(client.request(pb::ListSetIdsRequest {
                    org_id,
                    project_id,
                    set_metadata: sets.metadata(),
                }))
                .await?
                .into_inner()
                .sets;
            if args.json {
                let sets: Vec<_> = sets
                    .iter()
                    .map(|s| {
                        json!({"id": s.id, "is_org_level": s.is_org_level, "tags": s.tags,
                               "name": s.name, "description": s.description,
                               "metadata": s.metadata})
                    })
                    .collect();
                return print_json(&json!({ "sets": sets }));
            }
            let mut table = Table::new(&["ID", "ORG-LEVEL", "NAME", "METADATA"]);
            for s in &sets {
                let mut metadata: Vec<_> =
                    s.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
                metadata.sort();
                table.row(vec![
                    s.id.clone(),
                    s.is_org_level.to_string(),
                    s.name.clone(),
                    metadata.join(" "),
                ]);
            }
            table.print()
        }
        FeaturesCommand::List { paging, sets } => {
            super::list::list(&client, args.json, &paging, true, &sets).await
        }
        FeaturesCommand::Delete { ids } => {
            super::delete::delete(&client, args.json, ids, true).await
        }
    }
}

/// The id of the set a selection names: its keys are the set's tags.
async fn set_id(client: &Client, sets: &SetSelection, org_level: bool) -> Result<String, CliError> {
    let set_metadata = sets.metadata();
    let mut metadata_tags: Vec<String> = set_metadata.keys().cloned().collect();
    metadata_tags.sort();
    Ok(client
        .semantic()
        .get_set_id(client.request(pb::GetSetIdRequest {
            org_id: client.org.clone(),
            project_id: client.project.clone(),
            is_org_level: org_level,
            metadata_tags,
            set_metadata,
        }))
        .await?
        .into_inner()
        .set_id)
}

fn metadata(pairs: &[(String, String)]) -> prost_types::Struct {
    let object: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    proto_struct(&serde_json::Value::Object(object))
}

/// What made a feature version, as the history shows it.
fn change_name(change: pb::FeatureChange) -> &'static str {
    match change {
        pb::FeatureChange::Unspecified => "unknown",
        pb::FeatureChange::Extraction => "extraction",
        pb::FeatureChange::Consolidation => "consolidation",
        pb::FeatureChange::Manual => "manual",
        pb::FeatureChange::Deletion => "deletion",
    }
}
