//! `SettingsStore`: the server-wide runtime settings, one row replaced whole under its
//! version.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::error::storage_error;
use memmachine_core::error::Result;
use memmachine_core::store::{SettingsStore, StoredSettings};

pub(super) fn read(conn: &Connection) -> Result<StoredSettings> {
    let row = conn
        .prepare_cached("SELECT version, settings FROM runtime_settings WHERE id = 1")
        .and_then(|mut stmt| {
            stmt.query_row([], |row| {
                Ok(StoredSettings {
                    version: row.get(0)?,
                    settings: row.get(1)?,
                })
            })
            .optional()
        })
        .map_err(storage_error)?;
    Ok(row.unwrap_or_else(|| StoredSettings {
        version: 0,
        settings: "{}".into(),
    }))
}

pub(super) fn version(conn: &Connection) -> Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(version), 0) FROM runtime_settings")
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        .map_err(storage_error)
}

pub(super) fn replace(conn: &Connection, expected: i64, settings: &str) -> Result<Option<i64>> {
    let now = chrono::Utc::now().timestamp_micros();
    let next = expected + 1;
    // The writer thread serialises writes; the version check still guards a second
    // process over the same file.
    let changed = if expected == 0 {
        conn.execute(
            "INSERT OR IGNORE INTO runtime_settings (id, version, settings, updated_at)
             VALUES (1, ?1, ?2, ?3)",
            params![next, settings, now],
        )
    } else {
        conn.execute(
            "UPDATE runtime_settings SET version = ?1, settings = ?2, updated_at = ?3
             WHERE id = 1 AND version = ?4",
            params![next, settings, now, expected],
        )
    }
    .map_err(storage_error)?;
    Ok((changed == 1).then_some(next))
}

#[async_trait]
impl SettingsStore for SqliteStore {
    async fn runtime_settings(&self) -> Result<StoredSettings> {
        self.readers.read(|tx| read(tx)).await
    }

    async fn runtime_settings_version(&self) -> Result<i64> {
        self.readers.read(|tx| version(tx)).await
    }

    async fn replace_runtime_settings(&self, expected: i64, settings: &str) -> Result<Option<i64>> {
        let settings = settings.to_string();
        self.writer
            .write(move |conn| replace(conn, expected, &settings))
            .await
    }
}
