//! `memmachine.v2.UsageService`: language-model and embedder usage, and daily budgets.

use tonic::{Request, Response, Status};

use super::convert;
use crate::domain::Domain;
use memmachine_core::error::Error;
use memmachine_domain::semantic::estimate::Estimate;
use memmachine_domain::usage::{Budget, Figures};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::usage_service_server::UsageService;

pub struct UsageGrpc {
    domain: Domain,
}

impl UsageGrpc {
    pub fn new(domain: Domain) -> UsageGrpc {
        UsageGrpc { domain }
    }
}

type Reply<T> = Result<Response<T>, Status>;

/// A timestamp as microseconds since the epoch; out of range is INVALID_ARGUMENT.
fn micros(field: &str, ts: &prost_types::Timestamp) -> Result<i64, Error> {
    let valid = (0..1_000_000_000).contains(&ts.nanos);
    ts.seconds
        .checked_mul(1_000_000)
        .and_then(|s| s.checked_add(i64::from(ts.nanos / 1000)))
        .filter(|_| valid)
        .ok_or_else(|| Error::invalid(field, "not a valid timestamp"))
}

fn purpose(name: &str) -> pb::UsagePurpose {
    match name {
        "extraction" => pb::UsagePurpose::Extraction,
        "consolidation" => pb::UsagePurpose::Consolidation,
        "summary" => pb::UsagePurpose::Summary,
        "embedding" => pb::UsagePurpose::Embedding,
        _ => pb::UsagePurpose::Unspecified,
    }
}

fn figures(f: Figures) -> pb::UsageFigures {
    pb::UsageFigures {
        purpose: purpose(&f.purpose) as i32,
        calls: f.calls,
        prompt_tokens: f.prompt_tokens,
        completion_tokens: f.completion_tokens,
    }
}

fn budget(b: Budget) -> pb::Budget {
    pb::Budget {
        daily_tokens: b.daily_tokens,
        used_today: b.used_today,
        paused_until: b.paused_until.map(convert::timestamp),
    }
}

fn estimate(e: Estimate) -> pb::EstimateExtractionResponse {
    pb::EstimateExtractionResponse {
        tokens_left_today: e.tokens_left_today(),
        estimate: Some(pb::ExtractionEstimate {
            project_id: e.project_id,
            paused: e.paused,
            pending_messages: e.pending_messages,
            sets: e.sets,
            max_batch_messages: e.max_batch,
            batches: e.batches,
            calls: e.calls,
            prompt_tokens: e.prompt_tokens,
            completion_tokens: e.completion_tokens,
        }),
        budget: Some(budget(e.budget)),
    }
}

#[tonic::async_trait]
impl UsageService for UsageGrpc {
    async fn get_usage(
        &self,
        request: Request<pb::GetUsageRequest>,
    ) -> Reply<pb::GetUsageResponse> {
        let (caller, r) = super::split(request)?;
        let org = caller.org(&r.org_id)?;
        let since = r.since.as_ref().map(|ts| micros("since", ts)).transpose()?;
        let report = self
            .domain
            .usage
            .report(&org, r.project_id.as_deref(), since)
            .await?;
        Ok(Response::new(pb::GetUsageResponse {
            usage: report.usage.into_iter().map(figures).collect(),
            budget: Some(budget(report.budget)),
        }))
    }

    async fn set_budget(
        &self,
        request: Request<pb::SetBudgetRequest>,
    ) -> Reply<pb::SetBudgetResponse> {
        let (caller, r) = super::split(request)?;
        caller.require_admin("setting an org's token budget")?;
        let set = self
            .domain
            .usage
            .set_budget(&r.org_id, r.daily_tokens)
            .await?;
        Ok(Response::new(pb::SetBudgetResponse {
            budget: Some(budget(set)),
        }))
    }

    async fn estimate_extraction(
        &self,
        request: Request<pb::EstimateExtractionRequest>,
    ) -> Reply<pb::EstimateExtractionResponse> {
        let (caller, r) = super::split(request)?;
        let project = caller.project(&r.org_id, &r.project_id)?;
        let found = self.domain.semantic.estimate_extraction(&project).await?;
        Ok(Response::new(estimate(found)))
    }

    async fn set_extraction_paused(
        &self,
        request: Request<pb::SetExtractionPausedRequest>,
    ) -> Reply<pb::SetExtractionPausedResponse> {
        let (caller, r) = super::split(request)?;
        let project = caller.project(&r.org_id, &r.project_id)?;
        let paused = self
            .domain
            .semantic
            .set_extraction_paused(&project, r.paused)
            .await?;
        Ok(Response::new(pb::SetExtractionPausedResponse { paused }))
    }
}
