//! Semantic memory (`/memories/semantic/...`): features, set types, sets, categories,
//! category templates and tags, as MemMachine's routes.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Extension, State};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::Body;
use super::projects::key;
use super::shapes::{FeatureJson, ProjectRef};
use super::{ApiError, Gateway};
use memmachine_core::access::OpenProject;
use memmachine_domain::auth::Access;
use memmachine_domain::semantic::{FeatureChange, FeatureInput, SemanticMemory};

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new()
        .routes(routes!(add_feature))
        .routes(routes!(get_feature))
        .routes(routes!(update_feature))
        .routes(routes!(create_set_type))
        .routes(routes!(list_set_types))
        .routes(routes!(delete_set_type))
        .routes(routes!(get_set_id))
        .routes(routes!(list_set_ids))
        .routes(routes!(configure_set))
        .routes(routes!(get_category))
        .routes(routes!(add_category))
        .routes(routes!(add_category_template))
        .routes(routes!(list_category_templates))
        .routes(routes!(disable_category))
        .routes(routes!(get_category_set_ids))
        .routes(routes!(delete_category))
        .routes(routes!(add_tag))
        .routes(routes!(delete_tag))
}

type Reply<T> = Result<T, ApiError>;

/// The request's project (checked against the caller) and semantic memory.
async fn project<'g>(
    gateway: &'g Gateway,
    caller: &Access,
    org_id: &str,
    project_id: &str,
) -> Result<(OpenProject, &'g SemanticMemory), ApiError> {
    let key = key(
        caller,
        &ProjectRef {
            org_id: org_id.to_string(),
            project_id: project_id.to_string(),
        },
    )?;
    let domain = gateway.domain()?;
    Ok((domain.projects.get(&key).await?, &domain.semantic))
}

/// Set metadata values as the domain keeps them: strings as they are, other JSON as text.
fn set_metadata(metadata: Option<BTreeMap<String, serde_json::Value>>) -> BTreeMap<String, String> {
    metadata
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect()
}

/// Declares a request body: the project ids and the given fields.
macro_rules! spec {
    ($name:ident { $($(#[$attr:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        #[derive(Debug, Deserialize, ToSchema)]
        pub struct $name {
            #[serde(default)]
            org_id: String,
            #[serde(default)]
            project_id: String,
            $($(#[$attr])* $field: $ty,)*
        }
    };
}

spec!(AddFeature {
    set_id: String,
    category_name: String,
    tag: String,
    feature: String,
    value: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    feature_metadata: Option<serde_json::Value>,
    #[serde(default)]
    citations: Vec<String>,
});

#[derive(Debug, Serialize, ToSchema)]
pub struct FeatureId {
    feature_id: String,
}

#[utoipa::path(post, path = "/memories/semantic/feature", tag = "Semantic memory",
    request_body = AddFeature, responses((status = 201, body = FeatureId), (status = 422)))]
async fn add_feature(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<AddFeature>,
) -> Reply<(StatusCode, Json<FeatureId>)> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let input = FeatureInput {
        set_id: r.set_id,
        category_name: r.category_name,
        tag: r.tag,
        feature: r.feature,
        value: r.value,
        metadata: r
            .feature_metadata
            .unwrap_or_else(|| serde_json::Value::Object(Default::default())),
        citations: r.citations,
    };
    let feature_id = semantic.add_feature(&project, input).await?;
    Ok((StatusCode::CREATED, Json(FeatureId { feature_id })))
}

spec!(GetFeature {
    feature_id: String,
    #[serde(default)]
    load_citations: bool,
});

#[utoipa::path(post, path = "/memories/semantic/feature/get", tag = "Semantic memory",
    request_body = GetFeature, responses((status = 200, body = FeatureJson), (status = 404)))]
async fn get_feature(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<GetFeature>,
) -> Reply<Json<FeatureJson>> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let feature = semantic.get_feature(&project, &r.feature_id).await?;
    Ok(Json(FeatureJson::new(feature, None, r.load_citations)))
}

