//! The memory domain: routes adds, searches, lists and deletes by memory type to the
//! episodic and semantic modules, after resolving the project (never creating it).

use std::collections::BTreeMap;

use crate::episodic::{EpisodicMemory, EpisodicSearch, MessageInput, SearchInput};
use crate::error::{Error, Result};
use crate::model::{Episode, ProjectKey};
use crate::projects::Projects;
use crate::semantic::model::Feature;
use crate::semantic::{FeatureSearch, ScoredFeature, SemanticMemory};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    Episodic,
    Semantic,
}

/// Which modules a request naming `types` reaches (empty: every enabled type).
struct Wanted {
    episodic: bool,
    semantic: bool,
}

fn wanted(types: &[MemoryKind]) -> Wanted {
    Wanted {
        episodic: types.is_empty() || types.contains(&MemoryKind::Episodic),
        semantic: types.is_empty() || types.contains(&MemoryKind::Semantic),
    }
}

/// What a search found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchResult {
    pub episodic: EpisodicSearch,
    pub semantic: Vec<ScoredFeature>,
}

/// What to list: a memory type (unset: episodic), a page and a filter.
#[derive(Debug, Clone, Default)]
pub struct ListInput {
    pub kind: Option<MemoryKind>,
    pub page_size: Option<i32>,
    pub page_token: String,
    pub filter: String,
    /// Selects semantic sets.
    pub set_metadata: BTreeMap<String, String>,
}

/// A page of a listing: episodes or features, and the next page's token.
#[derive(Debug, Clone, PartialEq)]
pub enum Listed {
    Episodes(Vec<Episode>, String),
    Features(Vec<Feature>, String),
}

#[derive(Clone)]
pub struct Memories {
    projects: Projects,
    episodic: EpisodicMemory,
    semantic: SemanticMemory,
}

impl Memories {
    pub fn new(projects: Projects, episodic: EpisodicMemory, semantic: SemanticMemory) -> Memories {
        Memories {
            projects,
            episodic,
            semantic,
        }
    }

    pub fn semantic(&self) -> &SemanticMemory {
        &self.semantic
    }

    /// Stores the messages as episodes and, when semantic memory is asked for (or
    /// `types` is empty and a language model is configured), queues them for
    /// ingestion in the same transaction.
    pub async fn add(
        &self,
        org_id: &str,
        project_id: &str,
        types: &[MemoryKind],
        messages: Vec<MessageInput>,
    ) -> Result<Vec<uuid::Uuid>> {
        let key = ProjectKey::parse(org_id, project_id)?;
        if types.contains(&MemoryKind::Semantic) {
            self.semantic.require_model()?;
        }
        let project = self.projects.get(&key).await?;
        let semantic =
            (wanted(types).semantic && self.semantic.has_model()).then_some(&self.semantic);
        self.episodic.add(&project, messages, semantic).await
    }

    pub async fn search(
        &self,
        org_id: &str,
        project_id: &str,
        types: &[MemoryKind],
        input: SearchInput,
        set_metadata: &BTreeMap<String, String>,
    ) -> Result<SearchResult> {
        let key = ProjectKey::parse(org_id, project_id)?;
        let want = wanted(types);
        let project = self.projects.get(&key).await?;
        let semantic = async {
            if !want.semantic {
                return Ok(Vec::new());
            }
            if !want.episodic {
                // Semantic memory alone: the request is validated as a feature search.
                let search = FeatureSearch {
                    query: input.query.clone(),
                    top_k: input.top_k,
                    filter: input.filter.clone(),
                    score_threshold: input.score_threshold,
                    set_metadata: set_metadata.clone(),
                };
                return self.semantic.search(&project, search).await;
            }
            // The episodic half validates the request (and its error wins).
            let top_k = input.top_k.map_or(10, |k| k.max(1) as usize);
            // The filter applies to features when it names only their fields.
            let filter = crate::semantic::parse_filter("filter", &input.filter)
                .ok()
                .flatten();
            self.semantic
                .rank(
                    &project,
                    &input.query,
                    set_metadata,
                    filter.as_ref(),
                    top_k,
                    input.score_threshold,
                )
                .await
        };
        let episodic = async {
            if !want.episodic {
                return Ok(EpisodicSearch::default());
            }
            let mut found = self.episodic.search(&project, input.clone()).await?;
            if project.episodic.enabled && project.episodic.short_term_memory_enabled {
                found.summaries = self.semantic.summaries(&project).await?;
            }
            Ok::<_, Error>(found)
        };
        // Validation errors of the episodic half come first.
        let (episodic, semantic) = tokio::join!(episodic, semantic);
        Ok(SearchResult {
            episodic: episodic?,
            semantic: semantic?,
        })
    }

    pub async fn list(&self, org_id: &str, project_id: &str, input: ListInput) -> Result<Listed> {
        let key = ProjectKey::parse(org_id, project_id)?;
        if input.kind == Some(MemoryKind::Semantic) {
            let project = self.projects.get(&key).await?;
            let (features, next) = self
                .semantic
                .list(
                    &project,
                    input.page_size,
                    &input.page_token,
                    &input.filter,
                    &input.set_metadata,
                )
                .await?;
            return Ok(Listed::Features(features, next));
        }
        let (episodes, next) = self
            .episodic
            .list(&key, input.page_size, &input.page_token, &input.filter)
            .await?;
        Ok(Listed::Episodes(episodes, next))
    }

    pub async fn delete_episodes(
        &self,
        org_id: &str,
        project_id: &str,
        ids: &[String],
    ) -> Result<u64> {
        let key = ProjectKey::parse(org_id, project_id)?;
        self.episodic.delete(&key, ids).await
    }

    pub async fn delete_features(
        &self,
        org_id: &str,
        project_id: &str,
        ids: &[String],
    ) -> Result<u64> {
        let key = ProjectKey::parse(org_id, project_id)?;
        let project = self.projects.get(&key).await?;
        self.semantic.delete_features(&project, ids).await
    }
}
