//! `VectorStore`: the queue of episodes waiting for a
//! vector, claimed under leases (`FOR UPDATE SKIP LOCKED`: two replicas never take the
//! same episode while its lease holds; an expired lease is taken over), and the vectors
//! (pgvector, any dimension), each stored with a `Vector` change in its project's log.
//!
//! Lease times are the database's clock, the one clock every replica shares.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::{PgConnection, Row};

use super::PostgresStore;
use super::error::db_error;
use super::helpers::{DB_NOW, VECTOR, log_changes};
use super::projects;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::model::{EpisodeHandle, ProjectHandle, ProjectKey};
use memmachine_core::store::{PendingEmbedding, VectorStore};

/// pgvector's HNSW indexes take at most this many dimensions.
const HNSW_MAX_DIMENSIONS: usize = 2000;

pub(super) async fn enqueue(
    tx: &mut PgConnection,
    org_id: &str,
    rows: &[i64],
    embedder: &str,
) -> Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO embedding_queue (org_id, episode, embedder, queued_at)
         SELECT $1, e, $3, {DB_NOW} FROM UNNEST($2::bigint[]) AS e
         ON CONFLICT (org_id, episode) DO UPDATE SET embedder = EXCLUDED.embedder"
    )))
    .bind(org_id)
    .bind(rows)
    .bind(embedder)
    .execute(tx)
    .await
    .map_err(db_error)?;
    Ok(())
}

impl PostgresStore {
    /// Makes sure `table` has the HNSW index of vectors of `dimensions` (a partial
    /// expression index, for operators' nearest-neighbour queries), once per process.
    /// Outside the writing transaction: a failure is logged, never the caller's.
    pub(super) async fn ensure_hnsw(&self, table: &'static str, dimensions: &[usize]) {
        for &dims in dimensions {
            if dims == 0 || dims > HNSW_MAX_DIMENSIONS {
                continue;
            }
            if !self.hnsw.lock().expect("hnsw lock").insert((table, dims)) {
                continue;
            }
            let sql = format!(
                "CREATE INDEX IF NOT EXISTS {table}_hnsw_{dims} ON {table}
                 USING hnsw ((vector::vector({dims})) vector_cosine_ops)
                 WHERE vector_dims(vector) = {dims}"
            );
            if let Err(err) = sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(self.pool())
                .await
            {
                // Another replica may be making the same index right now.
                tracing::warn!(%err, table, dims, "could not create an HNSW index");
                self.hnsw.lock().expect("hnsw lock").remove(&(table, dims));
            }
        }
    }
}

pub(super) fn dimensions<'a>(vectors: impl Iterator<Item = &'a Vec<f32>>) -> Vec<usize> {
    let mut dims: Vec<usize> = vectors.map(Vec::len).collect();
    dims.sort_unstable();
    dims.dedup();
    dims
}

