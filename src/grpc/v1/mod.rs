//! Adapters of the deprecated legacy v1 API (`memmachine.v1`): decode, check that the
//! caller reaches the reserved org, call one `legacy::Legacy` function, encode.

mod convert;
mod group_service;
mod memory_service;
mod session_service;

pub use group_service::GroupGrpc;
pub use memory_service::MemoryGrpc;
pub use session_service::SessionGrpc;

/// The caller, if it may reach the v1 groups (all in `legacy::RESERVED_ORG`).
fn admit<T>(request: tonic::Request<T>) -> Result<T, tonic::Status> {
    let (caller, message) = super::split(request)?;
    caller.check_org(crate::legacy::RESERVED_ORG)?;
    Ok(message)
}
