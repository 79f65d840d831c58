//! `memmachine.v1.MemoryService` (deprecated).

use tonic::{Request, Response, Status};

use super::{admit, convert};
use memmachine_domain::legacy::Legacy;
use memmachine_proto::v1 as pb;
use memmachine_proto::v1::memory_service_server::MemoryService;

pub struct MemoryGrpc {
    legacy: Legacy,
}

impl MemoryGrpc {
    pub fn new(legacy: Legacy) -> MemoryGrpc {
        MemoryGrpc { legacy }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl MemoryService for MemoryGrpc {
    async fn add_episode(
        &self,
        request: Request<pb::AddEpisodeRequest>,
    ) -> Reply<pb::AddEpisodeResponse> {
        let (org, r) = admit(request)?;
        let ctx = convert::context(r.context);
        let episode = convert::episode_input(r.episode.unwrap_or_default());
        let uids = self.legacy.add_episodes(&org, &ctx, vec![episode]).await?;
        Ok(Response::new(pb::AddEpisodeResponse {
            uuid: uids.first().map(|u| u.to_string()).unwrap_or_default(),
        }))
    }

    async fn add_episodes(
        &self,
        request: Request<pb::AddEpisodesRequest>,
    ) -> Reply<pb::AddEpisodesResponse> {
        let (org, r) = admit(request)?;
        let ctx = convert::context(r.context);
        let episodes = r.episodes.into_iter().map(convert::episode_input).collect();
        let uids = self.legacy.add_episodes(&org, &ctx, episodes).await?;
        Ok(Response::new(pb::AddEpisodesResponse {
            uuids: uids.iter().map(|u| u.to_string()).collect(),
        }))
    }

    async fn search_episodes(
        &self,
        request: Request<pb::SearchEpisodesRequest>,
    ) -> Reply<pb::SearchEpisodesResponse> {
        let (org, r) = admit(request)?;
        let ctx = convert::context(r.context);
        let found = self
            .legacy
            .search_episodes(&org, &ctx, &r.query, r.limit, &r.filter)
            .await?;
        Ok(Response::new(pb::SearchEpisodesResponse {
            episodes: found
                .into_iter()
                .map(|(e, score)| pb::ScoredEpisode {
                    episode: Some(convert::episode(e)),
                    score,
                })
                .collect(),
        }))
    }

    async fn list_episodes(
        &self,
        request: Request<pb::ListEpisodesRequest>,
    ) -> Reply<pb::ListEpisodesResponse> {
        let (org, r) = admit(request)?;
        let ctx = convert::context(r.context);
        let (episodes, next_page_token) = self
            .legacy
            .list_episodes(&org, &ctx, r.page_size, &r.page_token, &r.filter)
            .await?;
        Ok(Response::new(pb::ListEpisodesResponse {
            episodes: episodes.into_iter().map(convert::episode).collect(),
            next_page_token,
        }))
    }

    async fn delete_episodes(
        &self,
        request: Request<pb::DeleteEpisodesRequest>,
    ) -> Reply<pb::DeleteEpisodesResponse> {
        let (org, r) = admit(request)?;
        let ctx = convert::context(r.context);
        let deleted = if r.whole_session && r.uuids.is_empty() {
            self.legacy.delete_whole_session(&org, &ctx).await?
        } else if r.whole_session {
            return Err(memmachine_core::error::Error::invalid(
                "uuids",
                "must be empty when whole_session is set",
            )
            .into());
        } else {
            self.legacy.delete_episodes(&org, &ctx, &r.uuids).await?
        };
        Ok(Response::new(pb::DeleteEpisodesResponse {
            deleted_count: deleted as i64,
        }))
    }
}
