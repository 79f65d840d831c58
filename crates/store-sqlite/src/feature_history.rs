//! SQL for the history of features. Triggers (migration 9) record a version whenever a
//! feature's names or value change or it is deleted; this module reads them, re-points
//! a consolidation's sources to the survivor, bounds and drops them.

use async_trait::async_trait;
use rusqlite::{Connection, Row, params};

use super::SqliteStore;
use super::error::storage_error;
use super::helpers::{bad_column, id_array, raw_ids};
use super::semantic_features as features;
use memmachine_core::error::Result;
use memmachine_core::model::{EpisodeHandle, FeatureId, ProjectHandle, SetId};
use memmachine_core::store::{
    ChangedBy, FeatureHistory, FeatureRowsAt, FeatureVersion, KeptVersion, RestoredVersion,
};

const COLUMNS: &str = "v.id, v.feature_public_id, v.origin_id, v.org_id, v.project, v.set_id, \
     v.category, v.category_id, v.tag, v.feature_name, v.value, v.metadata, v.valid_from, \
     v.valid_to, v.changed_by, v.set_ref";

fn version_of(row: &Row<'_>) -> rusqlite::Result<(i64, i64, FeatureVersion)> {
    let metadata: String = row.get(11)?;
    Ok((
        row.get(0)?,
        row.get(15)?,
        FeatureVersion {
            feature_id: row.get(1)?,
            origin_id: row.get(2)?,
            org_id: row.get(3)?,
            project: row.get::<_, Option<i64>>(4)?.map(ProjectHandle::from_raw),
            set_id: row.get(5)?,
            category: row.get(6)?,
            category_id: row.get(7)?,
            tag: row.get(8)?,
            feature: row.get(9)?,
            value: row.get(10)?,
            metadata: serde_json::from_str(&metadata).map_err(|err| bad_column(11, err))?,
            citations: Vec::new(),
            valid_from_micros: row.get(12)?,
            valid_to_micros: Some(row.get(13)?),
            changed_by: ChangedBy::from_code(row.get(14)?),
        },
    ))
}

/// The still stored episodes a version cites, oldest first.
fn citations(conn: &Connection, version: i64) -> Result<Vec<uuid::Uuid>> {
    conn.prepare_cached(
        "SELECT e.uid FROM feature_version_citations c JOIN episodes e ON e.id = c.episode
         WHERE c.version = ?1 ORDER BY c.episode",
    )
    .and_then(|mut stmt| {
        stmt.query_map([version], |row| {
            row.get::<_, [u8; 16]>(0).map(uuid::Uuid::from_bytes)
        })?
        .collect()
    })
    .map_err(storage_error)
}

fn versions(
    conn: &Connection,
    filter: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<(i64, i64, FeatureVersion)>> {
    let mut rows: Vec<(i64, i64, FeatureVersion)> = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM feature_versions v WHERE {filter}"
        ))
        .and_then(|mut stmt| stmt.query_map(params, version_of)?.collect())
        .map_err(storage_error)?;
    for (id, _, version) in &mut rows {
        version.citations = citations(conn, *id)?;
    }
    Ok(rows)
}

