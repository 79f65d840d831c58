//! Projects: create, get, list, delete, episode count, and the episodic memory settings
//! of a project (`/memory/episodic/...`).

use axum::Json;
use axum::extract::{Extension, State};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::Body;
use super::shapes::{ProjectConfigJson, ProjectJson, ProjectRef};
use super::{ApiError, Gateway};
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::{Error, Violations};
use memmachine_core::model::{
    EpisodicConfigUpdate, ProjectConfig, RankingWeights, RankingWeightsUpdate,
};
use memmachine_domain::auth::Access;

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new()
        .routes(routes!(create_project))
        .routes(routes!(get_project))
        .routes(routes!(list_projects))
        .routes(routes!(delete_project))
        .routes(routes!(episode_count))
        .routes(routes!(get_episodic_config))
        .routes(routes!(configure_episodic))
        .routes(routes!(get_short_term_config))
        .routes(routes!(configure_short_term))
        .routes(routes!(get_long_term_config))
        .routes(routes!(configure_long_term))
}

type Reply<T> = Result<T, ApiError>;

/// The project named by `r`, once the caller is checked against its org.
pub fn key(caller: &Access, r: &ProjectRef) -> Result<ProjectAccess, ApiError> {
    Ok(caller.project(&r.org_id, &r.project_id)?)
}

/// A project named in full, as MemMachine's project routes require (422 when an id is
/// missing or blank; memory routes default to `universal` instead).
#[derive(Debug, Deserialize, ToSchema)]
pub struct NamedProject {
    org_id: String,
    project_id: String,
}

impl NamedProject {
    fn key(&self, caller: &Access) -> Result<ProjectAccess, ApiError> {
        named(&self.org_id, &self.project_id)?;
        key(
            caller,
            &ProjectRef {
                org_id: self.org_id.clone(),
                project_id: self.project_id.clone(),
            },
        )
    }
}

/// Refuses a blank id where MemMachine requires one.
fn named(org_id: &str, project_id: &str) -> Result<(), ApiError> {
    let mut violations = Violations::default();
    for (field, value) in [("org_id", org_id), ("project_id", project_id)] {
        if value.trim().is_empty() {
            violations.add(field, "must not be empty");
        }
    }
    Ok(violations.into_result()?)
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateProject {
    org_id: String,
    project_id: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    config: ProjectConfigJson,
}

/// Creates a project; one that exists is answered as it is (as MemMachine 0.4 does; gRPC
/// answers `ALREADY_EXISTS`).
#[utoipa::path(post, path = "/projects", tag = "Projects", request_body = CreateProject,
    responses((status = 201, body = ProjectJson), (status = 422)))]
async fn create_project(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<CreateProject>,
) -> Reply<(StatusCode, Json<ProjectJson>)> {
    named(&r.org_id, &r.project_id)?;
    let key = caller.project(&r.org_id, &r.project_id)?;
    let config = ProjectConfig {
        embedder: r.config.embedder,
        reranker: r.config.reranker,
    };
    let projects = &gateway.domain()?.projects;
    let project = match projects.create(&key, &r.description, config).await {
        Err(Error::AlreadyExists(_)) => projects.get(&key).await?.into_project(),
        created => created?,
    };
    Ok((StatusCode::CREATED, Json(project.into())))
}

#[utoipa::path(post, path = "/projects/get", tag = "Projects", request_body = NamedProject,
    responses((status = 200, body = ProjectJson), (status = 404)))]
async fn get_project(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<NamedProject>,
) -> Reply<Json<ProjectJson>> {
    let key = r.key(&caller)?;
    let project = gateway.domain()?.projects.get(&key).await?;
    Ok(Json(project.into_project().into()))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct ListProjects {
    /// Only this org's projects (an org key lists only its own org).
    #[serde(default)]
    org_id: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProjectEntry {
    org_id: String,
    project_id: String,
}

/// Every project the caller reaches, as MemMachine lists them (ids only).
#[utoipa::path(post, path = "/projects/list", tag = "Projects", request_body = ListProjects,
    responses((status = 200, body = [ProjectEntry])))]
async fn list_projects(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ListProjects>,
) -> Reply<Json<Vec<ProjectEntry>>> {
    let asked = r.org_id.as_deref().filter(|org| !org.is_empty());
    let org = caller.list_scope(asked)?;
    let projects = gateway.domain()?.projects.list_all(org).await?;
    Ok(Json(
        projects
            .into_iter()
            .map(|p| ProjectEntry {
                org_id: p.key.org_id,
                project_id: p.key.project_id,
            })
            .collect(),
    ))
}

