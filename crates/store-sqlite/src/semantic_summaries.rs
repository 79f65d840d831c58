//! SQL for projects' short-term summaries. A summary covers the episodes with
//! sequence numbers `first_seq..=last_seq`. Deleting an episode (a trigger, migration 4)
//! deletes the summary that covers it and marks the project dirty, so that the
//! summariser rebuilds it from the episodes that remain, and so that a summary being
//! written meanwhile (it may cover the deleted episode) is refused once.

use rusqlite::{Connection, OptionalExtension, params};

use super::episodes::{COLUMNS, from_row};
use super::error::storage_error;
use super::projects;
use memmachine_core::error::Result;
use memmachine_core::model::{Episode, ProjectKey};
use memmachine_core::store::Summary;

fn current(conn: &Connection, project: i64) -> Result<Option<Summary>> {
    conn.prepare_cached(
        "SELECT text, first_seq, last_seq, updated_at FROM episode_summaries WHERE project = ?1",
    )
    .and_then(|mut stmt| {
        stmt.query_row([project], |row| {
            Ok(Summary {
                text: row.get(0)?,
                first_seq: row.get(1)?,
                last_seq: row.get(2)?,
                updated_at_micros: row.get(3)?,
            })
        })
        .optional()
    })
    .map_err(storage_error)
}

pub(super) fn summary(conn: &Connection, key: &ProjectKey) -> Result<Option<Summary>> {
    let project = projects::require(conn, key)?;
    current(conn, project)
}

/// Stores the summary if the current one ends at `previous_last_seq` (`None`: there
/// is none) and no episode of the project was deleted since the summariser last looked
/// (`projects_changed`) or was last refused; false, storing nothing, otherwise.
pub(super) fn put(
    conn: &Connection,
    key: &ProjectKey,
    summary: &Summary,
    previous_last_seq: Option<i64>,
) -> Result<bool> {
    let project = projects::require(conn, key)?;
    let dirty = conn
        .prepare_cached("DELETE FROM summary_dirty WHERE project = ?1")
        .and_then(|mut stmt| stmt.execute([project]))
        .map_err(storage_error)?;
    if dirty > 0 {
        return Ok(false);
    }
    if current(conn, project)?.map(|s| s.last_seq) != previous_last_seq {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT OR REPLACE INTO episode_summaries (project, text, first_seq, last_seq, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            project,
            summary.text,
            summary.first_seq,
            summary.last_seq,
            summary.updated_at_micros
        ])
    })
    .map_err(storage_error)?;
    Ok(true)
}

/// Projects with episodes of row id above `after`, and those whose summary was
/// invalidated (no longer marked once returned), with the new cursor: the highest
/// episode row id. A new episode's row id is above every existing one (SQLite's rowid
/// rule), so the cursor is that maximum even when it is below `after` (the newest
/// episodes were deleted), and 0 when there are no episodes.
pub(super) fn projects_changed(conn: &Connection, after: i64) -> Result<(Vec<ProjectKey>, i64)> {
    let keys: Vec<ProjectKey> = conn
        .prepare_cached(
            "SELECT p.org_id, p.project_id FROM projects p
             WHERE p.id IN (SELECT project FROM episodes WHERE id > ?1
                            UNION SELECT project FROM summary_dirty)
             ORDER BY p.org_id, p.project_id",
        )
        .and_then(|mut stmt| {
            stmt.query_map([after], |row| {
                Ok(ProjectKey {
                    org_id: row.get(0)?,
                    project_id: row.get(1)?,
                })
            })?
            .collect()
        })
        .map_err(storage_error)?;
    conn.execute("DELETE FROM summary_dirty", [])
        .map_err(storage_error)?;
    let cursor: i64 = conn
        .query_row("SELECT COALESCE(MAX(id), 0) FROM episodes", [], |row| {
            row.get(0)
        })
        .map_err(storage_error)?;
    Ok((keys, cursor))
}

pub(super) fn episodes_between(
    conn: &Connection,
    key: &ProjectKey,
    after_seq: i64,
    through_seq: i64,
    limit: usize,
) -> Result<Vec<Episode>> {
    let project = projects::require(conn, key)?;
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM episodes e
         WHERE e.project = ?1 AND e.seq > ?2 AND e.seq <= ?3 ORDER BY e.seq LIMIT ?4"
    ))
    .and_then(|mut stmt| {
        stmt.query_map(
            params![project, after_seq, through_seq, limit as i64],
            |row| from_row(row, 0),
        )?
        .collect()
    })
    .map_err(storage_error)
}
