//! A backend's health, shutdown and description.

use async_trait::async_trait;

use crate::error::Result;

#[async_trait]
pub trait StoreLifecycle: Send + Sync {
    /// Ok when the backend answers (a trivial query).
    async fn health(&self) -> Result<()>;
    /// Commits what is queued and stops; later calls answer `Unavailable`.
    async fn close(&self) -> Result<()>;
    /// What it is, for logs ("sqlite /path/memmachine.db", "postgres host:port/db"; never a password).
    fn describe(&self) -> String;
}
