//! `MemoryFeed`: the project's change log as clients follow it.
//!
//! What is logged (`episode_changes`, one id sequence per project): episodes added
//! (`log_changes` in the add and import paths) and deleted (`forget::delete_rows`, the
//! one path of client deletes, retention and forgetting), each with the episode's uid;
//! features of the project's own sets added, updated (category, tag, name, value or
//! metadata changed) and deleted, with the feature's public id, and the summary
//! written, rewritten or dropped, by triggers (schema, last migration), so every write
//! path logs them; a set's features are logged as deleted before the set goes. Vector
//! entries are the indexes' and are skipped here. Org-level sets' features and a
//! project's own deletion log nothing.

use std::collections::HashMap;
use std::rc::Rc;

use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::episodes::{COLUMNS, from_row};
use super::error::storage_error;
use super::helpers::{
    ADDED, FEATURE_ADDED, FEATURE_DELETED, FEATURE_UPDATED, REMOVED, SUMMARY_REPLACED, id_array,
    raw_ids,
};
use super::semantic_features;
use memmachine_core::error::Result;
use memmachine_core::model::{ChangeSeq, Episode, ProjectHandle};
use memmachine_core::store::{FeedHead, MemoryChange, MemoryChangeKind, MemoryChanges, MemoryFeed};

/// One log entry as read, before the episodes, features and summary are loaded.
struct Entry {
    id: i64,
    at: i64,
    kind: MemoryChangeKind,
    uid: Option<[u8; 16]>,
    feature: Option<String>,
}

fn kind_of(code: i64) -> Option<MemoryChangeKind> {
    Some(match code {
        ADDED => MemoryChangeKind::EpisodeAdded,
        REMOVED => MemoryChangeKind::EpisodeDeleted,
        FEATURE_ADDED => MemoryChangeKind::FeatureAdded,
        FEATURE_UPDATED => MemoryChangeKind::FeatureUpdated,
        FEATURE_DELETED => MemoryChangeKind::FeatureDeleted,
        SUMMARY_REPLACED => MemoryChangeKind::SummaryReplaced,
        _ => return None,
    })
}

/// The project's episodes with these uids, by uid.
fn episodes_by_uid(
    conn: &Connection,
    project: i64,
    uids: Vec<Value>,
) -> Result<HashMap<[u8; 16], Episode>> {
    if uids.is_empty() {
        return Ok(HashMap::new());
    }
    conn.prepare_cached(&format!(
        "SELECT e.uid, {COLUMNS} FROM rarray(?1) r CROSS JOIN episodes e ON e.uid = r.value
         WHERE e.project = ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_map(params![Rc::new(uids), project], |row| {
            Ok((row.get::<_, [u8; 16]>(0)?, from_row(row, 1)?))
        })?
        .collect()
    })
    .map_err(storage_error)
}

fn summary_text(conn: &Connection, project: i64) -> Result<Option<String>> {
    conn.prepare_cached("SELECT text FROM episode_summaries WHERE project = ?1")
        .and_then(|mut stmt| stmt.query_row([project], |row| row.get(0)).optional())
        .map_err(storage_error)
}

pub(super) fn read(
    conn: &Connection,
    project: i64,
    after: i64,
    limit: usize,
) -> Result<MemoryChanges> {
    let floor: Option<i64> = conn
        .prepare_cached("SELECT feed_floor FROM projects WHERE id = ?1")
        .and_then(|mut stmt| stmt.query_row([project], |row| row.get(0)).optional())
        .map_err(storage_error)?;
    let Some(floor) = floor else {
        return Ok(MemoryChanges::Gone);
    };
    if after < floor {
        return Ok(MemoryChanges::Pruned {
            oldest: ChangeSeq::from_raw(floor),
        });
    }
    let mut through = after;
    let mut entries = Vec::new();
    {
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, at, kind, uid, feature FROM episode_changes
                 WHERE project = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            )
            .map_err(storage_error)?;
        let mut rows = stmt
            .query(params![project, after, limit as i64])
            .map_err(storage_error)?;
        while let Some(row) = rows.next().map_err(storage_error)? {
            through = row.get(0).map_err(storage_error)?;
            let Some(kind) = kind_of(row.get(2).map_err(storage_error)?) else {
                continue;
            };
            entries.push(Entry {
                id: through,
                at: row.get(1).map_err(storage_error)?,
                kind,
                uid: row.get(3).map_err(storage_error)?,
                feature: row.get(4).map_err(storage_error)?,
            });
        }
    }
    let uids: Vec<Value> = entries
        .iter()
        .filter_map(|e| e.uid.map(|uid| Value::Blob(uid.to_vec())))
        .collect();
    let episodes = episodes_by_uid(conn, project, uids)?;
    let feature_ids: Vec<Value> = entries
        .iter()
        .filter_map(|e| e.feature.clone().map(Value::Text))
        .collect();
    let features = if feature_ids.is_empty() {
        HashMap::new()
    } else {
        semantic_features::query(
            conn,
            "f.public_id IN rarray(?1) AND s.project = ?2",
            params![Rc::new(feature_ids), project],
        )?
        .into_iter()
        .map(|f| (f.id.clone(), f))
        .collect::<HashMap<_, _>>()
    };
    let summary = if entries
        .iter()
        .any(|e| e.kind == MemoryChangeKind::SummaryReplaced)
    {
        summary_text(conn, project)?
    } else {
        None
    };
    let changes = entries
        .into_iter()
        .map(|e| MemoryChange {
            id: ChangeSeq::from_raw(e.id),
            at_micros: e.at,
            kind: e.kind,
            episode_uid: e.uid.map(uuid::Uuid::from_bytes),
            // An episode's entries may share it (added then deleted in one page).
            episode: e.uid.and_then(|uid| episodes.get(&uid).cloned()),
            feature: e.feature.as_ref().and_then(|id| features.get(id).cloned()),
            feature_id: e.feature,
            summary: match e.kind {
                MemoryChangeKind::SummaryReplaced => summary.clone(),
                _ => None,
            },
        })
        .collect();
    Ok(MemoryChanges::Read {
        changes,
        through: ChangeSeq::from_raw(through),
    })
}

pub(super) fn heads(conn: &Connection, projects: &[ProjectHandle]) -> Result<Vec<FeedHead>> {
    if projects.is_empty() {
        return Ok(Vec::new());
    }
    conn.prepare_cached("SELECT id, last_change FROM projects WHERE id IN rarray(?1) ORDER BY id")
        .and_then(|mut stmt| {
            stmt.query_map([id_array(&raw_ids(projects, ProjectHandle::raw))], |row| {
                Ok(FeedHead {
                    project: ProjectHandle::from_raw(row.get(0)?),
                    change: ChangeSeq::from_raw(row.get(1)?),
                })
            })?
            .collect()
        })
        .map_err(storage_error)
}

#[async_trait]
impl MemoryFeed for SqliteStore {
    async fn memory_changes(
        &self,
        project: ProjectHandle,
        after: ChangeSeq,
        limit: usize,
    ) -> Result<MemoryChanges> {
        self.readers
            .read(move |tx| read(tx, project.raw(), after.raw(), limit))
            .await
    }

    async fn feed_heads(&self, projects: &[ProjectHandle]) -> Result<Vec<FeedHead>> {
        let projects = projects.to_vec();
        self.readers.read(move |tx| heads(tx, &projects)).await
    }
}
