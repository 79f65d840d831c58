//! Episodic memory: every message kept as an episode, searchable by relevance, listed in
//! order, with the project's most recent episodes as short-term memory.

mod crash_hook;
pub mod embedding;
mod expand;
pub mod expiry;
mod messages;
pub mod ranking;
mod rerank;
pub mod retention;

use std::sync::Arc;

pub use messages::MessageInput;
// Where the transports have always found them.
pub use crate::search_plan::{MAX_EXPAND_CONTEXT, SearchInput};

use self::expiry::Expiry;

use self::embedding::EmbeddingQueue;
use crate::embed::Embedders;
use crate::error::{Error, Result, Violations};
use crate::limits::Limits;
use crate::model::filter::{self, Expr};
use crate::model::{AddedEpisode, Episode, EpisodeHandle, NewEpisode, ScoredEpisode};
use crate::rerank::Rerankers;
use std::collections::HashMap;

use crate::retrieval::index_cache::{IndexCache, IndexView, Warm};
use crate::retrieval::ranking::Ranking;
use crate::runtime_settings::{Effective, RuntimeSettings};
use crate::search_plan::SearchPlan;
use crate::semantic::SemanticMemory;
use crate::store::{FeedHead, SearchRead, Store};
use memmachine_core::access::{OpenProject, ProjectAccess};
use memmachine_core::model::Project;

/// How many times `top_k` a ranking may ask for while expired hits leave it short.
const MAX_OVERFETCH: usize = 8;
/// Episodes read from the store at a time while a page fills up to its byte budget.
const LIST_CHUNK: usize = 64;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EpisodicSearch {
    pub long_term: Vec<ScoredEpisode>,
    pub short_term: Vec<Episode>,
    pub summaries: Vec<String>,
}

/// Where a search starts: the project and its index as last seen (no read yet), or
/// the project just read.
pub enum Start {
    Warm(Warm),
    Cold(OpenProject),
}

/// What the episodic half found, and the project's row as its read saw it.
pub struct Searched {
    pub found: EpisodicSearch,
    pub project: OpenProject,
}

#[derive(Clone)]
pub struct EpisodicMemory {
    store: Arc<dyn Store>,
    index: Arc<IndexCache>,
    limits: Limits,
    embedders: Embedders,
    queue: EmbeddingQueue,
    rerankers: Rerankers,
    settings: RuntimeSettings,
    /// Where searches' query embeddings are counted (none: not counted).
    usage: Option<crate::usage::Usage>,
    /// Woken after this server's writes, so that its watchers hear at once.
    changes: Option<crate::changes::Changes>,
}

/// Parses the request field `field` as a filter.
pub fn parse_filter(field: &str, text: &str) -> Result<Option<Expr>> {
    filter::parse(text).map_err(|err| err.into_error(field))
}

impl EpisodicMemory {
    /// Over `store`, ranking with the project indexes in `index`.
    pub fn new(store: Arc<dyn Store>, index: Arc<IndexCache>, limits: Limits) -> EpisodicMemory {
        EpisodicMemory {
            store,
            index,
            limits,
            embedders: Embedders::default(),
            queue: EmbeddingQueue::default(),
            rerankers: Rerankers::default(),
            settings: RuntimeSettings::unstored(Effective::of_flags(
                &limits,
                crate::semantic::ingest::IngestSettings::default().triggers(),
                false,
            )),
            usage: None,
            changes: None,
        }
    }

