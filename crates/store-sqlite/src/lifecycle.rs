//! The backend's health, shutdown and description.

use async_trait::async_trait;

use super::SqliteStore;
use super::error::storage_error;
use memmachine_core::error::Result;
use memmachine_core::store::StoreLifecycle;

#[async_trait]
impl StoreLifecycle for SqliteStore {
    async fn health(&self) -> Result<()> {
        self.readers
            .read(|tx| {
                tx.query_row("SELECT 1", [], |_| Ok(()))
                    .map_err(storage_error)
            })
            .await
    }

    async fn close(&self) -> Result<()> {
        self.writer.close_async().await;
        Ok(())
    }

    fn describe(&self) -> String {
        format!("sqlite {}", self.path.display())
    }
}