#[async_trait]
impl VectorStore for PostgresStore {
    async fn queue_missing(&self, projects: Vec<(ProjectKey, Option<String>)>) -> Result<u64> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        for (key, embedder) in &projects {
            let Some(project) = sqlx::query_scalar::<_, i64>(
                "SELECT id FROM projects WHERE org_id = $1 AND project_id = $2",
            )
            .bind(&key.org_id)
            .bind(&key.project_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            else {
                continue;
            };
            match embedder {
                Some(embedder) => sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO embedding_queue (org_id, episode, embedder, queued_at)
                     SELECT e.org_id, e.id, $3, {DB_NOW} FROM episodes e
                     LEFT JOIN embeddings v ON v.org_id = e.org_id AND v.episode = e.id
                     WHERE e.org_id = $1 AND e.project = $2
                       AND (v.episode IS NULL OR v.embedder != $3)
                     ON CONFLICT (org_id, episode) DO UPDATE
                         SET embedder = EXCLUDED.embedder, lease_until = 0
                         WHERE embedding_queue.embedder != EXCLUDED.embedder"
                )))
                .bind(&key.org_id)
                .bind(project)
                .bind(embedder),
                None => sqlx::query(
                    "DELETE FROM embedding_queue q USING episodes e
                     WHERE q.org_id = $1 AND e.org_id = q.org_id AND e.id = q.episode
                       AND e.project = $2",
                )
                .bind(&key.org_id)
                .bind(project),
            }
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        }
        let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM embedding_queue")
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(waiting as u64)
    }

    async fn claim_embeddings(
        &self,
        embedder: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<PendingEmbedding>> {
        let lease_micros = i64::try_from(lease.as_micros()).unwrap_or(i64::MAX / 2);
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH now AS (SELECT {DB_NOW} AS at),
             claimed AS (
                 SELECT q.org_id, q.episode FROM embedding_queue q, now
                 WHERE q.embedder = $1 AND q.lease_until < now.at
                 ORDER BY q.queued_at, q.episode
                 LIMIT $2
                 FOR UPDATE OF q SKIP LOCKED
             )
             UPDATE embedding_queue q SET lease_until = (SELECT at FROM now) + $3
             FROM claimed, episodes e
             WHERE q.org_id = claimed.org_id AND q.episode = claimed.episode
               AND e.org_id = q.org_id AND e.id = q.episode
             RETURNING q.episode, e.content, e.producer_id, q.embedder, q.queued_at, e.project"
        )))
        .bind(embedder)
        .bind(limit as i64)
        .bind(lease_micros)
        .fetch_all(self.pool())
        .await
        .map_err(db_error)?;
        let mut pending = Vec::with_capacity(rows.len());
        for row in &rows {
            let queued_at: i64 = row.try_get(4).map_err(db_error)?;
            pending.push((
                queued_at,
                PendingEmbedding {
                    episode: EpisodeHandle::from_raw(row.try_get(0).map_err(db_error)?),
                    content: row.try_get(1).map_err(db_error)?,
                    producer_id: row.try_get(2).map_err(db_error)?,
                    embedder: row.try_get(3).map_err(db_error)?,
                    project: ProjectHandle::from_raw(row.try_get(5).map_err(db_error)?),
                },
            ));
        }
        pending.sort_by_key(|(at, p)| (*at, p.episode));
        Ok(pending.into_iter().map(|(_, p)| p).collect())
    }

    async fn release_embeddings(&self, episodes: &[EpisodeHandle]) -> Result<()> {
        let episodes: Vec<i64> = episodes.iter().map(|e| e.raw()).collect();
        sqlx::query("UPDATE embedding_queue SET lease_until = 0 WHERE episode = ANY($1)")
            .bind(&episodes)
            .execute(self.pool())
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn abandon_embeddings(&self, episodes: &[EpisodeHandle]) -> Result<u64> {
        let episodes: Vec<i64> = episodes.iter().map(|e| e.raw()).collect();
        let removed = sqlx::query("DELETE FROM embedding_queue WHERE episode = ANY($1)")
            .bind(&episodes)
            .execute(self.pool())
            .await
            .map_err(db_error)?
            .rows_affected();
        Ok(removed)
    }

    async fn store_embeddings(
        &self,
        embedder: &str,
        vectors: Vec<(EpisodeHandle, Vec<f32>)>,
    ) -> Result<()> {
        if vectors.is_empty() {
            return Ok(());
        }
        let handles: Vec<i64> = vectors.iter().map(|(h, _)| h.raw()).collect();
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        // Their projects' rows first, in a fixed order (as deleters take them: project,
        // then episodes), so two writers never deadlock.
        sqlx::query(
            "SELECT p.id FROM projects p
             WHERE (p.org_id, p.id) IN (SELECT org_id, project FROM episodes WHERE id = ANY($1))
             ORDER BY p.org_id, p.id FOR NO KEY UPDATE",
        )
        .bind(&handles)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        // The episodes that still exist, held against deletion until commit; one queued
        // since for another embedder (its project changed embedder) waits for that one.
        let rows = sqlx::query(
            "SELECT e.org_id, e.project, e.id FROM episodes e WHERE e.id = ANY($1)
             AND NOT EXISTS (SELECT 1 FROM embedding_queue q
                 WHERE q.org_id = e.org_id AND q.episode = e.id AND q.embedder <> $2)
             ORDER BY e.org_id, e.project, e.id FOR KEY SHARE OF e",
        )
        .bind(&handles)
        .bind(embedder)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_error)?;
        let mut by_project: BTreeMap<(String, i64), Vec<i64>> = BTreeMap::new();
        for row in &rows {
            let org: String = row.try_get(0).map_err(db_error)?;
            let project: i64 = row.try_get(1).map_err(db_error)?;
            let id: i64 = row.try_get(2).map_err(db_error)?;
            by_project.entry((org, project)).or_default().push(id);
        }
        let vector_of: std::collections::HashMap<i64, &Vec<f32>> =
            vectors.iter().map(|(h, v)| (h.raw(), v)).collect();
        for ((org, project), episodes) in &by_project {
            let n = episodes.len() as i64;
            let first: i64 = sqlx::query_scalar(
                "UPDATE projects SET last_change = last_change + $3
                 WHERE org_id = $1 AND id = $2 RETURNING last_change - $3",
            )
            .bind(org)
            .bind(*project)
            .bind(n)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
            let values: Vec<pgvector::Vector> = episodes
                .iter()
                .map(|e| pgvector::Vector::from(vector_of[e].clone()))
                .collect();
            sqlx::query(
                "INSERT INTO embeddings (org_id, episode, embedder, vector)
                 SELECT $1, v.episode, $3, v.vector
                 FROM UNNEST($2::bigint[], $4::vector[]) AS v (episode, vector)
                 ON CONFLICT (org_id, episode) DO UPDATE
                     SET embedder = EXCLUDED.embedder, vector = EXCLUDED.vector",
            )
            .bind(org)
            .bind(episodes)
            .bind(embedder)
            .bind(&values)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            sqlx::query(
                "DELETE FROM embedding_queue
                 WHERE org_id = $1 AND episode = ANY($2) AND embedder = $3",
            )
            .bind(org)
            .bind(episodes)
            .bind(embedder)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
            let ids: Vec<i64> = (1..=n).map(|i| first + i).collect();
            log_changes(&mut tx, org, *project, &ids, VECTOR, episodes).await?;
        }
        // Episodes deleted meanwhile leave the queue too (their rows cascade anyway).
        tx.commit().await.map_err(db_error)?;
        self.ensure_hnsw("embeddings", &dimensions(vectors.iter().map(|(_, v)| v)))
            .await;
        Ok(())
    }

    async fn vectors(
        &self,
        key: &ProjectAccess,
        embedder: &str,
        handles: &[EpisodeHandle],
    ) -> Result<Vec<(EpisodeHandle, Vec<f32>)>> {
        let mut conn = self.pool().acquire().await.map_err(db_error)?;
        by_handle(&mut conn, key, embedder, handles).await
    }
}

