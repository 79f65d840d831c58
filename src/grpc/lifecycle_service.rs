//! `memmachine.v2.LifecycleService`: forgetting a subject with a receipt, and a
//! feature's history.

use tonic::{Request, Response, Status};

use crate::domain::Domain;
use crate::pb;
use crate::pb::lifecycle_service_server::LifecycleService;

pub struct LifecycleGrpc {
    #[allow(dead_code)]
    domain: Domain,
}

impl LifecycleGrpc {
    pub fn new(domain: Domain) -> LifecycleGrpc {
        LifecycleGrpc { domain }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl LifecycleService for LifecycleGrpc {
    async fn forget_subject(
        &self,
        _request: Request<pb::ForgetSubjectRequest>,
    ) -> Reply<pb::ForgetSubjectResponse> {
        Err(Status::unimplemented("ForgetSubject is not served yet"))
    }

    async fn get_forget_receipt(
        &self,
        _request: Request<pb::GetForgetReceiptRequest>,
    ) -> Reply<pb::GetForgetReceiptResponse> {
        Err(Status::unimplemented("GetForgetReceipt is not served yet"))
    }

    async fn get_feature_history(
        &self,
        _request: Request<pb::GetFeatureHistoryRequest>,
    ) -> Reply<pb::GetFeatureHistoryResponse> {
        Err(Status::unimplemented("GetFeatureHistory is not served yet"))
    }
}