spec!(UpdateFeature {
    feature_id: String,
    #[serde(default)]
    category_name: Option<String>,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    feature: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<serde_json::Value>,
});

/// Changes the fields given, keeping the others.
#[utoipa::path(post, path = "/memories/semantic/feature/update", tag = "Semantic memory",
    request_body = UpdateFeature, responses((status = 204), (status = 404)))]
async fn update_feature(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<UpdateFeature>,
) -> Reply<StatusCode> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let change = FeatureChange {
        category_name: r.category_name,
        tag: r.tag,
        feature: r.feature,
        value: r.value,
        metadata: r.metadata,
    };
    semantic
        .update_feature(&project, &r.feature_id, change)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

spec!(CreateSetType {
    #[serde(default)]
    is_org_level: bool,
    #[serde(default)]
    metadata_tags: Vec<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
});

#[derive(Debug, Serialize, ToSchema)]
pub struct SetTypeId {
    set_type_id: String,
}

#[utoipa::path(post, path = "/memories/semantic/set_type", tag = "Semantic memory",
    request_body = CreateSetType, responses((status = 201, body = SetTypeId), (status = 409)))]
async fn create_set_type(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<CreateSetType>,
) -> Reply<(StatusCode, Json<SetTypeId>)> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let set_type_id = semantic
        .create_set_type(
            &project,
            r.is_org_level,
            &r.metadata_tags,
            r.name.as_deref().unwrap_or_default(),
            r.description.as_deref().unwrap_or_default(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(SetTypeId { set_type_id })))
}

/// A set type, or a set (with its type's name and description).
#[derive(Debug, Serialize, ToSchema)]
pub struct SetJson {
    id: String,
    is_org_level: bool,
    tags: Vec<String>,
    name: String,
    description: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SetTypes {
    set_types: Vec<SetJson>,
}

#[utoipa::path(post, path = "/memories/semantic/set_type/list", tag = "Semantic memory",
    request_body = ProjectRef, responses((status = 200, body = SetTypes)))]
async fn list_set_types(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ProjectRef>,
) -> Reply<Json<SetTypes>> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let set_types = semantic.list_set_types(&project).await?;
    Ok(Json(SetTypes {
        set_types: set_types
            .into_iter()
            .map(|t| SetJson {
                id: t.id,
                is_org_level: t.is_org_level,
                tags: t.tags,
                name: t.name,
                description: t.description,
            })
            .collect(),
    }))
}

spec!(DeleteSetType {
    set_type_id: String
});

#[utoipa::path(post, path = "/memories/semantic/set_type/delete", tag = "Semantic memory",
    request_body = DeleteSetType, responses((status = 204)))]
async fn delete_set_type(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<DeleteSetType>,
) -> Reply<StatusCode> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    deleted(semantic.delete_set_type(&project, &r.set_type_id).await)?;
    Ok(StatusCode::NO_CONTENT)
}

spec!(GetSetId {
    #[serde(default)]
    is_org_level: bool,
    #[serde(default)]
    metadata_tags: Vec<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    set_metadata: Option<BTreeMap<String, serde_json::Value>>,
});

#[derive(Debug, Serialize, ToSchema)]
pub struct SetId {
    set_id: String,
}

#[utoipa::path(post, path = "/memories/semantic/set_id/get", tag = "Semantic memory",
    request_body = GetSetId, responses((status = 200, body = SetId)))]
async fn get_set_id(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<GetSetId>,
) -> Reply<Json<SetId>> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let set_id = semantic
        .get_set_id(
            &project,
            r.is_org_level,
            &r.metadata_tags,
            &set_metadata(r.set_metadata),
        )
        .await?;
    Ok(Json(SetId { set_id }))
}

spec!(ListSetIds {
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    set_metadata: Option<BTreeMap<String, serde_json::Value>>,
});

