//! `memmachine.v2.LifecycleService`: forgetting a subject with a receipt, and a
//! feature's history.

use tonic::{Request, Response, Status};

use crate::domain::Domain;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::lifecycle_service_server::LifecycleService;

pub struct LifecycleGrpc {
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
        let org = caller.org(&r.org_id)?;
        let receipt = self
            .domain
            .forget
            .forget_subject(&org, &r.subject, &r.project_ids, r.dry_run)
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
        let org = caller.org(&r.org_id)?;
        let receipt = self.domain.forget.receipt(&org, &r.receipt_id).await?;
        Ok(Response::new(pb::GetForgetReceiptResponse {
            receipt: Some(forget_receipt(receipt)),
        }))
    }

    async fn get_feature_history(
        &self,
        request: Request<pb::GetFeatureHistoryRequest>,
    ) -> Reply<pb::GetFeatureHistoryResponse> {
        let (caller, r) = super::split(request)?;
        let key = caller.project(&r.org_id, &r.project_id)?;
        let project = self.domain.projects.get(&key).await?;
        let versions = self
            .domain
            .semantic
            .feature_history(&project, &r.feature_id)
            .await?;
        Ok(Response::new(pb::GetFeatureHistoryResponse {
            versions: versions.into_iter().map(feature_version).collect(),
        }))
    }
}

/// A kept or current version of a feature on the wire.
pub fn feature_version(v: crate::store::FeatureVersion) -> pb::FeatureVersion {
    use crate::store::ChangedBy;
    let changed_by = match v.changed_by {
        ChangedBy::Unknown => pb::FeatureChange::Unspecified,
        ChangedBy::Extraction => pb::FeatureChange::Extraction,
        ChangedBy::Consolidation => pb::FeatureChange::Consolidation,
        ChangedBy::Manual => pb::FeatureChange::Manual,
        ChangedBy::Deletion => pb::FeatureChange::Deletion,
    };
    pb::FeatureVersion {
        tag: v.tag,
        feature_name: v.feature,
        value: v.value,
        citations: v.citations.iter().map(|u| u.to_string()).collect(),
        valid_from: Some(super::convert::timestamp(v.valid_from_micros)),
        valid_to: v.valid_to_micros.map(super::convert::timestamp),
        changed_by: changed_by as i32,
        category: v.category,
    }
}
