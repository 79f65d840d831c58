//! `EpisodeStore`: episodes, their sequence numbers and the `Added`/`Removed` entries
//! of their project's change log.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use super::SqliteStore;
use super::error::storage_error;
use super::filter_sql;
use super::forget;
use super::helpers::{ADDED, log_changes};
use super::idempotency::{self, Resolution};
use super::projects;
use super::vectors;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::filter::Expr;
use memmachine_core::model::{AddedEpisode, Episode, EpisodeHandle, NewEpisode, ProjectKey};
use memmachine_core::store::EpisodeStore;

/// Columns read by `from_row`, over the alias `e`.
pub(super) const COLUMNS: &str = "e.uid, e.content, e.producer_id, e.producer_role, \
     e.produced_for_id, e.seq, e.episode_type, e.content_type, e.created_at, e.metadata, e.expires_at";

/// Reads an episode from `COLUMNS`, starting at column `at`.
pub(super) fn from_row(row: &Row<'_>, at: usize) -> rusqlite::Result<Episode> {
    let uid: [u8; 16] = row.get(at)?;
    let metadata: Option<String> = row.get(at + 9)?;
    Ok(Episode {
        uid: uuid::Uuid::from_bytes(uid),
        content: row.get(at + 1)?,
        producer_id: row.get(at + 2)?,
        producer_role: row.get::<_, Option<String>>(at + 3)?.unwrap_or_default(),
        produced_for_id: row.get::<_, Option<String>>(at + 4)?.unwrap_or_default(),
        sequence_num: row.get(at + 5)?,
        episode_type: row.get(at + 6)?,
        content_type: row.get(at + 7)?,
        created_at_micros: row.get(at + 8)?,
        metadata: metadata
            .and_then(|json| serde_json::from_str::<BTreeMap<String, String>>(&json).ok())
            .unwrap_or_default(),
        expires_at_micros: row.get(at + 10)?,
    })
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// What an add stored: the project's row id, the row id of each episode stored, and
/// the answer for each episode asked.
pub(super) struct Added {
    pub project: i64,
    pub rows: Vec<i64>,
    pub answers: Vec<AddedEpisode>,
}

pub(super) fn add(conn: &Connection, key: &ProjectKey, episodes: &[NewEpisode]) -> Result<Added> {
    let project = projects::require(conn, key)?;
    // Messages without a key cost nothing here.
    let resolved = if episodes.iter().any(|e| e.idempotency.is_some()) {
        idempotency::resolve(conn, project, episodes)?
    } else {
        vec![Resolution::Store; episodes.len()]
    };
    let count = resolved.iter().filter(|r| **r == Resolution::Store).count() as i64;
    let first: i64 = conn
        .query_row(
            "UPDATE projects SET next_seq = next_seq + ?2 WHERE id = ?1 RETURNING next_seq - ?2",
            params![project, count],
            |row| row.get(0),
        )
        .map_err(storage_error)?;
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO episodes (project, uid, seq, content, producer_id, producer_role,
                 produced_for_id, episode_type, content_type, created_at, metadata, expires_at,
                 idempotency_key, idempotency_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )
        .map_err(storage_error)?;
    let mut answers: Vec<AddedEpisode> = Vec::with_capacity(episodes.len());
    let mut rows = Vec::with_capacity(count as usize);
    let mut seq = first;
    for (episode, resolution) in episodes.iter().zip(&resolved) {
        match *resolution {
            Resolution::Stored { uid, seq } => {
                answers.push(AddedEpisode {
                    uid,
                    sequence_num: seq,
                    duplicate: true,
                });
                continue;
            }
            Resolution::Earlier(index) => {
                answers.push(AddedEpisode {
                    duplicate: true,
                    ..answers[index]
                });
                continue;
            }
            Resolution::Store => {}
        }
        let metadata = (!episode.metadata.is_empty())
            .then(|| serde_json::to_string(&episode.metadata))
            .transpose()
            .map_err(|err| Error::Internal(format!("encoding metadata: {err}")))?;
        let idempotency = episode.idempotency.as_ref();
        insert
            .execute(params![
                project,
                episode.uid.as_bytes(),
                seq,
                episode.content,
                episode.producer_id,
                non_empty(&episode.producer_role),
                non_empty(&episode.produced_for_id),
                episode.episode_type,
                episode.content_type,
                episode.created_at_micros,
                metadata,
                episode.expires_at_micros,
                idempotency.map(|i| &i.key),
                idempotency.map(|i| i.at_micros),
            ])
            .map_err(|err| match err {
                rusqlite::Error::SqliteFailure(e, _)
                    if e.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    Error::AlreadyExists(format!("episode {} already exists", episode.uid))
                }
                other => storage_error(other),
            })?;
        rows.push(conn.last_insert_rowid());
        answers.push(AddedEpisode {
            uid: episode.uid,
            sequence_num: seq,
            duplicate: false,
        });
        seq += 1;
    }
    log_changes(conn, project, ADDED, &rows)?;
    Ok(Added {
        project,
        rows,
        answers,
    })
}

