//! SQL for semantic features: the features of a set with the episodes they cite, the
//! queue of features waiting for a vector, and their vectors.
//!
//! A feature's `match_key` is the domain's `category_key + '\u{1f}' + tag_key + '\u{1f}' +
//! feature_key` (each part normalised, lower case): the features of one category are
//! those whose key starts with the category key and the separator, found as a range of
//! the (set_ref, match_key, value_key) index.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::error::storage_error;
use super::helpers::{bad_column, bump_sets, id_array, is_constraint, now_micros};
use super::semantic_sets::require_set;
use super::vectors;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::{EpisodeHandle, FeatureId, ProjectHandle, SetId};
use memmachine_core::store::semantic_features::feature_embedding_text;
use memmachine_core::store::{
    ChangedBy, Feature, FeatureUpdate, IndexedFeature, NewFeature, PendingFeatureEmbedding,
};

/// Columns read by `from_row`, over `semantic_features f JOIN semantic_sets s`.
const COLUMNS: &str = "f.id, f.public_id, f.set_ref, s.set_id, f.category, f.category_id, \
     f.tag, f.feature, f.value, f.metadata, f.created_at, f.updated_at, \
     MAX(f.valid_from, f.created_at), f.changed_by";

const FROM: &str = "semantic_features f JOIN semantic_sets s ON s.id = f.set_ref";

pub(super) fn from_row(row: &Row<'_>) -> rusqlite::Result<Feature> {
    let metadata: String = row.get(9)?;
    Ok(Feature {
        internal_id: FeatureId::from_raw(row.get(0)?),
        id: row.get(1)?,
        set: SetId::from_raw(row.get(2)?),
        set_id: row.get(3)?,
        category: row.get(4)?,
        category_id: row.get(5)?,
        tag: row.get(6)?,
        feature: row.get(7)?,
        value: row.get(8)?,
        metadata: serde_json::from_str(&metadata).map_err(|err| bad_column(9, err))?,
        citations: Vec::new(),
        created_at_micros: row.get(10)?,
        updated_at_micros: row.get(11)?,
        valid_from_micros: row.get(12)?,
        changed_by: ChangedBy::from_code(row.get(13)?),
    })
}

/// Fills in the features' citations: episode uids, oldest (lowest row id) first, read
/// in one query for all of them.
pub(super) fn with_citations(
    conn: &Connection,
    mut features: Vec<Feature>,
) -> Result<Vec<Feature>> {
    if features.is_empty() {
        return Ok(features);
    }
    let ids: Vec<i64> = features.iter().map(|f| f.internal_id.raw()).collect();
    let mut cited: BTreeMap<i64, Vec<uuid::Uuid>> = BTreeMap::new();
    conn.prepare_cached(
        "SELECT c.feature, e.uid FROM semantic_citations c JOIN episodes e ON e.id = c.episode
         WHERE c.feature IN rarray(?1) ORDER BY c.feature, c.episode",
    )
    .and_then(|mut stmt| {
        let mut rows = stmt.query([id_array(&ids)])?;
        while let Some(row) = rows.next()? {
            let uid = uuid::Uuid::from_bytes(row.get::<_, [u8; 16]>(1)?);
            cited.entry(row.get(0)?).or_default().push(uid);
        }
        Ok(())
    })
    .map_err(storage_error)?;
    for feature in &mut features {
        feature.citations = cited.remove(&feature.internal_id.raw()).unwrap_or_default();
    }
    Ok(features)
}

