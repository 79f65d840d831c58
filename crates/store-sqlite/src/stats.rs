//! `StatsStore`: the figures the metrics read.

use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::SqliteStore;
use super::error::storage_error;
use memmachine_core::error::Result;
use memmachine_core::store::{StatsStore, StoreStats};

pub(super) fn stats(conn: &Connection) -> Result<StoreStats> {
    let episodes: i64 = conn
        .query_row("SELECT COUNT(*) FROM episodes", [], |row| row.get(0))
        .map_err(storage_error)?;
    let (queue, oldest): (i64, Option<i64>) = conn
        .query_row(
            "SELECT COUNT(*), MIN(NULLIF(queued_at, 0)) FROM embedding_queue",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(storage_error)?;
    let now = chrono::Utc::now().timestamp_micros();
    let lag = oldest.map_or(0.0, |at| (now - at).max(0) as f64 / 1e6);
    let (semantic_queue, semantic_failed) = super::semantic_queue::counts(conn)?;
    Ok(StoreStats {
        episodes,
        embedding_queue: queue,
        embedding_lag_secs: if queue == 0 { 0.0 } else { lag },
        semantic_queue: semantic_queue as i64,
        semantic_failed: semantic_failed as i64,
    })
}

/// The episodes of an org: its projects' rows (episodes are keyed by project).
const ORG_EPISODES: &str =
    "SELECT id FROM episodes WHERE project IN (SELECT id FROM projects WHERE org_id = ?1)";

/// [`stats`] of one org's projects.
pub(super) fn org_stats(conn: &Connection, org_id: &str) -> Result<StoreStats> {
    let episodes: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM episodes
             WHERE project IN (SELECT id FROM projects WHERE org_id = ?1)",
            params![org_id],
            |row| row.get(0),
        )
        .map_err(storage_error)?;
    let (queue, oldest): (i64, Option<i64>) = conn
        .query_row(
            &format!(
                "SELECT COUNT(*), MIN(NULLIF(queued_at, 0)) FROM embedding_queue
                 WHERE episode IN ({ORG_EPISODES})"
            ),
            params![org_id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(storage_error)?;
    let (semantic_queue, semantic_failed): (i64, i64) = conn
        .query_row(
            &format!(
                "SELECT COALESCE(SUM(failed IS NULL), 0), COALESCE(SUM(failed IS NOT NULL), 0)
                 FROM semantic_queue WHERE episode IN ({ORG_EPISODES})"
            ),
            params![org_id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(storage_error)?;
    let now = chrono::Utc::now().timestamp_micros();
    let lag = oldest.map_or(0.0, |at| (now - at).max(0) as f64 / 1e6);
    Ok(StoreStats {
        episodes,
        embedding_queue: queue,
        embedding_lag_secs: if queue == 0 { 0.0 } else { lag },
        semantic_queue,
        semantic_failed,
    })
}

#[async_trait]
impl StatsStore for SqliteStore {
    async fn stats(&self) -> Result<StoreStats> {
        self.readers.read(|tx| stats(tx)).await
    }

    async fn org_stats(&self, org_id: &str) -> Result<StoreStats> {
        let org_id = org_id.to_string();
        self.readers.read(move |tx| org_stats(tx, &org_id)).await
    }
}
