//! `EpisodeStore`: episodes, their sequence numbers
//! and the `Added`/`Removed` entries of their project's change log.
//!
//! Sequence numbers and change ids come from counters on the project's row
//! (`next_seq`, `last_change`), bumped by the writing transaction: the row lock orders
//! the writers of a project, so ids commit in the order they were given.

use std::collections::{BTreeMap, HashMap, HashSet};

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{PgConnection, Postgres, QueryBuilder, Row};

use super::PostgresStore;
use super::error::db_error;
use super::filter_sql;
use super::forget;
use super::helpers::{ADDED, log_changes};
use super::idempotency::{self, Resolution};
use super::projects;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::filter::Expr;
use memmachine_core::model::{AddedEpisode, Episode, EpisodeHandle, NewEpisode, ProjectKey};
use memmachine_core::store::EpisodeStore;

/// The advisory lock adders of episodes hold shared, and the summariser's cursor
/// exclusive ("episodes" in ASCII).
pub(super) const EPISODE_IDS_LOCK: i64 = 0x65_70_69_73_6f_64_65_73;

/// Columns read by `from_row`, over the alias `e`.
pub(super) const COLUMNS: &str = "e.uid, e.content, e.producer_id, e.producer_role, \
     e.produced_for_id, e.seq, e.episode_type, e.content_type, e.created_at, e.metadata, e.expires_at";

