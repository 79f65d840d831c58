//! The embedded default backend: one SQLite file (WAL, `synchronous=FULL`), rows only.
//! One writer thread commits concurrent writes together; reads run on a pool of
//! connections on blocking threads.

mod connection;
mod episodes;
mod error;
mod feed;
mod filter_sql;
mod helpers;
mod keys;
mod legacy;
mod projects;
mod runtime_settings;
mod schema;
mod semantic;
mod semantic_features;
mod semantic_queue;
mod semantic_sets;
mod semantic_summaries;
mod stats;
mod transfer;
mod vectors;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;

use self::connection::{ReadPool, Writer, open_connection};
use memmachine_core::error::{Error, Result};
use memmachine_core::model::filter::Expr;
use memmachine_core::model::{
    ApiKeyRecord, Episode, EpisodicConfig, EpisodicConfigUpdate, NewEpisode, Project,
    ProjectConfig, ProjectKey,
};
use memmachine_core::store::{
    ChangeFeed, Changes, EpisodeStore, FeedHead, IndexedEpisode, KeyStore, PendingEmbedding,
    ProjectStore, SettingsStore, StatsStore, StoreLifecycle, StoreStats, StoredSettings,
    VectorStore,
};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "memmachine.db";

pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: ReadPool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database in `data_dir` and migrates it.
    pub fn open(data_dir: &Path) -> Result<SqliteStore> {
        prepare_data_dir(data_dir)?;
        let path = data_dir.join(DB_FILE);
        let named = |err: Error| match err {
            Error::Unavailable(m) | Error::Internal(m) => {
                Error::Unavailable(format!("cannot open the database {}: {m}", path.display()))
            }
            other => other,
        };
        let mut conn = open_connection(&path).map_err(named)?;
        schema::migrate(&mut conn).map_err(named)?;
        let readers = std::thread::available_parallelism().map_or(4, |n| n.get() * 2);
        Ok(SqliteStore {
            readers: ReadPool::new(path.clone(), readers),
            writer: Writer::start(conn),
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
}

/// Makes sure `dir` is a directory the server can write, creating it if missing, and
/// says what is wrong with which path otherwise.
fn prepare_data_dir(dir: &Path) -> Result<()> {
    let shown = dir.display();
    let unusable = |what: String| Error::Unavailable(format!("--data-dir {shown} {what}"));
    match (std::fs::symlink_metadata(dir), std::fs::metadata(dir)) {
        (Ok(link), Err(_)) if link.file_type().is_symlink() => {
            let target = std::fs::read_link(dir).unwrap_or_default();
            return Err(unusable(format!(
                "is a symbolic link to {}, which does not exist",
                target.display()
            )));
        }
        (_, Ok(meta)) if !meta.is_dir() => {
            return Err(unusable("is a file, not a directory".into()));
        }
        (_, Ok(_)) => {}
        (_, Err(_)) => std::fs::create_dir_all(dir)
            .map_err(|err| unusable(format!("does not exist and cannot be created: {err}")))?,
    }
    // SQLite writes its journal beside the database: the directory must be writable.
    let probe = dir.join(format!(".memmachine-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&probe)
        .map_err(|err| unusable(format!("is not writable: {err}")))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[async_trait]
impl StoreLifecycle for SqliteStore {
    async fn health(&self) -> Result<()> {
        self.readers
            .read(|tx| {
                tx.query_row("SELECT 1", [], |_| Ok(()))
                    .map_err(error::storage_error)
            })
            .await
    }

    async fn close(&self) -> Result<()> {
        self.writer.close_async().await;
        Ok(())
    }

    fn describe(&self) -> String {
        format!("sqlite {}", self.path.display())
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
impl SettingsStore for SqliteStore {
    async fn runtime_settings(&self) -> Result<StoredSettings> {
        self.readers.read(|tx| runtime_settings::read(tx)).await
    }

    async fn runtime_settings_version(&self) -> Result<i64> {
        self.readers.read(|tx| runtime_settings::version(tx)).await
    }

    async fn replace_runtime_settings(&self, expected: i64, settings: &str) -> Result<Option<i64>> {
        let settings = settings.to_string();
        self.writer
            .write(move |conn| runtime_settings::replace(conn, expected, &settings))
            .await
    }
}

#[async_trait]
impl StatsStore for SqliteStore {
    async fn stats(&self) -> Result<StoreStats> {
        self.readers.read(|tx| stats::stats(tx)).await
    }

    async fn org_stats(&self, org_id: &str) -> Result<StoreStats> {
        let org_id = org_id.to_string();
        self.readers
            .read(move |tx| stats::org_stats(tx, &org_id))
            .await
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
        let deleted = self
            .writer
            .write(move |conn| projects::delete(conn, &key))
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
    async fn add_episodes(
        &self,
        key: &ProjectKey,
        new: Vec<NewEpisode>,
        embedder: Option<&str>,
    ) -> Result<Vec<i64>> {
        self.add_episodes_then(key, new, embedder, |_, _| Ok(()))
            .await
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
        let (key, filter) = (key.clone(), filter.cloned());
        let mut recent = self
            .readers
            .read(move |tx| episodes::scan(tx, &key, filter.as_ref(), i64::MIN, true, limit))
            .await?;
        recent.reverse();
        Ok(recent)
    }

    async fn delete_episodes(&self, key: &ProjectKey, uids: &[uuid::Uuid]) -> Result<u64> {
        let (key, uids) = (key.clone(), uids.to_vec());
        let (_, rows) = self
            .writer
            .write(move |conn| episodes::delete(conn, &key, &uids))
            .await?;
        Ok(rows.len() as u64)
    }

    async fn episodes_by_handle(
        &self,
        key: &ProjectKey,
        handles: &[i64],
    ) -> Result<Vec<(i64, Episode)>> {
        let (key, handles) = (key.clone(), handles.to_vec());
        self.readers
            .read(move |tx| episodes::by_handle(tx, &key, &handles))
            .await
    }

    async fn episode_handles(
        &self,
        key: &ProjectKey,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<Option<i64>>> {
        let (key, uids) = (key.clone(), uids.to_vec());
        self.readers
            .read(move |tx| episodes::handles(tx, &key, &uids))
            .await
    }
}

impl SqliteStore {
    /// Stores the episodes (queued for a vector from `embedder`, logged in the change
    /// feed) and runs `also` in the same transaction. Returns their sequence numbers.
    async fn add_episodes_then<F>(
        &self,
        key: &ProjectKey,
        new: Vec<NewEpisode>,
        embedder: Option<&str>,
        also: F,
    ) -> Result<Vec<i64>>
    where
        F: FnOnce(&rusqlite::Connection, &episodes::Added) -> Result<()> + Send + 'static,
    {
        let key = key.clone();
        let embedder = embedder.map(str::to_string);
        let added = self
            .writer
            .write(move |conn| {
                let added = episodes::add(conn, &key, &new)?;
                if let Some(embedder) = &embedder {
                    vectors::enqueue(conn, embedder, &added.rows)?;
                }
                also(conn, &added)?;
                Ok(added)
            })
            .await?;
        Ok(added.seqs)
    }
}

#[async_trait]
impl ChangeFeed for SqliteStore {
    async fn feed_head(&self, key: &ProjectKey) -> Result<FeedHead> {
        let key = key.clone();
        self.readers.read(move |tx| feed::head(tx, &key)).await
    }

    async fn index_page(
        &self,
        project: i64,
        embedder: Option<&str>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<IndexedEpisode>> {
        let embedder = embedder.map(str::to_string);
        self.readers
            .read(move |tx| feed::page(tx, project, embedder.as_deref(), after_seq, limit))
            .await
    }

    async fn changes_since(
        &self,
        project: i64,
        after: i64,
        embedder: Option<&str>,
        limit: usize,
    ) -> Result<Option<Changes>> {
        let embedder = embedder.map(str::to_string);
        self.readers
            .read(move |tx| feed::since(tx, project, after, embedder.as_deref(), limit))
            .await
    }

    async fn prune_changes(&self, before_micros: i64) -> Result<u64> {
        self.writer
            .write(move |conn| feed::prune(conn, before_micros))
            .await
    }
}

#[async_trait]
impl VectorStore for SqliteStore {
    async fn queue_missing(&self, projects: Vec<(ProjectKey, Option<String>)>) -> Result<u64> {
        self.writer
            .write(move |conn| vectors::queue_missing(conn, &projects))
            .await
    }

    async fn claim_embeddings(
        &self,
        embedder: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<PendingEmbedding>> {
        let embedder = embedder.to_string();
        self.writer
            .write(move |conn| vectors::claim(conn, &embedder, limit, lease))
            .await
    }

    async fn release_embeddings(&self, episodes: Vec<i64>) -> Result<()> {
        self.writer
            .write(move |conn| vectors::release(conn, &episodes))
            .await
    }

    async fn abandon_embeddings(&self, episodes: Vec<i64>) -> Result<u64> {
        self.writer
            .write(move |conn| vectors::dequeue(conn, &episodes))
            .await
    }

    async fn store_embeddings(&self, embedder: &str, new: Vec<(i64, Vec<f32>)>) -> Result<()> {
        let embedder = embedder.to_string();
        self.writer
            .write(move |conn| vectors::store(conn, &embedder, &new))
            .await
    }

    async fn vectors(
        &self,
        key: &ProjectKey,
        embedder: &str,
        handles: &[i64],
    ) -> Result<Vec<(i64, Vec<f32>)>> {
        let (key, embedder, handles) = (key.clone(), embedder.to_string(), handles.to_vec());
        self.readers
            .read(move |tx| vectors::by_handle(tx, &key, &embedder, &handles))
            .await
    }
}
