//! API keys.

use async_trait::async_trait;

use crate::error::Result;
use crate::model::ApiKeyRecord;

/// API keys, stored as salted hashes.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// `AlreadyExists` when a key with this id exists.
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<()>;

    /// The key with this id, revoked or not.
    async fn find_key(&self, id: &str) -> Result<Option<ApiKeyRecord>>;

    /// Every key, revoked ones included, oldest first.
    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>>;

    /// Marks the key revoked (keeping the time of the first revocation); false when
    /// there is no such key.
    async fn revoke_key(&self, id: &str) -> Result<bool>;
}
