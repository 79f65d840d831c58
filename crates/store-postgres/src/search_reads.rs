//! `SearchReads` on PostgreSQL: everything a search reads after ranking, in one
//! REPEATABLE READ transaction (one snapshot).

use async_trait::async_trait;

use super::PostgresStore;
use super::error::db_error;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::store::{SearchRead, SearchReads, SearchRows};

#[async_trait]
impl SearchReads for PostgresStore {
    async fn search_rows(&self, key: &ProjectAccess, read: SearchRead<'_>) -> Result<SearchRows> {
        let mut tx = self.pool().begin().await.map_err(db_error)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let head = super::feed::head(&mut tx, key).await?;
        let project = super::projects::find(&mut tx, key)
            .await?
            .ok_or_else(|| super::projects::not_found(key))?;
        let episodes = match read.episodes.is_empty() {
            true => Vec::new(),
            false => super::episodes::by_handle(&mut tx, key, read.episodes).await?,
        };
        let vectors = match read.vectors {
            Some((embedder, handles)) if !handles.is_empty() => {
                super::vectors::by_handle(&mut tx, key, embedder, handles).await?
            }
            _ => Vec::new(),
        };
        let mut recent = match read.recent {
            0 => Vec::new(),
            n => super::episodes::scan(&mut tx, key, None, i64::MIN, true, n).await?,
        };
        recent.reverse();
        let summary = match read.summary {
            true => super::semantic_summaries::summary(&mut tx, key).await?,
            false => None,
        };
        tx.commit().await.map_err(db_error)?;
        Ok(SearchRows {
            project,
            head,
            episodes,
            vectors,
            recent,
            summary,
        })
    }
}
