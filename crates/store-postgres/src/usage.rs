//! `UsageStore`: usage figures added to their hour's row, budgets and pauses by org.

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use super::error::db_error;
use memmachine_core::access::OrgAccess;
use memmachine_core::error::Result;
use memmachine_core::model::{ProjectHandle, ProjectKey};
use memmachine_core::store::{UsageEntry, UsageStore, UsageTotals};

#[async_trait]
impl UsageStore for PostgresStore {
    async fn record_usage(&self, e: &UsageEntry) -> Result<()> {
        sqlx::query(
            "INSERT INTO usage_hours
                 (org_id, project_id, purpose, hour, calls, prompt_tokens, completion_tokens)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (org_id, hour, project_id, purpose) DO UPDATE SET
                 calls = usage_hours.calls + excluded.calls,
                 prompt_tokens = usage_hours.prompt_tokens + excluded.prompt_tokens,
                 completion_tokens = usage_hours.completion_tokens + excluded.completion_tokens",
        )
        .bind(&e.org_id)
        .bind(&e.project_id)
        .bind(&e.purpose)
        .bind(e.hour_micros)
        .bind(e.calls)
        .bind(e.prompt_tokens)
        .bind(e.completion_tokens)
        .execute(self.pool())
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn usage_since(
        &self,
        org: &OrgAccess,
        project_id: Option<&str>,
        since_micros: i64,
    ) -> Result<Vec<UsageTotals>> {
        let org_id = org.org_id();
        let rows = sqlx::query(
            "SELECT purpose, SUM(calls)::BIGINT, SUM(prompt_tokens)::BIGINT,
                    SUM(completion_tokens)::BIGINT
             FROM usage_hours
             WHERE org_id = $1 AND hour >= $2 AND ($3::TEXT IS NULL OR project_id = $3)
             GROUP BY purpose ORDER BY purpose",
        )
        .bind(org_id)
        .bind(since_micros)
        .bind(project_id)
        .fetch_all(self.pool())
        .await
        .map_err(db_error)?;
        rows.into_iter()
            .map(|row| {
                Ok(UsageTotals {
                    purpose: row.try_get(0).map_err(db_error)?,
                    calls: row.try_get(1).map_err(db_error)?,
                    prompt_tokens: row.try_get(2).map_err(db_error)?,
                    completion_tokens: row.try_get(3).map_err(db_error)?,
                })
            })
            .collect()
    }

    async fn budget(&self, org_id: &str) -> Result<Option<i64>> {
        sqlx::query_scalar("SELECT daily_tokens FROM usage_budgets WHERE org_id = $1")
            .bind(org_id)
            .fetch_optional(self.pool())
            .await
            .map_err(db_error)
    }

    async fn set_budget(&self, org_id: &str, daily_tokens: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO usage_budgets (org_id, daily_tokens) VALUES ($1, $2)
             ON CONFLICT (org_id) DO UPDATE SET daily_tokens = excluded.daily_tokens",
        )
        .bind(org_id)
        .bind(daily_tokens)
        .execute(self.pool())
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn pause(&self, org_id: &str) -> Result<Option<i64>> {
        sqlx::query_scalar("SELECT until_micros FROM usage_pauses WHERE org_id = $1")
            .bind(org_id)
            .fetch_optional(self.pool())
            .await
            .map_err(db_error)
    }

    async fn set_pause(&self, org_id: &str, until_micros: Option<i64>) -> Result<()> {
        let query = match until_micros {
            Some(until) => sqlx::query(
                "INSERT INTO usage_pauses (org_id, until_micros) VALUES ($1, $2)
                 ON CONFLICT (org_id) DO UPDATE SET until_micros = excluded.until_micros",
            )
            .bind(org_id)
            .bind(until),
            None => sqlx::query("DELETE FROM usage_pauses WHERE org_id = $1").bind(org_id),
        };
        query.execute(self.pool()).await.map_err(db_error)?;
        Ok(())
    }

    async fn project_key(&self, project: ProjectHandle) -> Result<Option<ProjectKey>> {
        let row: Option<(String, String)> =
            sqlx::query_as("SELECT org_id, project_id FROM projects WHERE id = $1")
                .bind(project.raw())
                .fetch_optional(self.pool())
                .await
                .map_err(db_error)?;
        Ok(row.map(|(org_id, project_id)| ProjectKey { org_id, project_id }))
    }
}
