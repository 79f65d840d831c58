//! gRPC adapters: decode a request, call one domain function, encode the result.

mod change_service;
pub mod convert;
mod deferred;
mod import_stream;
mod lifecycle_service;
mod memory_service;
mod project_service;
mod semantic_service;
mod usage_service;
pub mod v1;

pub use change_service::ChangeGrpc;
pub use deferred::Deferred;
pub use import_stream::ImportSettings;
pub use lifecycle_service::LifecycleGrpc;
pub use memory_service::MemoryGrpc;
pub use project_service::ProjectGrpc;
pub use semantic_service::SemanticGrpc;
pub use usage_service::UsageGrpc;

/// The caller the admission layer recorded, and the request's message.
fn split<T>(
    request: tonic::Request<T>,
) -> Result<(memmachine_domain::auth::Access, T), tonic::Status> {
    let caller = memmachine_domain::auth::caller_of(request.extensions())?.clone();
    Ok((caller, request.into_inner()))
}

/// `Service/Method` of every method the server serves (its own, health, reflection).
pub fn methods() -> std::collections::HashSet<String> {
    use prost::Message;
    let sets = [
        memmachine_proto::v2::FILE_DESCRIPTOR_SET,
        tonic_health::pb::FILE_DESCRIPTOR_SET,
        tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
        tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
    ];
    let mut methods = std::collections::HashSet::new();
    for bytes in sets {
        let Ok(set) = prost_types::FileDescriptorSet::decode(bytes) else {
            continue;
        };
        for file in set.file {
            for service in &file.service {
                for method in &service.method {
                    methods.insert(format!(
                        "{}.{}/{}",
                        file.package(),
                        service.name(),
                        method.name()
                    ));
                }
            }
        }
    }
    methods
}
