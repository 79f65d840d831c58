//! SQL for the semantic ingestion queue: episodes waiting to be distilled into each
//! set's features, claimed a set at a time under a lease.
//!
//! A row is ready when it has not failed, is not held by a live lease and its
//! `not_before` has come. A set is ready when it has enough ready rows, or an old
//! enough one, and no row of it is held by a live lease (one worker distils a set at a
//! time). Claimers of one set queue on its `semantic_sets` row (`FOR NO KEY UPDATE SKIP
//! LOCKED`: a set another replica is claiming is skipped, not waited for), then re-check
//! readiness under that lock and lease the rows. Rows of episodes of a project whose
//! extraction is paused (`extraction_pauses`) are never ready.

use sqlx::{PgConnection, Row};

use super::episodes::{self, COLUMNS};
use super::error::db_error;
use super::helpers::{bump_sets, now_micros};
use super::semantic_features as features;
use super::semantic_sets::{self as sets, set_by_id};
use memmachine_core::error::{Error, Result};
use memmachine_core::model::{Episode, EpisodeHandle};
use memmachine_core::store::Routing;
use memmachine_core::store::{Batch, ClaimRule, FeatureOp};

/// How many ready sets a claim tries before it gives up (the others being claimed by
/// other workers at that moment).
const CANDIDATES: i64 = 16;

