//! MemMachine in Rust: a memory server for AI agents, served over gRPC.
//!
//! Layers (data flows one way): `grpc` adapters decode and validate requests and call
//! the domain (`projects`, `memory`, `episodic`, `semantic`), which talks to storage
//! through the traits in `store` and to models through `embed`, `rerank` and `llm`.

pub use memmachine_core::{error, model, urls};

pub mod admission;
pub mod auth;
pub mod cli;
pub mod config;
pub mod connections;
pub mod domain;
pub mod embed;
pub mod episodic;
pub mod flags;
pub mod grpc;
pub(crate) mod inference;
pub mod legacy;
pub mod limits;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub(crate) mod openai_http;
pub mod probe;
pub mod projects;
pub mod rerank;
pub mod resource_status;
pub mod rest;
pub mod retrieval;
pub mod runtime_settings;
pub mod secret;
pub mod semantic;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod transfer;

/// Generated protobuf and gRPC code.
pub mod pb {
    tonic::include_proto!("memmachine.v2");

    /// Encoded descriptor set of every memmachine proto, served by reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("memmachine_descriptor");
}

/// Generated code of the deprecated legacy v1 API (`memmachine.v1`); its descriptors are
/// in `pb::FILE_DESCRIPTOR_SET` too.
#[allow(deprecated)]
pub mod pb_v1 {
    tonic::include_proto!("memmachine.v1");
}
