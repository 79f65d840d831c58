//! What the SQL modules share: clocks, column and constraint errors, the per-org lock
//! and semantic version, and the change log's kinds and writes. A leaf: it imports no
//! other module of the backend but `error`, so none of them import in a circle
//! through it.

use sqlx::PgConnection;

use super::error::{db_error, sqlstate};
use memmachine_core::error::Result;

/// Handles as the numbers SQL binds (`raw`: the handle type's `raw`).
pub(super) fn raw_ids<H: Copy>(handles: &[H], raw: fn(H) -> i64) -> Vec<i64> {
    handles.iter().map(|h| raw(*h)).collect()
}

/// Microseconds since the Unix epoch, by this process's clock.
pub(super) fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// Microseconds since the epoch by the database's clock, in SQL.
pub(super) const DB_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

/// A column that holds something it should not.
pub(super) fn bad_column(at: usize, err: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: at.to_string(),
        source: err.to_string().into(),
    }
}

pub(super) fn is_unique_violation(err: &sqlx::Error) -> bool {
    sqlstate(err).as_deref() == Some("23505")
}

/// Serialises the transactions that check-then-insert something unique in an org
/// (held until commit).
pub(super) async fn lock_org(tx: &mut PgConnection, org_id: &str) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('memmachine-org:' || $1, 0))")
        .bind(org_id)
        .execute(tx)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Moves the semantic version of the orgs of these sets (a feature of theirs was added,
/// changed or deleted). Deleted sets move theirs by a trigger (migration 2).
pub(super) async fn bump_sets(tx: &mut PgConnection, sets: &[i64]) -> Result<()> {
    if sets.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO semantic_versions (org_id, version)
         SELECT DISTINCT org_id, 1 FROM semantic_sets WHERE id = ANY($1) ORDER BY org_id
         ON CONFLICT (org_id) DO UPDATE SET version = semantic_versions.version + 1",
    )
    .bind(sets)
    .execute(tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Change kinds in `episode_changes`. Features and summaries are logged by triggers
/// (see the schema), which write these numbers too.
pub(super) const ADDED: i16 = 1;
pub(super) const REMOVED: i16 = 2;
pub(super) const VECTOR: i16 = 3;
pub(super) const FEATURE_ADDED: i16 = 4;
pub(super) const FEATURE_UPDATED: i16 = 5;
pub(super) const FEATURE_DELETED: i16 = 6;
pub(super) const SUMMARY_REPLACED: i16 = 7;

/// Appends one entry of `kind` per episode to the project's log, with these ids. Added
/// and removed entries keep the episode's uid for the clients' feed (read from the row,
/// so a removal is logged before the row goes).
pub(super) async fn log_changes(
    tx: &mut PgConnection,
    org_id: &str,
    project: i64,
    ids: &[i64],
    kind: i16,
    episodes: &[i64],
) -> Result<()> {
    sqlx::query(
        "INSERT INTO episode_changes (org_id, project, id, kind, episode, at, uid)
         SELECT $1, $2, c.id, $3, c.episode, $6, e.uid
         FROM UNNEST($4::bigint[], $5::bigint[]) AS c (id, episode)
         LEFT JOIN episodes e ON $3 <> 3 AND e.org_id = $1 AND e.id = c.episode",
    )
    .bind(org_id)
    .bind(project)
    .bind(kind)
    .bind(ids)
    .bind(episodes)
    .bind(now_micros())
    .execute(tx)
    .await
    .map_err(db_error)?;
    Ok(())
}