/// Creates the routing's sets that do not exist and queues the episodes (handles
/// `rows`, of project `project` in `org_id`) for them.
pub(super) async fn route(
    tx: &mut PgConnection,
    project: i64,
    org_id: &str,
    rows: &[i64],
    routing: &[Routing],
) -> Result<()> {
    let new: Vec<_> = routing.iter().map(|r| r.set.clone()).collect();
    let sets = sets::ensure_sets(&mut *tx, project, org_id, &new).await?;
    let now = now_micros();
    for (set, routed) in sets.iter().zip(routing) {
        let mut episodes = Vec::with_capacity(routed.episodes.len());
        for &index in &routed.episodes {
            let row = rows.get(index).ok_or_else(|| {
                Error::Internal(format!(
                    "routing names episode {index} of a batch of {}",
                    rows.len()
                ))
            })?;
            episodes.push(*row);
        }
        sqlx::query(
            "INSERT INTO semantic_queue (org_id, set_ref, episode, queued_at, project)
             SELECT $1, $2, e, $4, $5 FROM UNNEST($3::bigint[]) AS e ON CONFLICT DO NOTHING",
        )
        .bind(&set.org_id)
        .bind(set.internal_id.raw())
        .bind(&episodes)
        .bind(now)
        .bind(project)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

/// The ready sets, queued longest ago first (a scan of the queue).
async fn ready_sets(conn: &mut PgConnection, rule: &ClaimRule) -> Result<Vec<i64>> {
    sqlx::query_scalar(
        "SELECT set_ref FROM semantic_queue q
             WHERE failed IS NULL AND not_before <= $1 AND (lease IS NULL OR lease_until < $1)
                 AND org_id NOT IN (SELECT org_id FROM usage_pauses WHERE until_micros > $1)
                 AND NOT EXISTS (SELECT 1 FROM extraction_pauses x
                     WHERE x.org_id = q.org_id AND x.project = q.project)
             GROUP BY set_ref
             HAVING (COUNT(*) >= $2 OR MIN(queued_at) <= $3)
                AND set_ref NOT IN (SELECT set_ref FROM semantic_queue
                    WHERE failed IS NULL AND lease IS NOT NULL AND lease_until >= $1)
             ORDER BY MIN(queued_at), set_ref LIMIT $4",
    )
    .bind(rule.now_micros)
    .bind(rule.min_messages as i64)
    // Queued at or before this is old enough (saturating: no overflow in SQL).
    .bind(rule.now_micros.saturating_sub(rule.max_age_micros))
    .bind(CANDIDATES)
    .fetch_all(conn)
    .await
    .map_err(db_error)
}

/// Whether `set` is ready by `rule` (its rows only).
async fn is_ready(conn: &mut PgConnection, rule: &ClaimRule, set: i64) -> Result<bool> {
    let row = sqlx::query(
        "SELECT
             COUNT(*) FILTER (WHERE not_before <= $2 AND (lease IS NULL OR lease_until < $2)
                 AND NOT paused),
             MIN(queued_at) FILTER (WHERE not_before <= $2 AND (lease IS NULL OR lease_until < $2)
                 AND NOT paused),
             COUNT(*) FILTER (WHERE lease IS NOT NULL AND lease_until >= $2)
         FROM (SELECT q.*, EXISTS (SELECT 1 FROM extraction_pauses x
                     WHERE x.org_id = q.org_id AND x.project = q.project) AS paused
             FROM semantic_queue q WHERE q.set_ref = $1 AND q.failed IS NULL) rows",
    )
    .bind(set)
    .bind(rule.now_micros)
    .fetch_one(conn)
    .await
    .map_err(db_error)?;
    let ready: i64 = row.try_get(0).map_err(db_error)?;
    let oldest: Option<i64> = row.try_get(1).map_err(db_error)?;
    let leased: i64 = row.try_get(2).map_err(db_error)?;
    let old_enough =
        oldest.is_some_and(|at| at <= rule.now_micros.saturating_sub(rule.max_age_micros));
    Ok(leased == 0 && ready > 0 && (ready >= rule.min_messages as i64 || old_enough))
}

/// Claims the ready rows of the ready set queued longest ago that no one else is
/// claiming, up to `max_batch` in episode order, under a new lease.
pub(super) async fn claim(tx: &mut PgConnection, rule: &ClaimRule) -> Result<Option<Batch>> {
    let now = rule.now_micros;
    let mut chosen = None;
    for set in ready_sets(&mut *tx, rule).await? {
        let locked: Option<i64> = sqlx::query_scalar(
            "SELECT id FROM semantic_sets WHERE id = $1 FOR NO KEY UPDATE SKIP LOCKED",
        )
        .bind(set)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        // Under the lock, a fresh look: another worker may have claimed it meanwhile.
        if locked.is_some() && is_ready(&mut *tx, rule, set).await? {
            chosen = Some(set);
            break;
        }
    }
    let Some(set) = chosen else {
        return Ok(None);
    };
    let lease = uuid::Uuid::new_v4().to_string();
    let claimed = sqlx::query(
        "WITH claimed AS (
             SELECT org_id, set_ref, episode FROM semantic_queue q
             WHERE set_ref = $1 AND failed IS NULL AND not_before <= $2
                 AND (lease IS NULL OR lease_until < $2)
                 AND NOT EXISTS (SELECT 1 FROM extraction_pauses x
                     WHERE x.org_id = q.org_id AND x.project = q.project)
             ORDER BY episode LIMIT $3
             FOR UPDATE SKIP LOCKED
         )
         UPDATE semantic_queue q SET lease = $4, lease_until = $5
         FROM claimed
         WHERE q.org_id = claimed.org_id AND q.set_ref = claimed.set_ref
           AND q.episode = claimed.episode
         RETURNING q.episode, q.attempts",
    )
    .bind(set)
    .bind(now)
    .bind(rule.max_batch.max(1) as i64)
    .bind(&lease)
    .bind(now.saturating_add(rule.lease_micros))
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let mut rows = Vec::with_capacity(claimed.len());
    let mut attempts = 0u32;
    for row in &claimed {
        rows.push(row.try_get::<i64, _>(0).map_err(db_error)?);
        let a: i32 = row.try_get(1).map_err(db_error)?;
        attempts = attempts.max(a.max(0) as u32);
    }
    if rows.is_empty() {
        // Taken by another claimer between the look and the lease.
        return Ok(None);
    }
    let found = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT e.id, {COLUMNS} FROM episodes e WHERE e.id = ANY($1) ORDER BY e.id"
    )))
    .bind(&rows)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let messages = found
        .iter()
        .map(|row| {
            Ok((
                EpisodeHandle::from_raw(row.try_get(0)?),
                episodes::from_row(row, 1)?,
            ))
        })
        .collect::<sqlx::Result<Vec<_>>>()
        .map_err(db_error)?;
    let set = set_by_id(&mut *tx, set)
        .await?
        .ok_or_else(|| Error::Internal("a queued set vanished".into()))?;
    Ok(Some(Batch {
        set,
        lease,
        messages,
        attempts,
    }))
}

