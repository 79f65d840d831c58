//! Storage traits: rows only (ranking is the domain's, `retrieval::index_cache`). Every
//! backend implements them and passes the one conformance suite in `tests/conformance/`. Methods take the project's public key and resolve it
//! inside their own transaction, so a project deleted concurrently is `NotFound`, never
//! a half-finished operation.

pub mod open;
pub mod postgres;
pub mod sqlite;
pub mod transfer;

pub use open::{StoreLocation, open};

/// The episode column (over the alias `e`) a filter's system field compares, in every
/// SQL dialect; `None` for the fields of features, which episode filters never parse.
pub(crate) fn episode_column(field: crate::model::filter::SystemField) -> Option<&'static str> {
    use crate::model::filter::SystemField;
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
pub use transfer::{EpisodeVector, RestoredFeature, TransferStore};

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::legacy::store::LegacyStore;
use crate::model::filter::Expr;
use crate::model::{
    ApiKeyRecord, Episode, EpisodicConfig, EpisodicConfigUpdate, NewEpisode, Project,
    ProjectConfig, ProjectKey,
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

/// A project as the change feed sees it: the store's handle of it (never reused, so a
/// project deleted and created again has another) and the id of its latest change
/// (0 when none yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedHead {
    pub project: i64,
    pub change: i64,
}

/// An episode with its store handle and its vector from the asked embedder.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedEpisode {
    pub handle: i64,
    pub episode: Episode,
    pub vector: Option<Vec<f32>>,
}

/// One entry of a project's change log, as a reader needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// An episode added (left out when it has been deleted since).
    Added(IndexedEpisode),
    /// An episode deleted (its handle).
    Removed(i64),
    /// An episode's vector from the asked embedder was set (left out when the episode
    /// is gone or its vector is from another embedder).
    Vector { handle: i64, vector: Vec<f32> },
}

/// Changes read from a project's log.
#[derive(Debug, Clone, PartialEq)]
pub struct Changes {
    pub changes: Vec<Change>,
    /// The id of the last log entry read (the next read starts after it); equal to
    /// `after` when nothing was read.
    pub through: i64,
}

/// An episode waiting for its vector (claimed under a lease).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEmbedding {
    pub episode: i64, // the store's handle of the episode
    pub content: String,
    pub producer_id: String,
    pub embedder: String, // the embedder id it was queued for
}

