//! SQL for embeddings and the queue of episodes waiting for one.

use rusqlite::{Connection, OptionalExtension, params};

use super::connection::storage_error;
use crate::error::Result;
use crate::store::{EmbedderChoice, PendingEmbedding};

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

/// The id of the embedder that serves project `project` (`None`: it keeps no vectors).
pub(super) fn embedder_of(
    conn: &Connection,
    project: i64,
    embedders: &EmbedderChoice,
) -> Result<Option<String>> {
    let name: Option<String> = conn
        .prepare_cached("SELECT embedder FROM projects WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([project], |row| row.get(0)).optional())
        .map_err(storage_error)?;
    Ok(name.and_then(|name| embedders.for_project(&name).map(str::to_string)))
}

/// Queues every episode without a vector from its project's embedder (after a change
/// of embedder, or episodes added while there was none), and dequeues the episodes of
/// projects left without one. Returns how many are queued in all.
pub(super) fn queue_missing(conn: &Connection, embedders: &EmbedderChoice) -> Result<u64> {
    let projects: Vec<(i64, String)> = conn
        .prepare("SELECT id, embedder FROM projects")
        .and_then(|mut stmt| {
            stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect()
        })
        .map_err(storage_error)?;
    for (project, name) in projects {
        match embedders.for_project(&name) {
            Some(embedder) => conn.execute(
                "INSERT OR IGNORE INTO embedding_queue (episode, queued_at)
                 SELECT e.id, ?3 FROM episodes e LEFT JOIN embeddings v ON v.episode = e.id
                 WHERE e.project = ?1 AND (v.episode IS NULL OR v.embedder != ?2)",
                params![project, embedder, chrono::Utc::now().timestamp_micros()],
            ),
            None => conn.execute(
                "DELETE FROM embedding_queue
                 WHERE episode IN (SELECT id FROM episodes WHERE project = ?1)",
                [project],
            ),
        }
        .map_err(storage_error)?;
    }
    conn.query_row("SELECT COUNT(*) FROM embedding_queue", [], |r| r.get(0))
        .map_err(storage_error)
}

pub(super) fn enqueue(conn: &Connection, rows: &[i64]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO embedding_queue (episode, queued_at) VALUES (?1, ?2)",
        )
        .map_err(storage_error)?;
    let now = chrono::Utc::now().timestamp_micros();
    for row in rows {
        stmt.execute(params![row, now]).map_err(storage_error)?;
    }
    Ok(())
}

/// The oldest `limit` episodes queued for `embedder`, the embedder of the projects whose
/// config names one of `names`. (Episodes of a project without one are never queued:
/// `queue_missing` runs whenever that changes.)
pub(super) fn pending(
    conn: &Connection,
    embedder: &str,
    names: &[String],
    limit: usize,
) -> Result<Vec<PendingEmbedding>> {
    let names: Vec<rusqlite::types::Value> = names
        .iter()
        .map(|name| rusqlite::types::Value::Text(name.clone()))
        .collect();
    let mut stmt = conn
        .prepare_cached(
            "SELECT q.episode, e.content, e.producer_id
             FROM embedding_queue q JOIN episodes e ON e.id = q.episode
             JOIN projects p ON p.id = e.project
             WHERE p.embedder IN rarray(?1)
             ORDER BY q.episode LIMIT ?2",
        )
        .map_err(storage_error)?;
    stmt.query_map(params![std::rc::Rc::new(names), limit as i64], |row| {
        Ok(PendingEmbedding {
            episode: row.get(0)?,
            content: row.get(1)?,
            producer_id: row.get(2)?,
            embedder: embedder.to_string(),
        })
    })
    .and_then(|rows| rows.collect())
    .map_err(storage_error)
}

/// Takes `episodes` off the queue (with or without a vector); returns how many were
/// queued.
pub(super) fn dequeue(conn: &Connection, episodes: &[i64]) -> Result<u64> {
    let mut stmt = conn
        .prepare_cached("DELETE FROM embedding_queue WHERE episode = ?1")
        .map_err(storage_error)?;
    let mut removed = 0;
    for episode in episodes {
        removed += stmt.execute([episode]).map_err(storage_error)? as u64;
    }
    Ok(removed)
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
    let rows: Vec<i64> = vectors.iter().map(|(row, _)| *row).collect();
    dequeue(conn, &rows)?;
    let mut stored = Vec::with_capacity(vectors.len());
    for (row, vector) in vectors {
        let project: Option<i64> = match project_of.query_row([row], |r| r.get(0)) {
            Ok(project) => Some(project),
            Err(rusqlite::Error::QueryReturnedNoRows) => None,
            Err(err) => return Err(storage_error(err)),
        };
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
