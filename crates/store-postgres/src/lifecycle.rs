//! `StoreLifecycle`.

use async_trait::async_trait;

use super::PostgresStore;
use super::error::db_error;
use memmachine_core::error::Result;
use memmachine_core::store::StoreLifecycle;

#[async_trait]
impl StoreLifecycle for PostgresStore {
    async fn health(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(self.pool())
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Waits for the connections in use to come back and closes them all; later calls
    /// answer `Unavailable` (the pool is closed). Every write commits before it returns,
    /// so nothing is left to flush.
    async fn close(&self) -> Result<()> {
        self.pool().close().await;
        Ok(())
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}
