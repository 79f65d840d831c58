//! The per-project change log that keeps every replica's in-memory index current.

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{ChangeSeq, Episode, EpisodeHandle, ProjectHandle};

/// A project as the change feed sees it: the store's handle of it (never reused, so a
/// project deleted and created again has another) and the id of its latest change
/// (0 when none yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedHead {
    pub project: ProjectHandle,
    pub change: ChangeSeq,
}

/// An episode with its store handle and its vector from the asked embedder.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedEpisode {
    pub handle: EpisodeHandle,
    pub episode: Episode,
    pub vector: Option<Vec<f32>>,
}

/// One entry of a project's change log, as a reader needs it.
// Most entries are additions, read a page at a time and consumed at once: boxing them
// would cost an allocation each for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// An episode added (left out when it has been deleted since).
    Added(IndexedEpisode),
    /// An episode deleted (its handle).
    Removed(EpisodeHandle),
    /// An episode's vector from the asked embedder was set (left out when the episode
    /// is gone or its vector is from another embedder).
    Vector {
        handle: EpisodeHandle,
        vector: Vec<f32>,
    },
}

/// Changes read from a project's log.
#[derive(Debug, Clone, PartialEq)]
pub struct Changes {
    pub changes: Vec<Change>,
    /// The id of the last log entry read (the next read starts after it); equal to
    /// `after` when nothing was read.
    pub through: ChangeSeq,
}

/// The per-project change log that keeps every replica's in-memory index current.
/// Change ids are per project, strictly increasing, and assigned in commit order (the
/// counter lives on the project's row, so writers of one project serialise on it):
/// a reader that has seen change N has seen every change before N.
#[async_trait]
pub trait ChangeFeed: Send + Sync {
    /// `NotFound` when the project does not exist. One cheap query.
    async fn feed_head(&self, key: &ProjectAccess) -> Result<FeedHead>;
    /// Episodes of project `project` (a handle) with `seq > after_seq`, in sequence
    /// order, at most `limit`, each with its vector from `embedder` if any.
    async fn index_page(
        &self,
        project: ProjectHandle,
        embedder: Option<&str>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<IndexedEpisode>>;
    /// Log entries of `project` after change `after`, in id order, at most `limit`
    /// entries read. `None` when the log no longer reaches back to `after` (pruned:
    /// the reader reloads the whole project), or the project is gone.
    async fn changes_since(
        &self,
        project: ProjectHandle,
        after: ChangeSeq,
        embedder: Option<&str>,
        limit: usize,
    ) -> Result<Option<Changes>>;
    /// Drops log entries older than `before_micros` (keeping each project's newest
    /// entry), remembering per project how far the log was pruned. Returns how many.
    async fn prune_changes(&self, before_micros: i64) -> Result<u64>;
    /// This database's identity: a random id made once when its schema was created,
    /// never changed (files derived from it, such as index segments, name it).
    async fn store_id(&self) -> Result<String>;
}
