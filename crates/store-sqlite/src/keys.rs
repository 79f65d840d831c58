//! `KeyStore`: API keys (salted hashes).

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::error::storage_error;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::{ApiKeyRecord, KeyScope};
use memmachine_core::store::KeyStore;

/// In the order `from_row` reads and `insert` binds them.
const COLUMNS: &str = "id, org_id, label, salt, hash, created_at, revoked_at";

fn from_row(row: &Row<'_>) -> rusqlite::Result<ApiKeyRecord> {
    let org: Option<String> = row.get(1)?;
    Ok(ApiKeyRecord {
        id: row.get(0)?,
        scope: org.map_or(KeyScope::Admin, KeyScope::Org),
        label: row.get(2)?,
        salt: row.get(3)?,
        hash: row.get(4)?,
        created_at_micros: row.get(5)?,
        revoked_at_micros: row.get(6)?,
    })
}

pub(super) fn insert(conn: &Connection, key: &ApiKeyRecord) -> Result<()> {
    let org = match &key.scope {
        KeyScope::Admin => None,
        KeyScope::Org(org) => Some(org.as_str()),
    };
    let inserted = conn
        .execute(
            &format!(
                "INSERT OR IGNORE INTO api_keys ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
            ),
            params![
                key.id,
                org,
                key.label,
                key.salt,
                key.hash,
                key.created_at_micros,
                key.revoked_at_micros
            ],
        )
        .map_err(storage_error)?;
    if inserted == 0 {
        return Err(Error::AlreadyExists(format!(
            "API key {} already exists",
            key.id
        )));
    }
    Ok(())
}

pub(super) fn find(conn: &Connection, id: &str) -> Result<Option<ApiKeyRecord>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM api_keys WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row([id], from_row).optional())
        .map_err(storage_error)
}

pub(super) fn list(conn: &Connection) -> Result<Vec<ApiKeyRecord>> {
    conn.prepare(&format!(
        "SELECT {COLUMNS} FROM api_keys ORDER BY created_at, id"
    ))
    .and_then(|mut stmt| stmt.query_map([], from_row)?.collect())
    .map_err(storage_error)
}

pub(super) fn revoke(conn: &Connection, id: &str) -> Result<bool> {
    let now = chrono::Utc::now().timestamp_micros();
    conn.execute(
        "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
        params![id, now],
    )
    .map(|changed| changed > 0)
    .map_err(storage_error)
}

#[async_trait]
impl KeyStore for SqliteStore {
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let key = key.clone();
        self.writer.write(move |conn| insert(conn, &key)).await
    }

    async fn find_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        let id = id.to_string();
        self.readers.read(move |tx| find(tx, &id)).await
    }

    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.readers.read(|tx| list(tx)).await
    }

    async fn revoke_key(&self, id: &str) -> Result<bool> {
        let id = id.to_string();
        self.writer.write(move |conn| revoke(conn, &id)).await
    }
}
