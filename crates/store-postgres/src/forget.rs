//! `ForgetStore`, and what every episode deletion shares: the features left citing
//! nothing go with the episodes they cited, in the same transaction.

use async_trait::async_trait;
use sqlx::{PgConnection, Row};

use super::PostgresStore;
use super::error::db_error;
use super::helpers::{REMOVED, log_changes};
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

/// The episodes' match of a subject, over the alias `e` (`$3` the subject).
const OF_SUBJECT: &str = "(e.producer_id = $3 OR e.produced_for_id = $3)";

/// Locks the project's row (its change counter orders the log) and returns its id.
pub(super) async fn lock_project(tx: &mut PgConnection, key: &ProjectKey) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT id FROM projects WHERE org_id = $1 AND project_id = $2 FOR NO KEY UPDATE",
    )
    .bind(&key.org_id)
    .bind(&key.project_id)
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?
    .ok_or_else(|| projects::not_found(key))
}

/// Deletes these episode rows of the (locked) project, logs one `Removed` change each,
/// and deletes the features that cited one of them and now cite nothing (a feature that
/// never cited anything stays). Summaries covering them, their vectors and queued work
/// go by the schema's cascades and trigger.
pub(super) async fn delete_rows(
    tx: &mut PgConnection,
    org_id: &str,
    project: i64,
    rows: &[i64],
) -> Result<Forgotten> {
    if rows.is_empty() {
        return Ok(Forgotten::default());
    }
    let cited = sqlx::query(
        "SELECT feature, COUNT(*) FROM semantic_citations WHERE org_id = $1 AND episode = ANY($2)
         GROUP BY feature",
    )
    .bind(org_id)
    .bind(rows)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let mut candidates = Vec::with_capacity(cited.len());
    let mut citations = 0u64;
    for row in &cited {
        candidates.push(row.try_get::<i64, _>(0).map_err(db_error)?);
        citations += row.try_get::<i64, _>(1).map_err(db_error)? as u64;
    }
    let summaries: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM episode_summaries s WHERE s.org_id = $1 AND s.project = $2
         AND EXISTS (SELECT 1 FROM episodes e WHERE e.org_id = $1 AND e.id = ANY($3)
             AND e.seq BETWEEN s.first_seq AND s.last_seq)",
    )
    .bind(org_id)
    .bind(project)
    .bind(rows)
    .fetch_one(&mut *tx)
    .await
    .map_err(db_error)?;
    // Logged before the rows go, so the entries keep their uids; the project's lock
    // keeps any other deleter from taking them meanwhile.
    let deleted: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM episodes WHERE org_id = $1 AND project = $2 AND id = ANY($3)
         ORDER BY id FOR UPDATE",
    )
    .bind(org_id)
    .bind(project)
    .bind(rows)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let n = deleted.len() as i64;
    let first: i64 = sqlx::query_scalar(
        "UPDATE projects SET last_change = last_change + $3
         WHERE org_id = $1 AND id = $2 RETURNING last_change - $3",
    )
    .bind(org_id)
    .bind(project)
    .bind(n)
    .fetch_one(&mut *tx)
    .await
    .map_err(db_error)?;
    let ids: Vec<i64> = (1..=n).map(|i| first + i).collect();
    log_changes(&mut *tx, org_id, project, &ids, REMOVED, &deleted).await?;
    sqlx::query("DELETE FROM episodes WHERE org_id = $1 AND id = ANY($2)")
        .bind(org_id)
        .bind(&deleted)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    let orphans: Vec<i64> = sqlx::query_scalar(
        "SELECT f.id FROM semantic_features f WHERE f.org_id = $1 AND f.id = ANY($2)
         AND NOT EXISTS (SELECT 1 FROM semantic_citations c
             WHERE c.org_id = $1 AND c.feature = f.id)
         ORDER BY f.id",
    )
    .bind(org_id)
    .bind(&candidates)
    .fetch_all(&mut *tx)
    .await
    .map_err(db_error)?;
    let features = if orphans.is_empty() {
        0
    } else {
        semantic_features::delete(&mut *tx, &orphans).await?
    };
    Ok(Forgotten {
        counts: ForgetCounts {
            episodes: n as u64,
            features,
            citations,
            summaries: summaries as u64,
            sets: 0,
        },
        features: orphans.into_iter().map(FeatureId::from_raw).collect(),
    })
}

