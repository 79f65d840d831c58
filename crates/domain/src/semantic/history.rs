//! Fact history: a feature's versions (the store keeps each earlier one when a change
//! or a deletion ends it), and the features as they were at a time (`as_of`), ranked
//! and listed as the current ones are.

use std::collections::HashMap;
use std::sync::Arc;

use super::model::Feature;
use super::search::ProjectFeatures;
use super::{SemanticMemory, indexed_of, not_found};
use crate::error::Result;
use crate::model::{FeatureId, SetId};
use crate::store::{FeatureRowsAt, FeatureVersion, KeptVersion};
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

/// The features of these sets as they were at `at` (micros): the store's rows that hold
/// then, made into features (see [`features_at`]).
pub async fn features_as_of(
    store: &dyn crate::store::Store,
    sets: &[SetId],
    at: i64,
) -> Result<Vec<Feature>> {
    Ok(features_at(store.feature_rows_at(sets, at).await?))
}

/// What a point-in-time read makes of the rows that hold at a time: the current rows as
/// they are, and each kept version as a feature whose `internal_id` is the negated
/// number of the version (so ranking keeps it apart from current rows), whose `id` is
/// the feature it was a version of and whose `created_at`/`updated_at` is its
/// `valid_from`. A merge into several survivors copies its sources' versions: each
/// version counts once.
pub fn features_at(rows: FeatureRowsAt) -> Vec<Feature> {
    let mut seen = std::collections::HashSet::new();
    let mut out = rows.current;
    for KeptVersion {
        number,
        set,
        version: v,
    } in rows.kept
    {
        if !seen.insert((v.origin_id.clone(), v.valid_from_micros)) {
            continue;
        }
        out.push(Feature {
            internal_id: FeatureId::from_raw(-number),
            id: v.origin_id,
            set,
            set_id: v.set_id,
            category: v.category,
            category_id: v.category_id,
            tag: v.tag,
            feature: v.feature,
            value: v.value,
            metadata: v.metadata,
            citations: v.citations,
            created_at_micros: v.valid_from_micros,
            updated_at_micros: v.valid_from_micros,
            valid_from_micros: v.valid_from_micros,
            changed_by: v.changed_by,
        });
    }
    out
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
        let features = features_as_of(self.store.as_ref(), sets, at).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ChangedBy;

    fn version(origin: &str, value: &str, from: i64) -> FeatureVersion {
        FeatureVersion {
            feature_id: "survivor".into(),
            origin_id: origin.into(),
            org_id: "o".into(),
            project: None,
            set_id: "s".into(),
            category: "c".into(),
            category_id: "c1".into(),
            tag: "t".into(),
            feature: "f".into(),
            value: value.into(),
            metadata: serde_json::json!({}),
            citations: vec![],
            valid_from_micros: from,
            valid_to_micros: Some(from + 10),
            changed_by: ChangedBy::Manual,
        }
    }

    #[test]
    fn kept_versions_become_features_once_each_with_negated_numbers() {
        let kept = |number, v| KeptVersion {
            number,
            set: SetId::from_raw(7),
            version: v,
        };
        let rows = FeatureRowsAt {
            current: vec![],
            kept: vec![
                kept(3, version("a", "x", 100)),
                // The same version copied to a second survivor of a merge.
                kept(4, version("a", "x", 100)),
                kept(5, version("b", "y", 120)),
            ],
        };
        let features = features_at(rows);
        let seen: Vec<(i64, &str, &str, i64)> = features
            .iter()
            .map(|f| {
                (
                    f.internal_id.raw(),
                    f.id.as_str(),
                    f.value.as_str(),
                    f.created_at_micros,
                )
            })
            .collect();
        assert_eq!(seen, [(-3, "a", "x", 100), (-5, "b", "y", 120)]);
        assert!(features.iter().all(|f| f.set == SetId::from_raw(7)));
    }
}