/// Deletes the project and every memory in it before answering.
#[utoipa::path(post, path = "/projects/delete", tag = "Projects", request_body = NamedProject,
    responses((status = 204), (status = 404)))]
async fn delete_project(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<NamedProject>,
) -> Reply<StatusCode> {
    let key = r.key(&caller)?;
    gateway.domain()?.projects.delete(&key).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EpisodeCount {
    count: i64,
}

#[utoipa::path(post, path = "/projects/episode_count/get", tag = "Projects",
    request_body = NamedProject, responses((status = 200, body = EpisodeCount), (status = 404)))]
async fn episode_count(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<NamedProject>,
) -> Reply<Json<EpisodeCount>> {
    let key = r.key(&caller)?;
    let projects = &gateway.domain()?.projects;
    projects.get(&key).await?;
    let count = projects.episode_count(&key).await?;
    Ok(Json(EpisodeCount { count }))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EpisodicConfigJson {
    enabled: bool,
    long_term_memory_enabled: bool,
    short_term_memory_enabled: bool,
    /// This server's: dense and hybrid ranking treat the participants a question
    /// names apart (embedded without their names, their turns preferred).
    participant_aware: bool,
    /// This server's: seconds an episode is kept after its `created_at`; null keeps
    /// episodes until deleted.
    episode_retention_seconds: Option<f64>,
    /// This server's: how hybrid ranking weighs its parts.
    ranking_weights: RankingWeightsJson,
}

/// How hybrid ranking weighs the parts of an episode's score, per project; each weight
/// from 0 to 100, `own_similarity` above 0. In an update the fields given change and
/// the others are kept.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct RankingWeightsJson {
    /// The standardised dense score against the lexical one (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dense: Option<f32>,
    /// An episode's own similarity against each neighbour's in its smoothed dense
    /// score (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    own_similarity: Option<f32>,
    /// Added (in standard deviations) for a turn produced by a participant the query
    /// names (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    participant: Option<f32>,
    /// Each neighbouring turn's similarity in the smoothed dense score (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context: Option<f32>,
    /// Added for the turns of a session that matches as a whole (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<f32>,
    /// Added for a turn whose event falls in the period the query names (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    time: Option<f32>,
    /// Added for a turn that says when, to a query asking when (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    when: Option<f32>,
}

impl From<RankingWeights> for RankingWeightsJson {
    fn from(w: RankingWeights) -> RankingWeightsJson {
        RankingWeightsJson {
            dense: Some(w.dense),
            own_similarity: Some(w.own_similarity),
            participant: Some(w.participant),
            context: Some(w.context),
            session: Some(w.session),
            time: Some(w.time),
            when: Some(w.when),
        }
    }
}

