//! SQL for the semantic ingestion queue: episodes waiting to be distilled into each
//! set's features, claimed a set at a time under a lease.
//!
//! A row is ready when it has not failed, is not held by a live lease and its
//! `not_before` has come. A set is ready when it has enough ready rows, or an old
//! enough one, and no row of it is held by a live lease (one worker distils a set at a
//! time, so two batches of one set never race on its features). Rows of episodes of a
//! project whose extraction is paused (`extraction_pauses`) are never ready.

use rusqlite::{Connection, OptionalExtension, params};

use super::episodes::{self, COLUMNS};
use super::error::storage_error;
use super::helpers::{bump_sets, id_array, now_micros};
use super::semantic_features as features;
use super::semantic_sets::{self as sets, set_by_id};
use memmachine_core::error::{Error, Result};
use memmachine_core::model::{Episode, EpisodeHandle};
use memmachine_core::store::Routing;
use memmachine_core::store::{Batch, ClaimRule, FeatureOp};

/// Creates the routing's sets that do not exist and queues the episodes (row ids
/// `rows`, of project `project` in `org_id`) for them.
pub(super) fn route(
    conn: &Connection,
    project: i64,
    org_id: &str,
    rows: &[i64],
    routing: &[Routing],
) -> Result<()> {
    let new: Vec<_> = routing.iter().map(|r| r.set.clone()).collect();
    let sets = sets::ensure_sets(conn, project, org_id, &new)?;
    let mut queue = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO semantic_queue (set_ref, episode, queued_at, project)
             VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(storage_error)?;
    let now = now_micros();
    for (set, routed) in sets.iter().zip(routing) {
        for &index in &routed.episodes {
            let row = rows.get(index).ok_or_else(|| {
                Error::Internal(format!(
                    "routing names episode {index} of a batch of {}",
                    rows.len()
                ))
            })?;
            queue
                .execute(params![set.internal_id.raw(), row, now, project])
                .map_err(storage_error)?;
        }
    }
    Ok(())
}

/// The ready set queued longest ago, if any (a scan of the queue).
pub(super) fn ready_set(conn: &Connection, rule: &ClaimRule) -> Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT set_ref FROM semantic_queue
             WHERE failed IS NULL AND not_before <= ?1 AND (lease IS NULL OR lease_until < ?1)
                 AND (project IS NULL OR project NOT IN (SELECT project FROM extraction_pauses))
             GROUP BY set_ref
             HAVING (COUNT(*) >= ?2 OR MIN(queued_at) <= ?1 - ?3)
                AND set_ref NOT IN (SELECT set_ref FROM semantic_queue
                    WHERE failed IS NULL AND lease IS NOT NULL AND lease_until >= ?1)
                AND set_ref NOT IN (SELECT s.id FROM semantic_sets s
                    JOIN usage_pauses p ON p.org_id = s.org_id WHERE p.until_micros > ?1)
             ORDER BY MIN(queued_at), set_ref LIMIT 1",
    )
    .and_then(|mut stmt| {
        stmt.query_row(
            params![
                rule.now_micros,
                rule.min_messages as i64,
                rule.max_age_micros
            ],
            |row| row.get(0),
        )
        .optional()
    })
    .map_err(storage_error)
}

/// Whether `set` is ready by `rule` (its rows only, by the queue's key).
fn is_ready(conn: &Connection, rule: &ClaimRule, set: i64) -> Result<bool> {
    let (ready, oldest, leased): (i64, Option<i64>, i64) = conn
        .prepare_cached(
            "SELECT
                 COUNT(*) FILTER (WHERE not_before <= ?2 AND (lease IS NULL OR lease_until < ?2)
                     AND NOT paused),
                 MIN(queued_at) FILTER (WHERE not_before <= ?2 AND (lease IS NULL OR lease_until < ?2)
                     AND NOT paused),
                 COUNT(*) FILTER (WHERE lease IS NOT NULL AND lease_until >= ?2)
             FROM (SELECT *, project IS NOT NULL
                     AND project IN (SELECT project FROM extraction_pauses) AS paused
                 FROM semantic_queue WHERE set_ref = ?1 AND failed IS NULL)",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![set, rule.now_micros], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
        })
        .map_err(storage_error)?;
    let old_enough = oldest.is_some_and(|at| at <= rule.now_micros - rule.max_age_micros);
    Ok(leased == 0 && ready > 0 && (ready >= rule.min_messages as i64 || old_enough))
}

