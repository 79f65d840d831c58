//! The embedded default backend: one SQLite file (WAL, `synchronous=FULL`) as the source
//! of truth, with an in-memory BM25 index per project derived from it.

mod connection;
mod episodes;
mod filter_sql;
mod keys;
mod lexical;
mod project_index;
mod projects;
mod schema;
mod search;
mod semantic;
mod semantic_features;
mod semantic_queue;
mod semantic_sets;
mod semantic_summaries;
mod stats;
mod vectors;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use self::connection::{ReadPool, Writer, open_connection};
use self::lexical::{IndexChange, LexicalIndexes};
use self::project_index::ProjectIndex;
use super::{
    EmbedderChoice, EpisodeStore, KeyStore, PendingEmbedding, ProjectStore, StatsStore, StoreStats,
    VectorStore,
};
use crate::error::{Error, Result};
use crate::model::filter::Expr;
use crate::model::{
    ApiKeyRecord, Episode, EpisodicConfig, EpisodicConfigUpdate, NewEpisode, Project,
    ProjectConfig, ProjectKey, ScoredEpisode,
};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "memmachine.db";

pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: ReadPool,
    indexes: Arc<LexicalIndexes>,
    /// Which embedder's vectors each project keeps and searches.
    embedders: Arc<std::sync::RwLock<EmbedderChoice>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database in `data_dir` and migrates it.
    pub fn open(data_dir: &Path) -> Result<SqliteStore> {
        std::fs::create_dir_all(data_dir).map_err(|err| {
            Error::Internal(format!(
                "cannot create data dir {}: {err}",
                data_dir.display()
            ))
        })?;
        let path = data_dir.join(DB_FILE);
        let mut conn = open_connection(&path)?;
        schema::migrate(&mut conn)?;
        let readers = std::thread::available_parallelism().map_or(4, |n| n.get() * 2);
        Ok(SqliteStore {
            readers: ReadPool::new(path.clone(), readers),
            writer: Writer::start(conn),
            indexes: Arc::default(),
            embedders: Arc::default(),
            path,
        })
    }

    /// `open` on a blocking thread, for async callers.
    pub async fn open_async(data_dir: &Path) -> Result<SqliteStore> {
        let dir = data_dir.to_path_buf();
        tokio::task::spawn_blocking(move || SqliteStore::open(&dir))
            .await
            .map_err(|err| Error::Internal(format!("opening the store: {err}")))?
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads every project's lexical index, so that first searches need not wait.
    pub async fn preload_indexes(&self) -> Result<()> {
        let ids: Vec<i64> = self
            .readers
            .read(|tx| {
                let mut stmt = tx
                    .prepare("SELECT id FROM projects ORDER BY id")
                    .map_err(connection::storage_error)?;
                let ids = stmt
                    .query_map([], |row| row.get(0))
                    .and_then(|rows| rows.collect())
                    .map_err(connection::storage_error)?;
                Ok(ids)
            })
            .await?;
        for project in ids {
            self.load_index(project).await?;
        }
        Ok(())
    }

    /// Commits queued writes and stops the writer; later writes answer `UNAVAILABLE`.
    pub fn close(&self) {
        self.writer.close();
    }

    /// `close` on a blocking thread, for async callers.
    pub async fn close_async(self: Arc<Self>) -> Result<()> {
        tokio::task::spawn_blocking(move || self.close())
            .await
            .map_err(|err| Error::Internal(format!("closing the store: {err}")))
    }
}

#[async_trait]
impl KeyStore for SqliteStore {
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let key = key.clone();
        self.writer
            .write(move |conn| keys::insert(conn, &key))
            .await
    }

    async fn find_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        let id = id.to_string();
        self.readers.read(move |tx| keys::find(tx, &id)).await
    }

    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.readers.read(|tx| keys::list(tx)).await
    }

    async fn revoke_key(&self, id: &str) -> Result<bool> {
        let id = id.to_string();
        self.writer.write(move |conn| keys::revoke(conn, &id)).await
    }
}

#[async_trait]
impl StatsStore for SqliteStore {
    async fn stats(&self) -> Result<StoreStats> {
        self.readers.read(|tx| stats::stats(tx)).await
    }
}

#[async_trait]
impl ProjectStore for SqliteStore {
    async fn create_project(
        &self,
        key: &ProjectKey,
        description: &str,
        config: &ProjectConfig,
    ) -> Result<Project> {
        let (key, description, config) = (key.clone(), description.to_string(), config.clone());
        self.writer
            .write(move |conn| projects::insert(conn, &key, &description, &config))
            .await
    }