pub(super) fn history(conn: &Connection, id: &str) -> Result<Vec<FeatureVersion>> {
    let mut out: Vec<FeatureVersion> = versions(
        conn,
        "v.feature_public_id = ?1 ORDER BY v.valid_from, v.id",
        [id],
    )?
    .into_iter()
    .map(|(_, _, v)| v)
    .collect();
    if let Some(current) = features::find(conn, id)? {
        let (org_id, project): (String, Option<i64>) = conn
            .prepare_cached("SELECT org_id, project FROM semantic_sets WHERE id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([current.set.raw()], |row| Ok((row.get(0)?, row.get(1)?)))
            })
            .map_err(storage_error)?;
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

fn rows_at(conn: &Connection, sets: &[i64], at: i64) -> Result<FeatureRowsAt> {
    let current = features::query(
        conn,
        "f.set_ref IN rarray(?1) AND MAX(f.valid_from, f.created_at) <= ?2 ORDER BY f.id",
        params![id_array(sets), at],
    )?;
    let kept = versions(
        conn,
        "v.set_ref IN rarray(?1) AND v.valid_from <= ?2 AND v.valid_to > ?2 ORDER BY v.id",
        params![id_array(sets), at],
    )?;
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

/// Keeps the newest `keep` (the setting) versions of the feature.
fn trim(conn: &Connection, feature: i64) -> Result<()> {
    conn.prepare_cached(
        "DELETE FROM feature_versions WHERE feature = ?1 AND id <= (
             SELECT id FROM feature_versions WHERE feature = ?1 ORDER BY id DESC
             LIMIT 1 OFFSET (SELECT keep FROM feature_history_settings WHERE id = 1))",
    )
    .and_then(|mut stmt| stmt.execute([feature]))
    .map_err(storage_error)?;
    Ok(())
}

/// A consolidation replaced `sources` by `survivors` (internal and public ids): their
/// versions become the survivors' (copied to each), without the deletion tombstones.
pub(super) fn merge_into(
    conn: &Connection,
    sources: &[i64],
    survivors: &[(i64, &str)],
) -> Result<()> {
    conn.prepare_cached(
        "DELETE FROM feature_versions
         WHERE feature IN rarray(?1) AND changed_by = 4 AND valid_from = valid_to",
    )
    .and_then(|mut stmt| stmt.execute([id_array(sources)]))
    .map_err(storage_error)?;
    let Some(((first, first_id), others)) = survivors.split_first() else {
        return Ok(());
    };
    conn.prepare_cached(
        "UPDATE feature_versions SET feature = ?2, feature_public_id = ?3
         WHERE feature IN rarray(?1)",
    )
    .and_then(|mut stmt| stmt.execute(params![id_array(sources), first, first_id]))
    .map_err(storage_error)?;
    let ids: Vec<i64> = conn
        .prepare_cached("SELECT id FROM feature_versions WHERE feature = ?1 ORDER BY id")
        .and_then(|mut stmt| stmt.query_map([first], |row| row.get(0))?.collect())
        .map_err(storage_error)?;
    for (survivor, survivor_id) in others {
        for version in &ids {
            let copy: i64 = conn
                .prepare_cached(
                    "INSERT INTO feature_versions (feature, feature_public_id, origin_id, org_id,
                         project, set_ref, set_id, category, category_id, tag, feature_name,
                         value, metadata, valid_from, valid_to, changed_by)
                     SELECT ?2, ?3, origin_id, org_id, project, set_ref, set_id, category,
                         category_id, tag, feature_name, value, metadata, valid_from,
                         valid_to, changed_by
                     FROM feature_versions WHERE id = ?1 RETURNING id",
                )
                .and_then(|mut stmt| {
                    stmt.query_row(params![version, survivor, survivor_id], |row| row.get(0))
                })
                .map_err(storage_error)?;
            conn.prepare_cached(
                "INSERT INTO feature_version_citations (version, episode)
                 SELECT ?2, episode FROM feature_version_citations WHERE version = ?1",
            )
            .and_then(|mut stmt| stmt.execute(params![version, copy]))
            .map_err(storage_error)?;
        }
        trim(conn, *survivor)?;
    }
    trim(conn, *first)
}