#[async_trait]
pub trait EpisodeStore: Send + Sync {
    /// Stores all episodes or none, with consecutive sequence numbers in input order,
    /// queues them for a vector from `embedder` when given, and appends one `Added`
    /// change per episode to the project's log, all in one transaction. Returns the
    /// sequence numbers. `NotFound` when the project does not exist.
    async fn add_episodes(
        &self,
        key: &ProjectKey,
        episodes: Vec<NewEpisode>,
        embedder: Option<&str>,
    ) -> Result<Vec<i64>>;
    async fn count_episodes(&self, key: &ProjectKey) -> Result<i64>;
    /// Episodes with `sequence_num > after_seq` matching `filter` (translated to SQL), in sequence order.
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
    /// Deletes the episodes with these uids, all or none (`NotFound` naming the uids not
    /// in this project), appending one `Removed` change each. Returns how many.
    async fn delete_episodes(&self, key: &ProjectKey, uids: &[uuid::Uuid]) -> Result<u64>;
    /// The episodes of this project with these handles, in the order asked; handles
    /// not in the project (or deleted) are left out.
    async fn episodes_by_handle(
        &self,
        key: &ProjectKey,
        handles: &[i64],
    ) -> Result<Vec<(i64, Episode)>>;
    /// The handle of each uid, `None` for a uid not in this project.
    async fn episode_handles(
        &self,
        key: &ProjectKey,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<Option<i64>>>;
}

/// The per-project change log that keeps every replica's in-memory index current.
/// Change ids are per project, strictly increasing, and assigned in commit order (the
/// counter lives on the project's row, so writers of one project serialise on it):
/// a reader that has seen change N has seen every change before N.
#[async_trait]
pub trait ChangeFeed: Send + Sync {
    /// `NotFound` when the project does not exist. One cheap query.
    async fn feed_head(&self, key: &ProjectKey) -> Result<FeedHead>;
    /// Episodes of project `project` (a handle) with `seq > after_seq`, in sequence
    /// order, at most `limit`, each with its vector from `embedder` if any.
    async fn index_page(
        &self,
        project: i64,
        embedder: Option<&str>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<IndexedEpisode>>;
    /// Log entries of `project` after change `after`, in id order, at most `limit`
    /// entries read. `None` when the log no longer reaches back to `after` (pruned:
    /// the reader reloads the whole project), or the project is gone.
    async fn changes_since(
        &self,
        project: i64,
        after: i64,
        embedder: Option<&str>,
        limit: usize,
    ) -> Result<Option<Changes>>;
    /// Drops log entries older than `before_micros` (keeping each project's newest
    /// entry), remembering per project how far the log was pruned. Returns how many.
    async fn prune_changes(&self, before_micros: i64) -> Result<u64>;
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
    async fn release_embeddings(&self, episodes: Vec<i64>) -> Result<()>;
    /// Takes these episodes off the queue without a vector. Returns how many were queued.
    async fn abandon_embeddings(&self, episodes: Vec<i64>) -> Result<u64>;
    /// Stores vectors made by `embedder` (episodes deleted meanwhile are skipped), takes
    /// them off the queue, and appends a `Vector` change to each one's project log.
    async fn store_embeddings(&self, embedder: &str, vectors: Vec<(i64, Vec<f32>)>) -> Result<()>;
    /// The vectors from `embedder` of this project's episodes with these handles, in
    /// the order asked; handles not in the project, deleted, or without a vector from
    /// `embedder` are left out. `NotFound` when the project does not exist.
    async fn vectors(
        &self,
        key: &ProjectKey,
        embedder: &str,
        handles: &[i64],
    ) -> Result<Vec<(i64, Vec<f32>)>>;
}

#[async_trait]
pub trait StoreLifecycle: Send + Sync {
    /// Ok when the backend answers (a trivial query).
    async fn health(&self) -> Result<()>;
    /// Commits what is queued and stops; later calls answer `Unavailable`.
    async fn close(&self) -> Result<()>;
    /// What it is, for logs ("sqlite /path/memmachine.db", "postgres host:port/db"; never a password).
    fn describe(&self) -> String;
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

    /// The same figures, of one org's projects only (what its key may see).
    async fn org_stats(&self, org_id: &str) -> Result<StoreStats>;
}

/// The server-wide runtime settings (`PUT /api/v2/config/...`): one row holding a JSON
/// object the domain reads and writes whole, and a version every write bumps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSettings {
    /// 0 before the first write.
    pub version: i64,
    /// A JSON object (`{}` before the first write); its keys are the domain's.
    pub settings: String,
}

#[async_trait]
pub trait SettingsStore: Send + Sync {
    async fn runtime_settings(&self) -> Result<StoredSettings>;
    /// The version alone: one cheap read, which every replica polls.
    async fn runtime_settings_version(&self) -> Result<i64>;
    /// Replaces the settings if their version is still `expected` (compare and swap, so
    /// two replicas' writes never lose one another); the new version, or `None` when
    /// another writer went first.
    async fn replace_runtime_settings(&self, expected: i64, settings: &str) -> Result<Option<i64>>;
}

/// Everything the server needs from a backend.
pub trait Store:
    ProjectStore
    + EpisodeStore
    + ChangeFeed
    + VectorStore
    + KeyStore
    + StatsStore
    + SemanticStore
    + LegacyStore
    + TransferStore
    + SettingsStore
    + StoreLifecycle
{
}

impl<T> Store for T where
    T: ProjectStore
        + EpisodeStore
        + ChangeFeed
        + VectorStore
        + KeyStore
        + StatsStore
        + SemanticStore
        + LegacyStore
        + TransferStore
        + SettingsStore
        + StoreLifecycle
{
}