pub(super) fn count(conn: &Connection, key: &ProjectKey) -> Result<i64> {
    let project = projects::require(conn, key)?;
    conn.prepare_cached("SELECT COUNT(*) FROM episodes WHERE project = ?1")
        .and_then(|mut stmt| stmt.query_row([project], |row| row.get(0)))
        .map_err(storage_error)
}

/// Episodes of the project matching `filter`, in sequence order (`descending` for the
/// most recent first), after `after_seq` when ascending.
pub(super) fn scan(
    conn: &Connection,
    key: &ProjectKey,
    filter: Option<&Expr>,
    after_seq: i64,
    descending: bool,
    limit: usize,
) -> Result<Vec<Episode>> {
    let project = projects::require(conn, key)?;
    let mut params = vec![Value::Integer(project), Value::Integer(after_seq)];
    let mut sql = format!("SELECT {COLUMNS} FROM episodes e WHERE e.project = ? AND e.seq > ?");
    if let Some(filter) = filter {
        sql.push_str(" AND ");
        filter_sql::compile(filter, &mut sql, &mut params);
    }
    // The limit is written into the statement: one with a bound `LIMIT ?` is prepared
    // anew on every run (SQLite built with STAT4), and this one runs per search.
    let order = if descending { "DESC" } else { "ASC" };
    sql.push_str(&format!(
        " ORDER BY e.seq {order} LIMIT {}",
        limit.min(i64::MAX as usize)
    ));
    let mut stmt = conn.prepare_cached(&sql).map_err(storage_error)?;
    stmt.query_map(params_from_iter(params), |row| from_row(row, 0))
        .and_then(|rows| rows.collect())
        .map_err(storage_error)
}

/// The project's row id and the row ids of these episodes of it, in order; `NotFound`
/// naming those that are not in it (`consequence` says what that means for the call).
pub(super) fn rows_of(
    conn: &Connection,
    key: &ProjectKey,
    uids: &[uuid::Uuid],
    consequence: &str,
) -> Result<(i64, Vec<i64>)> {
    let project = projects::require(conn, key)?;
    let mut find = conn
        .prepare_cached("SELECT id FROM episodes WHERE project = ?1 AND uid = ?2")
        .map_err(storage_error)?;
    let mut rows = Vec::with_capacity(uids.len());
    let mut missing = Vec::new();
    for uid in uids {
        match find.query_row(params![project, uid.as_bytes()], |row| row.get::<_, i64>(0)) {
            Ok(id) => rows.push(id),
            Err(rusqlite::Error::QueryReturnedNoRows) => missing.push(uid.to_string()),
            Err(err) => return Err(storage_error(err)),
        }
    }
    if !missing.is_empty() {
        return Err(Error::NotFound(format!(
            "no episode {} in project {key}; {consequence}",
            missing.join(", ")
        )));
    }
    Ok((project, rows))
}

/// Deletes the episodes; returns the project's row id and the deleted rows.
pub(super) fn delete(
    conn: &Connection,
    key: &ProjectKey,
    uids: &[uuid::Uuid],
) -> Result<(i64, Vec<i64>)> {
    let (project, mut rows) = rows_of(conn, key, uids, "nothing was deleted")?;
    rows.sort_unstable();
    rows.dedup();
    forget::delete_rows(conn, project, &rows)?;
    Ok((project, rows))
}