/// Writes kept versions as they were. The owner is the feature with that public id, or
/// the owner its earlier restored versions got; a deleted feature's versions get a
/// negative owner of their own (no feature row ever has one).
fn restore(conn: &Connection, versions: &[RestoredVersion]) -> Result<()> {
    for v in versions {
        let Some(valid_to) = v.valid_to_micros else {
            conn.prepare_cached(
                "UPDATE semantic_features SET valid_from = ?2, changed_by = ?3
                 WHERE public_id = ?1 AND set_ref = ?4",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    v.feature_id,
                    v.valid_from_micros,
                    v.changed_by.code(),
                    v.set.raw()
                ])
            })
            .map_err(storage_error)?;
            continue;
        };
        let metadata = serde_json::to_string(&v.metadata).map_err(|err| {
            memmachine_core::error::Error::Internal(format!("encoding metadata: {err}"))
        })?;
        let id: i64 = conn
            .prepare_cached(
                "INSERT INTO feature_versions (feature, feature_public_id, origin_id, org_id,
                     project, set_ref, set_id, category, category_id, tag, feature_name, value,
                     metadata, valid_from, valid_to, changed_by)
                 SELECT COALESCE(
                         (SELECT id FROM semantic_features WHERE public_id = ?1),
                         (SELECT feature FROM feature_versions WHERE feature_public_id = ?1
                          LIMIT 1), 0),
                     ?1, ?2, s.org_id, s.project, s.id, s.set_id, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
                     ?11, ?12
                 FROM semantic_sets s WHERE s.id = ?3 RETURNING id",
            )
            .and_then(|mut stmt| {
                stmt.query_row(
                    params![
                        v.feature_id,
                        v.origin_id,
                        v.set.raw(),
                        v.category,
                        v.category_id,
                        v.tag,
                        v.feature,
                        v.value,
                        metadata,
                        v.valid_from_micros,
                        valid_to,
                        v.changed_by.code()
                    ],
                    |row| row.get(0),
                )
            })
            .map_err(|err| match err {
                rusqlite::Error::QueryReturnedNoRows => {
                    memmachine_core::error::Error::NotFound(format!("set {} does not exist", v.set))
                }
                err => storage_error(err),
            })?;
        conn.prepare_cached(
            "UPDATE feature_versions SET feature = -id WHERE id = ?1 AND feature = 0",
        )
        .and_then(|mut stmt| stmt.execute([id]))
        .map_err(storage_error)?;
        let mut cite = conn
            .prepare_cached(
                "INSERT OR IGNORE INTO feature_version_citations (version, episode) VALUES (?1, ?2)",
            )
            .map_err(storage_error)?;
        for episode in &v.citations {
            cite.execute(params![id, episode.raw()])
                .map_err(storage_error)?;
        }
    }
    Ok(())
}

#[async_trait]
impl FeatureHistory for SqliteStore {
    async fn versions_of_sets(&self, sets: &[SetId]) -> Result<Vec<FeatureVersion>> {
        let sets = raw_ids(sets, SetId::raw);
        self.readers
            .read(move |tx| {
                Ok(versions(
                    tx,
                    "v.set_ref IN rarray(?1) ORDER BY v.id",
                    [id_array(&sets)],
                )?
                .into_iter()
                .map(|(_, _, v)| v)
                .collect())
            })
            .await
    }

    async fn restore_feature_versions(&self, versions: Vec<RestoredVersion>) -> Result<()> {
        self.writer
            .write(move |conn| restore(conn, &versions))
            .await
    }

    async fn feature_history(&self, id: &str) -> Result<Vec<FeatureVersion>> {
        let id = id.to_string();
        self.readers.read(move |tx| history(tx, &id)).await
    }

    async fn feature_rows_at(&self, sets: &[SetId], at_micros: i64) -> Result<FeatureRowsAt> {
        let sets = raw_ids(sets, SetId::raw);
        self.readers
            .read(move |tx| rows_at(tx, &sets, at_micros))
            .await
    }

    async fn set_feature_history_limit(&self, keep: usize) -> Result<()> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE feature_history_settings SET keep = ?1 WHERE id = 1 AND keep != ?1",
                    [keep],
                )
                .map_err(storage_error)?;
                Ok(())
            })
            .await
    }

    async fn delete_feature_history(&self, features: &[FeatureId]) -> Result<u64> {
        let ids = raw_ids(features, FeatureId::raw);
        self.writer
            .write(move |conn| {
                conn.prepare_cached("DELETE FROM feature_versions WHERE feature IN rarray(?1)")
                    .and_then(|mut stmt| stmt.execute([id_array(&ids)]))
                    .map(|n| n as u64)
                    .map_err(storage_error)
            })
            .await
    }

    async fn delete_versions_citing(&self, episodes: &[EpisodeHandle]) -> Result<u64> {
        let ids = raw_ids(episodes, EpisodeHandle::raw);
        self.writer
            .write(move |conn| {
                conn.prepare_cached(
                    "DELETE FROM feature_versions WHERE id IN (
                         SELECT version FROM feature_version_citations
                         WHERE episode IN rarray(?1))",
                )
                .and_then(|mut stmt| stmt.execute([id_array(&ids)]))
                .map(|n| n as u64)
                .map_err(storage_error)
            })
            .await
    }
}