#[derive(Debug, Serialize, ToSchema)]
pub struct Sets {
    sets: Vec<SetJson>,
}

#[utoipa::path(post, path = "/memories/semantic/set_id/list", tag = "Semantic memory",
    request_body = ListSetIds, responses((status = 200, body = Sets)))]
async fn list_set_ids(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ListSetIds>,
) -> Reply<Json<Sets>> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let sets = semantic
        .list_sets(&project, &set_metadata(r.set_metadata))
        .await?;
    Ok(Json(Sets {
        sets: sets
            .into_iter()
            .map(|entry| SetJson {
                id: entry.set.set_id,
                is_org_level: entry.set.project.is_none(),
                tags: entry.set.tags.keys().cloned().collect(),
                name: entry.name,
                description: entry.description,
            })
            .collect(),
    }))
}

spec!(ConfigureSet {
    set_id: String,
    #[serde(default)]
    embedder_name: Option<String>,
    #[serde(default)]
    llm_name: Option<String>,
});

#[utoipa::path(post, path = "/memories/semantic/set/configure", tag = "Semantic memory",
    request_body = ConfigureSet, responses((status = 204), (status = 404)))]
async fn configure_set(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ConfigureSet>,
) -> Reply<StatusCode> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    semantic
        .configure_set(
            &project,
            &r.set_id,
            r.embedder_name.as_deref(),
            r.llm_name.as_deref(),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

spec!(GetCategory {
    category_id: String
});

#[derive(Debug, Serialize, ToSchema)]
pub struct CategoryJson {
    id: String,
    name: String,
    prompt: String,
    description: String,
    tags: Vec<TagJson>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TagJson {
    id: String,
    name: String,
    description: String,
}

#[utoipa::path(post, path = "/memories/semantic/category/get", tag = "Semantic memory",
    request_body = GetCategory, responses((status = 200, body = CategoryJson), (status = 404)))]
async fn get_category(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<GetCategory>,
) -> Reply<Json<CategoryJson>> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let c = semantic.get_category(&project, &r.category_id).await?;
    Ok(Json(CategoryJson {
        id: c.id,
        name: c.name,
        prompt: c.prompt,
        description: c.description,
        tags: c
            .tags
            .into_iter()
            .map(|t| TagJson {
                id: t.id,
                name: t.name,
                description: t.description,
            })
            .collect(),
    }))
}

spec!(AddCategory {
    set_id: String,
    category_name: String,
    prompt: String,
    #[serde(default)]
    description: Option<String>,
});

#[derive(Debug, Serialize, ToSchema)]
pub struct CategoryId {
    category_id: String,
}

#[utoipa::path(post, path = "/memories/semantic/category", tag = "Semantic memory",
    request_body = AddCategory, responses((status = 201, body = CategoryId), (status = 409)))]
async fn add_category(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<AddCategory>,
) -> Reply<(StatusCode, Json<CategoryId>)> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let category_id = semantic
        .add_category(
            &project,
            &r.set_id,
            &r.category_name,
            &r.prompt,
            r.description.as_deref().unwrap_or_default(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(CategoryId { category_id })))
}

spec!(AddCategoryTemplate {
    set_type_id: String,
    category_name: String,
    prompt: String,
    #[serde(default)]
    description: Option<String>,
});

#[utoipa::path(post, path = "/memories/semantic/category/template", tag = "Semantic memory",
    request_body = AddCategoryTemplate, responses((status = 201, body = CategoryId)))]
async fn add_category_template(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<AddCategoryTemplate>,
) -> Reply<(StatusCode, Json<CategoryId>)> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let category_id = semantic
        .add_category_template(
            &project,
            &r.set_type_id,
            &r.category_name,
            &r.prompt,
            r.description.as_deref().unwrap_or_default(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(CategoryId { category_id })))
}

spec!(ListCategoryTemplates {
    set_type_id: String
});

