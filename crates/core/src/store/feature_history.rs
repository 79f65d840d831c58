//! The history of features: every earlier version of a feature, kept by the store in
//! the same transaction as the change that ended it (rows only; how many to keep is the
//! domain's flag, handed down once).

use async_trait::async_trait;

use crate::error::Result;
use crate::model::{EpisodeHandle, FeatureId, ProjectHandle, SetId};

use super::semantic_features::Feature;

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

/// One version of a feature. The current one is the feature's row (`valid_to` unset);
/// a deletion ends the last one and adds a zero-length version `ChangedBy::Deletion`.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureVersion {
    /// The feature whose history holds it (a merge's survivor holds its sources').
    pub feature_id: String,
    /// The feature it was a version of.
    pub origin_id: String,
    pub org_id: String,
    /// The project of its set; `None` for an org-level set.
    pub project: Option<ProjectHandle>,
    pub set_id: String,
    pub category: String,
    pub category_id: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: serde_json::Value,
    /// Uids of the episodes it cited that are still stored, oldest first.
    pub citations: Vec<uuid::Uuid>,
    pub valid_from_micros: i64,
    pub valid_to_micros: Option<i64>,
    pub changed_by: ChangedBy,
}

/// A kept version to write as it was (an import): the feature whose history holds it
/// (`feature_id`, deleted or not), the set and cited episodes (the target's ids).
#[derive(Debug, Clone, PartialEq)]
pub struct RestoredVersion {
    pub feature_id: String,
    pub origin_id: String,
    pub set: SetId,
    pub category: String,
    pub category_id: String,
    pub tag: String,
    pub feature: String,
    pub value: String,
    pub metadata: serde_json::Value,
    pub citations: Vec<EpisodeHandle>,
    pub valid_from_micros: i64,
    /// `None`: the feature's current version, whose start and maker are set on its row.
    pub valid_to_micros: Option<i64>,
    pub changed_by: ChangedBy,
}

/// Earlier versions of features, as the store keeps them.
#[async_trait]
pub trait FeatureHistory: Send + Sync {
    /// The versions of the feature with this public id (deleted or not), oldest first,
    /// the current one (if it still exists) last; empty when there are none.
    async fn feature_history(&self, id: &str) -> Result<Vec<FeatureVersion>>;

    /// The features of these sets as they were at `at_micros`: current rows valid since
    /// then, and kept versions valid at that time. A kept version's `internal_id` is the
    /// negated number of the version (so ranking keeps them apart), its `id` the
    /// feature it was a version of, its `created_at`/`updated_at` its `valid_from`.
    async fn features_as_of(&self, sets: &[SetId], at_micros: i64) -> Result<Vec<Feature>>;

    /// How many earlier versions each feature keeps (the oldest are dropped first).
    async fn set_feature_history_limit(&self, keep: usize) -> Result<()>;

    /// Drops every kept version of these features (what a forget removes with them);
    /// returns how many.
    async fn delete_feature_history(&self, features: &[FeatureId]) -> Result<u64>;

    /// The kept versions (not the current ones) of these sets' features, deleted ones
    /// included, in the order they were kept (an export).
    async fn versions_of_sets(&self, sets: &[SetId]) -> Result<Vec<FeatureVersion>>;

    /// Writes kept versions as they were (an import).
    async fn restore_feature_versions(&self, versions: Vec<RestoredVersion>) -> Result<()>;

    /// Drops every kept version that cites one of these episodes; returns how many.
    /// Call it before deleting the episodes (their citations go with them).
    async fn delete_versions_citing(&self, episodes: &[EpisodeHandle]) -> Result<u64>;
}
