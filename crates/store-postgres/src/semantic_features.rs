//! SQL for semantic features: the features of a set with the episodes they cite, the
//! queue of features waiting for a vector (claimed under leases), and their vectors.
//!
//! A feature's `match_key` is the domain's `category_key + '\u{1f}' + tag_key + '\u{1f}' +
//! feature_key`: the features of one category are those whose key starts with the
//! category key and the separator, a range of the (set_ref, match_key) index compared
//! bytewise (`COLLATE "C"`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::error::{db_error, sqlstate};
use super::helpers::{DB_NOW, bad_column, bump_sets, now_micros};
use super::semantic_sets::require_set;
use memmachine_core::error::{Error, Result};
use memmachine_core::model::{EpisodeHandle, FeatureId, ProjectHandle, SetId};
use memmachine_core::store::semantic_features::feature_embedding_text;
use memmachine_core::store::{
    ChangedBy, Feature, FeatureUpdate, IndexedFeature, NewFeature, PendingFeatureEmbedding,
};

/// Columns read by `from_row`, over `semantic_features f JOIN semantic_sets s`.
const COLUMNS: &str = "f.id, f.public_id, f.set_ref, s.set_id, f.category, f.category_id, \
     f.tag, f.feature, f.value, f.metadata, f.created_at, f.updated_at, \
     GREATEST(f.valid_from, f.created_at), f.changed_by";

const FROM: &str =
    "semantic_features f JOIN semantic_sets s ON s.org_id = f.org_id AND s.id = f.set_ref";

pub(super) fn from_row(row: &PgRow) -> sqlx::Result<Feature> {
    let metadata: String = row.try_get(9)?;
    Ok(Feature {
        internal_id: FeatureId::from_raw(row.try_get(0)?),
        id: row.try_get(1)?,
        set: SetId::from_raw(row.try_get(2)?),
        set_id: row.try_get(3)?,
        category: row.try_get(4)?,
        category_id: row.try_get(5)?,
        tag: row.try_get(6)?,
        feature: row.try_get(7)?,
        value: row.try_get(8)?,
        metadata: serde_json::from_str(&metadata).map_err(|err| bad_column(9, err))?,
        citations: Vec::new(),
        created_at_micros: row.try_get(10)?,
        updated_at_micros: row.try_get(11)?,
        valid_from_micros: row.try_get(12)?,
        changed_by: ChangedBy::from_code(row.try_get(13)?),
    })
}

/// Fills in the features' citations: episode uids, oldest (lowest handle) first.
pub(super) async fn with_citations(
    conn: &mut PgConnection,
    mut features: Vec<Feature>,
) -> Result<Vec<Feature>> {
    if features.is_empty() {
        return Ok(features);
    }
    let ids: Vec<i64> = features.iter().map(|f| f.internal_id.raw()).collect();
    let rows = sqlx::query(
        "SELECT c.feature, e.uid FROM semantic_citations c
         JOIN episodes e ON e.org_id = c.org_id AND e.id = c.episode
         WHERE c.feature = ANY($1) ORDER BY c.feature, c.episode",
    )
    .bind(&ids)
    .fetch_all(conn)
    .await
    .map_err(db_error)?;
    let mut by_feature: HashMap<i64, Vec<uuid::Uuid>> = HashMap::new();
    for row in &rows {
        let feature: i64 = row.try_get(0).map_err(db_error)?;
        let uid: uuid::Uuid = row.try_get(1).map_err(db_error)?;
        by_feature.entry(feature).or_default().push(uid);
    }
    for feature in &mut features {
        feature.citations = by_feature
            .remove(&feature.internal_id.raw())
            .unwrap_or_default();
    }
    Ok(features)
}

