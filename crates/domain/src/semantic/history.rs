//! Fact history: a feature's versions (the store keeps each earlier one when a change
//! or a deletion ends it), and the features as they were at a time (`as_of`), ranked
//! and listed as the current ones are.

use std::collections::HashMap;
use std::sync::Arc;

use super::model::Feature;
use super::search::ProjectFeatures;
use super::{SemanticMemory, indexed_of, not_found};
use crate::error::Result;
use crate::model::SetId;
use crate::store::FeatureVersion;
use memmachine_core::access::OpenProject;

/// Fact history's flags, environment variables and config file keys.
#[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
#[group(skip)]
pub struct Flags {
    /// Earlier versions kept per feature (the oldest are dropped first)
    #[arg(long, env = "MEMMACHINE_FEATURE_HISTORY_LIMIT", default_value_t = 50)]
    pub feature_history_limit: usize,
}

/// `as_of` as the store reads it: a time not yet reached is the current state (`None`).
pub fn past(as_of: Option<i64>) -> Option<i64> {
    as_of.filter(|at| *at < chrono::Utc::now().timestamp_micros())
}

impl SemanticMemory {
    /// The feature's versions, oldest first, the current one last (unless deleted):
    /// `NotFound` unless the project sees (or saw) its set.
    pub async fn feature_history(
        &self,
        project: &OpenProject,
        id: &str,
    ) -> Result<Vec<FeatureVersion>> {
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(not_found("feature", id));
        }
        let versions = self.store.feature_history(id).await?;
        // A feature stays in its set, so every version has the same org and project.
        let visible = versions.last().is_some_and(|v| {
            v.org_id == project.key.org_id && v.project.is_none_or(|p| p == project.internal_id)
        });
        if !visible {
            return Err(not_found("feature", id));
        }
        Ok(versions)
    }

    /// The features of these sets valid at `at` (micros), with an index over them.
    pub(super) async fn snapshot(
        &self,
        sets: &[SetId],
        at: i64,
    ) -> Result<(Arc<ProjectFeatures>, HashMap<i64, Feature>)> {
        let features = self.store.features_as_of(sets, at).await?;
        let index = ProjectFeatures::build(0, features.iter().map(indexed_of).collect());
        let by_id = features
            .into_iter()
            .map(|f| (f.internal_id.raw(), f))
            .collect();
        Ok((Arc::new(index), by_id))
    }

    /// The sets the project sees, as the feature index holds them.
    pub(super) async fn visible_set_ids(&self, project: &OpenProject) -> Result<Vec<SetId>> {
        Ok(self
            .store
            .list_sets(project.access())
            .await?
            .iter()
            .map(|s| s.internal_id)
            .collect())
    }
}
