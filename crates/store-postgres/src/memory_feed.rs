//! `MemoryFeed`: the project's change log as clients follow it.
//!
//! What is logged (`episode_changes`, one id sequence per project, taken under the
//! project's row lock so ids commit in order): episodes added (`log_changes` in the add
//! and import paths) and deleted (`forget::delete_rows`, the one path of client
//! deletes, retention and forgetting), each with the episode's uid; features of the
//! project's own sets added, updated (category, tag, name, value or metadata changed)
//! and deleted, with the feature's public id, and the summary written, rewritten or
//! dropped, by triggers (schema, last migration), so every write path logs them; a
//! set's features are logged as deleted before the set goes. Vector entries are the
//! indexes' and are skipped here. Org-level sets' features and a project's own
//! deletion log nothing.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use super::episodes::{COLUMNS, from_row};
use super::error::db_error;
use super::helpers::{
    ADDED, FEATURE_ADDED, FEATURE_DELETED, FEATURE_UPDATED, REMOVED, SUMMARY_REPLACED, raw_ids,
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
    uid: Option<uuid::Uuid>,
    feature: Option<String>,
}

fn kind_of(code: i16) -> Option<MemoryChangeKind> {
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

#[async_trait]
impl MemoryFeed for PostgresStore {
    async fn memory_changes(
        &self,
        project: ProjectHandle,
        after: ChangeSeq,
        limit: usize,
    ) -> Result<MemoryChanges> {
        let (project, after) = (project.raw(), after.raw());
        // One snapshot for the floor, the log and what it names.
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
            return Ok(MemoryChanges::Gone);
        };
        let org_id: String = head.try_get(0).map_err(db_error)?;
        let floor: i64 = head.try_get(1).map_err(db_error)?;
        if after < floor {
            return Ok(MemoryChanges::Pruned {
                oldest: ChangeSeq::from_raw(floor),
            });
        }
        let rows = sqlx::query(
            "SELECT id, at, kind, uid, feature FROM episode_changes
             WHERE org_id = $1 AND project = $2 AND id > $3 ORDER BY id LIMIT $4",
        )
        .bind(&org_id)
        .bind(project)
        .bind(after)
        .bind(limit as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut through = after;
        let mut entries = Vec::with_capacity(rows.len());
        for row in &rows {
            through = row.try_get(0).map_err(db_error)?;
            let Some(kind) = kind_of(row.try_get(2).map_err(db_error)?) else {
                continue;
            };
            entries.push(Entry {
                id: through,
                at: row.try_get(1).map_err(db_error)?,
                kind,
                uid: row.try_get(3).map_err(db_error)?,
                feature: row.try_get(4).map_err(db_error)?,
            });
        }
        let uids: Vec<uuid::Uuid> = entries.iter().filter_map(|e| e.uid).collect();
        let mut episodes: HashMap<uuid::Uuid, Episode> = HashMap::new();
        if !uids.is_empty() {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM episodes e
                 WHERE e.org_id = $1 AND e.uid = ANY($2) AND e.project = $3"
            )))
            .bind(&org_id)
            .bind(&uids)
            .bind(project)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
            for row in &rows {
                let episode = from_row(row, 0).map_err(db_error)?;
                episodes.insert(episode.uid, episode);
            }
        }
        let feature_ids: Vec<String> = entries.iter().filter_map(|e| e.feature.clone()).collect();
        let features: HashMap<String, _> = if feature_ids.is_empty() {
            HashMap::new()
        } else {
            let org = org_id.clone();
            semantic_features::query(
                &mut tx,
                "f.org_id = $1 AND f.public_id = ANY($2) AND s.project = $3",
                move |q| q.bind(org).bind(feature_ids).bind(project),
            )
            .await?
            .into_iter()
            .map(|f| (f.id.clone(), f))
            .collect()
        };
        let summary: Option<String> = if entries
            .iter()
            .any(|e| e.kind == MemoryChangeKind::SummaryReplaced)
        {
            sqlx::query_scalar(
                "SELECT text FROM episode_summaries WHERE org_id = $1 AND project = $2",
            )
            .bind(&org_id)
            .bind(project)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
        } else {
            None
        };
        tx.commit().await.map_err(db_error)?;
        let changes = entries
            .into_iter()
            .map(|e| MemoryChange {
                id: ChangeSeq::from_raw(e.id),
                at_micros: e.at,
                kind: e.kind,
                episode_uid: e.uid,
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

    async fn feed_heads(&self, projects: &[ProjectHandle]) -> Result<Vec<FeedHead>> {
        if projects.is_empty() {
            return Ok(Vec::new());
        }
        let rows =
            sqlx::query("SELECT id, last_change FROM projects WHERE id = ANY($1) ORDER BY id")
                .bind(raw_ids(projects, ProjectHandle::raw))
                .fetch_all(self.pool())
                .await
                .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok(FeedHead {
                    project: ProjectHandle::from_raw(row.try_get(0)?),
                    change: ChangeSeq::from_raw(row.try_get(1)?),
                })
            })
            .collect::<sqlx::Result<_>>()
            .map_err(db_error)
    }
}
