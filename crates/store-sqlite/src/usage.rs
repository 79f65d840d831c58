//! `UsageStore`: usage figures added to their hour's row, budgets and pauses by org.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::error::storage_error;
use memmachine_core::access::OrgAccess;
use memmachine_core::error::Result;
use memmachine_core::model::{ProjectHandle, ProjectKey};
use memmachine_core::store::{UsageEntry, UsageStore, UsageTotals};

fn record(conn: &Connection, e: &UsageEntry) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO usage_hours
             (org_id, project_id, purpose, hour, calls, prompt_tokens, completion_tokens)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (org_id, hour, project_id, purpose) DO UPDATE SET
             calls = calls + excluded.calls,
             prompt_tokens = prompt_tokens + excluded.prompt_tokens,
             completion_tokens = completion_tokens + excluded.completion_tokens",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            e.org_id,
            e.project_id,
            e.purpose,
            e.hour_micros,
            e.calls,
            e.prompt_tokens,
            e.completion_tokens
        ])
    })
    .map_err(storage_error)?;
    Ok(())
}

fn since(
    conn: &Connection,
    org_id: &str,
    project_id: Option<&str>,
    since_micros: i64,
) -> Result<Vec<UsageTotals>> {
    conn.prepare_cached(
        "SELECT purpose, SUM(calls), SUM(prompt_tokens), SUM(completion_tokens)
         FROM usage_hours
         WHERE org_id = ?1 AND hour >= ?2 AND (?3 IS NULL OR project_id = ?3)
         GROUP BY purpose ORDER BY purpose",
    )
    .and_then(|mut stmt| {
        stmt.query_map(params![org_id, since_micros, project_id], |row| {
            Ok(UsageTotals {
                purpose: row.get(0)?,
                calls: row.get(1)?,
                prompt_tokens: row.get(2)?,
                completion_tokens: row.get(3)?,
            })
        })?
        .collect()
    })
    .map_err(storage_error)
}

fn one_value(conn: &Connection, sql: &str, org_id: &str) -> Result<Option<i64>> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.query_row([org_id], |row| row.get(0)).optional())
        .map_err(storage_error)
}

#[async_trait]
impl UsageStore for SqliteStore {
    async fn record_usage(&self, entry: &UsageEntry) -> Result<()> {
        let entry = entry.clone();
        self.writer.write(move |conn| record(conn, &entry)).await
    }

    async fn usage_since(
        &self,
        org: &OrgAccess,
        project_id: Option<&str>,
        since_micros: i64,
    ) -> Result<Vec<UsageTotals>> {
        let org_id = org.org_id();
        let (org_id, project_id) = (org_id.to_string(), project_id.map(str::to_string));
        self.readers
            .read(move |tx| since(tx, &org_id, project_id.as_deref(), since_micros))
            .await
    }

    async fn budget(&self, org_id: &str) -> Result<Option<i64>> {
        let org_id = org_id.to_string();
        self.readers
            .read(move |tx| {
                one_value(
                    tx,
                    "SELECT daily_tokens FROM usage_budgets WHERE org_id = ?1",
                    &org_id,
                )
            })
            .await
    }

    async fn set_budget(&self, org_id: &str, daily_tokens: i64) -> Result<()> {
        let org_id = org_id.to_string();
        self.writer
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO usage_budgets (org_id, daily_tokens) VALUES (?1, ?2)
                     ON CONFLICT (org_id) DO UPDATE SET daily_tokens = excluded.daily_tokens",
                    params![org_id, daily_tokens],
                )
                .map_err(storage_error)?;
                Ok(())
            })
            .await
    }

    async fn pause(&self, org_id: &str) -> Result<Option<i64>> {
        let org_id = org_id.to_string();
        self.readers
            .read(move |tx| {
                one_value(
                    tx,
                    "SELECT until_micros FROM usage_pauses WHERE org_id = ?1",
                    &org_id,
                )
            })
            .await
    }

    async fn set_pause(&self, org_id: &str, until_micros: Option<i64>) -> Result<()> {
        let org_id = org_id.to_string();
        self.writer
            .write(move |conn| {
                match until_micros {
                    Some(until) => conn.execute(
                        "INSERT INTO usage_pauses (org_id, until_micros) VALUES (?1, ?2)
                         ON CONFLICT (org_id) DO UPDATE SET until_micros = excluded.until_micros",
                        params![org_id, until],
                    ),
                    None => conn.execute("DELETE FROM usage_pauses WHERE org_id = ?1", [&org_id]),
                }
                .map_err(storage_error)?;
                Ok(())
            })
            .await
    }

    async fn project_key(&self, project: ProjectHandle) -> Result<Option<ProjectKey>> {
        let id = project.raw();
        self.readers
            .read(move |tx| {
                tx.prepare_cached("SELECT org_id, project_id FROM projects WHERE id = ?1")
                    .and_then(|mut stmt| {
                        stmt.query_row([id], |row| {
                            Ok(ProjectKey {
                                org_id: row.get(0)?,
                                project_id: row.get(1)?,
                            })
                        })
                        .optional()
                    })
                    .map_err(storage_error)
            })
            .await
    }
}