/// The project's episodes with these handles, in the order asked (others left out).
pub(super) fn by_handle(
    conn: &Connection,
    key: &ProjectKey,
    handles: &[EpisodeHandle],
) -> Result<Vec<(EpisodeHandle, Episode)>> {
    let project = projects::require(conn, key)?;
    let ids: Vec<Value> = handles.iter().map(|h| Value::Integer(h.raw())).collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    // CROSS JOIN keeps the id list as the outer loop: one row-id lookup each.
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT e.id, {COLUMNS} FROM rarray(?1) r CROSS JOIN episodes e ON e.id = r.value \
             WHERE e.project = ?2"
        ))
        .map_err(storage_error)?;
    let mut found: std::collections::HashMap<EpisodeHandle, Episode> = stmt
        .query_map(params![std::rc::Rc::new(ids), project], |row| {
            Ok((EpisodeHandle::from_raw(row.get(0)?), from_row(row, 1)?))
        })
        .and_then(|rows| rows.collect())
        .map_err(storage_error)?;
    Ok(handles
        .iter()
        .filter_map(|id| Some((*id, found.remove(id)?)))
        .collect())
}

/// The handle of each uid in the project (`None`: not in it).
pub(super) fn handles(
    conn: &Connection,
    key: &ProjectKey,
    uids: &[uuid::Uuid],
) -> Result<Vec<Option<EpisodeHandle>>> {
    let project = projects::require(conn, key)?;
    let mut find = conn
        .prepare_cached("SELECT id FROM episodes WHERE project = ?1 AND uid = ?2")
        .map_err(storage_error)?;
    uids.iter()
        .map(|uid| {
            find.query_row(params![project, uid.as_bytes()], |row| {
                Ok(EpisodeHandle::from_raw(row.get(0)?))
            })
            .optional()
            .map_err(storage_error)
        })
        .collect()
}

#[async_trait]
impl EpisodeStore for SqliteStore {
    async fn add_episodes(
        &self,
        key: &ProjectAccess,
        new: Vec<NewEpisode>,
        embedder: Option<&str>,
    ) -> Result<Vec<AddedEpisode>> {
        self.add_episodes_then(key, new, embedder, |_, _| Ok(()))
            .await
    }

    async fn count_episodes(&self, key: &ProjectAccess) -> Result<i64> {
        let key = key.clone();
        self.readers.read(move |tx| count(tx, &key)).await
    }

    async fn list_episodes(
        &self,
        key: &ProjectAccess,
        filter: Option<&Expr>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        let (key, filter) = (key.clone(), filter.cloned());
        self.readers
            .read(move |tx| scan(tx, &key, filter.as_ref(), after_seq, false, limit))
            .await
    }

    async fn recent_episodes(
        &self,
        key: &ProjectAccess,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        let (key, filter) = (key.clone(), filter.cloned());
        let mut recent = self
            .readers
            .read_here(move |tx| scan(tx, &key, filter.as_ref(), i64::MIN, true, limit))
            .await?;
        recent.reverse();
        Ok(recent)
    }

    async fn delete_episodes(&self, key: &ProjectAccess, uids: &[uuid::Uuid]) -> Result<u64> {
        let (key, uids) = (key.clone(), uids.to_vec());
        let (_, rows) = self
            .writer
            .write(move |conn| delete(conn, &key, &uids))
            .await?;
        Ok(rows.len() as u64)
    }

    async fn episodes_by_handle(
        &self,
        key: &ProjectAccess,
        handles: &[EpisodeHandle],
    ) -> Result<Vec<(EpisodeHandle, Episode)>> {
        let (key, handles) = (key.clone(), handles.to_vec());
        self.readers
            .read_here(move |tx| by_handle(tx, &key, &handles))
            .await
    }

    async fn episode_handles(
        &self,
        key: &ProjectAccess,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<Option<EpisodeHandle>>> {
        let (key, uids) = (key.clone(), uids.to_vec());
        self.readers
            .read_here(move |tx| handles(tx, &key, &uids))
            .await
    }
}

impl SqliteStore {
    /// Stores the episodes (queued for a vector from `embedder`, logged in the change
    /// feed) and runs `also` in the same transaction. Answers as `add_episodes`.
    pub(super) async fn add_episodes_then<F>(
        &self,
        key: &ProjectKey,
        new: Vec<NewEpisode>,
        embedder: Option<&str>,
        also: F,
    ) -> Result<Vec<AddedEpisode>>
    where
        F: FnOnce(&rusqlite::Connection, &Added) -> Result<()> + Send + 'static,
    {
        let key = key.clone();
        let embedder = embedder.map(str::to_string);
        let added = self
            .writer
            .write(move |conn| {
                let added = add(conn, &key, &new)?;
                if let Some(embedder) = &embedder {
                    vectors::enqueue(conn, embedder, &added.rows)?;
                }
                also(conn, &added)?;
                Ok(added)
            })
            .await?;
        Ok(added.answers)
    }
}