impl From<RankingWeightsJson> for RankingWeightsUpdate {
    fn from(w: RankingWeightsJson) -> RankingWeightsUpdate {
        RankingWeightsUpdate {
            dense: w.dense,
            own_similarity: w.own_similarity,
            participant: w.participant,
            context: w.context,
            session: w.session,
            time: w.time,
            when: w.when,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct ConfigureEpisodic {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    enabled: Option<bool>,
    long_term_memory_enabled: Option<bool>,
    short_term_memory_enabled: Option<bool>,
    participant_aware: Option<bool>,
    /// Seconds an episode is kept after its `created_at`; 0 clears it (keep forever).
    episode_retention_seconds: Option<f64>,
    /// The ranking weights given change, the others are kept.
    #[serde(default)]
    ranking_weights: Option<RankingWeightsJson>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Enabled {
    enabled: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct ConfigureEnabled {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    enabled: bool,
}

#[utoipa::path(post, path = "/memory/episodic/config/get", tag = "Episodic memory",
    request_body = ProjectRef, responses((status = 200, body = EpisodicConfigJson)))]
async fn get_episodic_config(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ProjectRef>,
) -> Reply<Json<EpisodicConfigJson>> {
    let key = key(&caller, &r)?;
    let c = gateway.domain()?.projects.episodic_config(&key).await?;
    Ok(Json(EpisodicConfigJson {
        enabled: c.enabled,
        long_term_memory_enabled: c.long_term_memory_enabled,
        short_term_memory_enabled: c.short_term_memory_enabled,
        participant_aware: c.participant_aware,
        episode_retention_seconds: c.episode_retention_micros.map(|m| m as f64 / 1e6),
        ranking_weights: c.ranking_weights.into(),
    }))
}

/// Changes the fields given, keeping the others.
#[utoipa::path(post, path = "/memory/episodic/config", tag = "Episodic memory",
    request_body = ConfigureEpisodic, responses((status = 204)))]
async fn configure_episodic(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ConfigureEpisodic>,
) -> Reply<StatusCode> {
    let key = key(
        &caller,
        &ProjectRef {
            org_id: r.org_id,
            project_id: r.project_id,
        },
    )?;
    let update = EpisodicConfigUpdate {
        enabled: r.enabled,
        long_term_memory_enabled: r.long_term_memory_enabled,
        short_term_memory_enabled: r.short_term_memory_enabled,
        participant_aware: r.participant_aware,
        episode_retention_micros: r.episode_retention_seconds.map(retention_micros),
        ranking_weights: r.ranking_weights.map(Into::into).unwrap_or_default(),
    };
    update_episodic(&gateway, &key, update).await
}

/// Seconds as the domain's retention: 0 clears it; anything not finite or out of range
/// stays out of range for the domain to refuse.
fn retention_micros(seconds: f64) -> Option<i64> {
    if seconds == 0.0 {
        return None;
    }
    let micros = (seconds * 1e6).ceil();
    Some(if micros.is_finite() {
        micros as i64
    } else {
        -1
    })
}

async fn update_episodic(
    gateway: &Gateway,
    key: &ProjectAccess,
    update: EpisodicConfigUpdate,
) -> Reply<StatusCode> {
    gateway
        .domain()?
        .projects
        .update_episodic_config(key, update)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One switch of a project's episodic memory.
async fn switch(
    gateway: &Gateway,
    caller: &Access,
    r: &ProjectRef,
    read: fn(&memmachine_core::model::EpisodicConfig) -> bool,
) -> Reply<Json<Enabled>> {
    let key = key(caller, r)?;
    let c = gateway.domain()?.projects.episodic_config(&key).await?;
    Ok(Json(Enabled { enabled: read(&c) }))
}

/// Sets one switch, keeping the others.
async fn set_switch(
    gateway: &Gateway,
    caller: &Access,
    r: ConfigureEnabled,
    update: fn(bool) -> EpisodicConfigUpdate,
) -> Reply<StatusCode> {
    let r_key = ProjectRef {
        org_id: r.org_id,
        project_id: r.project_id,
    };
    update_episodic(gateway, &key(caller, &r_key)?, update(r.enabled)).await
}

#[utoipa::path(post, path = "/memory/episodic/short_term/config/get", tag = "Episodic memory",
    request_body = ProjectRef, responses((status = 200, body = Enabled)))]
async fn get_short_term_config(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ProjectRef>,
) -> Reply<Json<Enabled>> {
    switch(&gateway, &caller, &r, |c| c.short_term_memory_enabled).await
}

#[utoipa::path(post, path = "/memory/episodic/short_term/config", tag = "Episodic memory",
    request_body = ConfigureEnabled, responses((status = 204)))]
async fn configure_short_term(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ConfigureEnabled>,
) -> Reply<StatusCode> {
    set_switch(&gateway, &caller, r, |on| EpisodicConfigUpdate {
        short_term_memory_enabled: Some(on),
        ..EpisodicConfigUpdate::default()
    })
    .await
}

#[utoipa::path(post, path = "/memory/episodic/long_term/config/get", tag = "Episodic memory",
    request_body = ProjectRef, responses((status = 200, body = Enabled)))]
async fn get_long_term_config(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ProjectRef>,
) -> Reply<Json<Enabled>> {
    switch(&gateway, &caller, &r, |c| c.long_term_memory_enabled).await
}

#[utoipa::path(post, path = "/memory/episodic/long_term/config", tag = "Episodic memory",
    request_body = ConfigureEnabled, responses((status = 204)))]
async fn configure_long_term(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ConfigureEnabled>,
) -> Reply<StatusCode> {
    set_switch(&gateway, &caller, r, |on| EpisodicConfigUpdate {
        long_term_memory_enabled: Some(on),
        ..EpisodicConfigUpdate::default()
    })
    .await
}