/// Whether the batch's lease still holds every one of its rows (locking them).
async fn holds(tx: &mut PgConnection, batch: &Batch) -> Result<bool> {
    let mut rows: Vec<i64> = batch.messages.iter().map(|(row, _)| row.raw()).collect();
    rows.sort_unstable();
    rows.dedup();
    // The projects of the batch's episodes first, in a fixed order, as deleters take
    // them (project, then episodes, whose deletion cascades to these queue rows): else a
    // deletion holding an episode waits for our queue rows while we wait to cite it.
    // Not shared: the feature triggers bump the project's change counter, and two
    // sharers upgrading at once would deadlock.
    sqlx::query(
        "SELECT p.id FROM projects p
         WHERE (p.org_id, p.id) IN (SELECT org_id, project FROM episodes WHERE id = ANY($1))
         ORDER BY p.org_id, p.id FOR NO KEY UPDATE OF p",
    )
    .bind(&rows)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let held: Vec<i64> = sqlx::query_scalar(
        "SELECT episode FROM semantic_queue
         WHERE set_ref = $1 AND lease = $2 AND episode = ANY($3) FOR UPDATE",
    )
    .bind(batch.set.internal_id.raw())
    .bind(&batch.lease)
    .bind(&rows)
    .fetch_all(tx)
    .await
    .map_err(db_error)?;
    Ok(held.len() == rows.len())
}

/// Applies the ops to the batch's set and dequeues its rows, if the lease still holds
/// them all (false: nothing done).
pub(super) async fn apply(
    tx: &mut PgConnection,
    batch: &Batch,
    ops: &[FeatureOp],
    embedder: Option<&str>,
) -> Result<bool> {
    if !holds(&mut *tx, batch).await? {
        return Ok(false);
    }
    let set = batch.set.internal_id.raw();
    for op in ops {
        match op {
            FeatureOp::Add { feature, citations } => {
                features::add_or_cite(&mut *tx, set, feature, citations, embedder).await?
            }
            FeatureOp::Update { feature, citations } => {
                features::update_or_add(&mut *tx, set, feature, citations, embedder).await?
            }
            FeatureOp::Delete { match_key } => {
                features::delete_matching(&mut *tx, set, match_key).await?
            }
        }
    }
    sqlx::query("DELETE FROM semantic_queue WHERE set_ref = $1 AND lease = $2")
        .bind(set)
        .bind(&batch.lease)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    if !ops.is_empty() {
        bump_sets(tx, &[set]).await?;
    }
    Ok(true)
}

/// Gives the lease's rows back, one attempt more, to be tried no sooner than
/// `not_before`.
pub(super) async fn release(tx: &mut PgConnection, batch: &Batch, not_before: i64) -> Result<()> {
    sqlx::query(
        "UPDATE semantic_queue SET lease = NULL, lease_until = 0, attempts = attempts + 1,
             not_before = $3
         WHERE set_ref = $1 AND lease = $2",
    )
    .bind(batch.set.internal_id.raw())
    .bind(&batch.lease)
    .bind(not_before)
    .execute(tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Marks the lease's rows failed; they are never claimed again.
pub(super) async fn fail(tx: &mut PgConnection, batch: &Batch, reason: &str) -> Result<()> {
    sqlx::query(
        "UPDATE semantic_queue SET lease = NULL, lease_until = 0, failed = $3
         WHERE set_ref = $1 AND lease = $2",
    )
    .bind(batch.set.internal_id.raw())
    .bind(&batch.lease)
    .bind(reason)
    .execute(tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// For each episode handle, the episode just before it (by sequence) in its project.
pub(super) async fn preceding(
    conn: &mut PgConnection,
    rows: &[EpisodeHandle],
) -> Result<Vec<Option<(EpisodeHandle, Episode)>>> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let found = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT e.id, {COLUMNS} FROM episodes o JOIN episodes e
                 ON e.org_id = o.org_id AND e.project = o.project AND e.seq < o.seq
             WHERE o.id = $1 ORDER BY e.seq DESC LIMIT 1"
        )))
        .bind(row.raw())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_error)?;
        out.push(
            found
                .map(|r| {
                    Ok::<_, sqlx::Error>((
                        EpisodeHandle::from_raw(r.try_get(0)?),
                        episodes::from_row(&r, 1)?,
                    ))
                })
                .transpose()
                .map_err(db_error)?,
        );
    }
    Ok(out)
}
