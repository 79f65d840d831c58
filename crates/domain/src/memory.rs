//! The memory domain: routes adds, searches, lists and deletes by memory type to the
//! episodic and semantic modules, after resolving the project (never creating it).

use std::collections::BTreeMap;

use crate::episodic::{EpisodicMemory, EpisodicSearch, MessageInput, SearchInput, Start};
use crate::error::{Error, Result};
use crate::model::{AddedEpisode, Episode, NewEpisode};
use crate::projects::Projects;
use crate::search_plan::SearchPlan;
use crate::semantic::model::Feature;
use crate::semantic::{FeatureSearch, ScoredFeature, SemanticMemory};
use memmachine_core::access::{OpenProject, ProjectAccess};

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
    /// Both ranked together, when asked (`rank_together.rs`).
    pub ranked: Vec<crate::rank_together::Ranked>,
}

/// What to list: a memory type (unset: episodic), a page and a filter.
#[derive(Debug, Clone, Default)]
pub struct ListInput {
    pub kind: Option<MemoryKind>,
    pub page_size: Option<i32>,
    pub page_token: String,
    /// Pages to skip after `page_token` (MemMachine's page numbers), 0 for none.
    pub page_num: u32,
    pub filter: String,
    /// A narrowing the transport built (MCP's user or profile set, a v1 session), ANDed
    /// onto the parsed `filter`.
    pub scope: Option<crate::model::filter::Expr>,
    /// Selects semantic sets.
    pub set_metadata: BTreeMap<String, String>,
    /// Micros: list the features as they were then (semantic listings only).
    pub as_of: Option<i64>,
}

/// A page of a listing: episodes or features, and the next page's token.
#[derive(Debug, Clone, PartialEq)]
pub enum Listed {
    Episodes(Vec<Episode>, String),
    Features(Vec<Feature>, String),
}

/// Most episodes read by id in one call: a feature's citations, not a listing (which
/// pages by bytes).
pub const MAX_GET_EPISODES: usize = 100;

/// Deepest `page_num` a listing walks to.
pub const MAX_PAGE_NUM: u32 = 10_000;

/// Parses episode uids, naming the first that is not one (`field[i]`).
fn episode_uids(field: &str, ids: &[String]) -> Result<Vec<uuid::Uuid>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            uuid::Uuid::parse_str(id)
                .map_err(|_| Error::invalid(format!("{field}[{i}]"), "is not an episode uid"))
        })
        .collect()
}

/// Why semantic memory was not reached though asked for.
const SEMANTIC_OFF: &str =
    "semantic memory is disabled on this server (PUT /api/v2/config/memory/semantic)";

#[derive(Clone)]
pub struct Memories {
    projects: Projects,
    episodic: EpisodicMemory,
    semantic: SemanticMemory,
    /// Where each search's store round trips are recorded (none: not recorded).
    metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

impl Memories {
    pub fn new(projects: Projects, episodic: EpisodicMemory, semantic: SemanticMemory) -> Memories {
        Memories {
            projects,
            episodic,
            semantic,
            metrics: None,
        }
    }

