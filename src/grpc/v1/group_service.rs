//! `memmachine.v1.GroupService` (deprecated).

use tonic::{Request, Response, Status};

use super::{admit, convert};
use memmachine_domain::legacy::Legacy;
use memmachine_proto::v1 as pb;
use memmachine_proto::v1::group_service_server::GroupService;

pub struct GroupGrpc {
    legacy: Legacy,
}

impl GroupGrpc {
    pub fn new(legacy: Legacy) -> GroupGrpc {
        GroupGrpc { legacy }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl GroupService for GroupGrpc {
    async fn create_group(
        &self,
        request: Request<pb::CreateGroupRequest>,
    ) -> Reply<pb::CreateGroupResponse> {
        let (org, r) = admit(request)?;
        let group = self
            .legacy
            .create_group(&org, convert::group_input(r.group))
            .await?;
        Ok(Response::new(pb::CreateGroupResponse {
            group: Some(convert::group(group)),
        }))
    }

    async fn update_group(
        &self,
        request: Request<pb::UpdateGroupRequest>,
    ) -> Reply<pb::UpdateGroupResponse> {
        let (org, r) = admit(request)?;
        let group = self
            .legacy
            .update_group(&org, convert::group_input(r.group))
            .await?;
        Ok(Response::new(pb::UpdateGroupResponse {
            group: Some(convert::group(group)),
        }))
    }

    async fn get_group(
        &self,
        request: Request<pb::GetGroupRequest>,
    ) -> Reply<pb::GetGroupResponse> {
        let (org, r) = admit(request)?;
        let group = self.legacy.get_group(&org, &r.group_id).await?;
        Ok(Response::new(pb::GetGroupResponse {
            group: Some(convert::group(group)),
        }))
    }

    async fn list_groups(
        &self,
        request: Request<pb::ListGroupsRequest>,
    ) -> Reply<pb::ListGroupsResponse> {
        let (org, r) = admit(request)?;
        let (groups, next_page_token) = self
            .legacy
            .list_groups(&org, &r.user_id, &r.agent_id, r.page_size, &r.page_token)
            .await?;
        Ok(Response::new(pb::ListGroupsResponse {
            groups: groups.into_iter().map(convert::group).collect(),
            next_page_token,
        }))
    }

    async fn delete_group(
        &self,
        request: Request<pb::DeleteGroupRequest>,
    ) -> Reply<pb::DeleteGroupResponse> {
        let (org, r) = admit(request)?;
        self.legacy.delete_group(&org, &r.group_id).await?;
        Ok(Response::new(pb::DeleteGroupResponse {}))
    }
}
