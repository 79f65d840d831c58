//! `ProjectStore`: projects, keyed by `(org_id, project_id)`, with an internal id
//! (`id`, from an identity column) that is never reused.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::PostgresStore;
use super::error::db_error;
use super::helpers::now_micros;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::weights::weights_from_json;
use memmachine_core::model::{
    EpisodicConfig, EpisodicConfigUpdate, Project, ProjectConfig, ProjectHandle, ProjectKey,
};
use memmachine_core::store::ProjectStore;

pub(super) const COLUMNS: &str = "id, org_id, project_id, description, embedder, reranker, \
     episodic_enabled, long_term_enabled, short_term_enabled, created_at, participant_aware, episode_retention, \
     ranking_weights";

pub(super) fn from_row(row: &PgRow) -> sqlx::Result<Project> {
    Ok(Project {
        internal_id: ProjectHandle::from_raw(row.try_get(0)?),
        key: ProjectKey {
            org_id: row.try_get(1)?,
            project_id: row.try_get(2)?,
        },
        description: row.try_get(3)?,
        config: ProjectConfig {
            embedder: row.try_get(4)?,
            reranker: row.try_get(5)?,
        },
        episodic: EpisodicConfig {
            enabled: row.try_get(6)?,
            long_term_memory_enabled: row.try_get(7)?,
            short_term_memory_enabled: row.try_get(8)?,
            participant_aware: row.try_get(10)?,
            episode_retention_micros: row.try_get(11)?,
            ranking_weights: weights_from_json(row.try_get::<Option<String>, _>(12)?.as_deref()),
        },
        created_at_micros: row.try_get(9)?,
    })
}

pub(super) fn not_found(key: &ProjectKey) -> Error {
    Error::NotFound(format!("project {key} does not exist"))
}

pub(super) async fn find(conn: &mut PgConnection, key: &ProjectKey) -> Result<Option<Project>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM projects WHERE org_id = $1 AND project_id = $2"
    )))
    .bind(&key.org_id)
    .bind(&key.project_id)
    .fetch_optional(conn)
    .await
    .map_err(db_error)?;
    row.as_ref().map(from_row).transpose().map_err(db_error)
}

/// The project's internal id, or `NotFound`.
pub(super) async fn require(conn: &mut PgConnection, key: &ProjectKey) -> Result<i64> {
    sqlx::query_scalar("SELECT id FROM projects WHERE org_id = $1 AND project_id = $2")
        .bind(&key.org_id)
        .bind(&key.project_id)
        .fetch_optional(conn)
        .await
        .map_err(db_error)?
        .ok_or_else(|| not_found(key))
}

/// The org of the project with this internal id, if it exists.
pub(super) async fn org_of(conn: &mut PgConnection, project: i64) -> Result<Option<String>> {
    sqlx::query_scalar("SELECT org_id FROM projects WHERE id = $1")
        .bind(project)
        .fetch_optional(conn)
        .await
        .map_err(db_error)
}

#[async_trait]
impl ProjectStore for PostgresStore {
    async fn create_project(
        &self,
        key: &ProjectAccess,
        description: &str,
        config: &ProjectConfig,
    ) -> Result<Project> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO projects (org_id, project_id, description, embedder, reranker, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (org_id, project_id) DO NOTHING RETURNING {COLUMNS}"
        )))
        .bind(&key.org_id)
        .bind(&key.project_id)
        .bind(description)
        .bind(&config.embedder)
        .bind(&config.reranker)
        .bind(now_micros())
        .fetch_optional(self.pool())
        .await
        .map_err(db_error)?;
        match row {
            Some(row) => from_row(&row).map_err(db_error),
            None => Err(Error::AlreadyExists(format!(
                "project {key} already exists"
            ))),
        }
    }

    async fn get_project(&self, key: &ProjectAccess) -> Result<Option<Project>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        find(&mut conn, key).await
    }

    async fn list_projects(
        &self,
        org_id: Option<&str>,
        after: Option<&ProjectKey>,
        limit: usize,
    ) -> Result<Vec<Project>> {
        let (after_org, after_project) = after
            .map(|k| (k.org_id.as_str(), k.project_id.as_str()))
            .unwrap_or(("", ""));
        // Ordered bytewise, as SQLite orders text.
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM projects
             WHERE ($1::text IS NULL OR org_id = $1)
               AND (org_id COLLATE \"C\", project_id COLLATE \"C\") > ($2, $3)
             ORDER BY org_id COLLATE \"C\", project_id COLLATE \"C\" LIMIT $4"
        )))
        .bind(org_id)
        .bind(after_org)
        .bind(after_project)
        .bind(limit as i64)
        .fetch_all(self.pool())
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(from_row)
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)
    }

    async fn delete_project(&self, key: &ProjectAccess) -> Result<bool> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let Some(id) = sqlx::query_scalar::<_, i64>(
            "SELECT id FROM projects WHERE org_id = $1 AND project_id = $2 FOR UPDATE",
        )
        .bind(&key.org_id)
        .bind(&key.project_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?
        else {
            return Ok(false);
        };
        // Episodes first (their trigger marks summaries while the project exists),
        // then the project, whose rows cascade.
        sqlx::query("DELETE FROM episodes WHERE org_id = $1 AND project = $2")
            .bind(&key.org_id)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        sqlx::query("DELETE FROM projects WHERE org_id = $1 AND id = $2")
            .bind(&key.org_id)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    async fn update_episodic_config(
        &self,
        key: &ProjectAccess,
        update: EpisodicConfigUpdate,
    ) -> Result<Option<EpisodicConfig>> {
        let row = sqlx::query(
            "UPDATE projects SET
                 episodic_enabled = COALESCE($3, episodic_enabled),
                 long_term_enabled = COALESCE($4, long_term_enabled),
                 short_term_enabled = COALESCE($5, short_term_enabled),
                 participant_aware = COALESCE($6, participant_aware),
                 episode_retention = CASE WHEN $7 THEN $8 ELSE episode_retention END,
                 ranking_weights = CASE WHEN $9::text IS NULL THEN ranking_weights
                     ELSE (COALESCE(ranking_weights::jsonb, '{}'::jsonb) || $9::jsonb)::text END
             WHERE org_id = $1 AND project_id = $2
             RETURNING episodic_enabled, long_term_enabled, short_term_enabled,
                 participant_aware, episode_retention, ranking_weights",
        )
        .bind(&key.org_id)
        .bind(&key.project_id)
        .bind(update.enabled)
        .bind(update.long_term_memory_enabled)
        .bind(update.short_term_memory_enabled)
        .bind(update.participant_aware)
        .bind(update.episode_retention_micros.is_some())
        .bind(update.episode_retention_micros.flatten())
        // Only the weights set, merged into the stored object in the same statement.
        .bind(
            (!update.ranking_weights.is_empty())
                .then(|| serde_json::to_string(&update.ranking_weights).expect("serialises")),
        )
        .fetch_optional(self.pool())
        .await
        .map_err(db_error)?;
        row.map(|row| {
            Ok(EpisodicConfig {
                enabled: row.try_get(0)?,
                long_term_memory_enabled: row.try_get(1)?,
                short_term_memory_enabled: row.try_get(2)?,
                participant_aware: row.try_get(3)?,
                episode_retention_micros: row.try_get(4)?,
                ranking_weights: weights_from_json(row.try_get::<Option<String>, _>(5)?.as_deref()),
            })
        })
        .transpose()
        .map_err(db_error)
    }
}
