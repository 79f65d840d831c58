//! Storage traits. Every backend implements them and passes the one conformance suite
//! in `tests/store_conformance.rs`. Methods take the project's public key and resolve it
//! inside their own transaction, so a project deleted concurrently is `NotFound`, never
//! a half-finished operation.

pub mod next;
pub mod postgres;
pub mod sqlite;

use async_trait::async_trait;

use crate::error::Result;
use crate::model::filter::Expr;
use crate::model::{
    ApiKeyRecord, Episode, EpisodicConfig, EpisodicConfigUpdate, NewEpisode, Project,
    ProjectConfig, ProjectKey, ScoredEpisode,
};
use crate::semantic::store::SemanticStore;

#[async_trait]
pub trait ProjectStore: Send + Sync {
    /// `AlreadyExists` when the project exists.
    async fn create_project(
        &self,
        key: &ProjectKey,
        description: &str,
        config: &ProjectConfig,
    ) -> Result<Project>;

    async fn get_project(&self, key: &ProjectKey) -> Result<Option<Project>>;

    /// Projects ordered by `(org_id, project_id)`, after `after`, optionally in one org.
    async fn list_projects(
        &self,
        org_id: Option<&str>,
        after: Option<&ProjectKey>,
        limit: usize,
    ) -> Result<Vec<Project>>;

    /// Removes the project and all its memories in one transaction; false when absent.
    async fn delete_project(&self, key: &ProjectKey) -> Result<bool>;

    /// `None` when the project does not exist.
    async fn update_episodic_config(
        &self,
        key: &ProjectKey,
        update: EpisodicConfigUpdate,
    ) -> Result<Option<EpisodicConfig>>;
}

#[async_trait]
pub trait EpisodeStore: Send + Sync {
    /// Stores all episodes or none, assigning consecutive sequence numbers in input
    /// order, and returns them. `NotFound` when the project does not exist.
    async fn add_episodes(&self, key: &ProjectKey, episodes: Vec<NewEpisode>) -> Result<Vec<i64>>;

    async fn count_episodes(&self, key: &ProjectKey) -> Result<i64>;

    /// Episodes with `sequence_num > after_seq` matching `filter`, in sequence order.
    async fn list_episodes(
        &self,
        key: &ProjectKey,
        filter: Option<&Expr>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>>;

    /// The `limit` most recent episodes matching `filter`, oldest first.
    async fn recent_episodes(
        &self,
        key: &ProjectKey,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<Episode>>;

    /// Deletes the episodes with these uids, all or none: `NotFound` naming the uids
    /// that are not in this project.
    async fn delete_episodes(&self, key: &ProjectKey, uids: &[uuid::Uuid]) -> Result<u64>;

    /// For each uid, that episode with up to `before` episodes before it and `after`
    /// after it (in sequence order, passing `filter`), oldest first; a uid that is not
    /// in this project gets an empty list.
    async fn episode_contexts(
        &self,
        key: &ProjectKey,
        uids: &[uuid::Uuid],
        before: usize,
        after: usize,
        filter: Option<&Expr>,
    ) -> Result<Vec<Vec<Episode>>>;

    /// Lexical (BM25) search, best first, filtered before the cut to `limit`.
    async fn search_lexical(
        &self,
        key: &ProjectKey,
        query: &str,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<ScoredEpisode>>;
}

/// An episode waiting for its vector.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEmbedding {
    /// The store's handle of the episode.
    pub episode: i64,
    pub content: String,
    pub producer_id: String,
    /// The id of the embedder its project uses.
    pub embedder: String,
}

/// Which embedder makes each project's vectors (and whose vectors its searches use):
/// the one its `config.embedder` names, else the server's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmbedderChoice {
    /// Embedder ids by the names projects may give.
    pub named: std::collections::BTreeMap<String, String>,
    /// The embedder id of projects that name none (`None`: they have no vectors).
    pub default: Option<String>,
}

impl EmbedderChoice {
    /// The embedder id for a project whose config names `name` (`None`: no vectors,
    /// for `none` or a name this server does not offer).
    pub fn for_project(&self, name: &str) -> Option<&str> {
        if name.is_empty() {
            self.default.as_deref()
        } else {
            self.named.get(name).map(String::as_str)
        }
    }

