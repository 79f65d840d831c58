//! The store traits main has today (`store::EpisodeStore`, `store::VectorStore`), by
//! the new ones (`store::next`), so that `PostgresStore` is a `store::Store` until the
//! refactor lands. Ranking leaves the store in that refactor: the searches answer
//! `Unimplemented` here. Deleted at the merge.

use std::time::Duration;

use async_trait::async_trait;

use super::PostgresStore;
use super::error::db_error;
use crate::error::{Error, Result};
use crate::model::filter::Expr;
use crate::model::{Episode, NewEpisode, ProjectKey, ScoredEpisode};
use crate::store::next;
use crate::store::{EmbedderChoice, EpisodeStore, PendingEmbedding, VectorStore};

/// How long `pending_embeddings` leases what it returns.
const PENDING_LEASE: Duration = Duration::from_secs(60);

fn unimplemented(what: &str) -> Error {
    Error::Unimplemented(format!(
        "{what} is not served by the PostgreSQL store (ranking runs in the server)"
    ))
}

#[async_trait]
impl EpisodeStore for PostgresStore {
    async fn add_episodes(&self, key: &ProjectKey, episodes: Vec<NewEpisode>) -> Result<Vec<i64>> {
        next::EpisodeStore::add_episodes(self, key, episodes, None).await
    }

    async fn count_episodes(&self, key: &ProjectKey) -> Result<i64> {
        next::EpisodeStore::count_episodes(self, key).await
    }

    async fn list_episodes(
        &self,
        key: &ProjectKey,
        filter: Option<&Expr>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        next::EpisodeStore::list_episodes(self, key, filter, after_seq, limit).await
    }

    async fn recent_episodes(
        &self,
        key: &ProjectKey,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        next::EpisodeStore::recent_episodes(self, key, filter, limit).await
    }

    async fn delete_episodes(&self, key: &ProjectKey, uids: &[uuid::Uuid]) -> Result<u64> {
        next::EpisodeStore::delete_episodes(self, key, uids).await
    }

    async fn episode_contexts(
        &self,
        _key: &ProjectKey,
        _uids: &[uuid::Uuid],
        _before: usize,
        _after: usize,
        _filter: Option<&Expr>,
    ) -> Result<Vec<Vec<Episode>>> {
        Err(unimplemented("episode_contexts"))
    }

    async fn search_lexical(
        &self,
        _key: &ProjectKey,
        _query: &str,
        _filter: Option<&Expr>,
        _limit: usize,
    ) -> Result<Vec<ScoredEpisode>> {
        Err(unimplemented("lexical search"))
    }
}

#[async_trait]
impl VectorStore for PostgresStore {
    async fn use_embedders(&self, choice: EmbedderChoice) -> Result<u64> {
        let rows: Vec<(String, String, String)> =
            sqlx::query_as("SELECT org_id, project_id, embedder FROM projects")
                .fetch_all(self.pool())
                .await
                .map_err(db_error)?;
        let projects = rows
            .into_iter()
            .map(|(org_id, project_id, name)| {
                let embedder = choice.for_project(&name).map(str::to_string);
                (ProjectKey { org_id, project_id }, embedder)
            })
            .collect();
        next::VectorStore::queue_missing(self, projects).await
    }

    async fn pending_embeddings(
        &self,
        embedder: &str,
        limit: usize,
    ) -> Result<Vec<PendingEmbedding>> {
        let claimed =
            next::VectorStore::claim_embeddings(self, embedder, limit, PENDING_LEASE).await?;
        Ok(claimed
            .into_iter()
            .map(|p| PendingEmbedding {
                episode: p.episode,
                content: p.content,
                producer_id: p.producer_id,
                embedder: p.embedder,
            })
            .collect())
    }

    async fn abandon_embeddings(&self, episodes: Vec<i64>) -> Result<u64> {
        next::VectorStore::abandon_embeddings(self, episodes).await
    }

    async fn store_embeddings(&self, embedder: &str, vectors: Vec<(i64, Vec<f32>)>) -> Result<()> {
        next::VectorStore::store_embeddings(self, embedder, vectors).await
    }

    async fn search_dense(
        &self,
        _key: &ProjectKey,
        _query: &[f32],
        _filter: Option<&Expr>,
        _limit: usize,
    ) -> Result<Vec<ScoredEpisode>> {
        Err(unimplemented("dense search"))
    }

    async fn search_hybrid(
        &self,
        _key: &ProjectKey,
        _query: &str,
        _vector: &[f32],
        _filter: Option<&Expr>,
        _limit: usize,
    ) -> Result<Vec<ScoredEpisode>> {
        Err(unimplemented("hybrid search"))
    }
}
