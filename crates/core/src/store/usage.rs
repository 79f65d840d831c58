//! Language-model and embedder usage, added up per org, project, purpose and UTC hour;
//! the orgs' daily token budgets and the pauses they cause.

use async_trait::async_trait;

use crate::access::OrgAccess;
use crate::error::Result;
use crate::model::{ProjectHandle, ProjectKey};

/// One call's figures (or several added together), for one hour's bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageEntry {
    pub org_id: String,
    /// Empty for org-level work (an org-level set's ingestion).
    pub project_id: String,
    /// `extraction`, `consolidation`, `summary` or `embedding`: the domain's names.
    pub purpose: String,
    /// The start of the UTC hour the calls fall in, in microseconds.
    pub hour_micros: i64,
    pub calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

/// The figures of one purpose, added over projects and hours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageTotals {
    pub purpose: String,
    pub calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Adds `entry` to its (org, project, purpose, hour) row, creating it if needed, so
    /// the table holds one row per bucket however many calls there are.
    async fn record_usage(&self, entry: &UsageEntry) -> Result<()>;

    /// The org's figures per purpose over the hours starting at or after `since_micros`
    /// (of one project when given), in purpose order; purposes without calls are absent.
    async fn usage_since(
        &self,
        org: &OrgAccess,
        project_id: Option<&str>,
        since_micros: i64,
    ) -> Result<Vec<UsageTotals>>;

    /// The org's own daily token budget, if one was set (0: set to unlimited).
    async fn budget(&self, org_id: &str) -> Result<Option<i64>>;

    async fn set_budget(&self, org_id: &str, daily_tokens: i64) -> Result<()>;

    /// Until when (microseconds) the org's semantic ingestion is paused, if a pause was
    /// set (it may have ended: compare with the time).
    async fn pause(&self, org_id: &str) -> Result<Option<i64>>;

    /// Pauses the org's semantic ingestion until `until_micros` (batches of its sets are
    /// not claimed before then), or lifts its pause (`None`).
    async fn set_pause(&self, org_id: &str, until_micros: Option<i64>) -> Result<()>;

    /// The public key of a project by its internal handle (`None`: gone), to name the
    /// project a set's work is counted under.
    async fn project_key(&self, project: ProjectHandle) -> Result<Option<ProjectKey>>;
}