pub(super) async fn query(
    conn: &mut PgConnection,
    condition: &str,
    bind: impl FnOnce(
        sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<Vec<Feature>> {
    let sql = format!("SELECT {COLUMNS} FROM {FROM} WHERE {condition}");
    let rows = bind(sqlx::query(sqlx::AssertSqlSafe(sql)))
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error)?;
    let features = rows
        .iter()
        .map(from_row)
        .collect::<sqlx::Result<Vec<_>>>()
        .map_err(db_error)?;
    with_citations(conn, features).await
}

pub(super) async fn by_id(conn: &mut PgConnection, internal_id: i64) -> Result<Option<Feature>> {
    Ok(query(conn, "f.id = $1", |q| q.bind(internal_id))
        .await?
        .pop())
}

pub(super) async fn find(conn: &mut PgConnection, id: &str) -> Result<Option<Feature>> {
    let id = id.to_string();
    Ok(query(conn, "f.public_id = $1 ORDER BY f.id LIMIT 1", |q| {
        q.bind(id)
    })
    .await?
    .pop())
}

/// Features by internal id, in the order asked (missing ones left out).
pub(super) async fn by_ids(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<Feature>> {
    let wanted = ids.to_vec();
    let mut found: BTreeMap<i64, Feature> = query(conn, "f.id = ANY($1)", |q| q.bind(wanted))
        .await?
        .into_iter()
        .map(|f| (f.internal_id.raw(), f))
        .collect();
    Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
}

pub(super) async fn list(
    conn: &mut PgConnection,
    sets: &[i64],
    after: i64,
    limit: usize,
) -> Result<Vec<Feature>> {
    let sets = sets.to_vec();
    query(
        conn,
        "f.set_ref = ANY($1) AND f.id > $2 ORDER BY f.id LIMIT $3",
        |q| q.bind(sets).bind(after).bind(limit as i64),
    )
    .await
}

/// The set's features whose match key starts with `category_key` and the separator.
pub(super) async fn of_category(
    conn: &mut PgConnection,
    set: i64,
    category_key: &str,
) -> Result<Vec<Feature>> {
    let (low, high) = (
        format!("{category_key}\u{1f}"),
        format!("{category_key}\u{20}"),
    );
    query(
        conn,
        "f.set_ref = $1 AND f.match_key COLLATE \"C\" >= $2 AND f.match_key COLLATE \"C\" < $3
         ORDER BY f.id",
        |q| q.bind(set).bind(low).bind(high),
    )
    .await
}

pub(super) async fn indexed(conn: &mut PgConnection, sets: &[i64]) -> Result<Vec<IndexedFeature>> {
    let rows = sqlx::query(
        "SELECT f.id, f.set_ref, s.set_id, f.category, f.tag, f.feature, f.value,
             f.metadata, f.created_at, f.updated_at, v.embedder, v.vector
         FROM semantic_features f JOIN semantic_sets s ON s.org_id = f.org_id AND s.id = f.set_ref
         LEFT JOIN feature_embeddings v ON v.org_id = f.org_id AND v.feature = f.id
         WHERE f.set_ref = ANY($1) ORDER BY f.id",
    )
    .bind(sets)
    .fetch_all(conn)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let metadata: String = row.try_get(7)?;
            let metadata: serde_json::Value =
                serde_json::from_str(&metadata).map_err(|err| bad_column(7, err))?;
            let embedder: Option<String> = row.try_get(10)?;
            let vector: Option<pgvector::Vector> = row.try_get(11)?;
            Ok(IndexedFeature {
                internal_id: FeatureId::from_raw(row.try_get(0)?),
                set: SetId::from_raw(row.try_get(1)?),
                set_id: row.try_get(2)?,
                category: row.try_get(3)?,
                tag: row.try_get(4)?,
                feature: row.try_get(5)?,
                value: row.try_get(6)?,
                metadata: memmachine_core::store::semantic_features::flatten_metadata(&metadata),
                created_at_micros: row.try_get(8)?,
                updated_at_micros: row.try_get(9)?,
                vector: embedder.zip(vector).map(|(e, v)| (e, v.to_vec())),
            })
        })
        .collect::<sqlx::Result<_>>()
        .map_err(db_error)
}

