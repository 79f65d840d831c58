//! `TransferStore` for `SqliteStore`: rows written as they were in another store, and
//! episode vectors read with their embedders (`memmachine export` / `import`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::error::storage_error;
use super::helpers::{ADDED, bump_sets, is_constraint, log_changes};
use super::semantic_sets::{SET_TYPE_COLUMNS, set_type_from_row};
use super::{SqliteStore, projects, semantic_features, semantic_sets, vectors};
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::weights::weights_to_json;
use memmachine_core::model::{
    Episode, EpisodeHandle, FeatureId, Project, ProjectKey, SetId, SetTypeId,
};
use memmachine_core::store::transfer::{EpisodeVector, RestoredFeature, TransferStore};
use memmachine_core::store::{SetRow, SetType};

fn restore_project(conn: &Connection, project: &Project) -> Result<Project> {
    conn.prepare_cached(
        "INSERT INTO projects (org_id, project_id, description, embedder, reranker,
             episodic_enabled, long_term_enabled, short_term_enabled, created_at,
             participant_aware, episode_retention, ranking_weights)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
         ON CONFLICT (org_id, project_id) DO UPDATE SET description = excluded.description,
             embedder = excluded.embedder, reranker = excluded.reranker,
             episodic_enabled = excluded.episodic_enabled,
             long_term_enabled = excluded.long_term_enabled,
             short_term_enabled = excluded.short_term_enabled,
             participant_aware = excluded.participant_aware,
             episode_retention = excluded.episode_retention,
             ranking_weights = excluded.ranking_weights,
             created_at = excluded.created_at",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            project.key.org_id,
            project.key.project_id,
            project.description,
            project.config.embedder,
            project.config.reranker,
            project.episodic.enabled,
            project.episodic.long_term_memory_enabled,
            project.episodic.short_term_memory_enabled,
            project.created_at_micros,
            project.episodic.participant_aware,
            project.episodic.episode_retention_micros,
            weights_to_json(&project.episodic.ranking_weights),
        ])
    })
    .map_err(storage_error)?;
    projects::find(conn, &project.key)?
        .ok_or_else(|| Error::Internal("a restored project vanished".into()))
}

fn restore_episodes(conn: &Connection, key: &ProjectKey, new: &[Episode]) -> Result<Vec<i64>> {
    let project = projects::require(conn, key)?;
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO episodes (project, uid, seq, content, producer_id, producer_role,
                 produced_for_id, episode_type, content_type, created_at, metadata, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )
        .map_err(storage_error)?;
    let mut rows = Vec::with_capacity(new.len());
    for episode in new {
        let metadata = (!episode.metadata.is_empty())
            .then(|| serde_json::to_string(&episode.metadata))
            .transpose()
            .map_err(|err| Error::Internal(format!("encoding metadata: {err}")))?;
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        insert
            .execute(params![
                project,
                episode.uid.as_bytes(),
                episode.sequence_num,
                episode.content,
                episode.producer_id,
                non_empty(&episode.producer_role),
                non_empty(&episode.produced_for_id),
                episode.episode_type,
                episode.content_type,
                episode.created_at_micros,
                metadata,
                episode.expires_at_micros,
            ])
            .map_err(|err| {
                if is_constraint(&err) {
                    Error::AlreadyExists(format!(
                        "episode {} (sequence number {}) already exists",
                        episode.uid, episode.sequence_num
                    ))
                } else {
                    storage_error(err)
                }
            })?;
        rows.push(conn.last_insert_rowid());
    }
    if let Some(highest) = new.iter().map(|e| e.sequence_num).max() {
        conn.prepare_cached("UPDATE projects SET next_seq = MAX(next_seq, ?2 + 1) WHERE id = ?1")
            .and_then(|mut stmt| stmt.execute(params![project, highest]))
            .map_err(storage_error)?;
    }
    log_changes(conn, project, ADDED, &rows)?;
    Ok(rows)
}

fn episode_vectors(
    conn: &Connection,
    key: &ProjectKey,
    after_seq: i64,
    limit: usize,
) -> Result<Vec<EpisodeVector>> {
    let project = projects::require(conn, key)?;
    conn.prepare_cached(
        "SELECT e.uid, e.seq, v.embedder, v.vector FROM episodes e
         JOIN embeddings v ON v.episode = e.id
         WHERE e.project = ?1 AND e.seq > ?2 ORDER BY e.seq LIMIT ?3",
    )
    .and_then(|mut stmt| {
        stmt.query_map(params![project, after_seq, limit as i64], |row| {
            let vector: Vec<u8> = row.get(3)?;
            Ok(EpisodeVector {
                uid: uuid::Uuid::from_bytes(row.get(0)?),
                sequence_num: row.get(1)?,
                embedder: row.get(2)?,
                vector: vectors::decode(&vector).into_vec(),
            })
        })?
        .collect()
    })
    .map_err(storage_error)
}

fn find_set_type(conn: &Connection, id: &str) -> Result<Option<SetType>> {
    conn.prepare_cached(&format!(
        "SELECT {SET_TYPE_COLUMNS} FROM semantic_set_types WHERE public_id = ?1"
    ))
    .and_then(|mut stmt| stmt.query_row([id], set_type_from_row).optional())
    .map_err(storage_error)
}

fn project_of(conn: &Connection, project: Option<&ProjectKey>) -> Result<Option<i64>> {
    project.map(|key| projects::require(conn, key)).transpose()
}

