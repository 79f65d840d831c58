//! `SettingsStore`: the server-wide runtime settings, one row replaced whole under its
//! version (compare and swap, so concurrent replicas never lose a write).

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use super::error::db_error;
use memmachine_core::error::Result;
use memmachine_core::store::{SettingsStore, StoredSettings};

#[async_trait]
impl SettingsStore for PostgresStore {
    async fn runtime_settings(&self) -> Result<StoredSettings> {
        let row = sqlx::query("SELECT version, settings FROM runtime_settings WHERE id = 1")
            .fetch_optional(self.pool())
            .await
            .map_err(db_error)?;
        match row {
            None => Ok(StoredSettings {
                version: 0,
                settings: "{}".into(),
            }),
            Some(row) => Ok(StoredSettings {
                version: row.try_get(0).map_err(db_error)?,
                settings: row.try_get(1).map_err(db_error)?,
            }),
        }
    }

    async fn runtime_settings_version(&self) -> Result<i64> {
        sqlx::query_scalar("SELECT COALESCE(MAX(version), 0)::BIGINT FROM runtime_settings")
            .fetch_one(self.pool())
            .await
            .map_err(db_error)
    }

    async fn replace_runtime_settings(&self, expected: i64, settings: &str) -> Result<Option<i64>> {
        let now = chrono::Utc::now().timestamp_micros();
        let next = expected + 1;
        let query = if expected == 0 {
            sqlx::query(
                "INSERT INTO runtime_settings (id, version, settings, updated_at)
                 VALUES (1, $1, $2, $3) ON CONFLICT (id) DO NOTHING",
            )
            .bind(next)
            .bind(settings)
            .bind(now)
        } else {
            sqlx::query(
                "UPDATE runtime_settings SET version = $1, settings = $2, updated_at = $3
                 WHERE id = 1 AND version = $4",
            )
            .bind(next)
            .bind(settings)
            .bind(now)
            .bind(expected)
        };
        let changed = query
            .execute(self.pool())
            .await
            .map_err(db_error)?
            .rows_affected();
        Ok((changed == 1).then_some(next))
    }
}
