//! `ExtractionStore`: the per-project pause of semantic extraction (a row of
//! `extraction_pauses`, read by the queue's claim) and the queued rows a backlog
//! estimate is made from.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::error::storage_error;
use super::helpers::now_micros;
use super::projects;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::store::{ExtractionStore, QueuedForSet, QueuedMessages};

fn paused(conn: &Connection, project: i64) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM extraction_pauses WHERE project = ?1")
        .and_then(|mut stmt| stmt.query_row([project], |_| Ok(())).optional())
        .map(|found| found.is_some())
        .map_err(storage_error)
}

fn set_paused(conn: &Connection, project: i64, paused: bool) -> Result<()> {
    let done = if paused {
        conn.execute(
            "INSERT OR IGNORE INTO extraction_pauses (project, paused_at) VALUES (?1, ?2)",
            params![project, now_micros()],
        )
    } else {
        conn.execute(
            "DELETE FROM extraction_pauses WHERE project = ?1",
            [project],
        )
    };
    done.map_err(storage_error)?;
    Ok(())
}

fn queued(conn: &Connection, project: i64) -> Result<QueuedMessages> {
    let messages = conn
        .prepare_cached(
            "SELECT COUNT(DISTINCT q.episode) FROM episodes e JOIN semantic_queue q ON q.episode = e.id
             WHERE e.project = ?1 AND q.failed IS NULL",
        )
        .and_then(|mut stmt| stmt.query_row([project], |row| row.get(0)))
        .map_err(storage_error)?;
    let sets = conn
        .prepare_cached(
            "SELECT s.set_id, COUNT(*), COALESCE(SUM(LENGTH(e.content)), 0)
         FROM episodes e
             JOIN semantic_queue q ON q.episode = e.id
             JOIN semantic_sets s ON s.id = q.set_ref
         WHERE e.project = ?1 AND q.failed IS NULL
         GROUP BY s.set_id ORDER BY s.set_id",
        )
        .and_then(|mut stmt| {
            stmt.query_map([project], |row| {
                Ok(QueuedForSet {
                    set_id: row.get(0)?,
                    messages: row.get(1)?,
                    chars: row.get(2)?,
                })
            })?
            .collect()
        })
        .map_err(storage_error)?;
    Ok(QueuedMessages { messages, sets })
}

#[async_trait]
impl ExtractionStore for SqliteStore {
    async fn extraction_paused(&self, project: &ProjectAccess) -> Result<bool> {
        let key = project.key().clone();
        self.readers
            .read(move |tx| paused(tx, projects::require(tx, &key)?))
            .await
    }

    async fn set_extraction_paused(&self, project: &ProjectAccess, pause: bool) -> Result<()> {
        let key = project.key().clone();
        self.writer
            .write(move |conn| set_paused(conn, projects::require(conn, &key)?, pause))
            .await
    }

    async fn queued_for_extraction(&self, project: &ProjectAccess) -> Result<QueuedMessages> {
        let key = project.key().clone();
        self.readers
            .read(move |tx| queued(tx, projects::require(tx, &key)?))
            .await
    }
}
