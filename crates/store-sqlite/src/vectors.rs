//! `VectorStore`: episode vectors and the queue of episodes waiting for one.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::error::storage_error;
use super::helpers::{VECTOR, log_changes};
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::model::{EpisodeHandle, ProjectHandle, ProjectKey};
use memmachine_core::store::{PendingEmbedding, VectorStore};

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

/// For each project, queues every episode without a vector from its embedder, after
/// dropping queue entries for any other (a change of embedder); a project with none
/// leaves the queue. Returns how many are queued in all.
pub(super) fn queue_missing(
    conn: &Connection,
    projects: &[(ProjectKey, Option<String>)],
) -> Result<u64> {
    let now = chrono::Utc::now().timestamp_micros();
    for (key, embedder) in projects {
        let Some(project) = super::projects::find(conn, key)?.map(|p| p.internal_id.raw()) else {
            continue;
        };
        conn.execute(
            "DELETE FROM embedding_queue WHERE embedder IS NOT ?2
             AND episode IN (SELECT id FROM episodes WHERE project = ?1)",
            params![project, embedder],
        )
        .map_err(storage_error)?;
        if let Some(embedder) = embedder {
            conn.execute(
                "INSERT OR IGNORE INTO embedding_queue (episode, queued_at, embedder)
                 SELECT e.id, ?3, ?2 FROM episodes e LEFT JOIN embeddings v ON v.episode = e.id
                 WHERE e.project = ?1 AND (v.episode IS NULL OR v.embedder != ?2)",
                params![project, embedder, now],
            )
            .map_err(storage_error)?;
        }
    }
    conn.query_row("SELECT COUNT(*) FROM embedding_queue", [], |r| r.get(0))
        .map_err(storage_error)
}

pub(super) fn enqueue(conn: &Connection, embedder: &str, rows: &[i64]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO embedding_queue (episode, queued_at, embedder)
             VALUES (?1, ?2, ?3)",
        )
        .map_err(storage_error)?;
    let now = chrono::Utc::now().timestamp_micros();
    for row in rows {
        stmt.execute(params![row, now, embedder])
            .map_err(storage_error)?;
    }
    Ok(())
}

/// Leases the oldest `limit` episodes queued for `embedder` that nobody holds.
pub(super) fn claim(
    conn: &Connection,
    embedder: &str,
    limit: usize,
    lease: Duration,
) -> Result<Vec<PendingEmbedding>> {
    let now = chrono::Utc::now().timestamp_micros();
    let pending: Vec<PendingEmbedding> = conn
        .prepare_cached(
            "SELECT q.episode, e.content, e.producer_id, e.project
             FROM embedding_queue q JOIN episodes e ON e.id = q.episode
             WHERE q.embedder = ?1 AND q.lease_until <= ?2
             ORDER BY q.episode LIMIT ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![embedder, now, limit as i64], |row| {
                Ok(PendingEmbedding {
                    episode: EpisodeHandle::from_raw(row.get(0)?),
                    content: row.get(1)?,
                    producer_id: row.get(2)?,
                    embedder: embedder.to_string(),
                    project: ProjectHandle::from_raw(row.get(3)?),
                })
            })?
            .collect()
        })
        .map_err(storage_error)?;
    let until = now.saturating_add(lease.as_micros() as i64);
    let mut hold = conn
        .prepare_cached("UPDATE embedding_queue SET lease_until = ?2 WHERE episode = ?1")
        .map_err(storage_error)?;
    for p in &pending {
        hold.execute(params![p.episode.raw(), until])
            .map_err(storage_error)?;
    }
    Ok(pending)
}

pub(super) fn release(conn: &Connection, episodes: &[EpisodeHandle]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached("UPDATE embedding_queue SET lease_until = 0 WHERE episode = ?1")
        .map_err(storage_error)?;
    for episode in episodes {
        stmt.execute([episode.raw()]).map_err(storage_error)?;
    }
    Ok(())
}

/// Takes `episodes` off the queue (with or without a vector); returns how many were
/// queued.
pub(super) fn dequeue(conn: &Connection, episodes: &[EpisodeHandle]) -> Result<u64> {
    let mut stmt = conn
        .prepare_cached("DELETE FROM embedding_queue WHERE episode = ?1")
        .map_err(storage_error)?;
    let mut removed = 0;
    for episode in episodes {
        removed += stmt.execute([episode.raw()]).map_err(storage_error)? as u64;
    }
    Ok(removed)
}