pub(super) fn query(
    conn: &Connection,
    filter: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<Feature>> {
    let features = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM {FROM} WHERE {filter}"))
        .and_then(|mut stmt| stmt.query_map(params, from_row)?.collect())
        .map_err(storage_error)?;
    with_citations(conn, features)
}

pub(super) fn by_id(conn: &Connection, internal_id: i64) -> Result<Option<Feature>> {
    Ok(query(conn, "f.id = ?1", [internal_id])?.pop())
}

pub(super) fn find(conn: &Connection, id: &str) -> Result<Option<Feature>> {
    Ok(query(conn, "f.public_id = ?1", [id])?.pop())
}

/// Features by internal id, in the order asked (missing ones left out).
pub(super) fn by_ids(conn: &Connection, ids: &[i64]) -> Result<Vec<Feature>> {
    let mut found: BTreeMap<i64, Feature> = query(conn, "f.id IN rarray(?1)", [id_array(ids)])?
        .into_iter()
        .map(|f| (f.internal_id.raw(), f))
        .collect();
    Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
}

pub(super) fn list(
    conn: &Connection,
    sets: &[i64],
    after: i64,
    limit: usize,
) -> Result<Vec<Feature>> {
    query(
        conn,
        "f.set_ref IN rarray(?1) AND f.id > ?2 ORDER BY f.id LIMIT ?3",
        params![id_array(sets), after, limit as i64],
    )
}

/// The set's features whose match key starts with `category_key` and the separator.
pub(super) fn of_category(conn: &Connection, set: i64, category_key: &str) -> Result<Vec<Feature>> {
    query(
        conn,
        "f.set_ref = ?1 AND f.match_key >= ?2 || char(31) AND f.match_key < ?2 || char(32)
         ORDER BY f.id",
        params![set, category_key],
    )
}

pub(super) fn indexed(conn: &Connection, sets: &[i64]) -> Result<Vec<IndexedFeature>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT f.id, f.set_ref, s.set_id, f.category, f.tag, f.feature, f.value,
                 f.metadata, f.created_at, f.updated_at, v.embedder, v.vector
             FROM semantic_features f JOIN semantic_sets s ON s.id = f.set_ref
             LEFT JOIN feature_embeddings v ON v.feature = f.id
             WHERE f.set_ref IN rarray(?1) ORDER BY f.id",
        )
        .map_err(storage_error)?;
    stmt.query_map([id_array(sets)], |row| {
        let metadata: String = row.get(7)?;
        let metadata: serde_json::Value =
            serde_json::from_str(&metadata).map_err(|err| bad_column(7, err))?;
        let embedder: Option<String> = row.get(10)?;
        let vector: Option<Vec<u8>> = row.get(11)?;
        Ok(IndexedFeature {
            internal_id: FeatureId::from_raw(row.get(0)?),
            set: SetId::from_raw(row.get(1)?),
            set_id: row.get(2)?,
            category: row.get(3)?,
            tag: row.get(4)?,
            feature: row.get(5)?,
            value: row.get(6)?,
            metadata: memmachine_core::store::semantic_features::flatten_metadata(&metadata),
            created_at_micros: row.get(8)?,
            updated_at_micros: row.get(9)?,
            vector: embedder
                .zip(vector)
                .map(|(embedder, bytes)| (embedder, vectors::decode(&bytes).into_vec())),
        })
    })
    .and_then(|rows| rows.collect())
    .map_err(storage_error)
}

fn encode_metadata(metadata: &serde_json::Value) -> Result<String> {
    serde_json::to_string(metadata)
        .map_err(|err| Error::Internal(format!("encoding feature metadata: {err}")))
}

/// Cites these episodes in the feature (those already cited are left as they are).
pub(super) fn cite(conn: &Connection, feature: i64, episodes: &[EpisodeHandle]) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO semantic_citations (feature, episode) VALUES (?1, ?2)",
        )
        .map_err(storage_error)?;
    for episode in episodes {
        stmt.execute(params![feature, episode.raw()])
            .map_err(|err| {
                if is_constraint(&err) {
                    Error::NotFound(format!("episode {episode} does not exist"))
                } else {
                    storage_error(err)
                }
            })?;
    }
    Ok(())
}

/// Queues the feature for a vector by `embedder` (none: it stays lexical).
fn queue_vector(conn: &Connection, feature: i64, embedder: Option<&str>) -> Result<()> {
    let Some(embedder) = embedder else {
        return Ok(());
    };
    conn.prepare_cached(
        "INSERT OR REPLACE INTO feature_embedding_queue (feature, embedder) VALUES (?1, ?2)",
    )
    .and_then(|mut stmt| stmt.execute(params![feature, embedder]))
    .map_err(storage_error)?;
    Ok(())
}

