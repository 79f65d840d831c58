//! Short-term summaries.

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{Episode, ProjectKey};

/// A project's rolling summary of the episodes that left its short-term window.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub text: String,
    /// The sequence numbers it covers, inclusive.
    pub first_seq: i64,
    pub last_seq: i64,
    pub updated_at_micros: i64,
}

/// Short-term summaries and what the summariser reads.
#[async_trait]
pub trait Summaries: Send + Sync {
    async fn summary(&self, key: &ProjectAccess) -> Result<Option<Summary>>;

    /// Stores the project's summary if its current one still ends at `previous_last_seq`
    /// (`None`: there is none) and no episode it covers was deleted meanwhile; false
    /// when it changed.
    async fn put_summary(
        &self,
        key: &ProjectAccess,
        summary: Summary,
        previous_last_seq: Option<i64>,
    ) -> Result<bool>;

    /// Projects (keys) with episodes added since `after` (a store cursor), and the new
    /// cursor: what the summariser looks at.
    async fn projects_changed(&self, after: i64) -> Result<(Vec<ProjectKey>, i64)>;

    /// Episodes with `after_seq < seq <= through_seq`, oldest first, at most `limit`.
    async fn episodes_between(
        &self,
        key: &ProjectAccess,
        after_seq: i64,
        through_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>>;
}
