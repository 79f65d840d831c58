//! The generated protobuf and gRPC code of MemMachine's API, shared by the server, its
//! tests and the benchmarks (one generation, compiled once).

/// The current API (`memmachine.v2`).
pub mod v2 {
    tonic::include_proto!("memmachine.v2");

    /// Encoded descriptor set of every memmachine proto, served by reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("memmachine_descriptor");
}

/// The deprecated legacy v1 API (`memmachine.v1`); its descriptors are in
/// `v2::FILE_DESCRIPTOR_SET` too.
#[allow(deprecated)]
pub mod v1 {
    tonic::include_proto!("memmachine.v1");
}
