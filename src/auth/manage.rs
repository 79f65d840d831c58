//! `memmachine keys ...`: API keys created, listed and revoked in the store directly
//! (a running server sees the change on its next call).

use std::sync::Arc;

use crate::store::{Store, StoreLocation};
use memmachine_core::error::Result;
use memmachine_core::model::ids::validate_id;
use memmachine_core::model::{ApiKeyRecord, KeyScope};
use memmachine_domain::auth::keys::{IssuedKey, issue};

async fn closing<T>(store: Arc<dyn Store>, result: Result<T>) -> Result<T> {
    store.close().await?;
    result
}

/// Creates a key; its token is in the answer and nowhere else.
pub async fn create(location: &StoreLocation, scope: KeyScope, label: &str) -> Result<IssuedKey> {
    if let KeyScope::Org(org) = &scope {
        validate_id("org", org)?;
    }
    let store = crate::store::open(location, true).await?;
    let issued = issue(scope, label)?;
    let result = store.insert_key(&issued.record).await;
    closing(store, result).await?;
    Ok(issued)
}

pub async fn list(location: &StoreLocation) -> Result<Vec<ApiKeyRecord>> {
    let store = crate::store::open(location, false).await?;
    let result = store.list_keys().await;
    closing(store, result).await
}

/// False when there is no key with this id.
pub async fn revoke(location: &StoreLocation, id: &str) -> Result<bool> {
    let store = crate::store::open(location, false).await?;
    let result = store.revoke_key(id).await;
    closing(store, result).await
}
