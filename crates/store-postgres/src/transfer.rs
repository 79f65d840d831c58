//! `TransferStore` for `PostgresStore`: rows written as they were in another store, and
//! episode vectors read with their embedders (`memmachine export` / `import`).

use async_trait::async_trait;
use sqlx::{PgConnection, Row};

use super::PostgresStore;
use super::error::db_error;
use super::helpers::{ADDED, bump_sets, is_unique_violation, lock_org, log_changes};
use super::semantic_sets::{SET_TYPE_COLUMNS, find_set, require_set, set_type_from_row};
use super::{projects, semantic_features};
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::weights::weights_to_json;
use memmachine_core::model::{
    Episode, EpisodeHandle, FeatureId, Project, ProjectKey, SetId, SetTypeId,
};
use memmachine_core::store::transfer::{EpisodeVector, RestoredFeature, TransferStore};
use memmachine_core::store::{SetRow, SetType};

/// `AlreadyExists` naming `what` for a unique violation, else the usual mapping.
fn taken(what: impl FnOnce() -> String) -> impl FnOnce(sqlx::Error) -> Error {
    move |err| {
        if is_unique_violation(&err) {
            Error::AlreadyExists(format!("{} already exists", what()))
        } else {
            db_error(err)
        }
    }
}

async fn project_of(conn: &mut PgConnection, project: Option<&ProjectKey>) -> Result<Option<i64>> {
    match project {
        Some(key) => Ok(Some(projects::require(conn, key).await?)),
        None => Ok(None),
    }
}

async fn restore_episodes(
    tx: &mut PgConnection,
    key: &ProjectKey,
    new: &[Episode],
) -> Result<Vec<i64>> {
    let count = new.len() as i64;
    let highest = new.iter().map(|e| e.sequence_num).max().unwrap_or(0);
    // Locks the project's row until commit, as adds do.
    let row = sqlx::query(
        "UPDATE projects SET next_seq = GREATEST(next_seq, $3 + 1),
             last_change = last_change + $4
         WHERE org_id = $1 AND project_id = $2 RETURNING id, last_change - $4",
    )
    .bind(&key.org_id)
    .bind(&key.project_id)
    .bind(highest)
    .bind(count)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?
    .ok_or_else(|| projects::not_found(key))?;
    let project: i64 = row.try_get(0).map_err(db_error)?;
    let first_change: i64 = row.try_get(1).map_err(db_error)?;
    let mut rows = Vec::with_capacity(new.len());
    for episode in new {
        let metadata = (!episode.metadata.is_empty())
            .then(|| serde_json::to_value(&episode.metadata))
            .transpose()
            .map_err(|err| Error::Internal(format!("encoding metadata: {err}")))?;
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO episodes (org_id, project, uid, seq, content, producer_id,
                 producer_role, produced_for_id, episode_type, content_type, created_at,
                 metadata, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id",
        )
        .bind(&key.org_id)
        .bind(project)
        .bind(episode.uid)
        .bind(episode.sequence_num)
        .bind(&episode.content)
        .bind(&episode.producer_id)
        .bind(non_empty(&episode.producer_role))
        .bind(non_empty(&episode.produced_for_id))
        .bind(&episode.episode_type)
        .bind(&episode.content_type)
        .bind(episode.created_at_micros)
        .bind(metadata)
        .bind(episode.expires_at_micros)
        .fetch_one(&mut *tx)
        .await
        .map_err(taken(|| {
            format!(
                "episode {} (sequence number {})",
                episode.uid, episode.sequence_num
            )
        }))?;
        rows.push(id);
    }
    let changes: Vec<i64> = (1..=count).map(|i| first_change + i).collect();
    log_changes(&mut *tx, &key.org_id, project, &changes, ADDED, &rows).await?;
    Ok(rows)
}

async fn restore_features(tx: &mut PgConnection, features: &[RestoredFeature]) -> Result<Vec<i64>> {
    let mut ids = Vec::with_capacity(features.len());
    let mut sets = Vec::new();
    for restored in features {
        let set = require_set(&mut *tx, restored.set.raw()).await?;
        let f = &restored.feature;
        let metadata = serde_json::to_string(&f.metadata)
            .map_err(|err| Error::Internal(format!("encoding feature metadata: {err}")))?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO semantic_features (org_id, public_id, set_ref, category, category_id,
                 tag, feature, value, metadata, match_key, value_key, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id",
        )
        .bind(&set.org_id)
        .bind(&f.id)
        .bind(restored.set.raw())
        .bind(&f.category)
        .bind(&f.category_id)
        .bind(&f.tag)
        .bind(&f.feature)
        .bind(&f.value)
        .bind(&metadata)
        .bind(&f.match_key)
        .bind(&f.value_key)
        .bind(restored.created_at_micros)
        .bind(restored.updated_at_micros)
        .fetch_one(&mut *tx)
        .await
        .map_err(taken(|| format!("feature {}", f.id)))?;
        semantic_features::cite(&mut *tx, &set.org_id, id, &restored.citations).await?;
        ids.push(id);
        sets.push(restored.set.raw());
    }
    sets.sort_unstable();
    sets.dedup();
    bump_sets(&mut *tx, &sets).await?;
    Ok(ids)
}

