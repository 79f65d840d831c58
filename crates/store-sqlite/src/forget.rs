//! `ForgetStore`, and what every episode deletion shares: the features left citing
//! nothing go with the episodes they cited, in the same transaction.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::error::storage_error;
use super::helpers::{REMOVED, id_array, log_changes};
use super::projects;
use super::semantic_features;
use memmachine_core::access::OrgAccess;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::model::{FeatureId, ProjectKey, SetId};
use memmachine_core::store::{
    ForgetCounts, ForgetReceipt, ForgetStore, Forgotten, decode_forget_projects,
    encode_forget_projects,
};

/// The episodes' match of a subject, over the alias `e` (`?2` the subject).
const OF_SUBJECT: &str = "(e.producer_id = ?2 OR e.produced_for_id = ?2)";

/// Deletes these episode rows of `project` (sorted, existing), logs one `Removed`
/// change each, and deletes the features that cited one of them and now cite nothing
/// (a feature that never cited anything stays). Summaries covering them, their vectors
/// and queued work go by the schema's cascades and trigger.
pub(super) fn delete_rows(conn: &Connection, project: i64, rows: &[i64]) -> Result<Forgotten> {
    if rows.is_empty() {
        return Ok(Forgotten::default());
    }
    let ids = id_array(rows);
    let cited: Vec<(i64, i64)> = conn
        .prepare_cached(
            "SELECT feature, COUNT(*) FROM semantic_citations WHERE episode IN rarray(?1)
             GROUP BY feature",
        )
        .and_then(|mut stmt| {
            stmt.query_map([ids.clone()], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect()
        })
        .map_err(storage_error)?;
    let summaries: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM episode_summaries s WHERE s.project = ?1 AND EXISTS
             (SELECT 1 FROM episodes e WHERE e.id IN rarray(?2)
              AND e.seq BETWEEN s.first_seq AND s.last_seq)",
        )
        .and_then(|mut stmt| stmt.query_row(params![project, ids.clone()], |row| row.get(0)))
        .map_err(storage_error)?;
    log_changes(conn, project, REMOVED, rows)?;
    let mut delete_episode = conn
        .prepare_cached("DELETE FROM episodes WHERE id = ?1")
        .map_err(storage_error)?;
    for id in rows {
        delete_episode.execute([id]).map_err(storage_error)?;
    }
    let candidates: Vec<i64> = cited.iter().map(|(feature, _)| *feature).collect();
    let orphans: Vec<i64> = conn
        .prepare_cached(
            "SELECT f.id FROM semantic_features f WHERE f.id IN rarray(?1)
             AND NOT EXISTS (SELECT 1 FROM semantic_citations c WHERE c.feature = f.id)",
        )
        .and_then(|mut stmt| {
            stmt.query_map([id_array(&candidates)], |row| row.get(0))?
                .collect()
        })
        .map_err(storage_error)?;
    let features = if orphans.is_empty() {
        0
    } else {
        semantic_features::delete(conn, &orphans)?
    };
    Ok(Forgotten {
        counts: ForgetCounts {
            episodes: rows.len() as u64,
            features,
            citations: cited.iter().map(|(_, n)| *n as u64).sum(),
            summaries: summaries as u64,
            sets: 0,
        },
        features: orphans.into_iter().map(FeatureId::from_raw).collect(),
    })
}

fn subject_episodes(
    conn: &Connection,
    key: &ProjectKey,
    subject: &str,
    limit: usize,
) -> Result<Vec<uuid::Uuid>> {
    let project = projects::require(conn, key)?;
    conn.prepare_cached(&format!(
        "SELECT e.uid FROM episodes e WHERE e.project = ?1 AND {OF_SUBJECT}
         ORDER BY e.seq LIMIT ?3"
    ))
    .and_then(|mut stmt| {
        stmt.query_map(params![project, subject, limit as i64], |row| {
            let bytes: Vec<u8> = row.get(0)?;
            Ok(uuid::Uuid::from_slice(&bytes).unwrap_or_default())
        })?
        .collect()
    })
    .map_err(storage_error)
}

