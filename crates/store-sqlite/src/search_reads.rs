//! `SearchReads` on SQLite: everything a search reads after ranking, in one read
//! transaction on one connection (one snapshot of the file).

use async_trait::async_trait;

use super::SqliteStore;
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::store::{SearchRead, SearchReads, SearchRows};

#[async_trait]
impl SearchReads for SqliteStore {
    async fn search_rows(&self, key: &ProjectAccess, read: SearchRead<'_>) -> Result<SearchRows> {
        let key = key.clone();
        let episodes = read.episodes.to_vec();
        let vectors = read
            .vectors
            .map(|(embedder, handles)| (embedder.to_string(), handles.to_vec()));
        let (recent, summary) = (read.recent, read.summary);
        self.readers
            .read_here(move |tx| {
                let head = super::feed::head(tx, &key)?;
                let project = super::projects::find(tx, &key)?
                    .ok_or_else(|| super::projects::not_found(&key))?;
                let episodes = match episodes.is_empty() {
                    true => Vec::new(),
                    false => super::episodes::by_handle(tx, &key, &episodes)?,
                };
                let vectors = match vectors {
                    Some((embedder, handles)) if !handles.is_empty() => {
                        super::vectors::by_handle(tx, &key, &embedder, &handles)?
                    }
                    _ => Vec::new(),
                };
                let mut recent = match recent {
                    0 => Vec::new(),
                    n => super::episodes::scan(tx, &key, None, i64::MIN, true, n)?,
                };
                recent.reverse();
                let summary = match summary {
                    true => super::semantic_summaries::summary(tx, &key)?,
                    false => None,
                };
                Ok(SearchRows {
                    project,
                    head,
                    episodes,
                    vectors,
                    recent,
                    summary,
                })
            })
            .await
    }
}
