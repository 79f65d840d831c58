//! `ChangeFeed`: each project's change log, which keeps
//! every replica's in-memory index current. Entries are `episode_changes` rows; their
//! ids come from `projects.last_change`, bumped under the project's row lock, so they
//! commit in id order. Pruning remembers, in `projects.feed_floor`, the last id it
//! removed: a reader asking for changes after an older id reloads the project.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use super::episodes::{COLUMNS, from_row};
use super::error::db_error;
use super::helpers::{ADDED, REMOVED, VECTOR};
use super::projects;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::model::{ChangeSeq, EpisodeHandle, ProjectHandle, ProjectKey};
use memmachine_core::store::{Change, ChangeFeed, Changes, FeedHead, IndexedEpisode};

fn vector_of(row: &sqlx::postgres::PgRow, at: usize) -> sqlx::Result<Option<Vec<f32>>> {
    let vector: Option<pgvector::Vector> = row.try_get(at)?;
    Ok(vector.map(|v| v.to_vec()))
}

#[async_trait]
impl ChangeFeed for PostgresStore {
    async fn feed_head(&self, key: &ProjectAccess) -> Result<FeedHead> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        head(&mut conn, key).await
    }

    async fn index_page(
        &self,
        project: ProjectHandle,
        embedder: Option<&str>,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<IndexedEpisode>> {
        let project = project.raw();
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let Some(org_id) = projects::org_of(&mut conn, project).await? else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT e.id, {COLUMNS}, v.vector FROM episodes e
             LEFT JOIN embeddings v
                 ON v.org_id = e.org_id AND v.episode = e.id AND v.embedder = $4
             WHERE e.org_id = $1 AND e.project = $2 AND e.seq > $3
             ORDER BY e.seq LIMIT $5"
        )))
        .bind(&org_id)
        .bind(project)
        .bind(after_seq)
        .bind(embedder)
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok(IndexedEpisode {
                    handle: EpisodeHandle::from_raw(row.try_get(0)?),
                    episode: from_row(row, 1)?,
                    vector: vector_of(row, 12)?,
                })
            })
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)
    }

    async fn changes_since(
        &self,
        project: ProjectHandle,
        after: ChangeSeq,
        embedder: Option<&str>,
        limit: usize,
    ) -> Result<Option<Changes>> {
        let (project, after) = (project.raw(), after.raw());
        // One snapshot for the head, the log and the episodes it names.
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let Some(head) = sqlx::query("SELECT org_id, feed_floor FROM projects WHERE id = $1")
            .bind(project)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
        else {
            return Ok(None);
        };
        let org_id: String = head.try_get(0).map_err(db_error)?;
        let floor: i64 = head.try_get(1).map_err(db_error)?;
        if after < floor {
            return Ok(None);
        }
        let entries = sqlx::query(
            "SELECT id, kind, episode FROM episode_changes
             WHERE org_id = $1 AND project = $2 AND id > $3 ORDER BY id LIMIT $4",
        )
        .bind(&org_id)
        .bind(project)
        .bind(after)
        .bind(limit as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut log = Vec::with_capacity(entries.len());
        for row in &entries {
            let id: i64 = row.try_get(0).map_err(db_error)?;
            let kind: i16 = row.try_get(1).map_err(db_error)?;
            let episode = EpisodeHandle::from_raw(row.try_get(2).map_err(db_error)?);
            log.push((id, kind, episode));
        }
        let through = log.last().map_or(after, |(id, _, _)| *id);
        let named: Vec<i64> = log
            .iter()
            .filter(|(_, kind, _)| *kind == ADDED || *kind == VECTOR)
            .map(|(_, _, episode)| episode.raw())
            .collect();
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT e.id, {COLUMNS}, v.vector FROM episodes e
             LEFT JOIN embeddings v
                 ON v.org_id = e.org_id AND v.episode = e.id AND v.embedder = $3
             WHERE e.org_id = $1 AND e.id = ANY($2)"
        )))
        .bind(&org_id)
        .bind(&named)
        .bind(embedder)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut live = HashMap::with_capacity(rows.len());
        for row in &rows {
            let handle = EpisodeHandle::from_raw(row.try_get(0).map_err(db_error)?);
            let episode = from_row(row, 1).map_err(db_error)?;
            let vector = vector_of(row, 12).map_err(db_error)?;
            live.insert(handle, (episode, vector));
        }
        tx.commit().await.map_err(db_error)?;
        let mut changes = Vec::with_capacity(log.len());
        for (_, kind, handle) in log {
            match kind {
                ADDED => {
                    if let Some((episode, vector)) = live.get(&handle) {
                        changes.push(Change::Added(IndexedEpisode {
                            handle,
                            episode: episode.clone(),
                            vector: vector.clone(),
                        }));
                    }
                }
                REMOVED => changes.push(Change::Removed(handle)),
                VECTOR => {
                    if let Some((_, Some(vector))) = live.get(&handle) {
                        changes.push(Change::Vector {
                            handle,
                            vector: vector.clone(),
                        });
                    }
                }
                // The clients' entries (features, summaries): nothing for an index.
                _ => {}
            }
        }
        let through = ChangeSeq::from_raw(through);
        Ok(Some(Changes { changes, through }))
    }

    async fn prune_changes(&self, before_micros: i64) -> Result<u64> {
        let pruned: i64 = sqlx::query_scalar(
            "WITH pruned AS (
                 DELETE FROM episode_changes c USING projects p
                 WHERE c.org_id = p.org_id AND c.project = p.id
                   AND c.at < $1 AND c.id < p.last_change
                 RETURNING c.org_id, c.project, c.id
             ),
             per_project AS (
                 SELECT org_id, project, MAX(id) AS floor, COUNT(*) AS n
                 FROM pruned GROUP BY org_id, project
             ),
             floors AS (
                 UPDATE projects p SET feed_floor = GREATEST(p.feed_floor, f.floor)
                 FROM per_project f WHERE p.org_id = f.org_id AND p.id = f.project
                 RETURNING 1
             )
             SELECT COALESCE(SUM(n), 0)::bigint FROM per_project",
        )
        .bind(before_micros)
        .fetch_one(self.pool())
        .await
        .map_err(db_error)?;
        Ok(pruned as u64)
    }

    async fn store_id(&self) -> Result<String> {
        sqlx::query_scalar("SELECT store_id FROM store_meta WHERE id = 1")
            .fetch_one(self.pool())
            .await
            .map_err(db_error)
    }
}

/// The project's feed head; `NotFound` when it does not exist.
pub(super) async fn head(conn: &mut sqlx::PgConnection, key: &ProjectKey) -> Result<FeedHead> {
    let row =
        sqlx::query("SELECT id, last_change FROM projects WHERE org_id = $1 AND project_id = $2")
            .bind(&key.org_id)
            .bind(&key.project_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_error)?
            .ok_or_else(|| projects::not_found(key))?;
    Ok(FeedHead {
        project: ProjectHandle::from_raw(row.try_get(0).map_err(db_error)?),
        change: ChangeSeq::from_raw(row.try_get(1).map_err(db_error)?),
    })
}
