//! The change feed clients follow (`ChangeService.WatchChanges`): what changed in a
//! project's memory, in commit order, read from the same per-project log that keeps
//! every replica's index current.

use async_trait::async_trait;

use super::feed::FeedHead;
use super::semantic_features::Feature;
use crate::error::Result;
use crate::model::{ChangeSeq, Episode, ProjectHandle};

/// What a change of a project's memory was, as its clients see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryChangeKind {
    EpisodeAdded,
    /// By a client, retention or forgetting.
    EpisodeDeleted,
    FeatureAdded,
    FeatureUpdated,
    FeatureDeleted,
    /// The project's summary was written, rewritten or dropped.
    SummaryReplaced,
}

/// One entry of a project's log as a client sees it. Entries only the indexes need
/// (vectors set) are never returned.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryChange {
    pub id: ChangeSeq,
    /// When it committed (microseconds since the Unix epoch).
    pub at_micros: i64,
    pub kind: MemoryChangeKind,
    /// The episode's uid (episode changes; `None` for entries logged before the log
    /// kept uids, i.e. before the stores' feed migration).
    pub episode_uid: Option<uuid::Uuid>,
    /// The episode as stored now, when it still is.
    pub episode: Option<Episode>,
    /// The feature's public id (feature changes).
    pub feature_id: Option<String>,
    /// The feature as it is now, when it still exists.
    pub feature: Option<Feature>,
    /// The summary's text now (summary changes; `None` when there is none).
    pub summary: Option<String>,
}

/// What reading a project's log after a change found.
#[derive(Debug, Clone, PartialEq)]
pub enum MemoryChanges {
    /// Entries after the asked change, in id order; `through` is the id of the last
    /// entry read, of any kind (the next read starts after it), equal to `after` when
    /// nothing was read.
    Read {
        changes: Vec<MemoryChange>,
        through: ChangeSeq,
    },
    /// The log no longer reaches back to the asked change: the oldest change a reader
    /// may resume after is `oldest`.
    Pruned { oldest: ChangeSeq },
    /// The project is gone.
    Gone,
}

#[async_trait]
pub trait MemoryFeed: Send + Sync {
    /// Entries of `project`'s log after change `after`, at most `limit` entries read
    /// (of every kind, so a page may hold fewer changes than that).
    async fn memory_changes(
        &self,
        project: ProjectHandle,
        after: ChangeSeq,
        limit: usize,
    ) -> Result<MemoryChanges>;
    /// The latest change of each of these projects that still exists, in one query
    /// (the watchers' poll); projects that are gone are left out.
    async fn feed_heads(&self, projects: &[ProjectHandle]) -> Result<Vec<FeedHead>>;
}
