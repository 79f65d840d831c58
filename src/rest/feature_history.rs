//! A feature's history (`/memories/semantic/feature/history`): its versions, oldest
//! first, the current one without `valid_to`. The gateway's addition (MemMachine has no
//! history); `as_of` on search and list is in `memories`.

use axum::Json;
use axum::extract::{Extension, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::Body;
use super::projects::key;
use super::shapes::{ProjectRef, time};
use super::{ApiError, Gateway};
use crate::store::{ChangedBy, FeatureVersion};
use memmachine_domain::auth::Access;

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new().routes(routes!(feature_history))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GetFeatureHistory {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    feature_id: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FeatureHistoryJson {
    versions: Vec<FeatureVersionJson>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FeatureVersionJson {
    category: String,
    tag: String,
    feature_name: String,
    value: String,
    /// Uids of the cited episodes still stored.
    citations: Vec<String>,
    valid_from: String,
    /// Absent for the current version.
    #[serde(skip_serializing_if = "Option::is_none")]
    valid_to: Option<String>,
    /// What made this version: extraction, consolidation, manual, deletion (or unknown,
    /// for features stored before history was kept).
    changed_by: &'static str,
}

fn version(v: FeatureVersion) -> FeatureVersionJson {
    FeatureVersionJson {
        category: v.category,
        tag: v.tag,
        feature_name: v.feature,
        value: v.value,
        citations: v.citations.iter().map(|u| u.to_string()).collect(),
        valid_from: time(v.valid_from_micros),
        valid_to: v.valid_to_micros.map(time),
        changed_by: match v.changed_by {
            ChangedBy::Unknown => "unknown",
            ChangedBy::Extraction => "extraction",
            ChangedBy::Consolidation => "consolidation",
            ChangedBy::Manual => "manual",
            ChangedBy::Deletion => "deletion",
        },
    }
}

#[utoipa::path(post, path = "/memories/semantic/feature/history", tag = "Semantic memory",
    request_body = GetFeatureHistory,
    responses((status = 200, body = FeatureHistoryJson), (status = 404)))]
async fn feature_history(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<GetFeatureHistory>,
) -> Result<Json<FeatureHistoryJson>, ApiError> {
    let key = key(
        &caller,
        &ProjectRef {
            org_id: r.org_id,
            project_id: r.project_id,
        },
    )?;
    let domain = gateway.domain()?;
    let project = domain.projects.get(&key).await?;
    let versions = domain
        .semantic
        .feature_history(&project, &r.feature_id)
        .await?;
    Ok(Json(FeatureHistoryJson {
        versions: versions.into_iter().map(version).collect(),
    }))
}
