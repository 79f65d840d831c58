//! The history of features: every earlier version of a feature, kept by the store in
//! the same transaction as the change that ended it (rows only; how many to keep is the
//! domain's flag, handed down once).

use async_trait::async_trait;

use crate::error::Result;
use crate::model::{EpisodeHandle, FeatureId, ProjectHandle, SetId};

use super::semantic_features::{ChangedBy, Feature};

/// A kept version as [`FeatureHistory::feature_rows_at`] reads it: its row number and set
/// with it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptVersion {
    /// The number of the version's row.
    pub number: i64,
    pub set: SetId,
    pub version: FeatureVersion,
}

/// The rows that hold at a time (see [`FeatureHistory::feature_rows_at`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeatureRowsAt {
    pub current: Vec<Feature>,
    pub kept: Vec<KeptVersion>,
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

    /// The rows of these sets that hold at `at_micros`: the current features created and
    /// valid from then or earlier, and the kept versions with `valid_from <= at <
    /// valid_to`, in row order. What a point-in-time read makes of them is the domain's.
    async fn feature_rows_at(&self, sets: &[SetId], at_micros: i64) -> Result<FeatureRowsAt>;

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