    /// The names a project's config may give for the embedder `id` (`""` if it is the
    /// default).
    pub fn names_of(&self, id: &str) -> Vec<String> {
        let default = (self.default.as_deref() == Some(id)).then(String::new);
        self.named
            .iter()
            .filter(|(_, named)| *named == id)
            .map(|(name, _)| name.clone())
            .chain(default)
            .collect()
    }
}

#[async_trait]
pub trait VectorStore: Send + Sync {
    /// Sets which embedder serves each project, and queues every episode without a
    /// vector from its project's embedder (after a change of embedder, or episodes
    /// added while there was none); episodes of projects left without one leave the
    /// queue. Called at start-up before any other call. Returns how many episodes wait.
    async fn use_embedders(&self, choice: EmbedderChoice) -> Result<u64>;

    /// Episodes waiting for a vector from `embedder` (an id), oldest first, across
    /// projects.
    async fn pending_embeddings(
        &self,
        embedder: &str,
        limit: usize,
    ) -> Result<Vec<PendingEmbedding>>;

    /// Takes these episodes off the queue without a vector (their text cannot be
    /// embedded); they stay stored and lexically searchable. Returns how many were queued.
    async fn abandon_embeddings(&self, episodes: Vec<i64>) -> Result<u64>;

    /// Stores vectors made by `embedder` by the episodes' handles (episodes deleted
    /// meanwhile are skipped) and takes them off the queue; they are searchable once
    /// this returns.
    async fn store_embeddings(&self, embedder: &str, vectors: Vec<(i64, Vec<f32>)>) -> Result<()>;

    /// Episodes most similar to `query` (a unit vector), best first, filtered before the
    /// cut to `limit`; episodes without a vector are left out.
    async fn search_dense(
        &self,
        key: &ProjectKey,
        query: &[f32],
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<ScoredEpisode>>;

    /// Lexical and vector evidence fused (`query` is the text, `vector` its unit
    /// embedding), best first, filtered before the cut to `limit`. Episodes without a
    /// vector yet still rank by their text.
    async fn search_hybrid(
        &self,
        key: &ProjectKey,
        query: &str,
        vector: &[f32],
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<ScoredEpisode>>;
}

/// API keys, stored as salted hashes.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// `AlreadyExists` when a key with this id exists.
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<()>;

    /// The key with this id, revoked or not.
    async fn find_key(&self, id: &str) -> Result<Option<ApiKeyRecord>>;

    /// Every key, revoked ones included, oldest first.
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>>;

    /// Marks the key revoked (keeping the time of the first revocation); false when
    /// there is no such key.
    async fn revoke_key(&self, id: &str) -> Result<bool>;
}

/// What the server's metrics read from a backend.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoreStats {
    pub episodes: i64,
    /// Episodes waiting for a vector.
    pub embedding_queue: i64,
    /// Age in seconds of the oldest of them (0 when none waits).
    pub embedding_lag_secs: f64,
    /// Messages queued for semantic ingestion, and those whose ingestion failed.
    pub semantic_queue: i64,
    pub semantic_failed: i64,
}

#[async_trait]
pub trait StatsStore: Send + Sync {
    async fn stats(&self) -> Result<StoreStats>;
}

/// Everything the server needs from a backend.
pub trait Store:
    ProjectStore + EpisodeStore + VectorStore + KeyStore + StatsStore + SemanticStore
{
}

impl<T: ProjectStore + EpisodeStore + VectorStore + KeyStore + StatsStore + SemanticStore> Store
    for T
{
}