fn forget_episodes(conn: &Connection, key: &ProjectKey, uids: &[uuid::Uuid]) -> Result<Forgotten> {
    let project = projects::require(conn, key)?;
    let mut find = conn
        .prepare_cached("SELECT id FROM episodes WHERE project = ?1 AND uid = ?2")
        .map_err(storage_error)?;
    let mut rows = Vec::with_capacity(uids.len());
    for uid in uids {
        if let Some(id) = find
            .query_row(params![project, uid.as_bytes()], |row| row.get::<_, i64>(0))
            .optional()
            .map_err(storage_error)?
        {
            rows.push(id);
        }
    }
    rows.sort_unstable();
    rows.dedup();
    delete_rows(conn, project, &rows)
}

fn drop_set(conn: &Connection, set: i64) -> Result<Vec<FeatureId>> {
    let features: Vec<i64> = conn
        .prepare_cached("SELECT id FROM semantic_features WHERE set_ref = ?1")
        .and_then(|mut stmt| stmt.query_map([set], |row| row.get(0))?.collect())
        .map_err(storage_error)?;
    // The set's trigger moves its org's semantic version, so caches drop its features.
    conn.prepare_cached("DELETE FROM semantic_sets WHERE id = ?1")
        .and_then(|mut stmt| stmt.execute([set]))
        .map_err(storage_error)?;
    Ok(features.into_iter().map(FeatureId::from_raw).collect())
}

fn preview(
    conn: &Connection,
    key: &ProjectKey,
    subject: &str,
    before: &[ProjectKey],
    user_sets: &[i64],
) -> Result<ForgetCounts> {
    let project = projects::require(conn, key)?;
    let mut gone = vec![project];
    for earlier in before {
        gone.extend(projects::find(conn, earlier)?.map(|p| p.internal_id.raw()));
    }
    let count = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> Result<u64> {
        conn.prepare_cached(sql)
            .and_then(|mut stmt| stmt.query_row(params, |row| row.get::<_, i64>(0)))
            .map(|n| n as u64)
            .map_err(storage_error)
    };
    let sets = id_array(user_sets);
    let episodes = count(
        &format!("SELECT COUNT(*) FROM episodes e WHERE e.project = ?1 AND {OF_SUBJECT}"),
        &[&project, &subject],
    )?;
    let own_sets = count(
        "SELECT COUNT(*) FROM semantic_sets WHERE project = ?1 AND id IN rarray(?2)",
        &[&project, &sets],
    )?;
    let set_features = count(
        "SELECT COUNT(*) FROM semantic_features f JOIN semantic_sets s ON s.id = f.set_ref
         WHERE s.project = ?1 AND s.id IN rarray(?2)",
        &[&project, &sets],
    )?;
    let citations = count(
        &format!(
            "SELECT COUNT(*) FROM semantic_citations c JOIN episodes e ON e.id = c.episode
             JOIN semantic_features f ON f.id = c.feature
             WHERE e.project = ?1 AND {OF_SUBJECT} AND f.set_ref NOT IN rarray(?3)"
        ),
        &[&project, &subject, &sets],
    )?;
    // Left citing nothing: cites one of these episodes, and nothing but the subject's
    // episodes of the projects forgotten so far.
    let orphans = count(
        &format!(
            "SELECT COUNT(DISTINCT f.id) FROM semantic_citations c
             JOIN episodes e ON e.id = c.episode JOIN semantic_features f ON f.id = c.feature
             WHERE e.project = ?1 AND {OF_SUBJECT} AND f.set_ref NOT IN rarray(?3)
             AND NOT EXISTS (SELECT 1 FROM semantic_citations c2
                 JOIN episodes e2 ON e2.id = c2.episode WHERE c2.feature = f.id
                 AND NOT (e2.project IN rarray(?4)
                     AND (e2.producer_id = ?2 OR COALESCE(e2.produced_for_id, '') = ?2)))"
        ),
        &[&project, &subject, &sets, &id_array(&gone)],
    )?;
    let summaries = count(
        &format!(
            "SELECT COUNT(*) FROM episode_summaries s WHERE s.project = ?1 AND EXISTS
             (SELECT 1 FROM episodes e WHERE e.project = ?1 AND {OF_SUBJECT}
              AND e.seq BETWEEN s.first_seq AND s.last_seq)"
        ),
        &[&project, &subject],
    )?;
    Ok(ForgetCounts {
        episodes,
        features: set_features + orphans,
        citations,
        summaries,
        sets: own_sets,
    })
}

