//! Forgetting a subject: its episodes found and deleted in batches with what derives
//! from them, its user set dropped, and the receipts of past forgets (counts only).

use async_trait::async_trait;

use crate::access::OrgAccess;
use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{FeatureId, ProjectKey, SetId};

/// What one forget step removed (or, for a preview, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForgetCounts {
    pub episodes: u64,
    /// Features deleted: those of a dropped set, and those left citing nothing.
    pub features: u64,
    /// Citations of the deleted episodes by features of other sets.
    pub citations: u64,
    pub summaries: u64,
    pub sets: u64,
}

impl ForgetCounts {
    pub fn add(&mut self, other: ForgetCounts) {
        self.episodes += other.episodes;
        self.features += other.features;
        self.citations += other.citations;
        self.summaries += other.summaries;
        self.sets += other.sets;
    }
}

/// What deleting episodes removed: the counts and the features it deleted (for their
/// history).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forgotten {
    pub counts: ForgetCounts,
    pub features: Vec<FeatureId>,
}

/// One project's line of a receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectForget {
    pub project_id: String,
    pub counts: ForgetCounts,
}

/// The record of a forget: who, where, when and how much; never memory content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgetReceipt {
    pub receipt_id: String,
    pub org_id: String,
    pub subject: String,
    pub dry_run: bool,
    pub completed_at_micros: i64,
    pub projects: Vec<ProjectForget>,
}

#[async_trait]
pub trait ForgetStore: Send + Sync {
    /// Up to `limit` uids of the project's episodes whose producer or recipient is
    /// `subject`, oldest first. `NotFound` when the project does not exist.
    async fn subject_episodes(
        &self,
        key: &ProjectAccess,
        subject: &str,
        limit: usize,
    ) -> Result<Vec<uuid::Uuid>>;
    /// Deletes those of these episodes still in the project (the others are skipped, so
    /// a re-run after a crash completes), as `delete_episodes` does, in one transaction.
    async fn forget_episodes(&self, key: &ProjectAccess, uids: &[uuid::Uuid]) -> Result<Forgotten>;
    /// Deletes the set with its features (and their citations, vectors and queued
    /// work); the features deleted, empty when the set is gone.
    async fn drop_set(&self, set: SetId) -> Result<Vec<FeatureId>>;
    /// What forgetting the subject in `key` would remove after the projects `before`
    /// were forgotten (features shared across them are counted where their last
    /// citation goes), with `user_set` dropped first. Changes nothing.
    async fn forget_preview(
        &self,
        key: &ProjectAccess,
        subject: &str,
        before: &[ProjectKey],
        user_sets: &[SetId],
    ) -> Result<ForgetCounts>;
    async fn save_forget_receipt(&self, receipt: &ForgetReceipt) -> Result<()>;
    /// The receipt with this id in this org; `None` when there is none.
    async fn forget_receipt(
        &self,
        org: &OrgAccess,
        receipt_id: &str,
    ) -> Result<Option<ForgetReceipt>>;
}

/// A receipt's project lines as the JSON text both backends store.
pub fn encode_forget_projects(projects: &[ProjectForget]) -> String {
    let lines: Vec<serde_json::Value> = projects
        .iter()
        .map(|p| {
            serde_json::json!({
                "project_id": p.project_id,
                "episodes": p.counts.episodes,
                "features": p.counts.features,
                "citations": p.counts.citations,
                "summaries": p.counts.summaries,
                "sets": p.counts.sets,
            })
        })
        .collect();
    serde_json::Value::Array(lines).to_string()
}

/// The project lines [`encode_forget_projects`] wrote; `None` when the text is not that.
pub fn decode_forget_projects(text: &str) -> Option<Vec<ProjectForget>> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let count = |line: &serde_json::Value, name: &str| line.get(name)?.as_u64();
    value
        .as_array()?
        .iter()
        .map(|line| {
            Some(ProjectForget {
                project_id: line.get("project_id")?.as_str()?.to_string(),
                counts: ForgetCounts {
                    episodes: count(line, "episodes")?,
                    features: count(line, "features")?,
                    citations: count(line, "citations")?,
                    summaries: count(line, "summaries")?,
                    sets: count(line, "sets")?,
                },
            })
        })
        .collect()
}