fn encode_metadata(metadata: &serde_json::Value) -> Result<String> {
    serde_json::to_string(metadata)
        .map_err(|err| Error::Internal(format!("encoding feature metadata: {err}")))
}

/// The org of the set (which every row of its features carries).
async fn org_of_set(conn: &mut PgConnection, set: i64) -> Result<String> {
    sqlx::query_scalar("SELECT org_id FROM semantic_sets WHERE id = $1")
        .bind(set)
        .fetch_optional(conn)
        .await
        .map_err(db_error)?
        .ok_or_else(|| Error::NotFound(format!("feature set {set} does not exist")))
}

/// Cites these episodes in the feature (those already cited are left as they are).
pub(super) async fn cite(
    tx: &mut PgConnection,
    org_id: &str,
    feature: i64,
    episodes: &[EpisodeHandle],
) -> Result<()> {
    if episodes.is_empty() {
        return Ok(());
    }
    let episodes: Vec<i64> = episodes.iter().map(|e| e.raw()).collect();
    // An episode that is not there (or of another org) is NotFound, as SQLite's
    // foreign key makes it: checked first, so the transaction stays usable.
    let found: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM episodes WHERE org_id = $1 AND id = ANY($2)")
            .bind(org_id)
            .bind(&episodes)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
    if let Some(missing) = episodes.iter().find(|e| !found.contains(e)) {
        return Err(Error::NotFound(format!("episode {missing} does not exist")));
    }
    sqlx::query(
        "INSERT INTO semantic_citations (org_id, feature, episode)
         SELECT $1, $2, e FROM UNNEST($3::bigint[]) AS e ON CONFLICT DO NOTHING",
    )
    .bind(org_id)
    .bind(feature)
    .bind(&episodes)
    .execute(tx)
    .await
    .map_err(|err| {
        if sqlstate(&err).as_deref() == Some("23503") {
            Error::NotFound("a cited episode does not exist".into())
        } else {
            db_error(err)
        }
    })?;
    Ok(())
}

