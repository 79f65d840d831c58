//! Episodes: stored in batches, listed, filtered and deleted.

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::filter::{Expr, SystemField};
use crate::model::{AddedEpisode, Episode, EpisodeHandle, NewEpisode};

/// The episode column (over the alias `e`) a filter's system field compares, in every
/// SQL dialect; `None` for the fields of features, which episode filters never parse.
pub fn episode_column(field: SystemField) -> Option<&'static str> {
    match field {
        SystemField::ProducerId => Some("e.producer_id"),
        SystemField::ProducerRole => Some("e.producer_role"),
        SystemField::ProducedForId => Some("e.produced_for_id"),
        SystemField::CreatedAt => Some("e.created_at"),
        SystemField::EpisodeType => Some("e.episode_type"),
        SystemField::SetId
        | SystemField::Category
        | SystemField::Tag
        | SystemField::Feature
        | SystemField::Value
        | SystemField::UpdatedAt => None,
    }
}
#[async_trait]
pub trait EpisodeStore: Send + Sync {
    /// Stores all episodes or none, with consecutive sequence numbers in input order,
    /// queues them for a vector from `embedder` when given, and appends one `Added`
    /// change per episode to the project's log, all in one transaction. An episode
    /// whose idempotency key the project holds within its window (or an earlier one of
    /// the batch holds) is not stored: it answers the stored one, `duplicate`. Returns
    /// one answer per episode, in order. `NotFound` when the project does not exist.
    async fn add_episodes(
        &self,
        key: &ProjectAccess,
        episodes: Vec<NewEpisode>,
        embedder: Option<&str>,
    ) -> Result<Vec<AddedEpisode>>;
    async fn count_episodes(&self, key: &ProjectAccess) -> Result<i64>;
    /// Episodes with `sequence_num > after_seq` matching `filter` (translated to SQL), in sequence order.
    async fn list_episodes(
        &self,
        key: &ProjectAccess,
        filter: Option<&Expr>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>>;
    /// The `limit` most recent episodes matching `filter`, oldest first.
    async fn recent_episodes(
        &self,
        key: &ProjectAccess,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<Episode>>;
    /// Deletes the episodes with these uids, all or none (`NotFound` naming the uids not
    /// in this project), appending one `Removed` change each. Returns how many.
    async fn delete_episodes(&self, key: &ProjectAccess, uids: &[uuid::Uuid]) -> Result<u64>;
    /// The episodes of this project with these handles, in the order asked; handles
    /// not in the project (or deleted) are left out.
    async fn episodes_by_handle(
        &self,
        key: &ProjectAccess,
        handles: &[EpisodeHandle],
    ) -> Result<Vec<(EpisodeHandle, Episode)>>;
    /// The handle of each uid, `None` for a uid not in this project.
    async fn episode_handles(
        &self,
        key: &ProjectAccess,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<Option<EpisodeHandle>>>;
}
