//! SQL for projects' short-term summaries. A summary covers the episodes with
//! sequence numbers `first_seq..=last_seq`. Deleting an episode (a trigger, migration 2)
//! deletes the summary that covers it and marks the project dirty, so that the
//! summariser rebuilds it from the episodes that remain, and so that a summary being
//! written meanwhile (it may cover the deleted episode) is refused once.

use sqlx::{PgConnection, Row};

use super::episodes::{COLUMNS, from_row};
use super::error::db_error;
use super::projects;
use memmachine_core::error::Result;
use memmachine_core::model::{Episode, ProjectKey};
use memmachine_core::store::Summary;

async fn current(conn: &mut PgConnection, org_id: &str, project: i64) -> Result<Option<Summary>> {
    let row = sqlx::query(
        "SELECT text, first_seq, last_seq, updated_at FROM episode_summaries
         WHERE org_id = $1 AND project = $2",
    )
    .bind(org_id)
    .bind(project)
    .fetch_optional(conn)
    .await
    .map_err(db_error)?;
    row.map(|row| {
        Ok(Summary {
            text: row.try_get(0)?,
            first_seq: row.try_get(1)?,
            last_seq: row.try_get(2)?,
            updated_at_micros: row.try_get(3)?,
        })
    })
    .transpose()
    .map_err(db_error)
}

pub(super) async fn summary(conn: &mut PgConnection, key: &ProjectKey) -> Result<Option<Summary>> {
    let project = projects::require(&mut *conn, key).await?;
    current(conn, &key.org_id, project).await
}

/// Stores the summary if the current one ends at `previous_last_seq` (`None`: there
/// is none) and no episode of the project was deleted since the summariser last looked
/// (`projects_changed`) or was last refused; false, storing nothing, otherwise.
pub(super) async fn put(
    tx: &mut PgConnection,
    key: &ProjectKey,
    summary: &Summary,
    previous_last_seq: Option<i64>,
) -> Result<bool> {
    // The project's row, locked: puts of one project run one at a time.
    let project: i64 = sqlx::query_scalar(
        "SELECT id FROM projects WHERE org_id = $1 AND project_id = $2 FOR NO KEY UPDATE",
    )
    .bind(&key.org_id)
    .bind(&key.project_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?
    .ok_or_else(|| projects::not_found(key))?;
    let dirty = sqlx::query("DELETE FROM summary_dirty WHERE org_id = $1 AND project = $2")
        .bind(&key.org_id)
        .bind(project)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?
        .rows_affected();
    if dirty > 0 {
        return Ok(false);
    }
    if current(&mut *tx, &key.org_id, project)
        .await?
        .map(|s| s.last_seq)
        != previous_last_seq
    {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO episode_summaries (org_id, project, text, first_seq, last_seq, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (org_id, project) DO UPDATE SET text = EXCLUDED.text,
             first_seq = EXCLUDED.first_seq, last_seq = EXCLUDED.last_seq,
             updated_at = EXCLUDED.updated_at",
    )
    .bind(&key.org_id)
    .bind(project)
    .bind(&summary.text)
    .bind(summary.first_seq)
    .bind(summary.last_seq)
    .bind(summary.updated_at_micros)
    .execute(tx)
    .await
    .map_err(db_error)?;
    Ok(true)
}

/// Projects with episodes of handle above `after`, and those whose summary was
/// invalidated (no longer marked once returned), with the new cursor: the highest
/// episode handle (0 when there are none).
///
/// Handles come from an identity column, given at insert, not at commit: a handle
/// below the cursor could still commit later. So the cursor is read holding the lock
/// every adder holds shared while it inserts (`episodes::EPISODE_IDS_LOCK`): no add is
/// then in flight, and every later one gets a higher handle.
pub(super) async fn projects_changed(
    tx: &mut PgConnection,
    after: i64,
) -> Result<(Vec<ProjectKey>, i64)> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(super::episodes::EPISODE_IDS_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    let rows = sqlx::query(
        "SELECT p.org_id, p.project_id FROM projects p
         WHERE (p.org_id, p.id) IN (SELECT org_id, project FROM episodes WHERE id > $1
                                    UNION SELECT org_id, project FROM summary_dirty)
         ORDER BY p.org_id COLLATE \"C\", p.project_id COLLATE \"C\"",
    )
    .bind(after)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let keys = rows
        .iter()
        .map(|row| {
            Ok(ProjectKey {
                org_id: row.try_get(0)?,
                project_id: row.try_get(1)?,
            })
        })
        .collect::<sqlx::Result<Vec<_>>>()
        .map_err(db_error)?;
    sqlx::query("DELETE FROM summary_dirty")
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    let cursor: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM episodes")
        .fetch_one(tx)
        .await
        .map_err(db_error)?;
    Ok((keys, cursor))
}

pub(super) async fn episodes_between(
    conn: &mut PgConnection,
    key: &ProjectKey,
    after_seq: i64,
    through_seq: i64,
    limit: usize,
) -> Result<Vec<Episode>> {
    let project = projects::require(&mut *conn, key).await?;
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM episodes e
         WHERE e.org_id = $1 AND e.project = $2 AND e.seq > $3 AND e.seq <= $4
         ORDER BY e.seq LIMIT $5"
    )))
    .bind(&key.org_id)
    .bind(project)
    .bind(after_seq)
    .bind(through_seq)
    .bind(limit as i64)
    .fetch_all(conn)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| from_row(row, 0))
        .collect::<sqlx::Result<_>>()
        .map_err(db_error)
}
