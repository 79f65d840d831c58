//! `memmachine.v2.UsageService`: language-model and embedder usage, and daily budgets.

use tonic::{Request, Response, Status};

use crate::domain::Domain;
use crate::pb;
use crate::pb::usage_service_server::UsageService;

pub struct UsageGrpc {
    #[allow(dead_code)]
    domain: Domain,
}

impl UsageGrpc {
    pub fn new(domain: Domain) -> UsageGrpc {
        UsageGrpc { domain }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl UsageService for UsageGrpc {
    async fn get_usage(
        &self,
        _request: Request<pb::GetUsageRequest>,
    ) -> Reply<pb::GetUsageResponse> {
        Err(Status::unimplemented("GetUsage is not served yet"))
    }

    async fn set_budget(
        &self,
        _request: Request<pb::SetBudgetRequest>,
    ) -> Reply<pb::SetBudgetResponse> {
        Err(Status::unimplemented("SetBudget is not served yet"))
    }
}