#[async_trait]
impl TransferStore for PostgresStore {
    async fn restore_project(&self, project: &Project) -> Result<Project> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO projects (org_id, project_id, description, embedder, reranker,
                 episodic_enabled, long_term_enabled, short_term_enabled, created_at,
                 participant_aware, episode_retention, ranking_weights)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (org_id, project_id) DO UPDATE SET
                 description = EXCLUDED.description, embedder = EXCLUDED.embedder,
                 reranker = EXCLUDED.reranker, episodic_enabled = EXCLUDED.episodic_enabled,
                 long_term_enabled = EXCLUDED.long_term_enabled,
                 short_term_enabled = EXCLUDED.short_term_enabled,
                 participant_aware = EXCLUDED.participant_aware,
                 episode_retention = EXCLUDED.episode_retention,
                 ranking_weights = EXCLUDED.ranking_weights,
                 created_at = EXCLUDED.created_at
             RETURNING {}",
            projects::COLUMNS
        )))
        .bind(&project.key.org_id)
        .bind(&project.key.project_id)
        .bind(&project.description)
        .bind(&project.config.embedder)
        .bind(&project.config.reranker)
        .bind(project.episodic.enabled)
        .bind(project.episodic.long_term_memory_enabled)
        .bind(project.episodic.short_term_memory_enabled)
        .bind(project.created_at_micros)
        .bind(project.episodic.participant_aware)
        .bind(project.episodic.episode_retention_micros)
        .bind(weights_to_json(&project.episodic.ranking_weights))
        .fetch_one(self.pool())
        .await
        .map_err(db_error)?;
        projects::from_row(&row).map_err(db_error)
    }

    async fn restore_episodes(
        &self,
        key: &ProjectAccess,
        new: Vec<Episode>,
    ) -> Result<Vec<EpisodeHandle>> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let rows = restore_episodes(&mut tx, key, &new).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(rows.into_iter().map(EpisodeHandle::from_raw).collect())
    }

    async fn episode_vectors(
        &self,
        key: &ProjectAccess,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<EpisodeVector>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let project = projects::require(&mut conn, key).await?;
        let rows = sqlx::query(
            "SELECT e.uid, e.seq, v.embedder, v.vector FROM episodes e
             JOIN embeddings v ON v.org_id = e.org_id AND v.episode = e.id
             WHERE e.org_id = $1 AND e.project = $2 AND e.seq > $3 ORDER BY e.seq LIMIT $4",
        )
        .bind(&key.org_id)
        .bind(project)
        .bind(after_seq)
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let vector: pgvector::Vector = row.try_get(3)?;
                Ok(EpisodeVector {
                    uid: row.try_get(0)?,
                    sequence_num: row.try_get(1)?,
                    embedder: row.try_get(2)?,
                    vector: vector.to_vec(),
                })
            })
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)
    }

    async fn find_set_type(&self, id: &str) -> Result<Option<SetType>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {SET_TYPE_COLUMNS} FROM semantic_set_types WHERE public_id = $1"
        )))
        .bind(id)
        .fetch_optional(self.pool())
        .await
        .map_err(db_error)?;
        row.as_ref()
            .map(set_type_from_row)
            .transpose()
            .map_err(db_error)
    }

    async fn restore_set_type(
        &self,
        project: Option<&ProjectAccess>,
        set_type: &SetType,
    ) -> Result<SetType> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let project = project_of(&mut tx, project.map(|p| p.key())).await?;
        let tags = serde_json::to_string(&set_type.tags)
            .map_err(|err| Error::Internal(format!("encoding tags: {err}")))?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO semantic_set_types (org_id, public_id, project, is_org_level, name,
                 description, tags, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {SET_TYPE_COLUMNS}"
        )))
        .bind(&set_type.org_id)
        .bind(&set_type.id)
        .bind(project)
        .bind(set_type.is_org_level)
        .bind(&set_type.name)
        .bind(&set_type.description)
        .bind(tags)
        .bind(set_type.created_at_micros)
        .fetch_one(&mut *tx)
        .await
        .map_err(taken(|| format!("set type {}", set_type.id)))?;
        let restored = set_type_from_row(&row).map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(restored)
    }

    async fn restore_set(&self, project: Option<&ProjectAccess>, set: &SetRow) -> Result<SetRow> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        lock_org(&mut tx, &set.org_id).await?;
        let project = project_of(&mut tx, project.map(|p| p.key())).await?;
        let tags = serde_json::to_string(&set.tags)
            .map_err(|err| Error::Internal(format!("encoding set tags: {err}")))?;
        sqlx::query(
            "INSERT INTO semantic_sets (org_id, set_id, project, kind, set_type, tags, embedder,
                 llm, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&set.org_id)
        .bind(&set.set_id)
        .bind(project)
        .bind(set.kind.as_str())
        .bind(set.set_type.map(SetTypeId::raw))
        .bind(tags)
        .bind(&set.config.embedder)
        .bind(&set.config.llm)
        .bind(set.created_at_micros)
        .execute(&mut *tx)
        .await
        .map_err(taken(|| format!("set {}", set.set_id)))?;
        let restored = find_set(&mut tx, &set.set_id)
            .await?
            .ok_or_else(|| Error::Internal("a restored set vanished".into()))?;
        tx.commit().await.map_err(db_error)?;
        Ok(restored)
    }

    async fn delete_set(&self, internal_id: SetId) -> Result<bool> {
        // The org's semantic version moves by a trigger.
        let deleted = sqlx::query("DELETE FROM semantic_sets WHERE id = $1")
            .bind(internal_id.raw())
            .execute(self.pool())
            .await
            .map_err(db_error)?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn restore_features(&self, features: Vec<RestoredFeature>) -> Result<Vec<FeatureId>> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let ids = restore_features(&mut tx, &features).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(ids.into_iter().map(FeatureId::from_raw).collect())
    }
}
