//! A project's extraction backlog with its estimated cost, and the per-project pause of
//! extraction (`/usage/extraction/...`), this server's own routes (MemMachine has none),
//! the same domain calls as `UsageService.EstimateExtraction` and `SetExtractionPaused`.

use axum::Json;
use axum::extract::{Extension, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::Body;
use super::usage::{BudgetJson, budget};
use super::{ApiError, Gateway};
use memmachine_domain::auth::Access;

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new()
        .routes(routes!(estimate_extraction))
        .routes(routes!(set_extraction_paused))
}

type Reply<T> = Result<Json<T>, ApiError>;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectRef {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
}

/// As `ExtractionEstimate` in the gRPC API (prompt tokens a quarter of the characters
/// sent; completion tokens a guess).
#[derive(Debug, Serialize, ToSchema)]
pub struct ExtractionEstimate {
    project_id: String,
    paused: bool,
    pending_messages: i64,
    sets: i64,
    max_batch_messages: i64,
    batches: i64,
    calls: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
    budget: BudgetJson,
    /// Absent when the org's budget is unlimited.
    tokens_left_today: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseChange {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    paused: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PauseState {
    paused: bool,
}

/// A project's queued messages and what extracting them will cost (no model is
/// called), with its org's budget.
#[utoipa::path(post, path = "/usage/extraction/estimate", tag = "Usage", request_body = ProjectRef,
    responses((status = 200, body = ExtractionEstimate), (status = 403), (status = 404), (status = 422)))]
async fn estimate_extraction(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(asked): Body<ProjectRef>,
) -> Reply<ExtractionEstimate> {
    let project = caller.project(&asked.org_id, &asked.project_id)?;
    let e = gateway
        .domain()?
        .semantic
        .estimate_extraction(&project)
        .await?;
    let tokens_left_today = e.tokens_left_today();
    Ok(Json(ExtractionEstimate {
        project_id: e.project_id,
        paused: e.paused,
        pending_messages: e.pending_messages,
        sets: e.sets,
        max_batch_messages: e.max_batch,
        batches: e.batches,
        calls: e.calls,
        prompt_tokens: e.prompt_tokens,
        completion_tokens: e.completion_tokens,
        budget: budget(e.budget),
        tokens_left_today,
    }))
}

/// Pauses or resumes a project's extraction (adds go on; its messages stay queued).
#[utoipa::path(post, path = "/usage/extraction/paused", tag = "Usage", request_body = PauseChange,
    responses((status = 200, body = PauseState), (status = 403), (status = 404), (status = 422)))]
async fn set_extraction_paused(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(change): Body<PauseChange>,
) -> Reply<PauseState> {
    let project = caller.project(&change.org_id, &change.project_id)?;
    let paused = gateway
        .domain()?
        .semantic
        .set_extraction_paused(&project, change.paused)
        .await?;
    Ok(Json(PauseState { paused }))
}
