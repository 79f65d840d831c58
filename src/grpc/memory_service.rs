//! `memmachine.v2.MemoryService`.

use tonic::{Request, Response, Status};

use super::convert;
use super::import_stream::{self, Drain, ImportSettings, Requests};
use memmachine_domain::episodic::SearchInput;
use memmachine_domain::memory::{ListInput, Listed, Memories};
use memmachine_domain::search_time;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_server::MemoryService;

pub struct MemoryGrpc {
    memories: Memories,
    imports: ImportSettings,
}

impl MemoryGrpc {
    pub fn new(memories: Memories, imports: ImportSettings) -> MemoryGrpc {
        MemoryGrpc { memories, imports }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl MemoryService for MemoryGrpc {
    async fn import_memories(
        &self,
        request: Request<tonic::Streaming<pb::ImportMemoriesRequest>>,
    ) -> Reply<pb::ImportMemoriesResponse> {
        let (caller, stream) = super::split(request)?;
        let mut requests = Requests {
            stream,
            settings: &self.imports,
        };
        let imported = self
            .memories
            .import(
                &mut requests,
                |org, project| caller.org_of_project(org, project),
                &Drain(&self.imports.lifecycle),
            )
            .await?;
        Ok(Response::new(import_stream::response(imported)))
    }

    async fn add_memories(
        &self,
        request: Request<pb::AddMemoriesRequest>,
    ) -> Reply<pb::AddMemoriesResponse> {
        let (caller, r) = super::split(request)?;
        let key = caller.project(&r.org_id, &r.project_id)?;
        let types = convert::memory_kinds(&r.types)?;
        let messages = convert::messages(r.messages)?;
        let added = self.memories.add(&key, &types, messages).await?;
        Ok(Response::new(pb::AddMemoriesResponse {
            results: added
                .into_iter()
                .map(|a| pb::AddMemoryResult {
                    uid: a.uid.to_string(),
                    duplicate: a.duplicate,
                })
                .collect(),
        }))
    }

    async fn search_memories(
        &self,
        request: Request<pb::SearchMemoriesRequest>,
    ) -> Reply<pb::SearchMemoriesResponse> {
        // Timing by stage only when asked: a `server-timing` entry in the answer.
        let timing_asked = request.metadata().contains_key(search_time::ASK_HEADER);
        let (caller, r) = super::split(request)?;
        let key = caller.project(&r.org_id, &r.project_id)?;
        let types = convert::memory_kinds(&r.types)?;
        let input = SearchInput {
            query: r.query,
            top_k: r.top_k,
            filter: r.filter,
            expand_context: r.expand_context,
            score_threshold: r.score_threshold,
            scope: None,
            blank_query_ranks_nothing: false,
            as_of: convert::as_of("as_of", r.as_of)?,
            rank_together: r.rank_together,
            semantic_weight: r.semantic_weight,
            explain: r.explain,
        };
        let set_metadata = r.set_metadata.into_iter().collect();
        // Boxed: with the timing's wrappers the search's future is large (a debug
        // build's overflowed a test thread's stack).
        let search = Box::pin(self.memories.search(&key, &types, input, &set_metadata));
        let (found, timing) = if timing_asked {
            search_time::reported(search).await
        } else {
            (search.await, None)
        };
        let found = found?;
        let episodic = found.episodic;
        let mut response = Response::new(pb::SearchMemoriesResponse {
            episodic_memory: Some(pb::EpisodicSearchResult {
                long_term_memory: episodic
                    .long_term
                    .into_iter()
                    .map(|hit| convert::scored_episode(&key, hit))
                    .collect(),
                short_term_memory: episodic
                    .short_term
                    .into_iter()
                    .map(|e| convert::episode(&key, e))
                    .collect(),
                episode_summary: episodic.summaries,
            }),
            semantic_memory: found
                .semantic
                .into_iter()
                .map(|hit| convert::feature(hit.feature, hit.score, true))
                .collect(),
            ranked: found
                .ranked
                .into_iter()
                .map(|r| convert::ranked(&key, r))
                .collect(),
        });
        let header = timing.and_then(|t| t.header().parse().ok());
        if let Some(header) = header {
            response
                .metadata_mut()
                .insert(search_time::REPORT_HEADER, header);
        }
        Ok(response)
    }

    async fn list_memories(
        &self,
        request: Request<pb::ListMemoriesRequest>,
    ) -> Reply<pb::ListMemoriesResponse> {
        let (caller, r) = super::split(request)?;
        let key = caller.project(&r.org_id, &r.project_id)?;
        let kind = match r.r#type {
            0 => None,
            t => Some(convert::memory_kind("type", t)?),
        };
        let input = ListInput {
            kind,
            page_size: r.page_size,
            page_token: r.page_token,
            page_num: 0,
            filter: r.filter,
            set_metadata: r.set_metadata.into_iter().collect(),
            scope: None,
            as_of: convert::as_of("as_of", r.as_of)?,
        };
        let listed = self.memories.list(&key, input).await?;
        Ok(Response::new(match listed {
            Listed::Episodes(episodes, next_page_token) => pb::ListMemoriesResponse {
                episodes: episodes
                    .into_iter()
                    .map(|e| convert::episode(&key, e))
                    .collect(),
                features: Vec::new(),
                next_page_token,
            },
            Listed::Features(features, next_page_token) => pb::ListMemoriesResponse {
                episodes: Vec::new(),
                features: features
                    .into_iter()
                    .map(|f| convert::feature(f, 0.0, true))
                    .collect(),
                next_page_token,
            },
        }))
    }

    async fn delete_episodic_memories(
        &self,
        request: Request<pb::DeleteEpisodicMemoriesRequest>,
    ) -> Reply<pb::DeleteEpisodicMemoriesResponse> {
        let (caller, r) = super::split(request)?;
        let key = caller.project(&r.org_id, &r.project_id)?;
        let deleted = self.memories.delete_episodes(&key, &r.episode_ids).await?;
        Ok(Response::new(pb::DeleteEpisodicMemoriesResponse {
            deleted_count: deleted as i64,
        }))
    }

    async fn delete_semantic_memories(
        &self,
        request: Request<pb::DeleteSemanticMemoriesRequest>,
    ) -> Reply<pb::DeleteSemanticMemoriesResponse> {
        let (caller, r) = super::split(request)?;
        let key = caller.project(&r.org_id, &r.project_id)?;
        let deleted = self.memories.delete_features(&key, &r.feature_ids).await?;
        Ok(Response::new(pb::DeleteSemanticMemoriesResponse {
            deleted_count: deleted as i64,
        }))
    }
}