/// Queues the feature for a vector by `embedder` (none: it stays lexical).
async fn queue_vector(
    tx: &mut PgConnection,
    org_id: &str,
    feature: i64,
    embedder: Option<&str>,
) -> Result<()> {
    let Some(embedder) = embedder else {
        return Ok(());
    };
    sqlx::query(
        "INSERT INTO feature_embedding_queue (org_id, feature, embedder) VALUES ($1, $2, $3)
         ON CONFLICT (org_id, feature) DO UPDATE SET embedder = EXCLUDED.embedder, lease_until = 0",
    )
    .bind(org_id)
    .bind(feature)
    .bind(embedder)
    .execute(tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Inserts a feature of `set` with its citations (queued for a vector by `embedder`);
/// returns its internal id. Does not bump the version: callers do, once.
pub(super) async fn insert(
    tx: &mut PgConnection,
    set: i64,
    feature: &NewFeature,
    citations: &[EpisodeHandle],
    embedder: Option<&str>,
    changed_by: ChangedBy,
) -> Result<i64> {
    let org = org_of_set(&mut *tx, set).await?;
    let now = now_micros();
    let metadata = encode_metadata(&feature.metadata)?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO semantic_features (org_id, public_id, set_ref, category, category_id, tag,
             feature, value, metadata, match_key, value_key, created_at, updated_at,
             valid_from, changed_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $12, $13) RETURNING id",
    )
    .bind(&org)
    .bind(&feature.id)
    .bind(set)
    .bind(&feature.category)
    .bind(&feature.category_id)
    .bind(&feature.tag)
    .bind(&feature.feature)
    .bind(&feature.value)
    .bind(&metadata)
    .bind(&feature.match_key)
    .bind(&feature.value_key)
    .bind(now)
    .bind(changed_by.code())
    .fetch_one(&mut *tx)
    .await
    .map_err(|err| {
        if sqlstate(&err).as_deref() == Some("23505") {
            Error::AlreadyExists(format!("feature {} already exists", feature.id))
        } else {
            db_error(err)
        }
    })?;
    cite(&mut *tx, &org, id, citations).await?;
    queue_vector(&mut *tx, &org, id, embedder).await?;
    Ok(id)
}

pub(super) async fn add(
    tx: &mut PgConnection,
    set: i64,
    feature: &NewFeature,
    citations: &[EpisodeHandle],
    embedder: Option<&str>,
) -> Result<Feature> {
    require_set(&mut *tx, set).await?;
    let id = insert(
        &mut *tx,
        set,
        feature,
        citations,
        embedder,
        ChangedBy::Manual,
    )
    .await?;
    bump_sets(&mut *tx, &[set]).await?;
    by_id(tx, id)
        .await?
        .ok_or_else(|| Error::Internal("an added feature vanished".into()))
}

/// Adds the feature, or cites the episodes in the set's feature with the same keys
/// and value (touching its `updated_at`).
pub(super) async fn add_or_cite(
    tx: &mut PgConnection,
    set: i64,
    feature: &NewFeature,
    citations: &[EpisodeHandle],
    embedder: Option<&str>,
) -> Result<()> {
    let same: Option<(i64, String)> = sqlx::query_as(
        "SELECT id, org_id FROM semantic_features
         WHERE set_ref = $1 AND match_key = $2 AND value_key = $3 ORDER BY id LIMIT 1",
    )
    .bind(set)
    .bind(&feature.match_key)
    .bind(&feature.value_key)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?;
    match same {
        Some((id, org)) => {
            cite(&mut *tx, &org, id, citations).await?;
            sqlx::query(
                "UPDATE semantic_features SET updated_at = $2 WHERE org_id = $3 AND id = $1",
            )
            .bind(id)
            .bind(now_micros())
            .bind(&org)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        None => {
            insert(tx, set, feature, citations, embedder, ChangedBy::Extraction).await?;
        }
    }
    Ok(())
}

/// Sets the value (and names) of the set's features with the feature's match key and
/// cites the episodes in them; adds the feature when there is none.
pub(super) async fn update_or_add(
    tx: &mut PgConnection,
    set: i64,
    feature: &NewFeature,
    citations: &[EpisodeHandle],
    embedder: Option<&str>,
) -> Result<()> {
    let updated: Vec<(i64, String)> = sqlx::query_as(
        "UPDATE semantic_features SET value = $3, value_key = $4, category = $5,
             category_id = $6, tag = $7, feature = $8, updated_at = $9,
             changed_by = CASE WHEN value IS DISTINCT FROM $3 OR category IS DISTINCT FROM $5
                 OR tag IS DISTINCT FROM $7 OR feature IS DISTINCT FROM $8
                 THEN $10 ELSE changed_by END
         WHERE set_ref = $1 AND match_key = $2 RETURNING id, org_id",
    )
    .bind(set)
    .bind(&feature.match_key)
    .bind(&feature.value)
    .bind(&feature.value_key)
    .bind(&feature.category)
    .bind(&feature.category_id)
    .bind(&feature.tag)
    .bind(&feature.feature)
    .bind(now_micros())
    .bind(ChangedBy::Extraction.code())
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    if updated.is_empty() {
        insert(tx, set, feature, citations, embedder, ChangedBy::Extraction).await?;
        return Ok(());
    }
    let mut updated = updated;
    updated.sort_unstable();
    for (id, org) in updated {
        cite(&mut *tx, &org, id, citations).await?;
        queue_vector(&mut *tx, &org, id, embedder).await?;
    }
    Ok(())
}

/// Deletes the set's features with this match key.
pub(super) async fn delete_matching(
    tx: &mut PgConnection,
    set: i64,
    match_key: &str,
) -> Result<()> {
    sqlx::query("DELETE FROM semantic_features WHERE set_ref = $1 AND match_key = $2")
        .bind(set)
        .bind(match_key)
        .execute(tx)
        .await
        .map_err(db_error)?;
    Ok(())
}

pub(super) async fn update(
    tx: &mut PgConnection,
    internal_id: i64,
    update: &FeatureUpdate,
    embedder: Option<&str>,
) -> Result<()> {
    let Some(current) = by_id(&mut *tx, internal_id).await? else {
        return Err(Error::NotFound(format!(
            "feature {internal_id} does not exist"
        )));
    };
    let org = org_of_set(&mut *tx, current.set.raw()).await?;
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
        ChangedBy::Manual
    } else {
        current.changed_by
    };
    sqlx::query(
        "UPDATE semantic_features SET category = $2, category_id = $3,
             tag = COALESCE($4, tag), feature = COALESCE($5, feature),
             value = COALESCE($6, value), metadata = $7,
             match_key = COALESCE($8, match_key), value_key = COALESCE($9, value_key),
             updated_at = $10, changed_by = $12
         WHERE org_id = $11 AND id = $1",
    )
    .bind(internal_id)
    .bind(&category)
    .bind(&category_id)
    .bind(&update.tag)
    .bind(&update.feature)
    .bind(&update.value)
    .bind(&metadata)
    .bind(&update.match_key)
    .bind(&update.value_key)
    .bind(now_micros())
    .bind(&org)
    .bind(changed_by.code())
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    // The embedded text is the feature's name and value.
    if update.feature.is_some() || update.value.is_some() {
        queue_vector(&mut *tx, &org, internal_id, embedder).await?;
    }
    bump_sets(tx, &[current.set.raw()]).await
}

/// Deletes those of the features that exist; returns how many.
pub(super) async fn delete(tx: &mut PgConnection, ids: &[i64]) -> Result<u64> {
    let sets: Vec<i64> =
        sqlx::query_scalar("DELETE FROM semantic_features WHERE id = ANY($1) RETURNING set_ref")
            .bind(ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
    let deleted = sets.len() as u64;
    let mut sets = sets;
    sets.sort_unstable();
    sets.dedup();
    bump_sets(tx, &sets).await?;
    Ok(deleted)
}

/// Replaces the set's features `remove` by `add`, which cite every episode the removed
/// ones cited; returns the new features' numbers (in `add`'s order), to which the caller
/// hands the removed ones' history.
pub(super) async fn consolidate(
    tx: &mut PgConnection,
    set: i64,
    remove: &[i64],
    add: &[NewFeature],
    embedder: Option<&str>,
) -> Result<Vec<i64>> {
    require_set(&mut *tx, set).await?;
    let citations: Vec<EpisodeHandle> = sqlx::query_scalar::<_, i64>(
        "SELECT DISTINCT c.episode FROM semantic_citations c
         JOIN semantic_features f ON f.org_id = c.org_id AND f.id = c.feature
         WHERE c.feature = ANY($1) AND f.set_ref = $2 ORDER BY c.episode",
    )
    .bind(remove)
    .bind(set)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?
    .into_iter()
    .map(EpisodeHandle::from_raw)
    .collect();
    sqlx::query("DELETE FROM semantic_features WHERE id = ANY($1) AND set_ref = $2")
        .bind(remove)
        .bind(set)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    let mut survivors = Vec::with_capacity(add.len());
    for feature in add {
        let id = insert(
            &mut *tx,
            set,
            feature,
            &citations,
            embedder,
            ChangedBy::Consolidation,
        )
        .await?;
        survivors.push(id);
    }
    bump_sets(tx, &[set]).await?;
    Ok(survivors)
}

// Feature vectors.

fn pending_from_row(row: &PgRow) -> sqlx::Result<PendingFeatureEmbedding> {
    let (feature, value): (String, String) = (row.try_get(2)?, row.try_get(3)?);
    Ok(PendingFeatureEmbedding {
        feature: FeatureId::from_raw(row.try_get(0)?),
        embedder: row.try_get(1)?,
        text: feature_embedding_text(&feature, &value),
        org_id: row.try_get(4)?,
        project: row
            .try_get::<Option<i64>, _>(5)?
            .map(ProjectHandle::from_raw),
    })
}

/// Claims up to `limit` queued features whose lease is free or expired, oldest first,
/// leasing them for `lease` (`FOR UPDATE SKIP LOCKED`: two claimers never get the same
/// feature while its lease holds).
pub(super) async fn claim_vectors(
    conn: &mut PgConnection,
    limit: usize,
    lease: Duration,
) -> Result<Vec<PendingFeatureEmbedding>> {
    let lease_micros = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX / 2);
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH now AS (SELECT {DB_NOW} AS at),
         claimed AS (
             SELECT q.org_id, q.feature FROM feature_embedding_queue q, now
             WHERE q.lease_until < now.at
             ORDER BY q.feature LIMIT $1
             FOR UPDATE OF q SKIP LOCKED
         )
         UPDATE feature_embedding_queue q SET lease_until = (SELECT at FROM now) + $2
         FROM claimed, semantic_features f, semantic_sets s
         WHERE q.org_id = claimed.org_id AND q.feature = claimed.feature
           AND f.org_id = q.org_id AND f.id = q.feature
           AND s.org_id = f.org_id AND s.id = f.set_ref
         RETURNING q.feature, q.embedder, f.feature, f.value, s.org_id, s.project"
    )))
    .bind(limit as i64)
    .bind(lease_micros)
    .fetch_all(conn)
    .await
    .map_err(db_error)?;
    let mut pending = rows
        .iter()
        .map(pending_from_row)
        .collect::<sqlx::Result<Vec<_>>>()
        .map_err(db_error)?;
    pending.sort_by_key(|p| p.feature);
    Ok(pending)
}

