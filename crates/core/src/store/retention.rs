//! Retention: the episodes whose time is up, for the sweeper to delete.

use async_trait::async_trait;

use crate::error::Result;
use crate::model::ProjectKey;

#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Up to `limit` episodes expired at `now_micros`: their own `expires_at <= now`, or
    /// `created_at <= now - retention` in a project with a retention. Any order.
    async fn expired_episodes(
        &self,
        now_micros: i64,
        limit: usize,
    ) -> Result<Vec<(ProjectKey, uuid::Uuid)>>;
}
