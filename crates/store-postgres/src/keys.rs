//! `KeyStore`: API keys (salted hashes), in `api_keys`, the one table not keyed by org.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PostgresStore;
use super::error::db_error;
use super::helpers::now_micros;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::{ApiKeyRecord, KeyScope};
use memmachine_core::store::KeyStore;

const COLUMNS: &str = "id, org_id, label, salt, hash, created_at, revoked_at";

fn from_row(row: &PgRow) -> sqlx::Result<ApiKeyRecord> {
    let org: Option<String> = row.try_get(1)?;
    Ok(ApiKeyRecord {
        id: row.try_get(0)?,
        scope: org.map_or(KeyScope::Admin, KeyScope::Org),
        label: row.try_get(2)?,
        salt: row.try_get(3)?,
        hash: row.try_get(4)?,
        created_at_micros: row.try_get(5)?,
        revoked_at_micros: row.try_get(6)?,
    })
}

#[async_trait]
impl KeyStore for PostgresStore {
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let org = match &key.scope {
            KeyScope::Admin => None,
            KeyScope::Org(org) => Some(org.as_str()),
        };
        let inserted = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO api_keys ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (id) DO NOTHING"
        )))
        .bind(&key.id)
        .bind(org)
        .bind(&key.label)
        .bind(&key.salt)
        .bind(&key.hash)
        .bind(key.created_at_micros)
        .bind(key.revoked_at_micros)
        .execute(self.pool())
        .await
        .map_err(db_error)?
        .rows_affected();
        if inserted == 0 {
            return Err(Error::AlreadyExists(format!(
                "API key {} already exists",
                key.id
            )));
        }
        Ok(())
    }

    async fn find_key(&self, id: &str) -> Result<Option<ApiKeyRecord>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM api_keys WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(self.pool())
        .await
        .map_err(db_error)?;
        row.as_ref().map(from_row).transpose().map_err(db_error)
    }

    async fn list_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM api_keys ORDER BY created_at, id COLLATE \"C\""
        )))
        .fetch_all(self.pool())
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(from_row)
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)
    }

    async fn revoke_key(&self, id: &str) -> Result<bool> {
        let changed =
            sqlx::query("UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1")
                .bind(id)
                .bind(now_micros())
                .execute(self.pool())
                .await
                .map_err(db_error)?
                .rows_affected();
        Ok(changed > 0)
    }
}
