//! `ProjectStore`: projects, and the SQL that resolves a key to one.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::error::storage_error;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::weights::{merge_weights_json, weights_from_json};
use memmachine_core::model::{
    EpisodicConfig, EpisodicConfigUpdate, Project, ProjectConfig, ProjectHandle, ProjectKey,
};
use memmachine_core::store::ProjectStore;

const COLUMNS: &str = "id, org_id, project_id, description, embedder, reranker, \
     episodic_enabled, long_term_enabled, short_term_enabled, created_at, participant_aware, episode_retention, \
     ranking_weights";

fn from_row(row: &Row<'_>) -> rusqlite::Result<Project> {
    Ok(Project {
        internal_id: ProjectHandle::from_raw(row.get(0)?),
        key: ProjectKey {
            org_id: row.get(1)?,
            project_id: row.get(2)?,
        },
        description: row.get(3)?,
        config: ProjectConfig {
            embedder: row.get(4)?,
            reranker: row.get(5)?,
        },
        episodic: EpisodicConfig {
            enabled: row.get(6)?,
            long_term_memory_enabled: row.get(7)?,
            short_term_memory_enabled: row.get(8)?,
            participant_aware: row.get(10)?,
            episode_retention_micros: row.get(11)?,
            ranking_weights: weights_from_json(row.get::<_, Option<String>>(12)?.as_deref()),
        },
        created_at_micros: row.get(9)?,
    })
}

pub(super) fn find(conn: &Connection, key: &ProjectKey) -> Result<Option<Project>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM projects WHERE org_id = ?1 AND project_id = ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(params![key.org_id, key.project_id], from_row)
            .optional()
    })
    .map_err(storage_error)
}

/// The project's internal id, or `NotFound`.
pub(super) fn require(conn: &Connection, key: &ProjectKey) -> Result<i64> {
    conn.prepare_cached("SELECT id FROM projects WHERE org_id = ?1 AND project_id = ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![key.org_id, key.project_id], |row| row.get(0))
                .optional()
        })
        .map_err(storage_error)?
        .ok_or_else(|| not_found(key))
}

pub(super) fn not_found(key: &ProjectKey) -> Error {
    Error::NotFound(format!("project {key} does not exist"))
}

pub(super) fn insert(
    conn: &Connection,
    key: &ProjectKey,
    description: &str,
    config: &ProjectConfig,
) -> Result<Project> {
    if find(conn, key)?.is_some() {
        return Err(Error::AlreadyExists(format!(
            "project {key} already exists"
        )));
    }
    let now = chrono::Utc::now().timestamp_micros();
    conn.execute(
        "INSERT INTO projects (org_id, project_id, description, embedder, reranker, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            key.org_id,
            key.project_id,
            description,
            config.embedder,
            config.reranker,
            now
        ],
    )
    .map_err(storage_error)?;
    find(conn, key)?.ok_or_else(|| Error::Internal("inserted project vanished".into()))
}

pub(super) fn list(
    conn: &Connection,
    org_id: Option<&str>,
    after: Option<&ProjectKey>,
    limit: usize,
) -> Result<Vec<Project>> {
    let (after_org, after_project) = after
        .map(|k| (k.org_id.as_str(), k.project_id.as_str()))
        .unwrap_or(("", ""));
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM projects
             WHERE (?1 IS NULL OR org_id = ?1) AND (org_id, project_id) > (?2, ?3)
             ORDER BY org_id, project_id LIMIT ?4"
        ))
        .map_err(storage_error)?;
    stmt.query_map(
        params![org_id, after_org, after_project, limit as i64],
        from_row,
    )
    .and_then(|rows| rows.collect())
    .map_err(storage_error)
}

/// Deletes the project and its episodes; returns its row id, if it existed.
pub(super) fn delete(conn: &Connection, key: &ProjectKey) -> Result<Option<i64>> {
    let Some(project) = find(conn, key)? else {
        return Ok(None);
    };
    let id = project.internal_id.raw();
    conn.execute("DELETE FROM episodes WHERE project = ?1", [id])
        .map_err(storage_error)?;
    conn.execute("DELETE FROM projects WHERE id = ?1", [id])
        .map_err(storage_error)?;
    Ok(Some(id))
}

pub(super) fn update_episodic_config(
    conn: &Connection,
    key: &ProjectKey,
    update: EpisodicConfigUpdate,
) -> Result<Option<EpisodicConfig>> {
    let Some(project) = find(conn, key)? else {
        return Ok(None);
    };
    let stored: Option<String> = conn
        .query_row(
            "SELECT ranking_weights FROM projects WHERE id = ?1",
            [project.internal_id.raw()],
            |row| row.get(0),
        )
        .map_err(storage_error)?;
    let weights = merge_weights_json(stored.as_deref(), &update.ranking_weights);
    let config = project.episodic.apply(update);
    conn.execute(
        "UPDATE projects SET episodic_enabled = ?2, long_term_enabled = ?3,
             short_term_enabled = ?4, participant_aware = ?5, episode_retention = ?6,
             ranking_weights = ?7
             WHERE id = ?1",
        params![
            project.internal_id.raw(),
            config.enabled,
            config.long_term_memory_enabled,
            config.short_term_memory_enabled,
            config.participant_aware,
            config.episode_retention_micros,
            weights
        ],
    )
    .map_err(storage_error)?;
    Ok(Some(config))
}

#[async_trait]
impl ProjectStore for SqliteStore {
    async fn create_project(
        &self,
        key: &ProjectAccess,
        description: &str,
        config: &ProjectConfig,
    ) -> Result<Project> {
        let (key, description, config) = (key.clone(), description.to_string(), config.clone());
        self.writer
            .write(move |conn| insert(conn, &key, &description, &config))
            .await
    }

    async fn get_project(&self, key: &ProjectAccess) -> Result<Option<Project>> {
        let read = key.clone();
        self.readers.read_here(move |tx| find(tx, &read)).await
    }

    async fn list_projects(
        &self,
        org_id: Option<&str>,
        after: Option<&ProjectKey>,
        limit: usize,
    ) -> Result<Vec<Project>> {
        let (org_id, after) = (org_id.map(str::to_string), after.cloned());
        self.readers
            .read(move |tx| list(tx, org_id.as_deref(), after.as_ref(), limit))
            .await
    }

    async fn delete_project(&self, key: &ProjectAccess) -> Result<bool> {
        let key = key.clone();
        let deleted = self.writer.write(move |conn| delete(conn, &key)).await?;
        Ok(deleted.is_some())
    }

    async fn update_episodic_config(
        &self,
        key: &ProjectAccess,
        update: EpisodicConfigUpdate,
    ) -> Result<Option<EpisodicConfig>> {
        let key = key.clone();
        self.writer
            .write(move |conn| update_episodic_config(conn, &key, update))
            .await
    }
}
