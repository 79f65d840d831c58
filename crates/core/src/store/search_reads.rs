//! What one search reads from the store after ranking on its cached index: the
//! project's row and feed head (which tell whether that index and project were
//! current), the ranked episodes' rows and exact vectors, the recent window and the
//! summary, all in one call.

use async_trait::async_trait;

use super::{ChangeFeed, EpisodeStore, FeedHead, ProjectStore, Summaries, Summary, VectorStore};
use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{Episode, EpisodeHandle, Project};

/// What a search asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct SearchRead<'a> {
    /// Episodes whose rows are wanted.
    pub episodes: &'a [EpisodeHandle],
    /// Episodes whose exact vectors from this embedder (an id) are wanted.
    pub vectors: Option<(&'a str, &'a [EpisodeHandle])>,
    /// The newest this many episodes (the unfiltered recent window), oldest first.
    pub recent: usize,
    /// Whether the project's summary is wanted.
    pub summary: bool,
}

/// What it got, as of one moment of the store (`head`).
#[derive(Debug, Clone)]
pub struct SearchRows {
    pub project: Project,
    pub head: FeedHead,
    /// In no particular order; deleted ones left out.
    pub episodes: Vec<(EpisodeHandle, Episode)>,
    pub vectors: Vec<(EpisodeHandle, Vec<f32>)>,
    pub recent: Vec<Episode>,
    pub summary: Option<Summary>,
}

#[async_trait]
pub trait SearchReads: ProjectStore + ChangeFeed + EpisodeStore + VectorStore + Summaries {
    /// `NotFound` when the project does not exist. A backend that can reads it all in
    /// one transaction; this default issues the reads one after another, the head
    /// first, so every row is at least as new as the head says.
    async fn search_rows(&self, key: &ProjectAccess, read: SearchRead<'_>) -> Result<SearchRows> {
        let head = self.feed_head(key).await?;
        let project = self.get_project(key).await?.ok_or_else(|| {
            crate::error::Error::NotFound(format!("project {key} does not exist"))
        })?;
        let episodes = if read.episodes.is_empty() {
            Vec::new()
        } else {
            self.episodes_by_handle(key, read.episodes).await?
        };
        let vectors = match read.vectors {
            Some((embedder, handles)) if !handles.is_empty() => {
                self.vectors(key, embedder, handles).await?
            }
            _ => Vec::new(),
        };
        let recent = if read.recent == 0 {
            Vec::new()
        } else {
            self.recent_episodes(key, None, read.recent).await?
        };
        let summary = if read.summary {
            self.summary(key).await?
        } else {
            None
        };
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
