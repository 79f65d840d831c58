//! SQL for the history of features. Triggers (migration 7) record a version whenever a
//! feature's names or value change or it is deleted; this module reads them, re-points
//! a consolidation's sources to the survivor, bounds and drops them.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::PostgresStore;
use super::error::db_error;
use super::helpers::{bad_column, raw_ids};
use super::semantic_features as features;
use memmachine_core::error::Result;
use memmachine_core::model::{EpisodeHandle, FeatureId, ProjectHandle, SetId};
use memmachine_core::store::{
    ChangedBy, FeatureHistory, FeatureRowsAt, FeatureVersion, KeptVersion, RestoredVersion,
};

const COLUMNS: &str = "v.id, v.feature_public_id, v.origin_id, v.org_id, v.project, v.set_id, \
     v.category, v.category_id, v.tag, v.feature_name, v.value, v.metadata, v.valid_from, \
     v.valid_to, v.changed_by, v.set_ref";

fn version_of(row: &PgRow) -> sqlx::Result<(i64, i64, FeatureVersion)> {
    let metadata: String = row.try_get(11)?;
    Ok((
        row.try_get(0)?,
        row.try_get(15)?,
        FeatureVersion {
            feature_id: row.try_get(1)?,
            origin_id: row.try_get(2)?,
            org_id: row.try_get(3)?,
            project: row
                .try_get::<Option<i64>, _>(4)?
                .map(ProjectHandle::from_raw),
            set_id: row.try_get(5)?,
            category: row.try_get(6)?,
            category_id: row.try_get(7)?,
            tag: row.try_get(8)?,
            feature: row.try_get(9)?,
            value: row.try_get(10)?,
            metadata: serde_json::from_str(&metadata).map_err(|err| bad_column(11, err))?,
            citations: Vec::new(),
            valid_from_micros: row.try_get(12)?,
            valid_to_micros: Some(row.try_get(13)?),
            changed_by: ChangedBy::from_code(row.try_get(14)?),
        },
    ))
}

