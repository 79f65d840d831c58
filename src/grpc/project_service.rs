//! `memmachine.v2.ProjectService`.

use tonic::{Request, Response, Status};

use super::convert;
use memmachine_core::model::{EpisodicConfigUpdate, ProjectConfig};
use memmachine_domain::projects::Projects;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::project_service_server::ProjectService;

pub struct ProjectGrpc {
    projects: Projects,
}

impl ProjectGrpc {
    pub fn new(projects: Projects) -> ProjectGrpc {
        ProjectGrpc { projects }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl ProjectService for ProjectGrpc {
    async fn create_project(
        &self,
        request: Request<pb::CreateProjectRequest>,
    ) -> Reply<pb::CreateProjectResponse> {
        let (caller, r) = super::split(request)?;
        let key = caller.project(&r.org_id, &r.project_id)?;
        let config = r.config.unwrap_or_default();
        let config = ProjectConfig {
            embedder: config.embedder,
            reranker: config.reranker,
        };
        let project = self.projects.create(&key, &r.description, config).await?;
        Ok(Response::new(pb::CreateProjectResponse {
            project: Some(convert::project(project)),
        }))
    }

    async fn get_project(
        &self,
        request: Request<pb::GetProjectRequest>,
    ) -> Reply<pb::GetProjectResponse> {
        let (caller, r) = super::split(request)?;
        let project = self
            .projects
            .get(&caller.project(&r.org_id, &r.project_id)?)
            .await?;
        Ok(Response::new(pb::GetProjectResponse {
            project: Some(convert::project(project.into_project())),
        }))
    }

    async fn list_projects(
        &self,
        request: Request<pb::ListProjectsRequest>,
    ) -> Reply<pb::ListProjectsResponse> {
        let (caller, r) = super::split(request)?;
        let org = caller.list_scope(r.org_id.as_deref())?;
        let (projects, next_page_token) =
            self.projects.list(org, r.page_size, &r.page_token).await?;
        Ok(Response::new(pb::ListProjectsResponse {
            projects: projects.into_iter().map(convert::project).collect(),
            next_page_token,
        }))
    }

    async fn delete_project(
        &self,
        request: Request<pb::DeleteProjectRequest>,
    ) -> Reply<pb::DeleteProjectResponse> {
        let (caller, r) = super::split(request)?;
        self.projects
            .delete(&caller.project(&r.org_id, &r.project_id)?)
            .await?;
        Ok(Response::new(pb::DeleteProjectResponse {}))
    }

    async fn get_episode_count(
        &self,
        request: Request<pb::GetEpisodeCountRequest>,
    ) -> Reply<pb::GetEpisodeCountResponse> {
        let (caller, r) = super::split(request)?;
        let count = self
            .projects
            .episode_count(&caller.project(&r.org_id, &r.project_id)?)
            .await?;
        Ok(Response::new(pb::GetEpisodeCountResponse { count }))
    }

    async fn get_episodic_memory_config(
        &self,
        request: Request<pb::GetEpisodicMemoryConfigRequest>,
    ) -> Reply<pb::GetEpisodicMemoryConfigResponse> {
        let (caller, r) = super::split(request)?;
        let config = self
            .projects
            .episodic_config(&caller.project(&r.org_id, &r.project_id)?)
            .await?;
        Ok(Response::new(pb::GetEpisodicMemoryConfigResponse {
            config: Some(convert::episodic_config(config)),
        }))
    }

    async fn update_episodic_memory_config(
        &self,
        request: Request<pb::UpdateEpisodicMemoryConfigRequest>,
    ) -> Reply<pb::UpdateEpisodicMemoryConfigResponse> {
        let (caller, r) = super::split(request)?;
        let update = EpisodicConfigUpdate {
            enabled: r.enabled,
            long_term_memory_enabled: r.long_term_memory_enabled,
            short_term_memory_enabled: r.short_term_memory_enabled,
            participant_aware: r.participant_aware,
            episode_retention_micros: convert::retention_update(r.episode_retention),
            ranking_weights: convert::ranking_weights_update(r.ranking_weights),
        };
        let config = self
            .projects
            .update_episodic_config(&caller.project(&r.org_id, &r.project_id)?, update)
            .await?;
        Ok(Response::new(pb::UpdateEpisodicMemoryConfigResponse {
            config: Some(convert::episodic_config(config)),
        }))
    }
}
