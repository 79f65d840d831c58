//! `StatsStore`: the figures the metrics read.

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use super::error::db_error;
use super::helpers::now_micros;
use memmachine_core::error::Result;
use memmachine_core::store::{StatsStore, StoreStats};

#[async_trait]
impl StatsStore for PostgresStore {
    async fn stats(&self) -> Result<StoreStats> {
        let row = sqlx::query(
            "SELECT
                 (SELECT COUNT(*) FROM episodes),
                 (SELECT COUNT(*) FROM embedding_queue),
                 (SELECT MIN(NULLIF(queued_at, 0)) FROM embedding_queue),
                 (SELECT COUNT(*) FILTER (WHERE failed IS NULL) FROM semantic_queue),
                 (SELECT COUNT(*) FILTER (WHERE failed IS NOT NULL) FROM semantic_queue)",
        )
        .fetch_one(self.pool())
        .await
        .map_err(db_error)?;
        figures(&row)
    }

    async fn org_stats(&self, org_id: &str) -> Result<StoreStats> {
        // Every table is keyed by org_id first: one org's rows are a range of each.
        let row = sqlx::query(
            "SELECT
                 (SELECT COUNT(*) FROM episodes WHERE org_id = $1),
                 (SELECT COUNT(*) FROM embedding_queue WHERE org_id = $1),
                 (SELECT MIN(NULLIF(queued_at, 0)) FROM embedding_queue WHERE org_id = $1),
                 (SELECT COUNT(*) FILTER (WHERE failed IS NULL) FROM semantic_queue
                  WHERE org_id = $1),
                 (SELECT COUNT(*) FILTER (WHERE failed IS NOT NULL) FROM semantic_queue
                  WHERE org_id = $1)",
        )
        .bind(org_id)
        .fetch_one(self.pool())
        .await
        .map_err(db_error)?;
        figures(&row)
    }
}

/// The figures of a row of the five counts [`StatsStore::stats`] selects.
fn figures(row: &sqlx::postgres::PgRow) -> Result<StoreStats> {
    let episodes: i64 = row.try_get(0).map_err(db_error)?;
    let queue: i64 = row.try_get(1).map_err(db_error)?;
    let oldest: Option<i64> = row.try_get(2).map_err(db_error)?;
    let now = now_micros();
    let lag = oldest.map_or(0.0, |at| (now - at).max(0) as f64 / 1e6);
    Ok(StoreStats {
        episodes,
        embedding_queue: queue,
        embedding_lag_secs: if queue == 0 { 0.0 } else { lag },
        semantic_queue: row.try_get(3).map_err(db_error)?,
        semantic_failed: row.try_get(4).map_err(db_error)?,
    })
}