/// Inserts a feature of `set` with its citations (queued for a vector by `embedder`);
/// returns its internal id. Does not bump the version: callers do, once.
pub(super) fn insert(
    conn: &Connection,
    set: i64,
    feature: &NewFeature,
    citations: &[EpisodeHandle],
    embedder: Option<&str>,
    changed_by: ChangedBy,
) -> Result<i64> {
    let now = now_micros();
    let metadata = encode_metadata(&feature.metadata)?;
    let id: i64 = conn
        .prepare_cached(
            "INSERT INTO semantic_features (public_id, set_ref, category, category_id, tag,
                 feature, value, metadata, match_key, value_key, created_at, updated_at,
                 valid_from, changed_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?11, ?12) RETURNING id",
        )
        .and_then(|mut stmt| {
            stmt.query_row(
                params![
                    feature.id,
                    set,
                    feature.category,
                    feature.category_id,
                    feature.tag,
                    feature.feature,
                    feature.value,
                    metadata,
                    feature.match_key,
                    feature.value_key,
                    now,
                    changed_by.code()
                ],
                |row| row.get(0),
            )
        })
        .map_err(|err| {
            if is_constraint(&err) {
                Error::AlreadyExists(format!("feature {} already exists", feature.id))
            } else {
                storage_error(err)
            }
        })?;
    cite(conn, id, citations)?;
    queue_vector(conn, id, embedder)?;
    Ok(id)
}

pub(super) fn add(
    conn: &Connection,
    set: i64,
    feature: &NewFeature,
    citations: &[EpisodeHandle],
    embedder: Option<&str>,
) -> Result<Feature> {
    require_set(conn, set)?;
    let id = insert(conn, set, feature, citations, embedder, ChangedBy::Manual)?;
    bump_sets(conn, &[set])?;
    by_id(conn, id)?.ok_or_else(|| Error::Internal("an added feature vanished".into()))
}

/// Adds the feature, or cites the episodes in the set's feature with the same keys
/// and value (touching its `updated_at`).
pub(super) fn add_or_cite(
    conn: &Connection,
    set: i64,
    feature: &NewFeature,
    citations: &[EpisodeHandle],
    embedder: Option<&str>,
) -> Result<()> {
    let same: Option<i64> = conn
        .prepare_cached(
            "SELECT id FROM semantic_features
             WHERE set_ref = ?1 AND match_key = ?2 AND value_key = ?3 ORDER BY id LIMIT 1",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![set, feature.match_key, feature.value_key], |row| {
                row.get(0)
            })
            .optional()
        })
        .map_err(storage_error)?;
    match same {
        Some(id) => {
            cite(conn, id, citations)?;
            conn.prepare_cached("UPDATE semantic_features SET updated_at = ?2 WHERE id = ?1")
                .and_then(|mut stmt| stmt.execute(params![id, now_micros()]))
                .map_err(storage_error)?;
        }
        None => {
            insert(
                conn,
                set,
                feature,
                citations,
                embedder,
                ChangedBy::Extraction,
            )?;
        }
    }
    Ok(())
}

/// Sets the value (and names) of the set's features with the feature's match key and
/// cites the episodes in them; adds the feature when there is none.
pub(super) fn update_or_add(
    conn: &Connection,
    set: i64,
    feature: &NewFeature,
    citations: &[EpisodeHandle],
    embedder: Option<&str>,
) -> Result<()> {
    let ids: Vec<i64> = conn
        .prepare_cached(
            "UPDATE semantic_features SET value = ?3, value_key = ?4, category = ?5,
                 category_id = ?6, tag = ?7, feature = ?8, updated_at = ?9,
                 changed_by = CASE WHEN value IS NOT ?3 OR category IS NOT ?5 OR tag IS NOT ?7
                     OR feature IS NOT ?8 THEN ?10 ELSE changed_by END
             WHERE set_ref = ?1 AND match_key = ?2 RETURNING id",
        )
        .and_then(|mut stmt| {
            stmt.query_map(
                params![
                    set,
                    feature.match_key,
                    feature.value,
                    feature.value_key,
                    feature.category,
                    feature.category_id,
                    feature.tag,
                    feature.feature,
                    now_micros(),
                    ChangedBy::Extraction.code()
                ],
                |row| row.get(0),
            )?
            .collect()
        })
        .map_err(storage_error)?;
    if ids.is_empty() {
        insert(
            conn,
            set,
            feature,
            citations,
            embedder,
            ChangedBy::Extraction,
        )?;
        return Ok(());
    }
    for id in ids {
        cite(conn, id, citations)?;
        queue_vector(conn, id, embedder)?;
    }
    Ok(())
}