/// The vectors from `embedder` of this project's episodes with these handles.
pub(super) async fn by_handle(
    conn: &mut PgConnection,
    key: &ProjectKey,
    embedder: &str,
    handles: &[EpisodeHandle],
) -> Result<Vec<(EpisodeHandle, Vec<f32>)>> {
    if handles.is_empty() {
        projects::require(&mut *conn, key).await?;
        return Ok(Vec::new());
    }
    // One round trip on the hot path, as `episodes_by_handle`.
    let rows = sqlx::query(
        "SELECT v.episode, v.vector FROM embeddings v
             JOIN episodes e ON e.org_id = v.org_id AND e.id = v.episode
             WHERE v.org_id = $1 AND v.episode = ANY($3) AND v.embedder = $4 AND e.project =
                 (SELECT id FROM projects WHERE org_id = $1 AND project_id = $2)",
    )
    .bind(&key.org_id)
    .bind(&key.project_id)
    .bind(handles.iter().map(|h| h.raw()).collect::<Vec<i64>>())
    .bind(embedder)
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?;
    if rows.is_empty() {
        projects::require(&mut *conn, key).await?;
    }
    let mut found = std::collections::HashMap::with_capacity(rows.len());
    for row in &rows {
        let handle = EpisodeHandle::from_raw(row.try_get(0).map_err(db_error)?);
        let vector: pgvector::Vector = row.try_get(1).map_err(db_error)?;
        found.insert(handle, vector.to_vec());
    }
    Ok(handles
        .iter()
        .filter_map(|h| found.remove(h).map(|v| (*h, v)))
        .collect())
}
