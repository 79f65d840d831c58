//! `memmachine keys ...`: API keys created, listed and revoked in the store directly
//! (a running server sees the change on its next call).

use std::path::Path;
use std::sync::Arc;

use super::keys::{IssuedKey, issue};
use crate::error::Result;
use crate::model::ids::validate_id;
use crate::model::{ApiKeyRecord, KeyScope};
use crate::store::KeyStore;
use crate::store::sqlite::SqliteStore;

/// Opens the store in `data_dir`; unless `create`, only one that exists (a mistyped
/// `--data-dir` must not list or revoke in an empty new store).
async fn open(data_dir: &Path, create: bool) -> Result<Arc<SqliteStore>> {
    let file = data_dir.join(crate::store::sqlite::DB_FILE);
    if !create && !file.is_file() {
        return Err(crate::error::Error::NotFound(format!(
            "no store at {} (check --data-dir)",
            file.display()
        )));
    }
    Ok(Arc::new(SqliteStore::open_async(data_dir).await?))
}

async fn closing<T>(store: Arc<SqliteStore>, result: Result<T>) -> Result<T> {
    store.close_async().await?;
    result
}

/// Creates a key; its token is in the answer and nowhere else.
pub async fn create(data_dir: &Path, scope: KeyScope, label: &str) -> Result<IssuedKey> {
    if let KeyScope::Org(org) = &scope {
        validate_id("org", org)?;
    }
    let store = open(data_dir, true).await?;
    let issued = issue(scope, label)?;
    let result = store.insert_key(&issued.record).await;
    closing(store, result).await?;
    Ok(issued)
}

pub async fn list(data_dir: &Path) -> Result<Vec<ApiKeyRecord>> {
    let store = open(data_dir, false).await?;
    let result = store.list_keys().await;
    closing(store, result).await
}

/// False when there is no key with this id.
pub async fn revoke(data_dir: &Path, id: &str) -> Result<bool> {
    let store = open(data_dir, false).await?;
    let result = store.revoke_key(id).await;
    closing(store, result).await
}
