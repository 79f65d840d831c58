//! `ExtractionStore`: the per-project pause of semantic extraction (a row of
//! `extraction_pauses`, read by the queue's claim) and the queued rows a backlog
//! estimate is made from.

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use super::error::db_error;
use super::helpers::now_micros;
use super::projects;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::store::{ExtractionStore, QueuedForSet, QueuedMessages};

#[async_trait]
impl ExtractionStore for PostgresStore {
    async fn extraction_paused(&self, project: &ProjectAccess) -> Result<bool> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let id = projects::require(&mut conn, project.key()).await?;
        let found: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM extraction_pauses WHERE org_id = $1 AND project = $2",
        )
        .bind(&project.org_id)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_error)?;
        Ok(found.is_some())
    }

    async fn set_extraction_paused(&self, project: &ProjectAccess, paused: bool) -> Result<()> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let id = projects::require(&mut conn, project.key()).await?;
        let query = if paused {
            sqlx::query(
                "INSERT INTO extraction_pauses (org_id, project, paused_at) VALUES ($1, $2, $3)
                 ON CONFLICT (org_id, project) DO NOTHING",
            )
            .bind(&project.org_id)
            .bind(id)
            .bind(now_micros())
        } else {
            sqlx::query("DELETE FROM extraction_pauses WHERE org_id = $1 AND project = $2")
                .bind(&project.org_id)
                .bind(id)
        };
        query.execute(&mut *conn).await.map_err(db_error)?;
        Ok(())
    }

    async fn queued_for_extraction(&self, project: &ProjectAccess) -> Result<QueuedMessages> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let id = projects::require(&mut conn, project.key()).await?;
        let messages: i64 = sqlx::query_scalar(
            "SELECT COUNT(DISTINCT q.episode)::BIGINT FROM episodes e
                 JOIN semantic_queue q ON q.org_id = e.org_id AND q.episode = e.id
             WHERE e.org_id = $1 AND e.project = $2 AND q.failed IS NULL",
        )
        .bind(&project.org_id)
        .bind(id)
        .fetch_one(&mut *conn)
        .await
        .map_err(db_error)?;
        let rows = sqlx::query(
            "SELECT s.set_id, COUNT(*)::BIGINT, COALESCE(SUM(char_length(e.content)), 0)::BIGINT
             FROM episodes e
                 JOIN semantic_queue q ON q.org_id = e.org_id AND q.episode = e.id
                 JOIN semantic_sets s ON s.org_id = q.org_id AND s.id = q.set_ref
             WHERE e.org_id = $1 AND e.project = $2 AND q.failed IS NULL
             GROUP BY s.set_id ORDER BY s.set_id",
        )
        .bind(&project.org_id)
        .bind(id)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error)?;
        let sets = rows
            .iter()
            .map(|row| {
                Ok(QueuedForSet {
                    set_id: row.try_get(0)?,
                    messages: row.try_get(1)?,
                    chars: row.try_get(2)?,
                })
            })
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)?;
        Ok(QueuedMessages { messages, sets })
    }
}
