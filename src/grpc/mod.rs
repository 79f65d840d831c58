//! gRPC adapters: decode a request, call one domain function, encode the result.

mod convert;
mod memory_service;
mod project_service;
mod status;

pub use memory_service::MemoryGrpc;
pub use project_service::ProjectGrpc;
