//! `memmachine.v1.SessionService` (deprecated).

use tonic::{Request, Response, Status};

use super::{admit, convert};
use memmachine_domain::legacy::Legacy;
use memmachine_domain::legacy::sessions::SessionFilter;
use memmachine_proto::v1 as pb;
use memmachine_proto::v1::session_service_server::SessionService;

pub struct SessionGrpc {
    legacy: Legacy,
}

impl SessionGrpc {
    pub fn new(legacy: Legacy) -> SessionGrpc {
        SessionGrpc { legacy }
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl SessionService for SessionGrpc {
    async fn open_session(
        &self,
        request: Request<pb::OpenSessionRequest>,
    ) -> Reply<pb::OpenSessionResponse> {
        let (org, r) = admit(request)?;
        let ctx = convert::context(r.context);
        let session = self
            .legacy
            .open_session(&org, &ctx, convert::configuration(r.configuration))
            .await?;
        Ok(Response::new(pb::OpenSessionResponse {
            session: Some(convert::session(session)),
        }))
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Reply<pb::GetSessionResponse> {
        let (org, r) = admit(request)?;
        let session = self
            .legacy
            .get_session(&org, &r.group_id, &r.session_id)
            .await?;
        Ok(Response::new(pb::GetSessionResponse {
            session: Some(convert::session(session)),
        }))
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Reply<pb::ListSessionsResponse> {
        let (org, r) = admit(request)?;
        let filter = SessionFilter {
            group_id: r.group_id,
            user_id: r.user_id,
            agent_id: r.agent_id,
        };
        let (sessions, next_page_token) = self
            .legacy
            .list_sessions(&org, &filter, r.page_size, &r.page_token)
            .await?;
        Ok(Response::new(pb::ListSessionsResponse {
            sessions: sessions.into_iter().map(convert::session).collect(),
            next_page_token,
        }))
    }

    async fn delete_session(
        &self,
        request: Request<pb::DeleteSessionRequest>,
    ) -> Reply<pb::DeleteSessionResponse> {
        let (org, r) = admit(request)?;
        let deleted = self
            .legacy
            .delete_session(&org, &r.group_id, &r.session_id)
            .await?;
        Ok(Response::new(pb::DeleteSessionResponse {
            deleted_count: deleted as i64,
        }))
    }
}