/// Stores vectors, dequeues their episodes and logs the change in each one's project;
/// episodes deleted meanwhile, or queued since for another embedder, are skipped.
pub(super) fn store(
    conn: &Connection,
    embedder: &str,
    vectors: &[(EpisodeHandle, Vec<f32>)],
) -> Result<()> {
    let mut project_of = conn
        .prepare_cached("SELECT project FROM episodes WHERE id = ?1")
        .map_err(storage_error)?;
    let mut insert = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO embeddings (episode, embedder, vector) VALUES (?1, ?2, ?3)",
        )
        .map_err(storage_error)?;
    let mut dequeue = conn
        .prepare_cached("DELETE FROM embedding_queue WHERE episode = ?1 AND embedder = ?2")
        .map_err(storage_error)?;
    let mut queued_for_other = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM embedding_queue WHERE episode = ?1 AND embedder != ?2)",
        )
        .map_err(storage_error)?;
    let mut by_project: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
    for (handle, vector) in vectors {
        let row = handle.raw();
        let Some(project) = project_of
            .query_row([row], |r| r.get::<_, i64>(0))
            .optional()
            .map_err(storage_error)?
        else {
            continue;
        };
        // Its project changed embedder since this vector was asked for: the one it
        // waits for now is what counts.
        let stale: bool = queued_for_other
            .query_row(params![row, embedder], |r| r.get(0))
            .map_err(storage_error)?;
        if stale {
            continue;
        }
        dequeue
            .execute(params![row, embedder])
            .map_err(storage_error)?;
        insert
            .execute(params![row, embedder, encode(vector)])
            .map_err(storage_error)?;
        by_project.entry(project).or_default().push(row);
    }
    for (project, rows) in by_project {
        log_changes(conn, project, VECTOR, &rows)?;
    }
    Ok(())
}

/// The vectors from `embedder` of the project's episodes with these handles, in the
/// order asked (absent ones left out).
pub(super) fn by_handle(
    conn: &Connection,
    key: &ProjectKey,
    embedder: &str,
    handles: &[EpisodeHandle],
) -> Result<Vec<(EpisodeHandle, Vec<f32>)>> {
    let project = super::projects::require(conn, key)?;
    if handles.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<rusqlite::types::Value> = handles
        .iter()
        .map(|h| rusqlite::types::Value::Integer(h.raw()))
        .collect();
    // CROSS JOIN keeps the id list as the outer loop: one row-id lookup each.
    let mut found: std::collections::HashMap<EpisodeHandle, Vec<f32>> = conn
        .prepare_cached(
            "SELECT v.episode, v.vector FROM rarray(?1) r
             CROSS JOIN embeddings v ON v.episode = r.value
             JOIN episodes e ON e.id = v.episode
             WHERE e.project = ?2 AND v.embedder = ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![std::rc::Rc::new(ids), project, embedder], |row| {
                let bytes: Vec<u8> = row.get(1)?;
                Ok((
                    EpisodeHandle::from_raw(row.get(0)?),
                    decode(&bytes).into_vec(),
                ))
            })?
            .collect()
        })
        .map_err(storage_error)?;
    Ok(handles
        .iter()
        .filter_map(|h| Some((*h, found.remove(h)?)))
        .collect())
}

#[async_trait]
impl VectorStore for SqliteStore {
    async fn queue_missing(&self, projects: Vec<(ProjectKey, Option<String>)>) -> Result<u64> {
        self.writer
            .write(move |conn| queue_missing(conn, &projects))
            .await
    }

    async fn claim_embeddings(
        &self,
        embedder: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<PendingEmbedding>> {
        let embedder = embedder.to_string();
        self.writer
            .write(move |conn| claim(conn, &embedder, limit, lease))
            .await
    }

    async fn release_embeddings(&self, episodes: &[EpisodeHandle]) -> Result<()> {
        let episodes = episodes.to_vec();
        self.writer
            .write(move |conn| release(conn, &episodes))
            .await
    }

    async fn abandon_embeddings(&self, episodes: &[EpisodeHandle]) -> Result<u64> {
        let episodes = episodes.to_vec();
        self.writer
            .write(move |conn| dequeue(conn, &episodes))
            .await
    }

    async fn store_embeddings(
        &self,
        embedder: &str,
        new: Vec<(EpisodeHandle, Vec<f32>)>,
    ) -> Result<()> {
        let embedder = embedder.to_string();
        self.writer
            .write(move |conn| store(conn, &embedder, &new))
            .await
    }

    async fn vectors(
        &self,
        key: &ProjectAccess,
        embedder: &str,
        handles: &[EpisodeHandle],
    ) -> Result<Vec<(EpisodeHandle, Vec<f32>)>> {
        let (key, embedder, handles) = (key.clone(), embedder.to_string(), handles.to_vec());
        self.readers
            .read_here(move |tx| by_handle(tx, &key, &embedder, &handles))
            .await
    }
}