async fn preview(
    conn: &mut PgConnection,
    key: &ProjectKey,
    subject: &str,
    before: &[ProjectKey],
    sets: &[i64],
) -> Result<ForgetCounts> {
    let project = projects::require(&mut *conn, key).await?;
    let mut gone = vec![project];
    for earlier in before {
        if let Some(p) = projects::find(&mut *conn, earlier).await? {
            gone.push(p.internal_id.raw());
        }
    }
    // One round trip: every figure as a column ($1 org, $2 project, $3 subject, $4 the
    // dropped sets, $5 the projects forgotten so far).
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT
           (SELECT COUNT(*) FROM episodes e WHERE e.org_id = $1 AND e.project = $2 AND {OF_SUBJECT}),
           (SELECT COUNT(*) FROM semantic_sets s
              WHERE s.org_id = $1 AND s.project = $2 AND s.id = ANY($4)),
           (SELECT COUNT(*) FROM semantic_features f JOIN semantic_sets s
                ON s.org_id = f.org_id AND s.id = f.set_ref
              WHERE f.org_id = $1 AND s.project = $2 AND s.id = ANY($4)),
           (SELECT COUNT(*) FROM semantic_citations c
              JOIN episodes e ON e.org_id = c.org_id AND e.id = c.episode
              JOIN semantic_features f ON f.org_id = c.org_id AND f.id = c.feature
              WHERE c.org_id = $1 AND e.project = $2 AND {OF_SUBJECT}
                AND NOT (f.set_ref = ANY($4))),
           (SELECT COUNT(DISTINCT f.id) FROM semantic_citations c
              JOIN episodes e ON e.org_id = c.org_id AND e.id = c.episode
              JOIN semantic_features f ON f.org_id = c.org_id AND f.id = c.feature
              WHERE c.org_id = $1 AND e.project = $2 AND {OF_SUBJECT}
                AND NOT (f.set_ref = ANY($4))
                AND NOT EXISTS (SELECT 1 FROM semantic_citations c2
                    JOIN episodes e2 ON e2.org_id = c2.org_id AND e2.id = c2.episode
                    WHERE c2.org_id = $1 AND c2.feature = f.id
                      AND NOT (e2.project = ANY($5)
                          AND (e2.producer_id = $3 OR COALESCE(e2.produced_for_id, '') = $3)))),
           (SELECT COUNT(*) FROM episode_summaries s WHERE s.org_id = $1 AND s.project = $2
              AND EXISTS (SELECT 1 FROM episodes e
                  WHERE e.org_id = $1 AND e.project = $2 AND {OF_SUBJECT}
                    AND e.seq BETWEEN s.first_seq AND s.last_seq))"
    )))
    .bind(&key.org_id)
    .bind(project)
    .bind(subject)
    .bind(sets)
    .bind(&gone)
    .fetch_one(&mut *conn)
    .await
    .map_err(db_error)?;
    let get = |i: usize| -> Result<u64> { Ok(row.try_get::<i64, _>(i).map_err(db_error)? as u64) };
    Ok(ForgetCounts {
        episodes: get(0)?,
        sets: get(1)?,
        features: get(2)? + get(4)?,
        citations: get(3)?,
        summaries: get(5)?,
    })
}

#[async_trait]
impl ForgetStore for PostgresStore {
    async fn subject_episodes(
        &self,
        key: &ProjectAccess,
        subject: &str,
        limit: usize,
    ) -> Result<Vec<uuid::Uuid>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        let project = projects::require(&mut conn, key).await?;
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT e.uid FROM episodes e WHERE e.org_id = $1 AND e.project = $2 AND {OF_SUBJECT}
             ORDER BY e.seq LIMIT $4"
        )))
        .bind(&key.org_id)
        .bind(project)
        .bind(subject)
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error)
    }

    async fn forget_episodes(&self, key: &ProjectAccess, uids: &[uuid::Uuid]) -> Result<Forgotten> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let project = lock_project(&mut tx, key).await?;
        let mut rows: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM episodes WHERE org_id = $1 AND project = $2 AND uid = ANY($3)",
        )
        .bind(&key.org_id)
        .bind(project)
        .bind(uids)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        rows.sort_unstable();
        let forgotten = delete_rows(&mut tx, &key.org_id, project, &rows).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(forgotten)
    }

    async fn drop_set(&self, set: SetId) -> Result<Vec<FeatureId>> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        let org: Option<String> =
            sqlx::query_scalar("SELECT org_id FROM semantic_sets WHERE id = $1")
                .bind(set.raw())
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_error)?;
        let Some(org) = org else {
            return Ok(Vec::new());
        };
        let features: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM semantic_features WHERE org_id = $1 AND set_ref = $2 ORDER BY id",
        )
        .bind(&org)
        .bind(set.raw())
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        // The set's trigger moves its org's semantic version, so caches drop its features.
        sqlx::query("DELETE FROM semantic_sets WHERE org_id = $1 AND id = $2")
            .bind(&org)
            .bind(set.raw())
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(features.into_iter().map(FeatureId::from_raw).collect())
    }

    async fn forget_preview(
        &self,
        key: &ProjectAccess,
        subject: &str,
        before: &[ProjectKey],
        user_sets: &[SetId],
    ) -> Result<ForgetCounts> {
        let sets: Vec<i64> = user_sets.iter().map(|s| s.raw()).collect();
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        preview(&mut conn, key, subject, before, &sets).await
    }

    async fn save_forget_receipt(&self, receipt: &ForgetReceipt) -> Result<()> {
        sqlx::query(
            "INSERT INTO forget_receipts (org_id, receipt_id, subject, completed_at, projects)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&receipt.org_id)
        .bind(&receipt.receipt_id)
        .bind(&receipt.subject)
        .bind(receipt.completed_at_micros)
        .bind(encode_forget_projects(&receipt.projects))
        .execute(self.pool())
        .await
        .map_err(db_error)?;
        Ok(())
    }

    async fn forget_receipt(
        &self,
        org: &OrgAccess,
        receipt_id: &str,
    ) -> Result<Option<ForgetReceipt>> {
        let org_id = org.org_id();
        let row = sqlx::query(
            "SELECT subject, completed_at, projects FROM forget_receipts
             WHERE org_id = $1 AND receipt_id = $2",
        )
        .bind(org_id)
        .bind(receipt_id)
        .fetch_optional(self.pool())
        .await
        .map_err(db_error)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let projects: String = row.try_get(2).map_err(db_error)?;
        Ok(Some(ForgetReceipt {
            receipt_id: receipt_id.to_string(),
            org_id: org_id.to_string(),
            subject: row.try_get(0).map_err(db_error)?,
            dry_run: false,
            completed_at_micros: row.try_get(1).map_err(db_error)?,
            projects: decode_forget_projects(&projects).unwrap_or_default(),
        }))
    }
}