pub(super) async fn release_vectors(conn: &mut PgConnection, features: &[i64]) -> Result<()> {
    sqlx::query("UPDATE feature_embedding_queue SET lease_until = 0 WHERE feature = ANY($1)")
        .bind(features)
        .execute(conn)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Stores vectors made by `embedder` (replacing earlier ones) and takes their features
/// off the queue, unless they were queued again for another embedder meanwhile;
/// features deleted meanwhile are skipped. A feature's vector is part of what its
/// org's feature index is built from, so the version moves.
pub(super) async fn store_vectors(
    tx: &mut PgConnection,
    embedder: &str,
    new: &[(i64, Vec<f32>)],
) -> Result<()> {
    // One row per feature (the last vector given wins, as SQLite's REPLACE does): a
    // statement may not update a row twice.
    let mut last: BTreeMap<i64, &Vec<f32>> = BTreeMap::new();
    for (feature, vector) in new {
        last.insert(*feature, vector);
    }
    let ids: Vec<i64> = last.keys().copied().collect();
    let values: Vec<pgvector::Vector> = last
        .values()
        .map(|v| pgvector::Vector::from((*v).clone()))
        .collect();
    sqlx::query(
        "INSERT INTO feature_embeddings (org_id, feature, embedder, vector)
         SELECT f.org_id, f.id, $2, v.vector
         FROM UNNEST($1::bigint[], $3::vector[]) AS v (feature, vector)
         JOIN semantic_features f ON f.id = v.feature
         ON CONFLICT (org_id, feature) DO UPDATE
             SET embedder = EXCLUDED.embedder, vector = EXCLUDED.vector",
    )
    .bind(&ids)
    .bind(embedder)
    .bind(&values)
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    sqlx::query("DELETE FROM feature_embedding_queue WHERE feature = ANY($1) AND embedder = $2")
        .bind(&ids)
        .bind(embedder)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    let sets: Vec<i64> =
        sqlx::query_scalar("SELECT DISTINCT set_ref FROM semantic_features WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error)?;
    bump_sets(tx, &sets).await
}

pub(super) async fn abandon_vectors(tx: &mut PgConnection, features: &[i64]) -> Result<()> {
    sqlx::query("DELETE FROM feature_embedding_queue WHERE feature = ANY($1)")
        .bind(features)
        .execute(tx)
        .await
        .map_err(db_error)?;
    Ok(())
}
