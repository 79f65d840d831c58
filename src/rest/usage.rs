//! Language-model usage and daily token budgets (`/usage`), this server's own routes
//! (MemMachine has none), in the gateway's style: JSON bodies, the same domain calls as
//! `UsageService`.

use axum::Json;
use axum::extract::{Extension, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::Body;
use super::{ApiError, Gateway};
use memmachine_core::error::Error;
use memmachine_domain::auth::Access;
use memmachine_domain::usage::{Budget, Figures};

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new()
        .routes(routes!(get_usage))
        .routes(routes!(set_budget))
}

type Reply<T> = Result<Json<T>, ApiError>;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    #[serde(default)]
    org_id: String,
    /// Empty or absent: every project of the org.
    #[serde(default)]
    project_id: Option<String>,
    /// RFC 3339; absent: the start of the current UTC day.
    #[serde(default)]
    since: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageFigures {
    /// `extraction`, `consolidation`, `summary` or `embedding`.
    purpose: String,
    calls: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetJson {
    /// Language-model tokens per UTC day; 0 is unlimited.
    daily_tokens: i64,
    used_today: i64,
    /// RFC 3339, while the org's semantic ingestion is paused for its budget.
    paused_until: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageReport {
    usage: Vec<UsageFigures>,
    budget: BudgetJson,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetChange {
    #[serde(default)]
    org_id: String,
    /// 0 is unlimited.
    daily_tokens: i64,
}

fn rfc3339(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default()
}

pub(super) fn budget(b: Budget) -> BudgetJson {
    BudgetJson {
        daily_tokens: b.daily_tokens,
        used_today: b.used_today,
        paused_until: b.paused_until.map(rfc3339),
    }
}

fn figures(f: Figures) -> UsageFigures {
    UsageFigures {
        purpose: f.purpose,
        calls: f.calls,
        prompt_tokens: f.prompt_tokens,
        completion_tokens: f.completion_tokens,
    }
}

/// An org's model usage per purpose since a time, and its budget; an org key reads
/// only its own org.
#[utoipa::path(post, path = "/usage", tag = "Usage", request_body = UsageQuery,
    responses((status = 200, body = UsageReport), (status = 403), (status = 422)))]
async fn get_usage(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(query): Body<UsageQuery>,
) -> Reply<UsageReport> {
    let org = caller.org(&query.org_id)?;
    let since = match query.since.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(
            chrono::DateTime::parse_from_rfc3339(text)
                .map_err(|e| Error::invalid("since", format!("not an RFC 3339 time: {e}")))?
                .timestamp_micros(),
        ),
    };
    let report = gateway
        .domain()?
        .usage
        .report(&org, query.project_id.as_deref(), since)
        .await?;
    Ok(Json(UsageReport {
        usage: report.usage.into_iter().map(figures).collect(),
        budget: budget(report.budget),
    }))
}

/// Sets an org's daily token budget (an admin key under --auth).
#[utoipa::path(post, path = "/usage/budget", tag = "Usage", request_body = BudgetChange,
    responses((status = 200, body = BudgetJson), (status = 403), (status = 422)))]
async fn set_budget(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(change): Body<BudgetChange>,
) -> Reply<BudgetJson> {
    caller.require_admin("setting an org's token budget")?;
    let set = gateway
        .domain()?
        .usage
        .set_budget(&change.org_id, change.daily_tokens)
        .await?;
    Ok(Json(budget(set)))
}