    /// Counts searches' query embeddings in `usage`.
    pub fn with_usage(mut self, usage: crate::usage::Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Pokes `changes`' hub after each write (its watchers need not wait for a poll).
    pub fn with_changes(mut self, changes: crate::changes::Changes) -> Self {
        self.changes = Some(changes);
        self
    }

    fn changed(&self) {
        if let Some(changes) = &self.changes {
            changes.poke();
        }
    }

    /// The server-wide settings it follows.
    pub fn settings(&self) -> &RuntimeSettings {
        &self.settings
    }

    /// Follows the server-wide settings changed at run time.
    pub fn with_settings(mut self, settings: RuntimeSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The request limits it enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Reranks the candidates of projects that name one of `rerankers`.
    pub fn with_rerankers(mut self, rerankers: Rerankers) -> Self {
        self.rerankers = rerankers;
        self
    }

    /// Ranks by embeddings too, each project's made by its embedder among `embedders`
    /// from episodes the worker behind `queue` takes off the store's queue.
    pub fn with_embedders(mut self, embedders: Embedders, queue: EmbeddingQueue) -> Self {
        self.embedders = embedders;
        self.queue = queue;
        self
    }

    /// Stores the messages atomically; one answer per message in input order (a
    /// message whose idempotency key is stored answers the stored episode's uid,
    /// `duplicate`). With `semantic`, the stored ones are queued for its ingestion in
    /// the same transaction.
    pub async fn add(
        &self,
        project: &OpenProject,
        messages: Vec<MessageInput>,
        semantic: Option<&SemanticMemory>,
    ) -> Result<Vec<AddedEpisode>> {
        ensure_enabled(project, &self.settings.current())?;
        let episodes = self.prepare(messages)?;
        self.add_prepared(project, episodes, semantic).await
    }

    /// Checks one call's messages and turns them into episodes: the part of `add` that
    /// refuses a client's input, apart so that an import names the batch at fault
    /// before it stores the batches received with it in one transaction.
    pub fn prepare(&self, messages: Vec<MessageInput>) -> Result<Vec<NewEpisode>> {
        messages::to_episodes(messages, &self.limits)
    }

    /// Stores episodes `prepare` made (of one call or several) atomically, as `add`.
    pub async fn add_prepared(
        &self,
        project: &OpenProject,
        episodes: Vec<NewEpisode>,
        semantic: Option<&SemanticMemory>,
    ) -> Result<Vec<AddedEpisode>> {
        let settings = self.settings.current();
        ensure_enabled(project, &settings)?;
        let count = episodes.len();
        let embedder = self.embedders.for_project(&project.config.embedder);
        let vectors = embedder.map(|e| e.id());
        let added = match semantic {
            None => {
                self.store
                    .add_episodes(project.access(), episodes, vectors)
                    .await?
            }
            Some(semantic) => {
                let routing = semantic.routing(project, &episodes).await?;
                let added = self
                    .store
                    .add_episodes_routed(project.access(), episodes, routing, vectors)
                    .await?;
                semantic.notify_queued();
                added
            }
        };
        crash_hook::after_add();
        if let Some(embedder) = vectors {
            self.queue.notify(embedder);
        }
        self.changed();
        tracing::debug!(project = %project.key, count, "episodes stored");
        Ok(added)
    }

    /// The project and its index as this server last saw them, when they are for the
    /// embedder the project names now. No read of the store.
    pub async fn warm(&self, key: &ProjectAccess) -> Option<Warm> {
        let warm = self.index.warm(key).await?;
        (warm.embedder.as_deref() == self.vectors_of(&warm.project)).then_some(warm)
    }

    /// Runs the episodic half of a search `plan` (checked once, by `SearchPlan::new`),
    /// with the project's summary when `summary`. From a warm start it ranks on the
    /// index as last seen and reads the store once: rows, vectors, the recent window
    /// and the summary, with the project's row and feed head, which tell whether that
    /// index was current; if not, it runs once more on the index brought up to them.
    pub async fn search(&self, start: Start, plan: &SearchPlan, summary: bool) -> Result<Searched> {
        let (mut project, mut view, mut seen) = match start {
            Start::Warm(warm) => (warm.project, warm.view, Some(warm.head)),
            Start::Cold(project) => {
                let view = self
                    .index
                    .view(project.access(), self.vectors_of(&project))
                    .await?;
                (project, view, None)
            }
        };
        loop {
            let (found, read) = match self.search_on(&project, &view, plan, summary).await {
                Err(Error::NotFound(m)) => {
                    // Deleted (here or by another replica): its index goes too.
                    self.index.forget(&project.key);
                    return Err(Error::NotFound(m));
                }
                other => other?,
            };
            let (read_project, head) = read;
            match seen {
                Some(known) if known != head || read_project != *project.project() => {
                    let read_project = project.access().open(read_project)?;
                    let embedder = self.vectors_of(&read_project);
                    view = self.index.view_at(&read_project, head, embedder).await?;
                    (project, seen) = (read_project, None);
                }
                _ => {
                    let read_project = project.access().open(read_project)?;
                    self.index.remember(&read_project, head).await;
                    return Ok(Searched {
                        found,
                        project: read_project,
                    });
                }
            }
        }
    }

    /// One pass of `search` on `view`: the index proposes, one read of the store
    /// answers. Returns what it found and the project's row and head the read saw.
    async fn search_on(
        &self,
        project: &OpenProject,
        view: &IndexView,
        plan: &SearchPlan,
        summary: bool,
    ) -> Result<(EpisodicSearch, (Project, FeedHead))> {
        let top_k = plan.top_k;
        let embedder = self.embedders.for_project(&project.config.embedder);
        let settings = self.settings.current();
        // A project that names no ranking gets the server's (settable at run time).
        let ranking = Ranking::parse(&project.config.reranker);
        let (mode, reranker) = ranking.or(&settings.ranking).plan(embedder.is_some());
        let metered = self.usage.as_ref().zip(embedder).map(|(usage, e)| {
            let scope = crate::usage::Scope::new(&project.key.org_id, &project.key.project_id);
            usage.metered(e.clone(), scope)
        });
        let embedder = metered.as_ref().or(embedder);
        let candidates = match reranker {
            Some(_) => self.rerankers.candidates(top_k),
            None => top_k,
        };
        let config = settings.episodic_for(project.episodic);
        let capacity = self.limits.short_term_window;
        // A blank query asks for nothing to rank by: the recent window still answers
        // (MemMachine answers such a search normally).
        let long_term =
            config.enabled && config.long_term_memory_enabled && !plan.query.trim().is_empty();
        let short_term = config.enabled && config.short_term_memory_enabled && capacity > 0;
        // Expired episodes are never answered: retention narrows every read, own
        // expiries are dropped after it.
        let expiry = Expiry::of(&project.episodic);
        let filter = filter::confine(plan.filter.clone(), expiry.scope());
        let asked = |top_k| ranking::RankQuery {
            mode,
            key: project.access(),
            query: &plan.query,
            participant_aware: config.participant_aware,
            filter: filter.as_ref(),
            top_k,
            weights: config.ranking_weights,
            explain: plan.explain,
        };
        // Before the read: what the index proposes, and the newest episodes passing the
        // filter (SQL may walk far back through rows that fail it; the index walks
        // back through episodes' fields in memory instead).
        let proposal = match long_term {
            true => Some(ranking::propose(view, embedder, asked(candidates)).await?),
            false => None,
        };
        let newest = match (short_term, filter.clone()) {
            (true, Some(filter)) => Some(
                view.read(move |index| {
                    let newest = index.newest(&filter, capacity).into_iter();
                    newest.map(EpisodeHandle::from_raw).collect::<Vec<_>>()
                })
                .await?,
            ),
            _ => None,
        };
        let mut episodes = proposal.as_ref().map_or_else(Vec::new, |p| p.rows_wanted());
        episodes.extend(newest.iter().flatten().copied());
        let vectors = proposal.as_ref().and_then(|p| p.vectors_wanted());
        let read = SearchRead {
            episodes: &episodes,
            vectors: vectors.as_ref().map(|(e, h)| (*e, h.as_slice())),
            recent: if short_term && newest.is_none() {
                capacity
            } else {
                0
            },
            summary: summary && config.enabled && config.short_term_memory_enabled,
        };
        let rows = crate::round_trips::call(self.store.search_rows(project.access(), read)).await?;
        let seen = (rows.project, rows.head);
        let mut by_handle: HashMap<EpisodeHandle, Episode> = rows.episodes.into_iter().collect();
        let summaries = rows.summary.map(|s| vec![s.text]).unwrap_or_default();
        let short_term = match (short_term, newest) {
            (false, _) => Vec::new(),
            (true, newest) => {
                let recent = match newest {
                    Some(ids) => ids
                        .iter()
                        .filter_map(|id| by_handle.get(id).cloned())
                        .collect(),
                    None => rows.recent,
                };
                let window = crate::semantic::summary::Window {
                    messages: capacity,
                    chars: settings.short_term_chars,
                };
                crate::semantic::summary::kept(window, expiry.retain(recent))
            }
        };
        let Some(proposal) = proposal else {
            let found = EpisodicSearch {
                long_term: Vec::new(),
                short_term,
                summaries,
            };
            return Ok((found, seen));
        };
        let exact: HashMap<i64, Vec<f32>> = rows
            .vectors
            .into_iter()
            .map(|(handle, vector)| (handle.raw(), vector))
            .collect();
        let mut hits = proposal.finish(&mut by_handle, &exact);
        // Asks for more while expired hits left the ranking short (bounded; each round
        // reads the store again).
        let most = candidates.saturating_mul(MAX_OVERFETCH);
        let mut asked_for = candidates;
        loop {
            let ranked = hits.len();
            hits.retain_mut(|hit| expiry.keep(&mut hit.scored.episode));
            if hits.len() >= candidates || ranked < asked_for || asked_for >= most {
                hits.truncate(candidates);
                break;
            }
            asked_for = asked_for.saturating_mul(2).min(most);
            hits = ranking::rank(&self.store, view, embedder, asked(asked_for)).await?;
        }
        if let Some(name) = reranker {
            hits = rerank::rerank(&self.rerankers, name, &plan.query, hits, top_k).await;
        }
        if let Some(threshold) = plan.score_threshold {
            hits.retain(|hit| hit.scored.score >= threshold);
        }
        let long_term = if plan.expand_context == 0 || hits.is_empty() {
            hits.into_iter().map(|h| h.scored).collect()
        } else {
            let (before, after) = expand::split(plan.expand_context);
            let handles: Vec<EpisodeHandle> = hits.iter().map(|h| h.handle).collect();
            let contexts = self
                .contexts(
                    view,
                    project.access(),
                    handles,
                    before,
                    after,
                    filter.as_ref(),
                )
                .await?
                .into_iter()
                .map(|window| expiry.retain(window))
                .collect();
            let hits = hits.into_iter().map(|h| h.scored).collect();
            expand::expand(hits, contexts, top_k)
        };
        let found = EpisodicSearch {
            long_term,
            short_term,
            summaries,
        };
        Ok((found, seen))
    }

    /// For each hit (its handle), the episode with up to `before` and `after`
    /// neighbours passing `filter`, oldest first; one no longer indexed gets none.
    async fn contexts(
        &self,
        view: &IndexView,
        key: &ProjectAccess,
        handles: Vec<EpisodeHandle>,
        before: usize,
        after: usize,
        filter: Option<&Expr>,
    ) -> Result<Vec<Vec<Episode>>> {
        let filter = filter.cloned();
        let windows: Vec<Vec<EpisodeHandle>> = view
            .read(move |index| {
                let neighbours = |h: &EpisodeHandle| {
                    let window = index.neighbours(h.raw(), before, after, filter.as_ref());
                    window.into_iter().map(EpisodeHandle::from_raw).collect()
                };
                handles.iter().map(neighbours).collect()
            })
            .await?;
        let all: Vec<EpisodeHandle> = windows.iter().flatten().copied().collect();
        let rows: std::collections::HashMap<EpisodeHandle, Episode> =
            crate::round_trips::call(self.store.episodes_by_handle(key, &all))
                .await?
                .into_iter()
                .collect();
        Ok(windows
            .iter()
            .map(|ids| ids.iter().filter_map(|id| rows.get(id).cloned()).collect())
            .collect())
    }

    /// The id of the embedder whose vectors the project's index holds.
    fn vectors_of(&self, project: &OpenProject) -> Option<&str> {
        self.embedders
            .for_project(&project.config.embedder)
            .map(|e| e.id())
    }

    /// One page of episodes in sequence order passing `filter` within `scope`, and the
    /// next page's token (a position, so it holds whatever the scope).
    pub async fn list(
        &self,
        project: &OpenProject,
        page_size: Option<i32>,
        page_token: &str,
        filter: &str,
        scope: Option<&Expr>,
    ) -> Result<(Vec<Episode>, String)> {
        let mut violations = Violations::default();
        let limit = violations.check(self.limits.page_size("page_size", page_size, 100));
        let filter = violations.check(parse_filter("filter", filter));
        let after = violations.check(decode_sequence_token(page_token));
        violations.into_result()?;
        let key = project.access();
        let expiry = Expiry::of(&project.episodic);
        let (limit, filter, after) = (
            limit.expect("validated"),
            filter::confine(
                filter::confine(filter.expect("validated"), scope.cloned()),
                expiry.scope(),
            ),
            after.expect("validated"),
        );
        // Read in chunks, so that a page of large episodes ends at the byte budget
        // without the rest of it ever being read.
        let mut page: Vec<Episode> = Vec::new();
        let (mut bytes, mut cursor) = (0usize, after);
        loop {
            let wanted = (limit + 1 - page.len()).min(LIST_CHUNK);
            let chunk = self
                .store
                .list_episodes(key, filter.as_ref(), cursor, wanted)
                .await?;
            let exhausted = chunk.len() < wanted;
            for mut episode in chunk {
                if !expiry.keep(&mut episode) {
                    cursor = episode.sequence_num;
                    continue;
                }
                bytes += episode.approximate_bytes();
                // The first episode is always sent, however large.
                if page.len() == limit || (bytes > self.limits.max_page_bytes && !page.is_empty()) {
                    let next = page
                        .last()
                        .map_or_else(String::new, |last| last.sequence_num.to_string());
                    return Ok((page, next));
                }
                cursor = episode.sequence_num;
                page.push(episode);
            }
            if exhausted {
                return Ok((page, String::new()));
            }
        }
    }

    /// The episodes of this project with these uids, in the order asked (`None` for a
    /// uid not in it).
    pub async fn get(
        &self,
        project: &OpenProject,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<Option<Episode>>> {
        let (key, expiry) = (project.access(), Expiry::of(&project.episodic));
        let handles = crate::round_trips::call(self.store.episode_handles(key, uids)).await?;
        let known: Vec<EpisodeHandle> = handles.iter().flatten().copied().collect();
        let mut rows: std::collections::HashMap<EpisodeHandle, Episode> =
            crate::round_trips::call(self.store.episodes_by_handle(key, &known))
                .await?
                .into_iter()
                .collect();
        Ok(handles
            .into_iter()
            .map(|h| h.and_then(|h| rows.remove(&h)))
            .map(|e| e.and_then(|mut e| expiry.keep(&mut e).then_some(e)))
            .collect())
    }

    /// Those of these episodes a search with `filter` (a plan's: its scope ANDed on)
    /// may answer: of this project, alive, passing the filter, and none while the
    /// project's long-term memory is off. For episodes the ranking did not propose (the
    /// ones features cite), so they obey the search's rules.
    pub async fn visible(
        &self,
        project: &OpenProject,
        uids: &[uuid::Uuid],
        filter: Option<&Expr>,
    ) -> Result<HashMap<uuid::Uuid, Episode>> {
        let config = self.settings.current().episodic_for(project.episodic);
        if !(config.enabled && config.long_term_memory_enabled) || uids.is_empty() {
            return Ok(HashMap::new());
        }
        let found = self.get(project, uids).await?;
        Ok(found
            .into_iter()
            .flatten()
            .filter(|e| {
                filter.is_none_or(|f| {
                    let fields = crate::retrieval::episode_fields::EpisodeFields::of(e);
                    crate::model::filter_eval::matches(f, &fields)
                })
            })
            .map(|e| (e.uid, e))
            .collect())
    }

    /// Deletes episodes of this project only; all or none.
    pub async fn delete(&self, key: &ProjectAccess, ids: &[String]) -> Result<u64> {
        let mut violations = Violations::default();
        if ids.is_empty() {
            violations.add("episode_ids", "must name at least one episode");
        }
        if ids.len() > self.limits.max_page_size {
            violations.add(
                "episode_ids",
                format!("at most {} per call", self.limits.max_page_size),
            );
        }
        let mut uids = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            match uuid::Uuid::parse_str(id) {
                Ok(uid) => uids.push(uid),
                Err(_) => {
                    violations.add(format!("episode_ids[{i}]"), format!("{id:?} is not a UUID"))
                }
            }
        }
        violations.into_result()?;
        let deleted = self.store.delete_episodes(key, &uids).await?;
        // No index segment keeps what was deleted.
        self.index.erase(key).await;
        self.changed();
        tracing::debug!(project = %key, deleted, "episodes deleted");
        Ok(deleted)
    }
}

fn ensure_enabled(project: &OpenProject, settings: &Effective) -> Result<()> {
    if !settings.episodic_enabled {
        return Err(Error::FailedPrecondition(
            "episodic memory is disabled on this server (PUT /api/v2/config/memory/episodic)"
                .into(),
        ));
    }
    if project.episodic.enabled {
        Ok(())
    } else {
        Err(Error::FailedPrecondition(format!(
            "episodic memory is disabled for project {}",
            project.key
        )))
    }
}

/// An episode page token is the sequence number of the previous page's last episode.
fn decode_sequence_token(token: &str) -> Result<i64> {
    if token.is_empty() {
        return Ok(0);
    }
    token
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| Error::invalid("page_token", "is not a token this server issued"))
}