/// Reads an episode from `COLUMNS`, starting at column `at`.
pub(super) fn from_row(row: &PgRow, at: usize) -> sqlx::Result<Episode> {
    let metadata: Option<Json<BTreeMap<String, String>>> = row.try_get(at + 9)?;
    Ok(Episode {
        uid: row.try_get(at)?,
        content: row.try_get(at + 1)?,
        producer_id: row.try_get(at + 2)?,
        producer_role: row
            .try_get::<Option<String>, _>(at + 3)?
            .unwrap_or_default(),
        produced_for_id: row
            .try_get::<Option<String>, _>(at + 4)?
            .unwrap_or_default(),
        sequence_num: row.try_get(at + 5)?,
        episode_type: row.try_get(at + 6)?,
        content_type: row.try_get(at + 7)?,
        created_at_micros: row.try_get(at + 8)?,
        metadata: metadata.map(|m| m.0).unwrap_or_default(),
        expires_at_micros: row.try_get(at + 10)?,
    })
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// What an add stored: the project's handle and org, the handle of each episode
/// stored, and the answer for each episode asked, in input order.
pub(super) struct Added {
    pub project: i64,
    pub org_id: String,
    pub rows: Vec<i64>,
    pub answers: Vec<AddedEpisode>,
}

/// Stores the episodes in the open transaction `tx`, appends their `Added` changes and
/// queues them for `embedder`; keyed duplicates are answered, not stored.
pub(super) async fn add(
    tx: &mut PgConnection,
    key: &ProjectKey,
    episodes: &[NewEpisode],
    embedder: Option<&str>,
) -> Result<Added> {
    // Episode ids are handed out under this lock (shared among adders), so that the
    // summariser's cursor, read under it exclusively, never passes an id still to
    // commit (`semantic_summaries::projects_changed`).
    sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
        .bind(EPISODE_IDS_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    // Messages without a key cost nothing here; keyed ones are looked up under the
    // project's row lock, which the add takes anyway.
    let resolved = if episodes.iter().any(|e| e.idempotency.is_some()) {
        idempotency::resolve(&mut *tx, key, episodes).await?
    } else {
        vec![Resolution::Store; episodes.len()]
    };
    let stored: Vec<&NewEpisode> = episodes
        .iter()
        .zip(&resolved)
        .filter(|(_, r)| **r == Resolution::Store)
        .map(|(e, _)| e)
        .collect();
    let count = stored.len() as i64;
    let uids: Vec<uuid::Uuid> = stored.iter().map(|e| e.uid).collect();
    let mut seen = HashSet::new();
    if let Some(dup) = uids.iter().find(|uid| !seen.insert(**uid)) {
        return Err(Error::AlreadyExists(format!(
            "episode {dup} already exists"
        )));
    }
    // Locks the project's row until commit: writers of the project queue here.
    let row = sqlx::query(
        "UPDATE projects SET next_seq = next_seq + $3, last_change = last_change + $3
         WHERE org_id = $1 AND project_id = $2
         RETURNING id, next_seq - $3, last_change - $3",
    )
    .bind(&key.org_id)
    .bind(&key.project_id)
    .bind(count)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?
    .ok_or_else(|| projects::not_found(key))?;
    let project: i64 = row.try_get(0).map_err(db_error)?;
    let first_seq: i64 = row.try_get(1).map_err(db_error)?;
    let first_change: i64 = row.try_get(2).map_err(db_error)?;
    let seqs: Vec<i64> = (0..count).map(|i| first_seq + i).collect();
    let answers = idempotency::answers(episodes, &resolved, &seqs);
    if stored.is_empty() {
        return Ok(Added {
            project,
            org_id: key.org_id.clone(),
            rows: Vec::new(),
            answers,
        });
    }
    let taken: Option<uuid::Uuid> = sqlx::query_scalar(
        "SELECT uid FROM episodes WHERE org_id = $1 AND project = $2 AND uid = ANY($3) LIMIT 1",
    )
    .bind(&key.org_id)
    .bind(project)
    .bind(&uids)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?;
    if let Some(uid) = taken {
        return Err(Error::AlreadyExists(format!(
            "episode {uid} already exists"
        )));
    }
    let mut metadata = Vec::with_capacity(stored.len());
    for episode in &stored {
        metadata.push(
            (!episode.metadata.is_empty())
                .then(|| serde_json::to_value(&episode.metadata))
                .transpose()
                .map_err(|err| Error::Internal(format!("encoding metadata: {err}")))?,
        );
    }
    let column = |f: fn(&NewEpisode) -> &str| -> Vec<String> {
        stored.iter().map(|e| f(e).to_string()).collect()
    };
    let optional = |f: fn(&NewEpisode) -> &str| -> Vec<Option<String>> {
        stored
            .iter()
            .map(|e| non_empty(f(e)).map(str::to_string))
            .collect()
    };
    let created: Vec<i64> = stored.iter().map(|e| e.created_at_micros).collect();
    let expires: Vec<Option<i64>> = stored.iter().map(|e| e.expires_at_micros).collect();
    let idempotency_keys: Vec<Option<&str>> = stored
        .iter()
        .map(|e| e.idempotency.as_ref().map(|i| i.key.as_str()))
        .collect();
    let idempotency_at: Vec<Option<i64>> = stored
        .iter()
        .map(|e| e.idempotency.as_ref().map(|i| i.at_micros))
        .collect();
    let inserted = sqlx::query(
        "INSERT INTO episodes (org_id, project, uid, seq, content, producer_id, producer_role,
             produced_for_id, episode_type, content_type, created_at, metadata, expires_at,
             idempotency_key, idempotency_at)
         SELECT $1, $2, u.uid, u.seq, u.content, u.producer_id, u.producer_role,
             u.produced_for_id, u.episode_type, u.content_type, u.created_at, u.metadata,
             u.expires_at, u.idempotency_key, u.idempotency_at
         FROM UNNEST($3::uuid[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[],
                     $9::text[], $10::text[], $11::bigint[], $12::jsonb[], $13::bigint[],
                     $14::text[], $15::bigint[])
             AS u (uid, seq, content, producer_id, producer_role, produced_for_id,
                   episode_type, content_type, created_at, metadata, expires_at,
                   idempotency_key, idempotency_at)
         ORDER BY u.seq
         RETURNING id, seq",
    )
    .bind(&key.org_id)
    .bind(project)
    .bind(&uids)
    .bind(&seqs)
    .bind(column(|e| &e.content))
    .bind(column(|e| &e.producer_id))
    .bind(optional(|e| &e.producer_role))
    .bind(optional(|e| &e.produced_for_id))
    .bind(column(|e| &e.episode_type))
    .bind(column(|e| &e.content_type))
    .bind(&created)
    .bind(&metadata)
    .bind(&expires)
    .bind(&idempotency_keys)
    .bind(&idempotency_at)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let mut by_seq = HashMap::with_capacity(inserted.len());
    for row in &inserted {
        let id: i64 = row.try_get(0).map_err(db_error)?;
        let seq: i64 = row.try_get(1).map_err(db_error)?;
        by_seq.insert(seq, id);
    }
    let rows: Vec<i64> = seqs
        .iter()
        .map(|seq| {
            by_seq
                .get(seq)
                .copied()
                .ok_or_else(|| Error::Internal("an inserted episode vanished".into()))
        })
        .collect::<Result<_>>()?;
    let changes: Vec<i64> = (1..=count).map(|i| first_change + i).collect();
    log_changes(&mut *tx, &key.org_id, project, &changes, ADDED, &rows).await?;
    if let Some(embedder) = embedder {
        super::vectors::enqueue(&mut *tx, &key.org_id, &rows, embedder).await?;
    }
    Ok(Added {
        project,
        org_id: key.org_id.clone(),
        rows,
        answers,
    })
}

/// The handles of these episodes of the project, in order; `NotFound` naming those
/// that are not in it (`consequence` says what that means for the call).
pub(super) async fn rows_of(
    conn: &mut PgConnection,
    org_id: &str,
    project: i64,
    key: &ProjectKey,
    uids: &[uuid::Uuid],
    consequence: &str,
) -> Result<Vec<i64>> {
    let found = handles(conn, org_id, project, uids).await?;
    let missing: Vec<String> = uids
        .iter()
        .zip(&found)
        .filter(|(_, row)| row.is_none())
        .map(|(uid, _)| uid.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(Error::NotFound(format!(
            "no episode {} in project {key}; {consequence}",
            missing.join(", ")
        )));
    }
    Ok(found.into_iter().flatten().collect())
}

async fn handles(
    conn: &mut PgConnection,
    org_id: &str,
    project: i64,
    uids: &[uuid::Uuid],
) -> Result<Vec<Option<i64>>> {
    let rows = sqlx::query(
        "SELECT uid, id FROM episodes WHERE org_id = $1 AND project = $2 AND uid = ANY($3)",
    )
    .bind(org_id)
    .bind(project)
    .bind(uids)
    .fetch_all(conn)
    .await
    .map_err(db_error)?;
    let mut by_uid = HashMap::with_capacity(rows.len());
    for row in &rows {
        let uid: uuid::Uuid = row.try_get(0).map_err(db_error)?;
        let id: i64 = row.try_get(1).map_err(db_error)?;
        by_uid.insert(uid, id);
    }
    Ok(uids.iter().map(|uid| by_uid.get(uid).copied()).collect())
}

/// Episodes of the project matching `filter`, in sequence order (`descending` for the
/// most recent first), after `after_seq`.
pub(super) async fn scan(
    conn: &mut PgConnection,
    key: &ProjectKey,
    filter: Option<&Expr>,
    after_seq: i64,
    descending: bool,
    limit: usize,
) -> Result<Vec<Episode>> {
    // The project by key inside the query: one round trip on the hot path (an empty
    // answer then tells a missing project from one with no such episodes).
    let mut sql = QueryBuilder::<Postgres>::new(format!(
        "SELECT {COLUMNS} FROM episodes e WHERE e.org_id = "
    ));
    sql.push_bind(key.org_id.clone());
    sql.push(" AND e.project = (SELECT id FROM projects WHERE org_id = ");
    sql.push_bind(key.org_id.clone());
    sql.push(" AND project_id = ");
    sql.push_bind(key.project_id.clone());
    sql.push(") AND e.seq > ");
    sql.push_bind(after_seq);
    if let Some(filter) = filter {
        sql.push(" AND ");
        filter_sql::compile(filter, &mut sql);
    }
    sql.push(if descending {
        " ORDER BY e.seq DESC LIMIT "
    } else {
        " ORDER BY e.seq LIMIT "
    });
    sql.push_bind(limit as i64);
    let rows = sql.build().fetch_all(&mut *conn).await.map_err(db_error)?;
    if rows.is_empty() {
        projects::require(conn, key).await?;
    }
    rows.iter()
        .map(|row| from_row(row, 0))
        .collect::<sqlx::Result<_>>()
        .map_err(db_error)
}

#[async_trait]
impl EpisodeStore for PostgresStore {
    async fn add_episodes(
        &self,
        key: &ProjectAccess,
        episodes: Vec<NewEpisode>,
        embedder: Option<&str>,
    ) -> Result<Vec<AddedEpisode>> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let added = add(&mut tx, key, &episodes, embedder).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(added.answers)
    }

    async fn count_episodes(&self, key: &ProjectAccess) -> Result<i64> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let project = projects::require(&mut conn, key).await?;
        sqlx::query_scalar("SELECT COUNT(*) FROM episodes WHERE org_id = $1 AND project = $2")
            .bind(&key.org_id)
            .bind(project)
            .fetch_one(&mut *conn)
            .await
            .map_err(db_error)
    }

    async fn list_episodes(
        &self,
        key: &ProjectAccess,
        filter: Option<&Expr>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        scan(&mut conn, key, filter, after_seq, false, limit).await
    }

    async fn recent_episodes(
        &self,
        key: &ProjectAccess,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let mut recent = scan(&mut conn, key, filter, i64::MIN, true, limit).await?;
        recent.reverse();
        Ok(recent)
    }

    async fn delete_episodes(&self, key: &ProjectAccess, uids: &[uuid::Uuid]) -> Result<u64> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let project = forget::lock_project(&mut tx, key).await?;
        let mut rows = rows_of(
            &mut tx,
            &key.org_id,
            project,
            key,
            uids,
            "nothing was deleted",
        )
        .await?;
        rows.sort_unstable();
        rows.dedup();
        if rows.is_empty() {
            return Ok(0);
        }
        let deleted = forget::delete_rows(&mut tx, &key.org_id, project, &rows).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(deleted.counts.episodes)
    }

    async fn episodes_by_handle(
        &self,
        key: &ProjectAccess,
        handles: &[EpisodeHandle],
    ) -> Result<Vec<(EpisodeHandle, Episode)>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        by_handle(&mut conn, key, handles).await
    }

    async fn episode_handles(
        &self,
        key: &ProjectAccess,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<Option<EpisodeHandle>>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let project = projects::require(&mut conn, key).await?;
        let rows = handles(&mut conn, &key.org_id, project, uids).await?;
        Ok(rows
            .into_iter()
            .map(|row| row.map(EpisodeHandle::from_raw))
            .collect())
    }
}

/// The episodes of this project with these handles, in the order asked.
pub(super) async fn by_handle(
    conn: &mut PgConnection,
    key: &ProjectKey,
    handles: &[EpisodeHandle],
) -> Result<Vec<(EpisodeHandle, Episode)>> {
    let raw: Vec<i64> = handles.iter().map(|h| h.raw()).collect();
    // One round trip on the hot path, as `scan`.
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT e.id, {COLUMNS} FROM episodes e
             WHERE e.org_id = $1 AND e.id = ANY($3) AND e.project =
                 (SELECT id FROM projects WHERE org_id = $1 AND project_id = $2)"
    )))
    .bind(&key.org_id)
    .bind(&key.project_id)
    .bind(&raw)
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?;
    if rows.is_empty() {
        projects::require(&mut *conn, key).await?;
    }
    let mut found = HashMap::with_capacity(rows.len());
    for row in &rows {
        let id = EpisodeHandle::from_raw(row.try_get(0).map_err(db_error)?);
        found.insert(id, from_row(row, 1).map_err(db_error)?);
    }
    Ok(handles
        .iter()
        .filter_map(|h| found.remove(h).map(|e| (*h, e)))
        .collect())
}
