//! Adapters of the deprecated legacy v1 API (`memmachine.v1`): decode, check that the
//! caller reaches the reserved org, call one `legacy::Legacy` function, encode.

use memmachine_core::access::OrgAccess;

mod convert;
mod group_service;
mod memory_service;
mod session_service;

pub use group_service::GroupGrpc;
pub use memory_service::MemoryGrpc;
pub use session_service::SessionGrpc;

/// The message, if the caller may reach the v1 groups (all in `legacy::RESERVED_ORG`)
/// and its routing key (if any) names the group the message is for.
fn admit<T: Grouped>(request: tonic::Request<T>) -> Result<(OrgAccess, T), tonic::Status> {
    let (caller, message) = super::split(request)?;
    let org = match message.group_id() {
        // An empty group id is the message's own error, reported where it is read.
        Some(group) if !group.is_empty() => {
            caller.org_of_project(memmachine_domain::legacy::RESERVED_ORG, group)?
        }
        _ => caller.org(memmachine_domain::legacy::RESERVED_ORG)?,
    };
    Ok((org, message))
}

/// The group a v1 request is for (`None`: it names none, as listing groups).
trait Grouped {
    fn group_id(&self) -> Option<&str>;
}

macro_rules! grouped {
    ($($request:ident: |$r:ident| $group:expr;)*) => {$(
        impl Grouped for memmachine_proto::v1::$request {
            fn group_id(&self) -> Option<&str> {
                let $r = self;
                $group
            }
        }
    )*};
}

grouped! {
    AddEpisodeRequest: |r| r.context.as_ref().map(|c| c.group_id.as_str());
    AddEpisodesRequest: |r| r.context.as_ref().map(|c| c.group_id.as_str());
    SearchEpisodesRequest: |r| r.context.as_ref().map(|c| c.group_id.as_str());
    ListEpisodesRequest: |r| r.context.as_ref().map(|c| c.group_id.as_str());
    DeleteEpisodesRequest: |r| r.context.as_ref().map(|c| c.group_id.as_str());
    OpenSessionRequest: |r| r.context.as_ref().map(|c| c.group_id.as_str());
    GetSessionRequest: |r| Some(r.group_id.as_str());
    ListSessionsRequest: |r| Some(r.group_id.as_str());
    DeleteSessionRequest: |r| Some(r.group_id.as_str());
    CreateGroupRequest: |r| r.group.as_ref().map(|g| g.group_id.as_str());
    UpdateGroupRequest: |r| r.group.as_ref().map(|g| g.group_id.as_str());
    GetGroupRequest: |r| Some(r.group_id.as_str());
    DeleteGroupRequest: |r| Some(r.group_id.as_str());
    ListGroupsRequest: |_r| None;
}
