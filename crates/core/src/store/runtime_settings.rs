//! The server-wide runtime settings row.

use async_trait::async_trait;

use crate::error::Result;

/// The server-wide runtime settings (`PUT /api/v2/config/...`): one row holding a JSON
/// object the domain reads and writes whole, and a version every write bumps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSettings {
    /// 0 before the first write.
    pub version: i64,
    /// A JSON object (`{}` before the first write); its keys are the domain's.
    pub settings: String,
}

#[async_trait]
pub trait SettingsStore: Send + Sync {
    async fn runtime_settings(&self) -> Result<StoredSettings>;
    /// The version alone: one cheap read, which every replica polls.
    async fn runtime_settings_version(&self) -> Result<i64>;
    /// Replaces the settings if their version is still `expected` (compare and swap, so
    /// two replicas' writes never lose one another); the new version, or `None` when
    /// another writer went first.
    async fn replace_runtime_settings(&self, expected: i64, settings: &str) -> Result<Option<i64>>;
}
