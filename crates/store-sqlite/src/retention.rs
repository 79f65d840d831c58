//! `LeaseStore` and `RetentionStore`: named leases, and the expired episodes the
//! retention sweeper deletes.

use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::SqliteStore;
use super::error::storage_error;
use super::helpers::now_micros;
use memmachine_core::error::Result;
use memmachine_core::model::ProjectKey;
use memmachine_core::store::{LeaseStore, RetentionStore};

fn try_lease(conn: &Connection, name: &str, holder: &str, ttl_micros: i64) -> Result<bool> {
    let now = now_micros();
    // Taken when free, expired or already ours; a live lease of another holder stays.
    let changed = conn
        .execute(
            "INSERT INTO leases (name, holder, until) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
             WHERE leases.holder = excluded.holder OR leases.until <= ?4",
            params![name, holder, now.saturating_add(ttl_micros), now],
        )
        .map_err(storage_error)?;
    Ok(changed == 1)
}

type Expired = Vec<(ProjectKey, uuid::Uuid)>;

fn expired(conn: &Connection, now: i64, limit: usize) -> Result<Expired> {
    let row = |row: &rusqlite::Row<'_>| {
        let uid: [u8; 16] = row.get(2)?;
        Ok((
            ProjectKey {
                org_id: row.get(0)?,
                project_id: row.get(1)?,
            },
            uuid::Uuid::from_bytes(uid),
        ))
    };
    // Own expiries through their index; then retention, project by project through
    // (project, created_at): CROSS JOIN keeps projects the outer loop (without it the
    // planner may scan every episode).
    let mut found: Expired = conn
        .prepare_cached(
            "SELECT p.org_id, p.project_id, e.uid FROM episodes e JOIN projects p ON p.id = e.project
             WHERE e.expires_at IS NOT NULL AND e.expires_at <= ?1 LIMIT ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![now, limit as i64], row)?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(storage_error)?;
    if found.len() < limit {
        let rest: Expired = conn
            .prepare_cached(
                "SELECT p.org_id, p.project_id, e.uid FROM projects p
                 CROSS JOIN episodes e
                     ON e.project = p.id AND e.created_at <= ?1 - p.episode_retention
                 WHERE p.episode_retention IS NOT NULL LIMIT ?2",
            )
            .and_then(|mut stmt| {
                stmt.query_map(params![now, (limit - found.len()) as i64], row)?
                    .collect::<rusqlite::Result<_>>()
            })
            .map_err(storage_error)?;
        for item in rest {
            if !found.contains(&item) {
                found.push(item);
            }
        }
    }
    Ok(found)
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn try_lease(&self, name: &str, holder: &str, ttl_micros: i64) -> Result<bool> {
        let (name, holder) = (name.to_string(), holder.to_string());
        self.writer
            .write(move |conn| try_lease(conn, &name, &holder, ttl_micros))
            .await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        let (name, holder) = (name.to_string(), holder.to_string());
        self.writer
            .write(move |conn| {
                conn.execute(
                    "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
                    params![name, holder],
                )
                .map(|_| ())
                .map_err(storage_error)
            })
            .await
    }
}

#[async_trait]
impl RetentionStore for SqliteStore {
    async fn expired_episodes(&self, now_micros: i64, limit: usize) -> Result<Expired> {
        self.readers
            .read(move |tx| expired(tx, now_micros, limit))
            .await
    }
}