/// Deletes the set's features with this match key.
pub(super) fn delete_matching(conn: &Connection, set: i64, match_key: &str) -> Result<()> {
    conn.prepare_cached("DELETE FROM semantic_features WHERE set_ref = ?1 AND match_key = ?2")
        .and_then(|mut stmt| stmt.execute(params![set, match_key]))
        .map_err(storage_error)?;
    Ok(())
}

pub(super) fn update(
    conn: &Connection,
    internal_id: i64,
    update: &FeatureUpdate,
    embedder: Option<&str>,
) -> Result<()> {
    let Some(current) = by_id(conn, internal_id)? else {
        return Err(Error::NotFound(format!(
            "feature {internal_id} does not exist"
        )));
    };
    let (category, category_id) = update
        .category
        .clone()
        .unwrap_or((current.category.clone(), current.category_id.clone()));
    let metadata = encode_metadata(update.metadata.as_ref().unwrap_or(&current.metadata))?;
    // A new version when a field the history keeps changes (metadata is not one).
    let differs = |new: &Option<String>, old: &str| new.as_deref().is_some_and(|n| n != old);
    let versioned = category != current.category
        || differs(&update.tag, &current.tag)
        || differs(&update.feature, &current.feature)
        || differs(&update.value, &current.value);
    let changed_by = if versioned {
        ChangedBy::Manual.code()
    } else {
        current.changed_by.code()
    };
    conn.prepare_cached(
        "UPDATE semantic_features SET category = ?2, category_id = ?3,
             tag = COALESCE(?4, tag), feature = COALESCE(?5, feature),
             value = COALESCE(?6, value), metadata = ?7,
             match_key = COALESCE(?8, match_key), value_key = COALESCE(?9, value_key),
             updated_at = ?10, changed_by = ?11
         WHERE id = ?1",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            internal_id,
            category,
            category_id,
            update.tag,
            update.feature,
            update.value,
            metadata,
            update.match_key,
            update.value_key,
            now_micros(),
            changed_by
        ])
    })
    .map_err(storage_error)?;
    // The embedded text is the feature's name and value.
    if update.feature.is_some() || update.value.is_some() {
        queue_vector(conn, internal_id, embedder)?;
    }
    bump_sets(conn, &[current.set.raw()])
}

/// Deletes those of the features that exist; returns how many.
pub(super) fn delete(conn: &Connection, ids: &[i64]) -> Result<u64> {
    let sets: Vec<i64> = conn
        .prepare_cached("SELECT DISTINCT set_ref FROM semantic_features WHERE id IN rarray(?1)")
        .and_then(|mut stmt| stmt.query_map([id_array(ids)], |row| row.get(0))?.collect())
        .map_err(storage_error)?;
    let deleted = conn
        .prepare_cached("DELETE FROM semantic_features WHERE id IN rarray(?1)")
        .and_then(|mut stmt| stmt.execute([id_array(ids)]))
        .map_err(storage_error)?;
    bump_sets(conn, &sets)?;
    Ok(deleted as u64)
}

/// Replaces the set's features `remove` by `add`, which cite every episode the removed
/// ones cited; returns the new features' numbers (in `add`'s order), to which the caller
/// hands the removed ones' history.
pub(super) fn consolidate(
    conn: &Connection,
    set: i64,
    remove: &[i64],
    add: &[NewFeature],
    embedder: Option<&str>,
) -> Result<Vec<i64>> {
    require_set(conn, set)?;
    let citations: Vec<EpisodeHandle> = conn
        .prepare_cached(
            "SELECT DISTINCT c.episode FROM semantic_citations c
             JOIN semantic_features f ON f.id = c.feature
             WHERE c.feature IN rarray(?1) AND f.set_ref = ?2 ORDER BY c.episode",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![id_array(remove), set], |row| {
                Ok(EpisodeHandle::from_raw(row.get(0)?))
            })?
            .collect()
        })
        .map_err(storage_error)?;
    conn.prepare_cached("DELETE FROM semantic_features WHERE id IN rarray(?1) AND set_ref = ?2")
        .and_then(|mut stmt| stmt.execute(params![id_array(remove), set]))
        .map_err(storage_error)?;
    let mut survivors = Vec::with_capacity(add.len());
    for feature in add {
        let id = insert(
            conn,
            set,
            feature,
            &citations,
            embedder,
            ChangedBy::Consolidation,
        )?;
        survivors.push(id);
    }
    bump_sets(conn, &[set])?;
    Ok(survivors)
}

