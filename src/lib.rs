//! MemMachine in Rust: a memory server for AI agents, served over gRPC.
//!
//! Layers (data flows one way): the transports (`grpc`, `rest`, `mcp`, `cli`) decode and
//! validate requests and call the domain (`memmachine_domain`: projects, memory,
//! episodic, semantic), which talks to storage through the traits of `memmachine_core`
//! (backends chosen in `store`) and to models through its `embed`, `rerank` and `llm`.

/// `memmachine keys` on a store location (the keys themselves are the domain's `auth`).
pub mod auth {
    pub mod manage;
}

/// `memmachine export`/`import` on files (the formats are the domain's `transfer`).
pub mod transfer {
    mod files;
    pub use files::{export_to, import_from};
}

pub mod admission;
pub mod cli;
pub mod config;
pub mod connections;
pub mod domain;
pub mod grpc;
pub mod heap_trim;
pub mod mcp;
pub mod metrics_listener;
pub mod probe;
pub mod rest;
pub mod server;
pub mod store;
pub mod telemetry;