    async fn get_project(&self, key: &ProjectKey) -> Result<Option<Project>> {
        let key = key.clone();
        self.readers.read(move |tx| projects::find(tx, &key)).await
    }

    async fn list_projects(
        &self,
        org_id: Option<&str>,
        after: Option<&ProjectKey>,
        limit: usize,
    ) -> Result<Vec<Project>> {
        let (org_id, after) = (org_id.map(str::to_string), after.cloned());
        self.readers
            .read(move |tx| projects::list(tx, org_id.as_deref(), after.as_ref(), limit))
            .await
    }

    async fn delete_project(&self, key: &ProjectKey) -> Result<bool> {
        let key = key.clone();
        let indexes = self.indexes.clone();
        let deleted = self
            .writer
            .write_then(
                move |conn| projects::delete(conn, &key),
                move |deleted| {
                    if let Some(project) = deleted {
                        indexes.drop_project(*project);
                    }
                },
            )
            .await?;
        Ok(deleted.is_some())
    }

    async fn update_episodic_config(
        &self,
        key: &ProjectKey,
        update: EpisodicConfigUpdate,
    ) -> Result<Option<EpisodicConfig>> {
        let key = key.clone();
        self.writer
            .write(move |conn| projects::update_episodic_config(conn, &key, update))
            .await
    }
}

#[async_trait]
impl EpisodeStore for SqliteStore {
    async fn add_episodes(&self, key: &ProjectKey, new: Vec<NewEpisode>) -> Result<Vec<i64>> {
        self.add_episodes_then(key, new, |_, _| Ok(())).await
    }

    async fn count_episodes(&self, key: &ProjectKey) -> Result<i64> {
        let key = key.clone();
        self.readers.read(move |tx| episodes::count(tx, &key)).await
    }

    async fn list_episodes(
        &self,
        key: &ProjectKey,
        filter: Option<&Expr>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        let (key, filter) = (key.clone(), filter.cloned());
        self.readers
            .read(move |tx| episodes::scan(tx, &key, filter.as_ref(), after_seq, false, limit))
            .await
    }

    async fn recent_episodes(
        &self,
        key: &ProjectKey,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        let Some(filter) = filter.cloned() else {
            // The (project, seq) index finds the newest rows directly.
            let key = key.clone();
            let mut recent = self
                .readers
                .read(move |tx| episodes::scan(tx, &key, None, i64::MIN, true, limit))
                .await?;
            recent.reverse();
            return Ok(recent);
        };
        // With a filter, SQL may walk far back through rows that fail it; the index
        // walks back through episodes' fields in memory instead.
        self.with_index(key, move |tx, index, project| {
            search::recent(tx, index, project, &filter, limit)
        })
        .await
    }

    async fn delete_episodes(&self, key: &ProjectKey, uids: &[uuid::Uuid]) -> Result<u64> {
        let (key, uids) = (key.clone(), uids.to_vec());
        let indexes = self.indexes.clone();
        let (_, rows) = self
            .writer
            .write_then(
                move |conn| episodes::delete(conn, &key, &uids),
                move |(project, rows)| indexes.apply(*project, IndexChange::Remove(rows)),
            )
            .await?;
        Ok(rows.len() as u64)
    }

    async fn episode_contexts(
        &self,
        key: &ProjectKey,
        uids: &[uuid::Uuid],
        before: usize,
        after: usize,
        filter: Option<&Expr>,
    ) -> Result<Vec<Vec<Episode>>> {
        let (uids, filter) = (uids.to_vec(), filter.cloned());
        self.with_index(key, move |tx, index, project| {
            search::contexts(tx, index, project, &uids, before, after, filter.as_ref())
        })
        .await
    }

    async fn search_lexical(
        &self,
        key: &ProjectKey,
        query: &str,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<ScoredEpisode>> {
        let terms = crate::retrieval::tokenize::query_terms(query);
        let filter = filter.cloned();
        self.with_index(key, move |tx, index, project| {
            search::search(tx, index, project, &terms, filter.as_ref(), limit)
        })
        .await
    }
}

impl SqliteStore {
    /// Stores the episodes (queued for a vector when their project has an embedder) and
    /// runs `also` in the same transaction; once committed they are in the lexical
    /// index. Returns their sequence numbers.
    async fn add_episodes_then<F>(
        &self,
        key: &ProjectKey,
        new: Vec<NewEpisode>,
        also: F,
    ) -> Result<Vec<i64>>
    where
        F: FnOnce(&rusqlite::Connection, &episodes::Added) -> Result<()> + Send + 'static,
    {
        let key = key.clone();
        let new = Arc::new(new);
        let indexes = self.indexes.clone();
        let stored = new.clone();
        let embedders = self.embedder_choice();
        let added = self
            .writer
            .write_then(
                move |conn| {
                    let added = episodes::add(conn, &key, &stored)?;
                    if vectors::embedder_of(conn, added.project, &embedders)?.is_some() {
                        vectors::enqueue(conn, &added.rows)?;
                    }
                    also(conn, &added)?;
                    Ok(added)
                },
                move |added| {
                    let docs: Vec<(i64, &NewEpisode)> =
                        added.rows.iter().copied().zip(new.iter()).collect();
                    indexes.apply(added.project, IndexChange::Insert(&docs));
                },
            )
            .await?;
        Ok(added.seqs)
    }

