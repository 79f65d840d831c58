//! `ChangeFeed`: each project's log of the writes that change what search
//! sees, and the reads that build and catch up an in-memory index from it.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::episodes::{COLUMNS, from_row};
use super::error::storage_error;
use super::helpers::{ADDED, REMOVED, VECTOR};
use super::projects;
use super::vectors;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::model::{ChangeSeq, EpisodeHandle, ProjectHandle, ProjectKey};
use memmachine_core::store::{Change, ChangeFeed, Changes, FeedHead, IndexedEpisode};

pub(super) fn head(conn: &Connection, key: &ProjectKey) -> Result<FeedHead> {
    conn.prepare_cached(
        "SELECT id, last_change FROM projects WHERE org_id = ?1 AND project_id = ?2",
    )
    .and_then(|mut stmt| {
        stmt.query_row(params![key.org_id, key.project_id], |row| {
            Ok(FeedHead {
                project: ProjectHandle::from_raw(row.get(0)?),
                change: ChangeSeq::from_raw(row.get(1)?),
            })
        })
        .optional()
    })
    .map_err(storage_error)?
    .ok_or_else(|| projects::not_found(key))
}

pub(super) fn page(
    conn: &Connection,
    project: i64,
    embedder: Option<&str>,
    after_seq: i64,
    limit: usize,
) -> Result<Vec<IndexedEpisode>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT e.id, {COLUMNS}, v.vector FROM episodes e
             LEFT JOIN embeddings v ON v.episode = e.id AND v.embedder = ?2
             WHERE e.project = ?1 AND e.seq > ?3 ORDER BY e.seq LIMIT ?4"
        ))
        .map_err(storage_error)?;
    stmt.query_map(params![project, embedder, after_seq, limit as i64], |row| {
        let vector: Option<Vec<u8>> = row.get(12)?;
        Ok(IndexedEpisode {
            handle: EpisodeHandle::from_raw(row.get(0)?),
            episode: from_row(row, 1)?,
            vector: vector.as_deref().map(|b| vectors::decode(b).into_vec()),
        })
    })
    .and_then(|rows| rows.collect())
    .map_err(storage_error)
}

pub(super) fn since(
    conn: &Connection,
    project: i64,
    after: i64,
    embedder: Option<&str>,
    limit: usize,
) -> Result<Option<Changes>> {
    let floor: Option<i64> = conn
        .prepare_cached("SELECT feed_floor FROM projects WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([project], |row| row.get(0)).optional())
        .map_err(storage_error)?;
    match floor {
        Some(floor) if after >= floor => {}
        _ => return Ok(None),
    }
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT c.id, c.kind, c.episode, e.id IS NOT NULL, {COLUMNS}, v.vector
             FROM episode_changes c
             LEFT JOIN episodes e ON e.id = c.episode
             LEFT JOIN embeddings v ON v.episode = c.episode AND v.embedder = ?3
             WHERE c.project = ?1 AND c.id > ?2 ORDER BY c.id LIMIT ?4"
        ))
        .map_err(storage_error)?;
    let mut rows = stmt
        .query(params![project, after, embedder, limit as i64])
        .map_err(storage_error)?;
    let (mut changes, mut through) = (Vec::new(), after);
    while let Some(row) = rows.next().map_err(storage_error)? {
        through = row.get(0).map_err(storage_error)?;
        let kind: i64 = row.get(1).map_err(storage_error)?;
        let handle = EpisodeHandle::from_raw(row.get(2).map_err(storage_error)?);
        let stored: bool = row.get(3).map_err(storage_error)?;
        let vector: Option<Vec<u8>> = row.get(15).map_err(storage_error)?;
        let vector = vector.as_deref().map(|b| vectors::decode(b).into_vec());
        match kind {
            REMOVED => changes.push(Change::Removed(handle)),
            ADDED if stored => changes.push(Change::Added(IndexedEpisode {
                handle,
                episode: from_row(row, 4).map_err(storage_error)?,
                vector,
            })),
            VECTOR if stored => {
                if let Some(vector) = vector {
                    changes.push(Change::Vector { handle, vector });
                }
            }
            _ => {}
        }
    }
    let through = ChangeSeq::from_raw(through);
    Ok(Some(Changes { changes, through }))
}

/// Drops entries older than `before_micros` (never a project's newest), moving each
/// pruned project's floor up to the last id dropped.
pub(super) fn prune(conn: &Connection, before_micros: i64) -> Result<u64> {
    let floors: Vec<(i64, i64)> = conn
        .prepare_cached(
            "SELECT c.project, MAX(c.id) FROM episode_changes c JOIN projects p ON p.id = c.project
             WHERE c.at < ?1 AND c.id < p.last_change GROUP BY c.project",
        )
        .and_then(|mut stmt| {
            stmt.query_map([before_micros], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect()
        })
        .map_err(storage_error)?;
    let mut dropped = 0;
    for (project, floor) in floors {
        dropped += conn
            .execute(
                "DELETE FROM episode_changes WHERE project = ?1 AND id <= ?2",
                params![project, floor],
            )
            .map_err(storage_error)? as u64;
        conn.execute(
            "UPDATE projects SET feed_floor = MAX(feed_floor, ?2) WHERE id = ?1",
            params![project, floor],
        )
        .map_err(storage_error)?;
    }
    Ok(dropped)
}

#[async_trait]
impl ChangeFeed for SqliteStore {
    async fn feed_head(&self, key: &ProjectAccess) -> Result<FeedHead> {
        let read = key.clone();
        self.readers.read_here(move |tx| head(tx, &read)).await
    }

    async fn index_page(
        &self,
        project: ProjectHandle,
        embedder: Option<&str>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<IndexedEpisode>> {
        let embedder = embedder.map(str::to_string);
        self.readers
            .read(move |tx| page(tx, project.raw(), embedder.as_deref(), after_seq, limit))
            .await
    }

    async fn changes_since(
        &self,
        project: ProjectHandle,
        after: ChangeSeq,
        embedder: Option<&str>,
        limit: usize,
    ) -> Result<Option<Changes>> {
        let embedder = embedder.map(str::to_string);
        self.readers
            .read(move |tx| since(tx, project.raw(), after.raw(), embedder.as_deref(), limit))
            .await
    }

    async fn prune_changes(&self, before_micros: i64) -> Result<u64> {
        self.writer
            .write(move |conn| prune(conn, before_micros))
            .await
    }

    async fn store_id(&self) -> Result<String> {
        self.readers
            .read(|tx| {
                tx.query_row("SELECT store_id FROM store_meta WHERE id = 1", [], |row| {
                    row.get(0)
                })
                .map_err(storage_error)
            })
            .await
    }
}