/// The versions `condition` selects (binding `$1`, `$2`), with the still stored
/// episodes each cites, oldest first.
async fn versions(
    conn: &mut PgConnection,
    condition: &str,
    bind: impl FnOnce(
        sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<Vec<(i64, i64, FeatureVersion)>> {
    let sql = format!("SELECT {COLUMNS} FROM feature_versions v WHERE {condition}");
    let rows = bind(sqlx::query(sqlx::AssertSqlSafe(sql)))
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error)?;
    let mut found = rows
        .iter()
        .map(version_of)
        .collect::<sqlx::Result<Vec<_>>>()
        .map_err(db_error)?;
    if found.is_empty() {
        return Ok(found);
    }
    let ids: Vec<i64> = found.iter().map(|(id, _, _)| *id).collect();
    let cited = sqlx::query(
        "SELECT c.version, e.uid FROM feature_version_citations c
         JOIN episodes e ON e.org_id = c.org_id AND e.id = c.episode
         WHERE c.version = ANY($1) ORDER BY c.version, c.episode",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?;
    let mut by_version: HashMap<i64, Vec<uuid::Uuid>> = HashMap::new();
    for row in &cited {
        let version: i64 = row.try_get(0).map_err(db_error)?;
        let uid: uuid::Uuid = row.try_get(1).map_err(db_error)?;
        by_version.entry(version).or_default().push(uid);
    }
    for (id, _, version) in &mut found {
        version.citations = by_version.remove(id).unwrap_or_default();
    }
    Ok(found)
}

async fn history(conn: &mut PgConnection, id: &str) -> Result<Vec<FeatureVersion>> {
    let owner = id.to_string();
    let mut out: Vec<FeatureVersion> = versions(
        &mut *conn,
        "v.feature_public_id = $1 ORDER BY v.valid_from, v.id",
        |q| q.bind(owner),
    )
    .await?
    .into_iter()
    .map(|(_, _, v)| v)
    .collect();
    if let Some(current) = features::find(&mut *conn, id).await? {
        let (org_id, project): (String, Option<i64>) =
            sqlx::query_as("SELECT org_id, project FROM semantic_sets WHERE id = $1")
                .bind(current.set.raw())
                .fetch_one(&mut *conn)
                .await
                .map_err(db_error)?;
        out.push(FeatureVersion {
            feature_id: current.id.clone(),
            origin_id: current.id,
            org_id,
            project: project.map(ProjectHandle::from_raw),
            set_id: current.set_id,
            category: current.category,
            category_id: current.category_id,
            tag: current.tag,
            feature: current.feature,
            value: current.value,
            metadata: current.metadata,
            citations: current.citations,
            valid_from_micros: current.valid_from_micros,
            valid_to_micros: None,
            changed_by: current.changed_by,
        });
    }
    Ok(out)
}

async fn rows_at(conn: &mut PgConnection, sets: &[i64], at: i64) -> Result<FeatureRowsAt> {
    let current = features::query(
        &mut *conn,
        "f.set_ref = ANY($1) AND GREATEST(f.valid_from, f.created_at) <= $2 ORDER BY f.id",
        |q| q.bind(sets.to_vec()).bind(at),
    )
    .await?;
    let kept = versions(
        &mut *conn,
        "v.set_ref = ANY($1) AND v.valid_from <= $2 AND v.valid_to > $2 ORDER BY v.id",
        |q| q.bind(sets.to_vec()).bind(at),
    )
    .await?;
    let kept = kept
        .into_iter()
        .map(|(number, set_ref, version)| KeptVersion {
            number,
            set: SetId::from_raw(set_ref),
            version,
        })
        .collect();
    Ok(FeatureRowsAt { current, kept })
}

/// A consolidation replaced `sources` by `survivors` (internal and public ids): their
/// versions become the survivors' (copied to each), without the deletion tombstones.
pub(super) async fn merge_into(
    tx: &mut PgConnection,
    sources: &[i64],
    survivors: &[(i64, &str)],
) -> Result<()> {
    sqlx::query(
        "DELETE FROM feature_versions
         WHERE feature = ANY($1) AND changed_by = 4 AND valid_from = valid_to",
    )
    .bind(sources)
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    for (index, (survivor, survivor_id)) in survivors.iter().enumerate() {
        if index == 0 {
            sqlx::query(
                "UPDATE feature_versions SET feature = $2, feature_public_id = $3
                 WHERE feature = ANY($1)",
            )
            .bind(sources)
            .bind(survivor)
            .bind(survivor_id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        } else {
            let (first, _) = survivors[0];
            let copies: Vec<(String, i64, i64)> = sqlx::query_as(
                "WITH src AS (
                     SELECT * FROM feature_versions WHERE feature = $1 ORDER BY id
                 ), copied AS (
                     INSERT INTO feature_versions (org_id, feature, feature_public_id,
                         origin_id, project, set_ref, set_id, category, category_id, tag,
                         feature_name, value, metadata, valid_from, valid_to, changed_by)
                     SELECT org_id, $2, $3, origin_id, project, set_ref, set_id, category,
                         category_id, tag, feature_name, value, metadata, valid_from,
                         valid_to, changed_by FROM src
                     RETURNING org_id, id, origin_id, valid_from
                 )
                 SELECT c.org_id, s.id, c.id FROM copied c JOIN src s
                     ON s.origin_id = c.origin_id AND s.valid_from = c.valid_from",
            )
            .bind(first)
            .bind(survivor)
            .bind(survivor_id)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
            for (org, from, to) in copies {
                sqlx::query(
                    "INSERT INTO feature_version_citations (org_id, version, episode)
                     SELECT org_id, $3, episode FROM feature_version_citations
                     WHERE org_id = $1 AND version = $2 ON CONFLICT DO NOTHING",
                )
                .bind(&org)
                .bind(from)
                .bind(to)
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
            }
        }
        sqlx::query(
            "SELECT memmachine_trim_feature_versions(org_id, $1) FROM semantic_features
             WHERE id = $1",
        )
        .bind(survivor)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

/// Writes kept versions as they were. The owner is the feature with that public id, or
/// the owner its earlier restored versions got; a deleted feature's versions get a
/// negative owner of their own (no feature row ever has one).
async fn restore(tx: &mut PgConnection, versions: &[RestoredVersion]) -> Result<()> {
    for v in versions {
        let Some(valid_to) = v.valid_to_micros else {
            sqlx::query(
                "UPDATE semantic_features SET valid_from = $2, changed_by = $3
                 WHERE public_id = $1 AND set_ref = $4",
            )
            .bind(&v.feature_id)
            .bind(v.valid_from_micros)
            .bind(v.changed_by.code())
            .bind(v.set.raw())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            continue;
        };
        let metadata = serde_json::to_string(&v.metadata).map_err(|err| {
            memmachine_core::error::Error::Internal(format!("encoding metadata: {err}"))
        })?;
        let kept: Option<(String, i64)> = sqlx::query_as(
            "INSERT INTO feature_versions (org_id, feature, feature_public_id, origin_id,
                 project, set_ref, set_id, category, category_id, tag, feature_name, value,
                 metadata, valid_from, valid_to, changed_by)
             SELECT s.org_id, COALESCE(
                     (SELECT id FROM semantic_features WHERE public_id = $1 LIMIT 1),
                     (SELECT feature FROM feature_versions WHERE feature_public_id = $1
                      LIMIT 1), 0),
                 $1, $2, s.project, s.id, s.set_id, $4, $5, $6, $7, $8, $9, $10, $11, $12
             FROM semantic_sets s WHERE s.id = $3 RETURNING org_id, id",
        )
        .bind(&v.feature_id)
        .bind(&v.origin_id)
        .bind(v.set.raw())
        .bind(&v.category)
        .bind(&v.category_id)
        .bind(&v.tag)
        .bind(&v.feature)
        .bind(&v.value)
        .bind(&metadata)
        .bind(v.valid_from_micros)
        .bind(valid_to)
        .bind(v.changed_by.code())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        let Some((org, id)) = kept else {
            return Err(memmachine_core::error::Error::NotFound(format!(
                "set {} does not exist",
                v.set
            )));
        };
        sqlx::query("UPDATE feature_versions SET feature = -id WHERE org_id = $1 AND id = $2 AND feature = 0")
            .bind(&org)
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let episodes: Vec<i64> = v.citations.iter().map(|e| e.raw()).collect();
        sqlx::query(
            "INSERT INTO feature_version_citations (org_id, version, episode)
             SELECT $1, $2, e FROM unnest($3::bigint[]) AS e ON CONFLICT DO NOTHING",
        )
        .bind(&org)
        .bind(id)
        .bind(&episodes)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    }
    Ok(())
}

#[async_trait]
impl FeatureHistory for PostgresStore {
    async fn versions_of_sets(&self, sets: &[SetId]) -> Result<Vec<FeatureVersion>> {
        let sets = raw_ids(sets, SetId::raw);
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let found = versions(&mut tx, "v.set_ref = ANY($1) ORDER BY v.id", |q| {
            q.bind(sets)
        })
        .await?
        .into_iter()
        .map(|(_, _, v)| v)
        .collect();
        tx.commit().await.map_err(db_error)?;
        Ok(found)
    }

    async fn restore_feature_versions(&self, versions: Vec<RestoredVersion>) -> Result<()> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        restore(&mut tx, &versions).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(())
    }

    async fn feature_history(&self, id: &str) -> Result<Vec<FeatureVersion>> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let found = history(&mut tx, id).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(found)
    }

    async fn feature_rows_at(&self, sets: &[SetId], at_micros: i64) -> Result<FeatureRowsAt> {
        let sets = raw_ids(sets, SetId::raw);
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let found = rows_at(&mut tx, &sets, at_micros).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(found)
    }

    async fn set_feature_history_limit(&self, keep: usize) -> Result<()> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        sqlx::query("UPDATE feature_history_settings SET keep = $1 WHERE id = 1 AND keep <> $1")
            .bind(keep)
            .execute(self.pool())
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn delete_feature_history(&self, features: &[FeatureId]) -> Result<u64> {
        let ids = raw_ids(features, FeatureId::raw);
        sqlx::query("DELETE FROM feature_versions WHERE feature = ANY($1)")
            .bind(&ids)
            .execute(self.pool())
            .await
            .map(|r| r.rows_affected())
            .map_err(db_error)
    }

    async fn delete_versions_citing(&self, episodes: &[EpisodeHandle]) -> Result<u64> {
        let ids = raw_ids(episodes, EpisodeHandle::raw);
        sqlx::query(
            "DELETE FROM feature_versions v USING feature_version_citations c
             WHERE c.org_id = v.org_id AND c.version = v.id AND c.episode = ANY($1)",
        )
        .bind(&ids)
        .execute(self.pool())
        .await
        .map(|r| r.rows_affected())
        .map_err(db_error)
    }
}
