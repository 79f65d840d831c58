//! What the SQL modules share: clocks, id arrays, column and constraint errors, the
//! semantic version of an org, and the change log's kinds and writes. A leaf: it
//! imports no other module of the backend but `error`, so none of them import in a
//! circle through it.

use std::rc::Rc;

use rusqlite::types::Value;
use rusqlite::{Connection, params};

use super::error::storage_error;
use memmachine_core::error::Result;

pub(super) fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// Handles as the numbers SQL binds (`raw`: the handle type's `raw`).
pub(super) fn raw_ids<H: Copy>(handles: &[H], raw: fn(H) -> i64) -> Vec<i64> {
    handles.iter().map(|h| raw(*h)).collect()
}

/// Ids as a `rarray` parameter.
pub(super) fn id_array(ids: &[i64]) -> Rc<Vec<Value>> {
    Rc::new(ids.iter().copied().map(Value::Integer).collect())
}

/// A column that holds something it should not.
pub(super) fn bad_column(at: usize, err: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        at,
        rusqlite::types::Type::Text,
        err.to_string().into(),
    )
}

pub(super) fn is_constraint(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _)
        if e.code == rusqlite::ErrorCode::ConstraintViolation)
}

/// Moves the semantic version of the orgs of these sets (a feature of theirs was added,
/// changed or deleted). Deleted sets move theirs by a trigger (migration 4).
pub(super) fn bump_sets(conn: &Connection, sets: &[i64]) -> Result<()> {
    if sets.is_empty() {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO semantic_versions (org_id, version)
         SELECT DISTINCT org_id, 1 FROM semantic_sets WHERE id IN rarray(?1)
         ON CONFLICT (org_id) DO UPDATE SET version = version + 1",
    )
    .and_then(|mut stmt| stmt.execute([id_array(sets)]))
    .map_err(storage_error)?;
    Ok(())
}

/// Kinds of change-log entries (`episode_changes.kind`). Features and summaries are
/// logged by triggers (see the schema), which write these numbers too.
pub(super) const ADDED: i64 = 1;
pub(super) const REMOVED: i64 = 2;
pub(super) const VECTOR: i64 = 3;
pub(super) const FEATURE_ADDED: i64 = 4;
pub(super) const FEATURE_UPDATED: i64 = 5;
pub(super) const FEATURE_DELETED: i64 = 6;
pub(super) const SUMMARY_REPLACED: i64 = 7;

/// Appends one change of `kind` per episode to the project's log, in the writing
/// transaction (ids from the project's counter, so they commit in order). Added and
/// removed entries keep the episode's uid for the clients' feed, so a removal is logged
/// while the row still exists.
pub(super) fn log_changes(
    conn: &Connection,
    project: i64,
    kind: i64,
    episodes: &[i64],
) -> Result<()> {
    if episodes.is_empty() {
        return Ok(());
    }
    let n = episodes.len() as i64;
    let first: i64 = conn
        .prepare_cached(
            "UPDATE projects SET last_change = last_change + ?2 WHERE id = ?1
             RETURNING last_change - ?2 + 1",
        )
        .and_then(|mut stmt| stmt.query_row(params![project, n], |row| row.get(0)))
        .map_err(storage_error)?;
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO episode_changes (project, id, kind, episode, at, uid)
             VALUES (?1, ?2, ?3, ?4, ?5,
                 CASE WHEN ?3 = 3 THEN NULL ELSE (SELECT uid FROM episodes WHERE id = ?4) END)",
        )
        .map_err(storage_error)?;
    let now = chrono::Utc::now().timestamp_micros();
    for (offset, episode) in episodes.iter().enumerate() {
        insert
            .execute(params![project, first + offset as i64, kind, episode, now])
            .map_err(storage_error)?;
    }
    Ok(())
}
