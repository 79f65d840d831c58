//! Forgetting a subject (`/forget`, `/forget/receipt`): this server's addition, the
//! REST face of `LifecycleService.ForgetSubject` and `GetForgetReceipt`.

use axum::Json;
use axum::extract::{Extension, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::Body;
use super::shapes::time;
use super::{ApiError, Gateway};
use crate::store::ForgetReceipt;
use memmachine_domain::auth::Access;

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new()
        .routes(routes!(forget))
        .routes(routes!(receipt))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct Forget {
    #[serde(default)]
    org_id: String,
    subject: String,
    /// Empty: every project of the org.
    #[serde(default)]
    project_ids: Vec<String>,
    /// Count what would be removed; remove nothing, keep no receipt.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GetReceipt {
    #[serde(default)]
    org_id: String,
    receipt_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProjectCounts {
    project_id: String,
    episodes_deleted: u64,
    features_deleted: u64,
    citations_removed: u64,
    summaries_deleted: u64,
    sets_deleted: u64,
}

/// What a forget removed (or, dry, would remove): counts only, never memory content.
#[derive(Debug, Serialize, ToSchema)]
pub struct Receipt {
    receipt_id: String,
    org_id: String,
    subject: String,
    dry_run: bool,
    completed_at: String,
    projects: Vec<ProjectCounts>,
}

impl Receipt {
    fn new(r: ForgetReceipt) -> Receipt {
        Receipt {
            receipt_id: r.receipt_id,
            org_id: r.org_id,
            subject: r.subject,
            dry_run: r.dry_run,
            completed_at: time(r.completed_at_micros),
            projects: r
                .projects
                .into_iter()
                .map(|p| ProjectCounts {
                    project_id: p.project_id,
                    episodes_deleted: p.counts.episodes,
                    features_deleted: p.counts.features,
                    citations_removed: p.counts.citations,
                    summaries_deleted: p.counts.summaries,
                    sets_deleted: p.counts.sets,
                })
                .collect(),
        }
    }
}

/// Removes what the subject produced or was produced for, its user sets and what
/// derives from those episodes, in the named projects (all of the org when none).
#[utoipa::path(post, path = "/forget", tag = "Lifecycle", request_body = Forget,
    responses((status = 200, body = Receipt), (status = 404), (status = 422)))]
async fn forget(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<Forget>,
) -> Result<Json<Receipt>, ApiError> {
    let org = caller.org(&r.org_id)?;
    let receipt = gateway
        .domain()?
        .forget
        .forget_subject(&org, &r.subject, &r.project_ids, r.dry_run)
        .await?;
    Ok(Json(Receipt::new(receipt)))
}

/// A past forget's receipt, in its org only.
#[utoipa::path(post, path = "/forget/receipt", tag = "Lifecycle", request_body = GetReceipt,
    responses((status = 200, body = Receipt), (status = 404)))]
async fn receipt(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<GetReceipt>,
) -> Result<Json<Receipt>, ApiError> {
    let org = caller.org(&r.org_id)?;
    let receipt = gateway
        .domain()?
        .forget
        .receipt(&org, &r.receipt_id)
        .await?;
    Ok(Json(Receipt::new(receipt)))
}
