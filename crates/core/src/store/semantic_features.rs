//! Semantic memory's features with their citations, and the queue of features waiting
//! for a vector.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{EpisodeHandle, FeatureId, ProjectHandle, SetId};

/// What made a version of a feature, or ended its last one (the wire's `FeatureChange`;
/// the numbers are stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangedBy {
    /// A feature stored before history was kept, or restored from an export.
    #[default]
    Unknown,
    Extraction,
    Consolidation,
    Manual,
    Deletion,
}

impl ChangedBy {
    pub fn code(self) -> i64 {
        match self {
            ChangedBy::Unknown => 0,
            ChangedBy::Extraction => 1,
            ChangedBy::Consolidation => 2,
            ChangedBy::Manual => 3,
            ChangedBy::Deletion => 4,
        }
    }

    pub fn from_code(code: i64) -> ChangedBy {
        match code {
            1 => ChangedBy::Extraction,
            2 => ChangedBy::Consolidation,
            3 => ChangedBy::Manual,
            4 => ChangedBy::Deletion,
            _ => ChangedBy::Unknown,
        }
    }
}

/// A feature to store. `match_key` and `value_key` are the domain's normalised forms
/// (a fact said again matches on them); the store only compares them.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFeature {
    pub id: String,
    pub category: String,
    pub category_id: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    /// A JSON object.
    pub metadata: serde_json::Value,
    /// Normalised `category`, `tag` and `feature`.
    pub match_key: String,
    /// Normalised `value`.
    pub value_key: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Feature {
    pub internal_id: FeatureId,
    pub id: String,
    pub set: SetId,
    pub set_id: String,
    pub category: String,
    pub category_id: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: serde_json::Value,
    /// Uids of the episodes it cites, oldest first.
    pub citations: Vec<uuid::Uuid>,
    pub created_at_micros: i64,
    pub updated_at_micros: i64,
    /// Since when its current value holds.
    pub valid_from_micros: i64,
    /// What made its current value.
    pub changed_by: ChangedBy,
}

/// A manual change of a feature: `None` keeps the field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeatureUpdate {
    pub category: Option<(String, String)>,
    pub tag: Option<String>,
    pub feature: Option<String>,
    pub value: Option<String>,
    pub metadata: Option<serde_json::Value>,
    /// Recomputed by the domain when a keyed field changes.
    pub match_key: Option<String>,
    pub value_key: Option<String>,
}

/// What the feature index of a project is built from: a feature's searchable fields.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedFeature {
    pub internal_id: FeatureId,
    pub set: SetId,
    pub set_id: String,
    pub category: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: BTreeMap<String, String>,
    pub created_at_micros: i64,
    pub updated_at_micros: i64,
    /// Its vector, by the embedder that made it.
    pub vector: Option<(String, Vec<f32>)>,
}

/// A feature waiting for its vector.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingFeatureEmbedding {
    pub feature: FeatureId,
    pub text: String,
    pub embedder: String,
    /// The org of the feature's set and its project (`None`: an org-level set), whose
    /// usage the embedding is counted under.
    pub org_id: String,
    pub project: Option<ProjectHandle>,
}

/// Feature metadata as strings, as filters compare them: JSON strings as they are,
/// other values as JSON.
pub fn flatten_metadata(metadata: &serde_json::Value) -> BTreeMap<String, String> {
    let Some(object) = metadata.as_object() else {
        return BTreeMap::new();
    };
    object
        .iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect()
}

/// The text a feature's vector is made from: its name and its value. The queue keeps no
/// text, so every backend derives it from the feature's row by this one rule at claim
/// time, and vectors agree whichever store made the queue row.
pub fn feature_embedding_text(feature: &str, value: &str) -> String {
    format!("{feature}: {value}")
}

/// Features with their citations, and the queue of features waiting for a vector.
#[async_trait]
pub trait SemanticFeatures: Send + Sync {
    /// Internal ids of these episodes of the project, in order; `NotFound` naming those
    /// that are not in it.
    async fn resolve_episodes(
        &self,
        key: &ProjectAccess,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<EpisodeHandle>>;

    async fn add_feature(
        &self,
        set: SetId,
        feature: NewFeature,
        citations: &[EpisodeHandle],
        embedder: Option<String>,
    ) -> Result<Feature>;

    async fn find_feature(&self, id: &str) -> Result<Option<Feature>>;

    /// Features by internal id, in the order asked (missing ones left out).
    async fn features(&self, ids: &[FeatureId]) -> Result<Vec<Feature>>;

    async fn update_feature(
        &self,
        internal_id: FeatureId,
        update: FeatureUpdate,
        embedder: Option<String>,
    ) -> Result<()>;

    /// Deletes those of these features that exist; returns how many.
    async fn delete_features(&self, ids: &[FeatureId]) -> Result<u64>;

    /// Features of these sets after feature `after` (from the first: `None`), in id
    /// order.
    async fn list_features(
        &self,
        sets: &[SetId],
        after: Option<FeatureId>,
        limit: usize,
    ) -> Result<Vec<Feature>>;

    /// Features of one set in one category (matching `category_key`, normalised).
    async fn category_features(&self, set: SetId, category_key: &str) -> Result<Vec<Feature>>;

    /// The searchable fields of every feature of these sets.
    async fn indexed_features(&self, sets: &[SetId]) -> Result<Vec<IndexedFeature>>;

    /// A number that changes whenever a feature of the org is added, changed or deleted.
    async fn semantic_version(&self, org_id: &str) -> Result<i64>;

    /// Claims up to `limit` features waiting for a vector whose lease is free or
    /// expired, oldest first, leasing them for `lease`.
    async fn claim_feature_embeddings(
        &self,
        limit: usize,
        lease: std::time::Duration,
    ) -> Result<Vec<PendingFeatureEmbedding>>;

    /// Frees the leases of these queued features (a failed attempt).
    async fn release_feature_embeddings(&self, features: &[FeatureId]) -> Result<()>;

    async fn store_feature_embeddings(
        &self,
        embedder: &str,
        vectors: Vec<(FeatureId, Vec<f32>)>,
    ) -> Result<()>;

    /// Takes these features off the vector queue without one.
    async fn abandon_feature_embeddings(&self, features: &[FeatureId]) -> Result<()>;
}
