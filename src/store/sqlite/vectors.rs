//! SQL for embeddings and the queue of episodes waiting for one.

use rusqlite::{Connection, params};

use super::connection::storage_error;
use crate::error::Result;
use crate::store::PendingEmbedding;

/// Vectors are stored as little-endian f32.
pub(super) fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn decode(bytes: &[u8]) -> Box<[f32]> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Queues every episode without a vector from `embedder` (after a change of embedder,
/// or episodes added while none was configured). Returns how many are queued in all.
pub(super) fn queue_missing(conn: &Connection, embedder: &str) -> Result<u64> {
    conn.execute(
        "INSERT OR IGNORE INTO embedding_queue (episode)
         SELECT e.id FROM episodes e LEFT JOIN embeddings v ON v.episode = e.id
         WHERE v.episode IS NULL OR v.embedder != ?1",
        [embedder],
    )
    .map_err(storage_error)?;
    conn.query_row("SELECT COUNT(*) FROM embedding_queue", [], |r| r.get(0))
        .map_err(storage_error)
}

pub(super) fn enqueue(conn: &Connection, rows: &[i64]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached("INSERT OR IGNORE INTO embedding_queue (episode) VALUES (?1)")
        .map_err(storage_error)?;
    for row in rows {
        stmt.execute([row]).map_err(storage_error)?;
    }
    Ok(())
}

pub(super) fn pending(conn: &Connection, limit: usize) -> Result<Vec<PendingEmbedding>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT q.episode, e.content FROM embedding_queue q JOIN episodes e ON e.id = q.episode
             ORDER BY q.episode LIMIT ?1",
        )
        .map_err(storage_error)?;
    stmt.query_map([limit as i64], |row| {
        Ok(PendingEmbedding {
            episode: row.get(0)?,
            content: row.get(1)?,
        })
    })
    .and_then(|rows| rows.collect())
    .map_err(storage_error)
}

/// A vector stored for episode `row` of `project`.
pub(super) struct Stored {
    pub project: i64,
    pub row: i64,
    pub vector: Box<[f32]>,
}

/// Stores vectors and dequeues their episodes; episodes deleted meanwhile are skipped.
pub(super) fn store(
    conn: &Connection,
    embedder: &str,
    vectors: &[(i64, Vec<f32>)],
) -> Result<Vec<Stored>> {
    let mut project_of = conn
        .prepare_cached("SELECT project FROM episodes WHERE id = ?1")
        .map_err(storage_error)?;
    let mut insert = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO embeddings (episode, embedder, vector) VALUES (?1, ?2, ?3)",
        )
        .map_err(storage_error)?;
    let mut dequeue = conn
        .prepare_cached("DELETE FROM embedding_queue WHERE episode = ?1")
        .map_err(storage_error)?;
    let mut stored = Vec::with_capacity(vectors.len());
    for (row, vector) in vectors {
        let project: Option<i64> = match project_of.query_row([row], |r| r.get(0)) {
            Ok(project) => Some(project),
            Err(rusqlite::Error::QueryReturnedNoRows) => None,
            Err(err) => return Err(storage_error(err)),
        };
        dequeue.execute([row]).map_err(storage_error)?;
        let Some(project) = project else { continue };
        insert
            .execute(params![row, embedder, encode(vector)])
            .map_err(storage_error)?;
        stored.push(Stored {
            project,
            row: *row,
            vector: vector.clone().into_boxed_slice(),
        });
    }
    Ok(stored)
}
