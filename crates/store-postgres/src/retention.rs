//! `LeaseStore` and `RetentionStore`: named leases (timed by the database's clock, which
//! every replica shares), and the expired episodes the retention sweeper deletes.

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use super::error::db_error;
use memmachine_core::error::Result;
use memmachine_core::model::ProjectKey;
use memmachine_core::store::{LeaseStore, RetentionStore};

/// The database's clock in microseconds since the Unix epoch.
const DB_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn try_lease(&self, name: &str, holder: &str, ttl_micros: i64) -> Result<bool> {
        // Taken when free, expired or already ours; a live lease of another holder stays.
        let taken = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO leases (name, holder, until) VALUES ($1, $2, {DB_NOW} + $3)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
             WHERE leases.holder = excluded.holder OR leases.until <= {DB_NOW}"
        )))
        .bind(name)
        .bind(holder)
        .bind(ttl_micros)
        .execute(self.pool())
        .await
        .map_err(db_error)?;
        Ok(taken.rows_affected() == 1)
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(self.pool())
            .await
            .map_err(db_error)?;
        Ok(())
    }
}

#[async_trait]
impl RetentionStore for PostgresStore {
    async fn expired_episodes(
        &self,
        now_micros: i64,
        limit: usize,
    ) -> Result<Vec<(ProjectKey, uuid::Uuid)>> {
        // Own expiries through their index; then retention, project by project through
        // (project, created_at).
        let rows = sqlx::query(
            "(SELECT p.org_id, p.project_id, e.uid FROM episodes e
                  JOIN projects p ON p.org_id = e.org_id AND p.id = e.project
              WHERE e.expires_at IS NOT NULL AND e.expires_at <= $1 LIMIT $2)
             UNION
             (SELECT p.org_id, p.project_id, e.uid FROM projects p
                  JOIN episodes e ON e.org_id = p.org_id AND e.project = p.id
                      AND e.created_at <= $1 - p.episode_retention
              WHERE p.episode_retention IS NOT NULL LIMIT $2)
             LIMIT $2",
        )
        .bind(now_micros)
        .bind(limit as i64)
        .fetch_all(self.pool())
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok((
                    ProjectKey {
                        org_id: row.try_get(0)?,
                        project_id: row.try_get(1)?,
                    },
                    row.try_get(2)?,
                ))
            })
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)
    }
}
