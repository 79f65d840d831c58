//! Semantic memory: durable facts (features) about the people and projects of a
//! conversation, in sets (the org's, the project's, each user's, and those of set
//! types), by category and tag, each citing the episodes it came from. A language model
//! distils queued messages in the background (`ingest`); without one, features,
//! categories, tags and set types are still managed by hand.

pub mod categories;
pub mod embedding;
pub mod estimate;
mod facts;
pub use facts::{Cut, Page};
pub mod features;
pub mod history;
pub mod ingest;
/// Semantic memory's rows, defined with the storage contract that exchanges them.
pub mod model {
    pub use memmachine_core::store::semantic_features::*;
    pub use memmachine_core::store::semantic_queue::{Batch, ClaimRule, FeatureOp};
    pub use memmachine_core::store::semantic_sets::*;
    pub use memmachine_core::store::summaries::*;
}
pub mod prompts;
pub mod search;
pub mod sets;
/// The storage traits of semantic memory, where callers have always found them.
pub mod store {
    pub use memmachine_core::store::semantic_queue::Routing;
    pub use memmachine_core::store::{
        SemanticFeatures, SemanticQueue, SemanticSets, SemanticStore, Summaries,
    };
}
mod structure;
pub mod summary;

use std::collections::BTreeMap;
use std::sync::Arc;

use self::model::{CategoryOwner, Feature, NewCategory, SetKind, SetRow, SetType};
use self::search::FeatureIndexes;
use self::store::Routing;
use crate::embed::Embedders;
use crate::error::{Error, Result, Violations};
use crate::limits::Limits;
use crate::llm::LanguageModel;
use crate::model::ids::validate_id;
use crate::model::{NewEpisode, SetTypeId};
use crate::store::Store;
use memmachine_core::access::OpenProject;

/// Longest prompt or description, in bytes.
const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Longest tag, feature name or category name, in characters.
const MAX_NAME_CHARS: usize = 256;
/// Longest feature value, in bytes.
const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Most metadata tags of a set type.
const MAX_SET_TYPE_TAGS: usize = 16;

/// What `--llm-base-url` missing means for a request.
pub const NO_MODEL: &str = "semantic ingestion needs a language model: start the server with \
     --llm-base-url and --llm-model (an OpenAI-compatible chat endpoint)";

/// A feature with its search score.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredFeature {
    pub feature: Feature,
    pub score: f64,
}

/// A set as listed: its row and, for sets of a set type, the type's name and description.
#[derive(Debug, Clone, PartialEq)]
pub struct SetEntry {
    pub set: SetRow,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone, Default)]
pub struct FeatureSearch {
    pub query: String,
    pub top_k: Option<i32>,
    pub filter: String,
    pub score_threshold: Option<f64>,
    pub set_metadata: BTreeMap<String, String>,
    /// Micros: rank the features as they were then (a time not yet reached: now).
    pub as_of: Option<i64>,
}

/// A manual feature.
#[derive(Debug, Clone, Default)]
pub struct FeatureInput {
    pub set_id: String,
    pub category_name: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: serde_json::Value,
    pub citations: Vec<String>,
}

/// A manual change: `None` keeps the field.
#[derive(Debug, Clone, Default)]
pub struct FeatureChange {
    pub category_name: Option<String>,
    pub tag: Option<String>,
    pub feature: Option<String>,
    pub value: Option<String>,
    pub metadata: Option<serde_json::Value>,
}

#[derive(Clone)]
pub struct SemanticMemory {
    store: Arc<dyn Store>,
    limits: Limits,
    embedders: Embedders,
    llm: Option<Arc<dyn LanguageModel>>,
    indexes: FeatureIndexes,
    /// Wakes the ingestion workers when messages are queued.
    wake: Arc<tokio::sync::Notify>,
    /// Where model calls are counted (none: not counted).
    usage: Option<crate::usage::Usage>,
    /// How the workers batch, for estimates of what they will spend.
    ingest: ingest::IngestSettings,
}

fn not_found(what: &str, id: &str) -> Error {
    Error::NotFound(format!("{what} {id:?} does not exist in this project"))
}

fn check_name(violations: &mut Violations, field: &str, value: &str) {
    if value.trim().is_empty() {
        violations.add(field, "must not be empty");
    } else if value.chars().count() > MAX_NAME_CHARS {
        violations.add(
            field,
            format!("must be at most {MAX_NAME_CHARS} characters"),
        );
    }
}