    fn embedder_choice(&self) -> EmbedderChoice {
        self.embedders.read().expect("embedder lock").clone()
    }

    async fn load_index(&self, project: i64) -> Result<()> {
        let (indexes, embedders) = (self.indexes.clone(), self.embedder_choice());
        self.readers
            .read(move |tx| indexes.load(tx, project, &embedders))
            .await
    }

    /// Runs `f` in a read transaction with the project's loaded lexical index, loading
    /// the index first when needed.
    async fn with_index<T, F>(&self, key: &ProjectKey, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&rusqlite::Transaction<'_>, &ProjectIndex, i64) -> Result<T> + Send + Sync + 'static,
    {
        let (key, f) = (Arc::new(key.clone()), Arc::new(f));
        loop {
            let (key, f, indexes) = (key.clone(), f.clone(), self.indexes.clone());
            let outcome = self
                .readers
                .read(move |tx| {
                    let project = projects::require(tx, &key)?;
                    let Some(slot) = indexes.loaded(project) else {
                        return Ok(Err(project));
                    };
                    let guard = slot.read().expect("index lock");
                    let index = guard.as_ref().expect("a loaded index");
                    f(tx, index, project).map(Ok)
                })
                .await?;
            match outcome {
                Ok(value) => return Ok(value),
                Err(project) => self.load_index(project).await?,
            }
        }
    }
}

#[async_trait]
impl VectorStore for SqliteStore {
    async fn use_embedders(&self, choice: EmbedderChoice) -> Result<u64> {
        *self.embedders.write().expect("embedder lock") = choice.clone();
        // Loaded indexes hold the previous embedders' vectors: load afresh when used.
        self.indexes.clear();
        self.writer
            .write(move |conn| vectors::queue_missing(conn, &choice))
            .await
    }

    async fn pending_embeddings(
        &self,
        embedder: &str,
        limit: usize,
    ) -> Result<Vec<PendingEmbedding>> {
        let names = self.embedder_choice().names_of(embedder);
        let embedder = embedder.to_string();
        self.readers
            .read(move |tx| vectors::pending(tx, &embedder, &names, limit))
            .await
    }

    async fn abandon_embeddings(&self, episodes: Vec<i64>) -> Result<u64> {
        self.writer
            .write(move |conn| vectors::dequeue(conn, &episodes))
            .await
    }

    async fn store_embeddings(&self, embedder: &str, new: Vec<(i64, Vec<f32>)>) -> Result<()> {
        let embedder = embedder.to_string();
        let indexes = self.indexes.clone();
        self.writer
            .write_then(
                move |conn| vectors::store(conn, &embedder, &new),
                move |stored| {
                    let mut by_project: std::collections::HashMap<i64, Vec<(i64, Box<[f32]>)>> =
                        std::collections::HashMap::new();
                    for s in stored {
                        by_project
                            .entry(s.project)
                            .or_default()
                            .push((s.row, s.vector.clone()));
                    }
                    for (project, vectors) in by_project {
                        indexes.apply(project, IndexChange::Vectors(&vectors));
                    }
                },
            )
            .await?;
        Ok(())
    }

    async fn search_dense(
        &self,
        key: &ProjectKey,
        query: &[f32],
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<ScoredEpisode>> {
        let (query, filter) = (query.to_vec(), filter.cloned());
        self.with_index(key, move |tx, index, project| {
            search::dense(tx, index, project, &query, filter.as_ref(), limit)
        })
        .await
    }

    async fn search_hybrid(
        &self,
        key: &ProjectKey,
        query: &str,
        vector: &[f32],
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<ScoredEpisode>> {
        let terms = crate::retrieval::tokenize::query_terms(query);
        let (vector, filter) = (vector.to_vec(), filter.cloned());
        self.with_index(key, move |tx, index, project| {
            search::hybrid(tx, index, project, &terms, &vector, filter.as_ref(), limit)
        })
        .await
    }
}