fn restore_set_type(
    conn: &Connection,
    project: Option<&ProjectKey>,
    set_type: &SetType,
) -> Result<SetType> {
    let project = project_of(conn, project)?;
    let tags = serde_json::to_string(&set_type.tags)
        .map_err(|err| Error::Internal(format!("encoding tags: {err}")))?;
    conn.prepare_cached(&format!(
        "INSERT INTO semantic_set_types (public_id, org_id, project, is_org_level, name,
             description, tags, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING {SET_TYPE_COLUMNS}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                set_type.id,
                set_type.org_id,
                project,
                set_type.is_org_level,
                set_type.name,
                set_type.description,
                tags,
                set_type.created_at_micros
            ],
            set_type_from_row,
        )
    })
    .map_err(|err| {
        if is_constraint(&err) {
            Error::AlreadyExists(format!("set type {} already exists", set_type.id))
        } else {
            storage_error(err)
        }
    })
}

fn restore_set(conn: &Connection, project: Option<&ProjectKey>, set: &SetRow) -> Result<SetRow> {
    let project = project_of(conn, project)?;
    let tags = serde_json::to_string::<BTreeMap<String, String>>(&set.tags)
        .map_err(|err| Error::Internal(format!("encoding set tags: {err}")))?;
    conn.prepare_cached(
        "INSERT INTO semantic_sets (set_id, org_id, project, kind, set_type, tags, embedder,
             llm, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            set.set_id,
            set.org_id,
            project,
            set.kind.as_str(),
            set.set_type.map(SetTypeId::raw),
            tags,
            set.config.embedder,
            set.config.llm,
            set.created_at_micros
        ])
    })
    .map_err(|err| {
        if is_constraint(&err) {
            Error::AlreadyExists(format!("set {} already exists", set.set_id))
        } else {
            storage_error(err)
        }
    })?;
    semantic_sets::find_set(conn, &set.set_id)?
        .ok_or_else(|| Error::Internal("a restored set vanished".into()))
}

fn delete_set(conn: &Connection, internal_id: i64) -> Result<bool> {
    // The org's semantic version moves by a trigger (migration 4).
    conn.prepare_cached("DELETE FROM semantic_sets WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([internal_id]))
        .map(|n| n > 0)
        .map_err(storage_error)
}

fn restore_features(conn: &Connection, features: &[RestoredFeature]) -> Result<Vec<i64>> {
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO semantic_features (public_id, set_ref, category, category_id, tag,
                 feature, value, metadata, match_key, value_key, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) RETURNING id",
        )
        .map_err(storage_error)?;
    let mut ids = Vec::with_capacity(features.len());
    let mut sets = Vec::new();
    for restored in features {
        semantic_sets::require_set(conn, restored.set.raw())?;
        let f = &restored.feature;
        let metadata = serde_json::to_string(&f.metadata)
            .map_err(|err| Error::Internal(format!("encoding feature metadata: {err}")))?;
        let id: i64 = insert
            .query_row(
                params![
                    f.id,
                    restored.set.raw(),
                    f.category,
                    f.category_id,
                    f.tag,
                    f.feature,
                    f.value,
                    metadata,
                    f.match_key,
                    f.value_key,
                    restored.created_at_micros,
                    restored.updated_at_micros
                ],
                |row| row.get(0),
            )
            .map_err(|err| {
                if is_constraint(&err) {
                    Error::AlreadyExists(format!("feature {} already exists", f.id))
                } else {
                    storage_error(err)
                }
            })?;
        semantic_features::cite(conn, id, &restored.citations)?;
        ids.push(id);
        sets.push(restored.set.raw());
    }
    sets.sort_unstable();
    sets.dedup();
    bump_sets(conn, &sets)?;
    Ok(ids)
}

#[async_trait]
impl TransferStore for SqliteStore {
    async fn restore_project(&self, project: &Project) -> Result<Project> {
        let project = project.clone();
        self.writer
            .write(move |conn| restore_project(conn, &project))
            .await
    }

    async fn restore_episodes(
        &self,
        key: &ProjectAccess,
        new: Vec<Episode>,
    ) -> Result<Vec<EpisodeHandle>> {
        let key = key.clone();
        let rows = self
            .writer
            .write(move |conn| restore_episodes(conn, &key, &new))
            .await?;
        Ok(rows.into_iter().map(EpisodeHandle::from_raw).collect())
    }

    async fn episode_vectors(
        &self,
        key: &ProjectAccess,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<EpisodeVector>> {
        let key = key.clone();
        self.readers
            .read(move |tx| episode_vectors(tx, &key, after_seq, limit))
            .await
    }

    async fn find_set_type(&self, id: &str) -> Result<Option<SetType>> {
        let id = id.to_string();
        self.readers.read(move |tx| find_set_type(tx, &id)).await
    }

    async fn restore_set_type(
        &self,
        project: Option<&ProjectAccess>,
        set_type: &SetType,
    ) -> Result<SetType> {
        let (project, set_type) = (project.cloned(), set_type.clone());
        self.writer
            .write(move |conn| restore_set_type(conn, project.as_deref(), &set_type))
            .await
    }

    async fn restore_set(&self, project: Option<&ProjectAccess>, set: &SetRow) -> Result<SetRow> {
        let (project, set) = (project.cloned(), set.clone());
        self.writer
            .write(move |conn| restore_set(conn, project.as_deref(), &set))
            .await
    }

    async fn delete_set(&self, internal_id: SetId) -> Result<bool> {
        self.writer
            .write(move |conn| delete_set(conn, internal_id.raw()))
            .await
    }

    async fn restore_features(&self, features: Vec<RestoredFeature>) -> Result<Vec<FeatureId>> {
        let ids = self
            .writer
            .write(move |conn| restore_features(conn, &features))
            .await?;
        Ok(ids.into_iter().map(FeatureId::from_raw).collect())
    }
}
