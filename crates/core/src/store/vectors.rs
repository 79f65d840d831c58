//! Episode vectors and the queue of episodes waiting for one.

use std::time::Duration;

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{EpisodeHandle, ProjectHandle, ProjectKey};

/// An episode waiting for its vector (claimed under a lease).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEmbedding {
    pub episode: EpisodeHandle,
    pub content: String,
    pub producer_id: String,
    pub embedder: String, // the embedder id it was queued for
    /// The episode's project: its embedding is counted as that project's usage.
    pub project: ProjectHandle,
}

#[async_trait]
pub trait VectorStore: Send + Sync {
    /// For each project (by key), queues every episode without a vector from its
    /// embedder (`None`: it keeps no vectors, and its queued episodes leave the queue).
    /// Projects not listed are untouched. Returns how many episodes wait in all.
    async fn queue_missing(&self, projects: Vec<(ProjectKey, Option<String>)>) -> Result<u64>;
    /// Claims up to `limit` episodes queued for `embedder` whose lease is free or
    /// expired, oldest first, leasing them for `lease` (PostgreSQL: FOR UPDATE SKIP
    /// LOCKED). Two claimers never get the same episode while its lease holds.
    async fn claim_embeddings(
        &self,
        embedder: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<PendingEmbedding>>;
    /// Frees the leases of these queued episodes (a failed attempt: anyone may retry).
    async fn release_embeddings(&self, episodes: &[EpisodeHandle]) -> Result<()>;
    /// Takes these episodes off the queue without a vector. Returns how many were queued.
    async fn abandon_embeddings(&self, episodes: &[EpisodeHandle]) -> Result<u64>;
    /// Stores vectors made by `embedder` (episodes deleted meanwhile are skipped), takes
    /// them off the queue, and appends a `Vector` change to each one's project log.
    async fn store_embeddings(
        &self,
        embedder: &str,
        vectors: Vec<(EpisodeHandle, Vec<f32>)>,
    ) -> Result<()>;
    /// The vectors from `embedder` of this project's episodes with these handles, in
    /// the order asked; handles not in the project, deleted, or without a vector from
    /// `embedder` are left out. `NotFound` when the project does not exist.
    async fn vectors(
        &self,
        key: &ProjectAccess,
        embedder: &str,
        handles: &[EpisodeHandle],
    ) -> Result<Vec<(EpisodeHandle, Vec<f32>)>>;
}