fn check_text(violations: &mut Violations, field: &str, value: &str, max: usize) {
    if value.len() > max {
        violations.add(field, format!("must be at most {max} bytes"));
    }
}

/// Largest feature metadata, as JSON, in bytes.
const MAX_METADATA_BYTES: usize = 64 * 1024;

fn check_metadata(violations: &mut Violations, field: &str, metadata: &serde_json::Value) {
    let bytes = serde_json::to_string(metadata).map_or(usize::MAX, |json| json.len());
    if bytes > MAX_METADATA_BYTES {
        violations.add(
            field,
            format!("must be at most {MAX_METADATA_BYTES} bytes as JSON"),
        );
    }
}

fn check_id(violations: &mut Violations, field: &str, value: &str) {
    violations.check(validate_id(field, value));
}

impl SemanticMemory {
    pub fn new(
        store: Arc<dyn Store>,
        limits: Limits,
        embedders: Embedders,
        llm: Option<Arc<dyn LanguageModel>>,
    ) -> SemanticMemory {
        SemanticMemory {
            store,
            limits,
            embedders,
            llm,
            indexes: FeatureIndexes::default(),
            wake: Arc::default(),
            usage: None,
            ingest: ingest::IngestSettings::default(),
        }
    }

    /// The workers' settings, for estimates of what they will spend.
    pub fn with_ingest(mut self, settings: ingest::IngestSettings) -> SemanticMemory {
        self.ingest = settings;
        self
    }

    /// Counts the model calls made for semantic memory in `usage`.
    pub fn with_usage(mut self, usage: crate::usage::Usage) -> SemanticMemory {
        self.usage = Some(usage);
        self
    }

    /// Whether the org's model work is paused for its budget.
    pub async fn is_paused(&self, org_id: &str) -> bool {
        match &self.usage {
            Some(usage) => usage.is_paused(org_id).await,
            None => false,
        }
    }

    /// Counts one embedder call for `scope`, if usage is kept.
    pub fn record_embedding(&self, scope: &crate::usage::Scope, tokens: u64) {
        if let Some(usage) = &self.usage {
            usage.record_embedding(scope, tokens);
        }
    }

    /// Counts one embedder call on a set's features: under its project when it has one
    /// (a project deleted meanwhile is not counted), else under its org.
    pub async fn record_set_embedding(
        &self,
        org_id: &str,
        project: Option<crate::model::ProjectHandle>,
        tokens: u64,
    ) {
        let Some(usage) = &self.usage else {
            return;
        };
        match project {
            Some(project) => usage.record_project_embedding(project, tokens).await,
            None => usage.record_embedding(&crate::usage::Scope::new(org_id, ""), tokens),
        }
    }

    /// Counts one call's tokens for `scope`, if usage is kept.
    pub async fn record_usage(
        &self,
        scope: &crate::usage::Scope,
        purpose: &str,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) {
        if let Some(usage) = &self.usage {
            usage
                .record(scope, purpose, prompt_tokens, completion_tokens)
                .await;
        }
    }

    pub fn has_model(&self) -> bool {
        self.llm.is_some()
    }

