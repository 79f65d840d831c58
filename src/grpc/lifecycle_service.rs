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

fn forget_receipt(receipt: crate::store::ForgetReceipt) -> pb::ForgetReceipt {
    pb::ForgetReceipt {
        receipt_id: receipt.receipt_id,
        org_id: receipt.org_id,
        subject: receipt.subject,
        dry_run: receipt.dry_run,
        completed_at: Some(super::convert::timestamp(receipt.completed_at_micros)),
        projects: receipt
            .projects
            .into_iter()
            .map(|p| pb::ForgetProjectCounts {
                project_id: p.project_id,
                episodes_deleted: p.counts.episodes as i64,
                features_deleted: p.counts.features as i64,
                citations_removed: p.counts.citations as i64,
                summaries_deleted: p.counts.summaries as i64,
                sets_deleted: p.counts.sets as i64,
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl LifecycleService for LifecycleGrpc {
    async fn forget_subject(
        &self,
        request: Request<pb::ForgetSubjectRequest>,
    ) -> Reply<pb::ForgetSubjectResponse> {
        let (caller, r) = super::split(request)?;
        caller.check_org(&r.org_id)?;
        let receipt = self
            .domain
            .forget
            .forget_subject(&r.org_id, &r.subject, &r.project_ids, r.dry_run)
            .await?;
        Ok(Response::new(pb::ForgetSubjectResponse {
            receipt: Some(forget_receipt(receipt)),
        }))
    }

    async fn get_forget_receipt(
        &self,
        request: Request<pb::GetForgetReceiptRequest>,
    ) -> Reply<pb::GetForgetReceiptResponse> {
        let (caller, r) = super::split(request)?;
        caller.check_org(&r.org_id)?;
        let receipt = self.domain.forget.receipt(&r.org_id, &r.receipt_id).await?;
        Ok(Response::new(pb::GetForgetReceiptResponse {
            receipt: Some(forget_receipt(receipt)),
        }))
    }

    async fn get_feature_history(
        &self,
        _request: Request<pb::GetFeatureHistoryRequest>,
    ) -> Reply<pb::GetFeatureHistoryResponse> {
        Err(Status::unimplemented("GetFeatureHistory is not served yet"))
    }
}