    /// Records each search's store round trips in `metrics`.
    pub fn with_metrics(mut self, metrics: std::sync::Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    pub fn semantic(&self) -> &SemanticMemory {
        &self.semantic
    }

    /// Stores the messages as episodes and, when semantic memory is asked for (or
    /// `types` is empty and a language model is configured), queues them for
    /// ingestion in the same transaction.
    pub async fn add(
        &self,
        key: &ProjectAccess,
        types: &[MemoryKind],
        messages: Vec<MessageInput>,
    ) -> Result<Vec<AddedEpisode>> {
        let (project, semantic) = self.add_target(key, types).await?;
        self.episodic.add(&project, messages, semantic).await
    }

    /// Checks one call's messages (see `EpisodicMemory::prepare`).
    pub fn prepare(&self, messages: Vec<MessageInput>) -> Result<Vec<NewEpisode>> {
        self.episodic.prepare(messages)
    }

    /// Stores prepared episodes (of one call or several) atomically, as `add`.
    pub async fn add_prepared(
        &self,
        key: &ProjectAccess,
        types: &[MemoryKind],
        episodes: Vec<NewEpisode>,
    ) -> Result<Vec<AddedEpisode>> {
        let (project, semantic) = self.add_target(key, types).await?;
        self.episodic
            .add_prepared(&project, episodes, semantic)
            .await
    }

    /// The project an add stores into, and the semantic memory that ingests it.
    async fn add_target(
        &self,
        key: &ProjectAccess,
        types: &[MemoryKind],
    ) -> Result<(OpenProject, Option<&SemanticMemory>)> {
        let settings = self.episodic.settings().current();
        if types.contains(&MemoryKind::Semantic) {
            self.semantic.require_model()?;
            if !settings.semantic_enabled {
                return Err(Error::FailedPrecondition(SEMANTIC_OFF.into()));
            }
        }
        let project = self.projects.get(key).await?;
        let semantic = (wanted(types).semantic && settings.semantic_enabled)
            .then_some(&self.semantic)
            .filter(|s| s.has_model());
        Ok((project, semantic))
    }

    pub async fn search(
        &self,
        key: &ProjectAccess,
        types: &[MemoryKind],
        input: SearchInput,
        set_metadata: &BTreeMap<String, String>,
    ) -> Result<SearchResult> {
        let search = self.search_untimed(key, types, input, set_metadata);
        let (found, trips) = crate::round_trips::counted(crate::search_time::logged(search)).await;
        if let Some(metrics) = &self.metrics {
            metrics.record_round_trips("search", trips);
        }
        found
    }

    async fn search_untimed(
        &self,
        key: &ProjectAccess,
        types: &[MemoryKind],
        input: SearchInput,
        set_metadata: &BTreeMap<String, String>,
    ) -> Result<SearchResult> {
        let want = wanted(types);
        let settings = self.episodic.settings().current();
        if !want.episodic {
            // Semantic memory alone: the request is validated as a feature search.
            let project = self.projects.get(key).await?;
            let together = input.together(self.episodic.limits().rank_semantic_weight)?;
            if !want.semantic || !settings.semantic_enabled || input.blank_allowed() {
                return Ok(SearchResult::default());
            }
            let search = FeatureSearch {
                query: input.query,
                top_k: input.top_k,
                filter: input.filter,
                score_threshold: input.score_threshold,
                set_metadata: set_metadata.clone(),
                as_of: input.as_of,
            };
            let semantic = self.semantic.search(&project, search).await?;
            let ranked = together.map_or_else(Vec::new, |weight| {
                crate::rank_together::features_alone(&semantic, weight)
            });
            return Ok(SearchResult {
                episodic: EpisodicSearch::default(),
                semantic,
                ranked,
            });
        }
        // Checked once, before either half runs (the episodic rules, whose errors win):
        // both halves read the plan.
        let semantic_runs = want.semantic && settings.semantic_enabled && !input.blank_allowed();
        let plan = SearchPlan::new(self.episodic.limits(), input, semantic_runs)?;
        // A warm project is not read here: the episodic half's one read checks it.
        let (project, start) = match self.episodic.warm(key).await {
            Some(warm) => (warm.project.clone(), Start::Warm(warm)),
            None => {
                let project = self.projects.get(key).await?;
                (project.clone(), Start::Cold(project))
            }
        };
        let semantic = |project: OpenProject| {
            let plan = &plan;
            async move {
                if !semantic_runs {
                    return Ok(Vec::new());
                }
                self.semantic
                    .rank(
                        &project,
                        &plan.query,
                        set_metadata,
                        plan.feature_filter.as_ref(),
                        crate::semantic::Cut {
                            top_k: plan.top_k,
                            score_threshold: plan.score_threshold,
                            as_of: plan.as_of,
                        },
                    )
                    .await
            }
        };
        let (episodic, features) = tokio::join!(
            self.episodic.search(start, &plan, true),
            semantic(project.clone())
        );
        // Errors of the episodic half come first.
        let episodic = episodic?;
        let semantic = if episodic.project.project() == project.project() {
            features?
        } else {
            // The project changed since this server last saw it: features again with it.
            semantic(episodic.project.clone()).await?
        };
        let ranked = match plan.together {
            None => Vec::new(),
            Some(weight) => {
                crate::ranked_search::answer(
                    &self.episodic,
                    &episodic.project,
                    &plan,
                    weight,
                    &episodic.found.long_term,
                    &semantic,
                )
                .await?
            }
        };
        Ok(SearchResult {
            episodic: episodic.found,
            semantic,
            ranked,
        })
    }

    /// One page; with `page_num`, the pages before it are walked (as an offset would be).
    pub async fn list(&self, key: &ProjectAccess, mut input: ListInput) -> Result<Listed> {
        // Each page walked is a read of the store: a deep one is a page token's job.
        if input.page_num > MAX_PAGE_NUM {
            return Err(Error::invalid(
                "page_num",
                format!("must be at most {MAX_PAGE_NUM} (page deeper with next_page_token)"),
            ));
        }
        for _ in 0..input.page_num {
            let skip = ListInput {
                page_num: 0,
                ..input.clone()
            };
            let next = match self.list_page(key, skip).await? {
                Listed::Episodes(_, next) | Listed::Features(_, next) => next,
            };
            if next.is_empty() {
                // Past the last page: an empty one.
                return Ok(match input.kind {
                    Some(MemoryKind::Semantic) => Listed::Features(Vec::new(), String::new()),
                    _ => Listed::Episodes(Vec::new(), String::new()),
                });
            }
            input.page_token = next;
        }
        self.list_page(key, input).await
    }

    async fn list_page(&self, key: &ProjectAccess, input: ListInput) -> Result<Listed> {
        if input.kind == Some(MemoryKind::Semantic) {
            let project = self.projects.get(key).await?;
            let (features, next) = self
                .semantic
                .list(
                    &project,
                    crate::semantic::Page {
                        size: input.page_size,
                        token: &input.page_token,
                        as_of: input.as_of,
                    },
                    &input.filter,
                    input.scope.as_ref(),
                    &input.set_metadata,
                )
                .await?;
            return Ok(Listed::Features(features, next));
        }
        let project = self.projects.get(key).await?;
        let (episodes, next) = self
            .episodic
            .list(
                &project,
                input.page_size,
                &input.page_token,
                &input.filter,
                input.scope.as_ref(),
            )
            .await?;
        Ok(Listed::Episodes(episodes, next))
    }

    pub async fn delete_episodes(&self, key: &ProjectAccess, ids: &[String]) -> Result<u64> {
        self.episodic.delete(key, ids).await
    }

    /// The episodes of the project with these uids, in the order asked (`None` for a
    /// uid not in it).
    pub async fn get_episodes(
        &self,
        key: &ProjectAccess,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<Option<Episode>>> {
        let project = self.projects.get(key).await?;
        self.episodic.get(&project, uids).await
    }

    /// The episodes of the project with these ids (at most [`MAX_GET_EPISODES`]), in the
    /// order asked, `None` for an id not in it; `field` names the ids in errors.
    pub async fn get_episodes_by_id(
        &self,
        key: &ProjectAccess,
        field: &str,
        ids: &[String],
    ) -> Result<Vec<Option<Episode>>> {
        if ids.is_empty() || ids.len() > MAX_GET_EPISODES {
            return Err(Error::invalid(
                field,
                format!(
                    "must name 1 to {MAX_GET_EPISODES} episodes, got {}",
                    ids.len()
                ),
            ));
        }
        let uids = episode_uids(field, ids)?;
        self.get_episodes(key, &uids).await
    }

    /// Deletes episodes said by `producer` (an agent's user scope): any other id, of
    /// another user or project, is `NotFound` and nothing is deleted.
    pub async fn delete_episodes_of(
        &self,
        key: &ProjectAccess,
        producer: &str,
        ids: &[String],
    ) -> Result<u64> {
        self.episodic.limits().ids("ids", ids.len())?;
        let uids = episode_uids("ids", ids)?;
        let found = self.get_episodes(key, &uids).await?;
        if let Some(i) = found
            .iter()
            .position(|e| e.as_ref().is_none_or(|e| e.producer_id != producer))
        {
            return Err(Error::NotFound(format!(
                "episode {} is not one of {producer}'s in {key}",
                ids[i]
            )));
        }
        self.delete_episodes(key, ids).await
    }

    /// Deletes features of the set `set_id` only (a user's own set): any other id is
    /// `NotFound` and nothing is deleted.
    pub async fn delete_features_in_set(
        &self,
        key: &ProjectAccess,
        set_id: &str,
        ids: &[String],
    ) -> Result<u64> {
        self.episodic.limits().ids("ids", ids.len())?;
        let project = self.projects.get(key).await?;
        for id in ids {
            let in_set = match self.semantic.get_feature(&project, id).await {
                Ok(feature) => feature.set_id == set_id,
                Err(Error::NotFound(_)) => false,
                Err(err) => return Err(err),
            };
            if !in_set {
                return Err(Error::NotFound(format!(
                    "feature {id} is not in set {set_id} of {key}"
                )));
            }
        }
        self.semantic.delete_features(&project, ids).await
    }

    pub async fn delete_features(&self, key: &ProjectAccess, ids: &[String]) -> Result<u64> {
        let project = self.projects.get(key).await?;
        self.semantic.delete_features(&project, ids).await
    }

    /// Deletes those of `ids` that are episodes of the project and skips the others, as
    /// MemMachine's REST delete does (gRPC's all-or-none delete answers `NotFound`).
    pub async fn delete_episodes_present(
        &self,
        key: &ProjectAccess,
        ids: &[String],
    ) -> Result<u64> {
        self.episodic.limits().ids("episodic_ids", ids.len())?;
        let uids = episode_uids("episodic_ids", ids)?;
        // A concurrent delete can take one away between the read and the delete: then
        // read again (twice at most, as each retry follows another caller's progress).
        for _ in 0..2 {
            let found = self.get_episodes(key, &uids).await?;
            let present = present(ids, found.iter().map(Option::is_some));
            if present.is_empty() {
                return Ok(0);
            }
            match self.delete_episodes(key, &present).await {
                Err(Error::NotFound(_)) => continue,
                deleted => return deleted,
            }
        }
        Ok(0)
    }

    /// Deletes those of `ids` that are features the project sees and skips the others
    /// (see [`Memories::delete_episodes_present`]).
    pub async fn delete_features_present(
        &self,
        key: &ProjectAccess,
        ids: &[String],
    ) -> Result<u64> {
        self.episodic.limits().ids("semantic_ids", ids.len())?;
        let project = self.projects.get(key).await?;
        for _ in 0..2 {
            let mut seen = Vec::with_capacity(ids.len());
            for id in ids {
                seen.push(match self.semantic.get_feature(&project, id).await {
                    Ok(_) => true,
                    Err(Error::NotFound(_)) => false,
                    Err(err) => return Err(err),
                });
            }
            let present = present(ids, seen.into_iter());
            if present.is_empty() {
                return Ok(0);
            }
            match self.semantic.delete_features(&project, &present).await {
                Err(Error::NotFound(_)) => continue,
                deleted => return deleted,
            }
        }
        Ok(0)
    }
}

/// The ids whose flag is set.
fn present(ids: &[String], found: impl Iterator<Item = bool>) -> Vec<String> {
    ids.iter()
        .zip(found)
        .filter(|(_, found)| *found)
        .map(|(id, _)| id.clone())
        .collect()
}