#[derive(Debug, Serialize, ToSchema)]
pub struct TemplateJson {
    id: String,
    name: String,
    origin_type: String,
    origin_id: String,
    inherited: bool,
    prompt: String,
    description: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Templates {
    categories: Vec<TemplateJson>,
}

#[utoipa::path(post, path = "/memories/semantic/category/template/list",
    tag = "Semantic memory", request_body = ListCategoryTemplates,
    responses((status = 200, body = Templates)))]
async fn list_category_templates(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ListCategoryTemplates>,
) -> Reply<Json<Templates>> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let templates = semantic
        .list_category_templates(&project, &r.set_type_id)
        .await?;
    Ok(Json(Templates {
        categories: templates
            .into_iter()
            .map(|c| TemplateJson {
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

spec!(DisableCategory {
    set_id: String,
    category_name: String,
});

#[utoipa::path(post, path = "/memories/semantic/category/disable", tag = "Semantic memory",
    request_body = DisableCategory, responses((status = 204), (status = 404)))]
async fn disable_category(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<DisableCategory>,
) -> Reply<StatusCode> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    semantic
        .disable_category(&project, &r.set_id, &r.category_name)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

spec!(CategorySetIds {
    category_id: String
});

#[derive(Debug, Serialize, ToSchema)]
pub struct SetIds {
    set_ids: Vec<String>,
}

#[utoipa::path(post, path = "/memories/semantic/category/set_ids/get", tag = "Semantic memory",
    request_body = CategorySetIds, responses((status = 200, body = SetIds)))]
async fn get_category_set_ids(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<CategorySetIds>,
) -> Reply<Json<SetIds>> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let set_ids = semantic.category_set_ids(&project, &r.category_id).await?;
    Ok(Json(SetIds { set_ids }))
}

spec!(DeleteCategory {
    category_id: String
});

#[utoipa::path(post, path = "/memories/semantic/category/delete", tag = "Semantic memory",
    request_body = DeleteCategory, responses((status = 204)))]
async fn delete_category(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<DeleteCategory>,
) -> Reply<StatusCode> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    deleted(semantic.delete_category(&project, &r.category_id).await)?;
    Ok(StatusCode::NO_CONTENT)
}

spec!(AddTag {
    category_id: String,
    tag_name: String,
    #[serde(default)]
    tag_description: String,
});

#[derive(Debug, Serialize, ToSchema)]
pub struct TagId {
    tag_id: String,
}

#[utoipa::path(post, path = "/memories/semantic/category/tag", tag = "Semantic memory",
    request_body = AddTag, responses((status = 201, body = TagId), (status = 409)))]
async fn add_tag(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<AddTag>,
) -> Reply<(StatusCode, Json<TagId>)> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    let tag_id = semantic
        .add_tag(&project, &r.category_id, &r.tag_name, &r.tag_description)
        .await?;
    Ok((StatusCode::CREATED, Json(TagId { tag_id })))
}

spec!(DeleteTag { tag_id: String });

#[utoipa::path(post, path = "/memories/semantic/category/tag/delete", tag = "Semantic memory",
    request_body = DeleteTag, responses((status = 204)))]
async fn delete_tag(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<DeleteTag>,
) -> Reply<StatusCode> {
    let (project, semantic) = project(&gateway, &caller, &r.org_id, &r.project_id).await?;
    deleted(semantic.delete_tag(&project, &r.tag_id).await)?;
    Ok(StatusCode::NO_CONTENT)
}

/// A delete's outcome as MemMachine's REST answers it: an id that is not there (or not
/// the caller's project's) is already deleted (gRPC answers `NOT_FOUND`).
fn deleted<T>(outcome: memmachine_core::error::Result<T>) -> memmachine_core::error::Result<()> {
    match outcome {
        Ok(_) | Err(memmachine_core::error::Error::NotFound(_)) => Ok(()),
        Err(err) => Err(err),
    }
}
