//! The figures the server's metrics read.

use async_trait::async_trait;

use crate::error::Result;

/// What the server's metrics read from a backend.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoreStats {
    pub episodes: i64,
    /// Episodes waiting for a vector.
    pub embedding_queue: i64,
    /// Age in seconds of the oldest of them (0 when none waits).
    pub embedding_lag_secs: f64,
    /// Messages queued for semantic ingestion, and those whose ingestion failed.
    pub semantic_queue: i64,
    pub semantic_failed: i64,
}

#[async_trait]
pub trait StatsStore: Send + Sync {
    async fn stats(&self) -> Result<StoreStats>;

    /// The same figures, of one org's projects only (what its key may see).
    async fn org_stats(&self, org_id: &str) -> Result<StoreStats>;
}