    pub fn model(&self) -> Option<&Arc<dyn LanguageModel>> {
        self.llm.as_ref()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn embedders(&self) -> &Embedders {
        &self.embedders
    }

    pub fn wake_handle(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }

    /// `FailedPrecondition` naming `--llm-base-url` when no model is configured.
    pub fn require_model(&self) -> Result<()> {
        if self.has_model() {
            Ok(())
        } else {
            Err(Error::FailedPrecondition(NO_MODEL.into()))
        }
    }

    /// The sets each episode of a batch is queued for.
    pub async fn routing(
        &self,
        project: &OpenProject,
        episodes: &[NewEpisode],
    ) -> Result<Vec<Routing>> {
        let set_types = self.store.list_set_types(project.access()).await?;
        let distilled = self.distilled_sets(project, &set_types).await?;
        let mut routing: Vec<Routing> = Vec::new();
        let mut at: BTreeMap<String, usize> = BTreeMap::new();
        for (i, episode) in episodes.iter().enumerate() {
            let sets = self.sets_of_message(project, episode, &set_types);
            for set in sets.into_iter().filter(|s| distilled.wants(s)) {
                let slot = *at.entry(set.set_id.clone()).or_insert_with(|| {
                    routing.push(Routing {
                        set,
                        episodes: Vec::new(),
                    });
                    routing.len() - 1
                });
                routing[slot].episodes.push(i);
            }
        }
        Ok(routing)
    }

    /// Which sets have categories now (a set without any is not queued for: nothing
    /// would be extracted).
    async fn distilled_sets(
        &self,
        project: &OpenProject,
        set_types: &[SetType],
    ) -> Result<Distilled> {
        let sets = self.store.list_sets(project.access()).await?;
        let mut owners: Vec<CategoryOwner> = sets
            .iter()
            .map(|s| CategoryOwner::Set(s.internal_id))
            .collect();
        owners.extend(
            set_types
                .iter()
                .map(|t| CategoryOwner::SetType(t.internal_id)),
        );
        let categories = self.store.categories_of(&owners).await?;
        let mut distilled = Distilled::default();
        for category in categories {
            match category.owner {
                CategoryOwner::Set(id) => {
                    if let Some(set) = sets.iter().find(|s| s.internal_id == id) {
                        distilled.sets.insert(set.set_id.clone());
                    }
                }
                CategoryOwner::SetType(id) => {
                    distilled.set_types.insert(id);
                }
            }
        }
        Ok(distilled)
    }

    fn sets_of_message(
        &self,
        project: &OpenProject,
        episode: &NewEpisode,
        set_types: &[SetType],
    ) -> Vec<model::NewSet> {
        let profile_type = user_set_type(set_types);
        let typed: Vec<SetType> = set_types
            .iter()
            .filter(|t| Some(t.internal_id) != profile_type)
            .cloned()
            .collect();
        let mut sets = sets::sets_of_message(
            project.access(),
            &episode.producer_id,
            &episode.producer_role,
            &episode.metadata,
            &typed,
        );
        for set in &mut sets {
            if set.kind == SetKind::User {
                set.set_type = profile_type;
            }
        }
        sets
    }

    /// Wakes the ingestion workers (messages were queued).
    pub fn notify_queued(&self) {
        self.wake.notify_waiters();
    }
}

/// The sets and set types that have categories of their own.
#[derive(Default)]
struct Distilled {
    sets: std::collections::HashSet<String>,
    set_types: std::collections::HashSet<SetTypeId>,
}

impl Distilled {
    /// Whether messages landing in `set` are queued for it: user sets have a default
    /// category; others only when they (or their set type) have one.
    fn wants(&self, set: &model::NewSet) -> bool {
        set.kind == SetKind::User
            || self.sets.contains(&set.set_id)
            || set.set_type.is_some_and(|t| self.set_types.contains(&t))
    }
}

/// The project's set type for user sets: one with exactly the tag `producer_id`, not
/// org-level (its templates configure the project's user profiles).
fn user_set_type(set_types: &[SetType]) -> Option<SetTypeId> {
    set_types
        .iter()
        .find(|t| !t.is_org_level && t.tags.len() == 1 && t.tags[0] == sets::PRODUCER_TAG)
        .map(|t| t.internal_id)
}

fn visible_set(project: &OpenProject, set: &SetRow) -> bool {
    set.org_id == project.key.org_id && set.project.is_none_or(|p| p == project.internal_id)
}

fn new_category(name: &str, prompt: &str, description: &str) -> NewCategory {
    NewCategory {
        id: uuid::Uuid::new_v4().to_string(),
        name: name.trim().to_string(),
        prompt: prompt.to_string(),
        description: description.to_string(),
    }
}

fn parse_uids(violations: &mut Violations, field: &str, ids: &[String]) -> Vec<uuid::Uuid> {
    let mut uids = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        match uuid::Uuid::parse_str(id) {
            Ok(uid) => uids.push(uid),
            Err(_) => violations.add(format!("{field}[{i}]"), format!("{id:?} is not a UUID")),
        }
    }
    uids
}

/// Parses the request field `field` as a feature filter.
pub fn parse_filter(field: &str, text: &str) -> Result<Option<crate::model::filter::Expr>> {
    crate::model::filter::parse_features(text).map_err(|err| err.into_error(field))
}

/// A feature's searchable fields (to filter a listed page as search filters).
fn indexed_of(feature: &Feature) -> model::IndexedFeature {
    let metadata = model::flatten_metadata(&feature.metadata);
    model::IndexedFeature {
        internal_id: feature.internal_id,
        set: feature.set,
        set_id: feature.set_id.clone(),
        category: feature.category.clone(),
        tag: feature.tag.clone(),
        feature: feature.feature.clone(),
        value: feature.value.clone(),
        metadata,
        created_at_micros: feature.created_at_micros,
        updated_at_micros: feature.updated_at_micros,
        vector: None,
    }
}
