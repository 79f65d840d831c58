//! `memmachine.v2.SemanticService`.

use tonic::{Request, Response, Status};

use super::convert;
use memmachine_core::access::OpenProject;
use memmachine_domain::projects::Projects;
use memmachine_domain::semantic::{FeatureChange, FeatureInput, FeatureSearch, SemanticMemory};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::semantic_service_server::SemanticService;

pub struct SemanticGrpc {
    projects: Projects,
    semantic: SemanticMemory,
}

impl SemanticGrpc {
    pub fn new(projects: Projects, semantic: SemanticMemory) -> SemanticGrpc {
        SemanticGrpc { projects, semantic }
    }

    /// The caller's project, once its org is checked against the caller's key.
    async fn project<T>(
        &self,
        request: Request<T>,
        ids: impl Fn(&T) -> (&str, &str),
    ) -> Result<(OpenProject, T), Status> {
        let (caller, r) = super::split(request)?;
        let (org, project) = ids(&r);
        let key = caller.project(org, project)?;
        Ok((self.projects.get(&key).await?, r))
    }
}

type Reply<T> = Result<Response<T>, Status>;

macro_rules! ids {
    () => {
        |r| (r.org_id.as_str(), r.project_id.as_str())
    };
}

#[tonic::async_trait]
impl SemanticService for SemanticGrpc {
    async fn add_feature(
        &self,
        request: Request<pb::AddFeatureRequest>,
    ) -> Reply<pb::AddFeatureResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let input = FeatureInput {
            set_id: r.set_id,
            category_name: r.category_name,
            tag: r.tag,
            feature: r.feature,
            value: r.value,
            metadata: convert::json_object(r.feature_metadata),
            citations: r.citations,
        };
        let feature_id = self.semantic.add_feature(&project, input).await?;
        Ok(Response::new(pb::AddFeatureResponse { feature_id }))
    }

    async fn get_feature(
        &self,
        request: Request<pb::GetFeatureRequest>,
    ) -> Reply<pb::GetFeatureResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let feature = self.semantic.get_feature(&project, &r.feature_id).await?;
        Ok(Response::new(pb::GetFeatureResponse {
            feature: Some(convert::feature(feature, 0.0, r.load_citations)),
        }))
    }

    async fn update_feature(
        &self,
        request: Request<pb::UpdateFeatureRequest>,
    ) -> Reply<pb::UpdateFeatureResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let change = FeatureChange {
            category_name: r.category_name,
            tag: r.tag,
            feature: r.feature,
            value: r.value,
            metadata: r.metadata.map(|m| convert::json_object(Some(m))),
        };
        self.semantic
            .update_feature(&project, &r.feature_id, change)
            .await?;
        Ok(Response::new(pb::UpdateFeatureResponse {}))
    }

    async fn create_set_type(
        &self,
        request: Request<pb::CreateSetTypeRequest>,
    ) -> Reply<pb::CreateSetTypeResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let set_type_id = self
            .semantic
            .create_set_type(
                &project,
                r.is_org_level,
                &r.metadata_tags,
                &r.name,
                &r.description,
            )
            .await?;
        Ok(Response::new(pb::CreateSetTypeResponse { set_type_id }))
    }

    async fn list_set_types(
        &self,
        request: Request<pb::ListSetTypesRequest>,
    ) -> Reply<pb::ListSetTypesResponse> {
        let (project, _) = self.project(request, ids!()).await?;
        let set_types = self.semantic.list_set_types(&project).await?;
        Ok(Response::new(pb::ListSetTypesResponse {
            set_types: set_types.into_iter().map(convert::set_type).collect(),
        }))
    }

    async fn delete_set_type(
        &self,
        request: Request<pb::DeleteSetTypeRequest>,
    ) -> Reply<pb::DeleteSetTypeResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        self.semantic
            .delete_set_type(&project, &r.set_type_id)
            .await?;
        Ok(Response::new(pb::DeleteSetTypeResponse {}))
    }

    async fn get_set_id(
        &self,
        request: Request<pb::GetSetIdRequest>,
    ) -> Reply<pb::GetSetIdResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let set_metadata = r.set_metadata.into_iter().collect();
        let set_id = self
            .semantic
            .get_set_id(&project, r.is_org_level, &r.metadata_tags, &set_metadata)
            .await?;
        Ok(Response::new(pb::GetSetIdResponse { set_id }))
    }

    async fn list_set_ids(
        &self,
        request: Request<pb::ListSetIdsRequest>,
    ) -> Reply<pb::ListSetIdsResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let set_metadata = r.set_metadata.into_iter().collect();
        let sets = self.semantic.list_sets(&project, &set_metadata).await?;
        Ok(Response::new(pb::ListSetIdsResponse {
            sets: sets
                .into_iter()
                .map(|entry| pb::SetEntry {
                    id: entry.set.set_id,
                    is_org_level: entry.set.project.is_none(),
                    tags: entry.set.tags.keys().cloned().collect(),
                    name: entry.name,
                    description: entry.description,
                    metadata: entry.set.tags.into_iter().collect(),
                })
                .collect(),
        }))
    }

    async fn configure_set(
        &self,
        request: Request<pb::ConfigureSetRequest>,
    ) -> Reply<pb::ConfigureSetResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        self.semantic
            .configure_set(
                &project,
                &r.set_id,
                r.embedder_name.as_deref(),
                r.llm_name.as_deref(),
            )
            .await?;
        Ok(Response::new(pb::ConfigureSetResponse {}))
    }

    async fn add_category(
        &self,
        request: Request<pb::AddCategoryRequest>,
    ) -> Reply<pb::AddCategoryResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let category_id = self
            .semantic
            .add_category(
                &project,
                &r.set_id,
                &r.category_name,
                &r.prompt,
                &r.description,
            )
            .await?;
        Ok(Response::new(pb::AddCategoryResponse { category_id }))
    }

    async fn get_category(
        &self,
        request: Request<pb::GetCategoryRequest>,
    ) -> Reply<pb::GetCategoryResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let category = self.semantic.get_category(&project, &r.category_id).await?;
        Ok(Response::new(pb::GetCategoryResponse {
            category: Some(convert::category(category)),
        }))
    }

    async fn add_category_template(
        &self,
        request: Request<pb::AddCategoryTemplateRequest>,
    ) -> Reply<pb::AddCategoryTemplateResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let category_id = self
            .semantic
            .add_category_template(
                &project,
                &r.set_type_id,
                &r.category_name,
                &r.prompt,
                &r.description,
            )
            .await?;
        Ok(Response::new(pb::AddCategoryTemplateResponse {
            category_id,
        }))
    }

    async fn list_category_templates(
        &self,
        request: Request<pb::ListCategoryTemplatesRequest>,
    ) -> Reply<pb::ListCategoryTemplatesResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let templates = self
            .semantic
            .list_category_templates(&project, &r.set_type_id)
            .await?;
        Ok(Response::new(pb::ListCategoryTemplatesResponse {
            categories: templates
                .into_iter()
                .map(|c| pb::CategoryTemplate {
                    id: c.id,
                    name: c.name,
                    origin_type: "set_type".into(),
                    origin_id: r.set_type_id.clone(),
                    inherited: true,
                    prompt: c.prompt,
                    description: c.description,
                })
                .collect(),
        }))
    }

    async fn disable_category(
        &self,
        request: Request<pb::DisableCategoryRequest>,
    ) -> Reply<pb::DisableCategoryResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        self.semantic
            .disable_category(&project, &r.set_id, &r.category_name)
            .await?;
        Ok(Response::new(pb::DisableCategoryResponse {}))
    }

    async fn get_category_set_ids(
        &self,
        request: Request<pb::GetCategorySetIdsRequest>,
    ) -> Reply<pb::GetCategorySetIdsResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let set_ids = self
            .semantic
            .category_set_ids(&project, &r.category_id)
            .await?;
        Ok(Response::new(pb::GetCategorySetIdsResponse { set_ids }))
    }

    async fn delete_category(
        &self,
        request: Request<pb::DeleteCategoryRequest>,
    ) -> Reply<pb::DeleteCategoryResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        self.semantic
            .delete_category(&project, &r.category_id)
            .await?;
        Ok(Response::new(pb::DeleteCategoryResponse {}))
    }

    async fn add_tag(&self, request: Request<pb::AddTagRequest>) -> Reply<pb::AddTagResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let tag_id = self
            .semantic
            .add_tag(&project, &r.category_id, &r.tag_name, &r.tag_description)
            .await?;
        Ok(Response::new(pb::AddTagResponse { tag_id }))
    }

    async fn delete_tag(
        &self,
        request: Request<pb::DeleteTagRequest>,
    ) -> Reply<pb::DeleteTagResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        self.semantic.delete_tag(&project, &r.tag_id).await?;
        Ok(Response::new(pb::DeleteTagResponse {}))
    }

    async fn search_features(
        &self,
        request: Request<pb::SearchFeaturesRequest>,
    ) -> Reply<pb::SearchFeaturesResponse> {
        let (project, r) = self.project(request, ids!()).await?;
        let input = FeatureSearch {
            query: r.query,
            top_k: r.top_k,
            filter: r.filter,
            score_threshold: r.score_threshold,
            set_metadata: r.set_metadata.into_iter().collect(),
            as_of: convert::as_of("as_of", r.as_of)?,
        };
        let found = self.semantic.search(&project, input).await?;
        Ok(Response::new(pb::SearchFeaturesResponse {
            features: found
                .into_iter()
                .map(|hit| convert::feature(hit.feature, hit.score, true))
                .collect(),
        }))
    }
}