/// Claims the ready rows of `set` if it is still ready by `rule` (else of the ready set
/// queued longest ago), up to `max_batch` in episode order, under a new lease.
pub(super) fn claim(conn: &Connection, set: i64, rule: &ClaimRule) -> Result<Option<Batch>> {
    let now = rule.now_micros;
    // Another worker may have taken it since it was found: then look again, here.
    let set = if is_ready(conn, rule, set)? {
        set
    } else {
        match ready_set(conn, rule)? {
            Some(set) => set,
            None => return Ok(None),
        }
    };
    let claimed: Vec<(i64, u32)> = conn
        .prepare_cached(
            "SELECT episode, attempts FROM semantic_queue
             WHERE set_ref = ?1 AND failed IS NULL AND not_before <= ?2
                 AND (lease IS NULL OR lease_until < ?2)
                 AND (project IS NULL OR project NOT IN (SELECT project FROM extraction_pauses))
             ORDER BY episode LIMIT ?3",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![set, now, rule.max_batch.max(1) as i64], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .collect()
        })
        .map_err(storage_error)?;
    let rows: Vec<i64> = claimed.iter().map(|(row, _)| *row).collect();
    let lease = uuid::Uuid::new_v4().to_string();
    conn.prepare_cached(
        "UPDATE semantic_queue SET lease = ?3, lease_until = ?4
         WHERE set_ref = ?1 AND episode IN rarray(?2)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            set,
            id_array(&rows),
            lease,
            now.saturating_add(rule.lease_micros)
        ])
    })
    .map_err(storage_error)?;
    let messages = conn
        .prepare_cached(&format!(
            "SELECT e.id, {COLUMNS} FROM episodes e WHERE e.id IN rarray(?1) ORDER BY e.id"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([id_array(&rows)], |row| {
                Ok((
                    EpisodeHandle::from_raw(row.get(0)?),
                    episodes::from_row(row, 1)?,
                ))
            })?
            .collect()
        })
        .map_err(storage_error)?;
    let set =
        set_by_id(conn, set)?.ok_or_else(|| Error::Internal("a queued set vanished".into()))?;
    Ok(Some(Batch {
        set,
        lease,
        messages,
        attempts: claimed.iter().map(|(_, a)| *a).max().unwrap_or(0),
    }))
}

/// Whether the batch's lease still holds every one of its rows.
fn holds(conn: &Connection, batch: &Batch) -> Result<bool> {
    let rows: Vec<i64> = batch.messages.iter().map(|(row, _)| row.raw()).collect();
    let held: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM semantic_queue
             WHERE set_ref = ?1 AND lease = ?2 AND episode IN rarray(?3)",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                params![batch.set.internal_id.raw(), batch.lease, id_array(&rows)],
                |row| row.get(0),
            )
        })
        .map_err(storage_error)?;
    let mut distinct = rows;
    distinct.sort_unstable();
    distinct.dedup();
    Ok(held == distinct.len() as i64)
}

/// Applies the ops to the batch's set and dequeues its rows, if the lease still holds
/// them all (false: nothing done).
pub(super) fn apply(
    conn: &Connection,
    batch: &Batch,
    ops: &[FeatureOp],
    embedder: Option<&str>,
) -> Result<bool> {
    if !holds(conn, batch)? {
        return Ok(false);
    }
    let set = batch.set.internal_id.raw();
    for op in ops {
        match op {
            FeatureOp::Add { feature, citations } => {
                features::add_or_cite(conn, set, feature, citations, embedder)?
            }
            FeatureOp::Update { feature, citations } => {
                features::update_or_add(conn, set, feature, citations, embedder)?
            }
            FeatureOp::Delete { match_key } => features::delete_matching(conn, set, match_key)?,
        }
    }
    conn.prepare_cached("DELETE FROM semantic_queue WHERE set_ref = ?1 AND lease = ?2")
        .and_then(|mut stmt| stmt.execute(params![set, batch.lease]))
        .map_err(storage_error)?;
    if !ops.is_empty() {
        bump_sets(conn, &[set])?;
    }
    Ok(true)
}

/// Gives the lease's rows back, one attempt more, to be tried no sooner than
/// `not_before`.
pub(super) fn release(conn: &Connection, batch: &Batch, not_before: i64) -> Result<()> {
    conn.prepare_cached(
        "UPDATE semantic_queue SET lease = NULL, lease_until = 0, attempts = attempts + 1,
             not_before = ?3
         WHERE set_ref = ?1 AND lease = ?2",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            batch.set.internal_id.raw(),
            batch.lease,
            not_before
        ])
    })
    .map_err(storage_error)?;
    Ok(())
}

/// Marks the lease's rows failed; they are never claimed again.
pub(super) fn fail(conn: &Connection, batch: &Batch, reason: &str) -> Result<()> {
    conn.prepare_cached(
        "UPDATE semantic_queue SET lease = NULL, lease_until = 0, failed = ?3
         WHERE set_ref = ?1 AND lease = ?2",
    )
    .and_then(|mut stmt| stmt.execute(params![batch.set.internal_id.raw(), batch.lease, reason]))
    .map_err(storage_error)?;
    Ok(())
}

/// Queued rows: (pending, failed).
pub(super) fn counts(conn: &Connection) -> Result<(u64, u64)> {
    conn.prepare_cached(
        "SELECT COALESCE(SUM(failed IS NULL), 0), COALESCE(SUM(failed IS NOT NULL), 0)
         FROM semantic_queue",
    )
    .and_then(|mut stmt| stmt.query_row([], |row| Ok((row.get(0)?, row.get(1)?))))
    .map_err(storage_error)
}

/// For each episode row, the episode just before it (by sequence) in its project.
pub(super) fn preceding(
    conn: &Connection,
    rows: &[EpisodeHandle],
) -> Result<Vec<Option<(EpisodeHandle, Episode)>>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT e.id, {COLUMNS} FROM episodes o JOIN episodes e
                 ON e.project = o.project AND e.seq < o.seq
             WHERE o.id = ?1 ORDER BY e.seq DESC LIMIT 1"
        ))
        .map_err(storage_error)?;
    rows.iter()
        .map(|row| {
            stmt.query_row([row.raw()], |r| {
                Ok((
                    EpisodeHandle::from_raw(r.get(0)?),
                    episodes::from_row(r, 1)?,
                ))
            })
            .optional()
            .map_err(storage_error)
        })
        .collect()
}