// Feature vectors.

/// The oldest `limit` features waiting for a vector, with the text to embed.
/// Leases the oldest `limit` features waiting for a vector that nobody holds.
pub(super) fn claim_vectors(
    conn: &Connection,
    limit: usize,
    lease: std::time::Duration,
) -> Result<Vec<PendingFeatureEmbedding>> {
    let now = chrono::Utc::now().timestamp_micros();
    let pending: Vec<PendingFeatureEmbedding> = conn
        .prepare_cached(
            "SELECT q.feature, q.embedder, f.feature, f.value, s.org_id, s.project
             FROM feature_embedding_queue q JOIN semantic_features f ON f.id = q.feature
                 JOIN semantic_sets s ON s.id = f.set_ref
             WHERE q.lease_until <= ?1 ORDER BY q.feature LIMIT ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![now, limit as i64], |row| {
                let (feature, value): (String, String) = (row.get(2)?, row.get(3)?);
                Ok(PendingFeatureEmbedding {
                    feature: FeatureId::from_raw(row.get(0)?),
                    embedder: row.get(1)?,
                    text: feature_embedding_text(&feature, &value),
                    org_id: row.get(4)?,
                    project: row.get::<_, Option<i64>>(5)?.map(ProjectHandle::from_raw),
                })
            })?
            .collect()
        })
        .map_err(storage_error)?;
    let until = now.saturating_add(lease.as_micros() as i64);
    let ids: Vec<i64> = pending.iter().map(|p| p.feature.raw()).collect();
    conn.prepare_cached(
        "UPDATE feature_embedding_queue SET lease_until = ?2 WHERE feature IN rarray(?1)",
    )
    .and_then(|mut stmt| stmt.execute(params![id_array(&ids), until]))
    .map_err(storage_error)?;
    Ok(pending)
}

pub(super) fn release_vectors(conn: &Connection, features: &[i64]) -> Result<()> {
    conn.prepare_cached(
        "UPDATE feature_embedding_queue SET lease_until = 0 WHERE feature IN rarray(?1)",
    )
    .and_then(|mut stmt| stmt.execute([id_array(features)]))
    .map_err(storage_error)?;
    Ok(())
}

/// Stores vectors made by `embedder` (replacing earlier ones) and takes their features
/// off the queue, unless they were queued again for another embedder meanwhile;
/// features deleted meanwhile are skipped. A feature's vector is part of what its
/// org's feature index is built from, so the version moves.
pub(super) fn store_vectors(
    conn: &Connection,
    embedder: &str,
    new: &[(i64, Vec<f32>)],
) -> Result<()> {
    let mut store = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO feature_embeddings (feature, embedder, vector)
             SELECT id, ?2, ?3 FROM semantic_features WHERE id = ?1",
        )
        .map_err(storage_error)?;
    let mut dequeue = conn
        .prepare_cached("DELETE FROM feature_embedding_queue WHERE feature = ?1 AND embedder = ?2")
        .map_err(storage_error)?;
    for (feature, vector) in new {
        store
            .execute(params![feature, embedder, vectors::encode(vector)])
            .map_err(storage_error)?;
        dequeue
            .execute(params![feature, embedder])
            .map_err(storage_error)?;
    }
    let ids: Vec<i64> = new.iter().map(|(feature, _)| *feature).collect();
    let sets: Vec<i64> = conn
        .prepare_cached("SELECT DISTINCT set_ref FROM semantic_features WHERE id IN rarray(?1)")
        .and_then(|mut stmt| {
            stmt.query_map([id_array(&ids)], |row| row.get(0))?
                .collect()
        })
        .map_err(storage_error)?;
    bump_sets(conn, &sets)
}

pub(super) fn abandon_vectors(conn: &Connection, features: &[i64]) -> Result<()> {
    conn.prepare_cached("DELETE FROM feature_embedding_queue WHERE feature IN rarray(?1)")
        .and_then(|mut stmt| stmt.execute([id_array(features)]))
        .map_err(storage_error)?;
    Ok(())
}
