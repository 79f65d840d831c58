//! gRPC adapters: decode a request, call one domain function, encode the result.

mod convert;
mod deferred;
mod memory_service;
mod project_service;
mod status;

pub use deferred::Deferred;
pub use memory_service::MemoryGrpc;
pub use project_service::ProjectGrpc;

/// The caller the admission layer recorded, and the request's message.
fn split<T>(request: tonic::Request<T>) -> Result<(crate::auth::Caller, T), tonic::Status> {
    let caller = crate::auth::caller_of(request.extensions())?.clone();
    Ok((caller, request.into_inner()))
}