fn save_receipt(conn: &Connection, receipt: &ForgetReceipt) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO forget_receipts (receipt_id, org_id, subject, completed_at, projects)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            receipt.receipt_id,
            receipt.org_id,
            receipt.subject,
            receipt.completed_at_micros,
            encode_forget_projects(&receipt.projects)
        ])
    })
    .map_err(storage_error)?;
    Ok(())
}

fn receipt(conn: &Connection, org_id: &str, receipt_id: &str) -> Result<Option<ForgetReceipt>> {
    let row: Option<(String, i64, String)> = conn
        .prepare_cached(
            "SELECT subject, completed_at, projects FROM forget_receipts
             WHERE org_id = ?1 AND receipt_id = ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![org_id, receipt_id], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()
        })
        .map_err(storage_error)?;
    Ok(
        row.map(|(subject, completed_at_micros, projects)| ForgetReceipt {
            receipt_id: receipt_id.to_string(),
            org_id: org_id.to_string(),
            subject,
            dry_run: false,
            completed_at_micros,
            projects: decode_forget_projects(&projects).unwrap_or_default(),
        }),
    )
}

#[async_trait]
impl ForgetStore for SqliteStore {
    async fn subject_episodes(
        &self,
        key: &ProjectAccess,
        subject: &str,
        limit: usize,
    ) -> Result<Vec<uuid::Uuid>> {
        let (key, subject) = (key.clone(), subject.to_string());
        self.readers
            .read(move |tx| subject_episodes(tx, &key, &subject, limit))
            .await
    }

    async fn forget_episodes(&self, key: &ProjectAccess, uids: &[uuid::Uuid]) -> Result<Forgotten> {
        let (key, uids) = (key.clone(), uids.to_vec());
        self.writer
            .write(move |conn| forget_episodes(conn, &key, &uids))
            .await
    }

    async fn drop_set(&self, set: SetId) -> Result<Vec<FeatureId>> {
        self.writer
            .write(move |conn| drop_set(conn, set.raw()))
            .await
    }

    async fn forget_preview(
        &self,
        key: &ProjectAccess,
        subject: &str,
        before: &[ProjectKey],
        user_sets: &[SetId],
    ) -> Result<ForgetCounts> {
        let (key, subject, before) = (key.clone(), subject.to_string(), before.to_vec());
        let sets: Vec<i64> = user_sets.iter().map(|s| s.raw()).collect();
        self.readers
            .read(move |tx| preview(tx, &key, &subject, &before, &sets))
            .await
    }

    async fn save_forget_receipt(&self, receipt: &ForgetReceipt) -> Result<()> {
        let receipt = receipt.clone();
        self.writer
            .write(move |conn| save_receipt(conn, &receipt))
            .await
    }

    async fn forget_receipt(
        &self,
        org: &OrgAccess,
        receipt_id: &str,
    ) -> Result<Option<ForgetReceipt>> {
        let org_id = org.org_id();
        let (org_id, receipt_id) = (org_id.to_string(), receipt_id.to_string());
        self.readers
            .read(move |tx| receipt(tx, &org_id, &receipt_id))
            .await
    }
}
