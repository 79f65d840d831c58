//! MemMachine in Rust: a memory server for AI agents, served over gRPC.
//!
//! Layers (data flows one way): `grpc` adapters decode and validate requests and call
//! the domain (`projects`, `memory`, `episodic`, `semantic`), which talks to storage
//! through the traits in `store` and to models through `embed`, `rerank` and `llm`.

pub use memmachine_core::{error, model, urls};
pub use memmachine_domain::{
    changes, embed, episodic, flags, forget, import, inference, legacy, limits, llm, memory,
    metrics, openai_http, projects, rerank, resource_status, retrieval, runtime_settings, secret,
    semantic, usage,
};

/// API keys: the domain's, and `memmachine keys` on a store location.
pub mod auth {
    pub use memmachine_domain::auth::*;
    pub mod manage;
}

/// Moving data between stores: the domain's, and `memmachine export`/`import` on files.
pub mod transfer {
    pub use memmachine_domain::transfer::*;
    mod files;
    pub use files::{export_to, import_from};
}

pub mod admission;
pub mod cli;
pub mod config;
pub mod connections;
pub mod domain;
pub mod grpc;
pub mod mcp;
pub mod metrics_listener;
pub mod probe;
pub mod rest;
pub mod server;
pub mod store;
pub mod telemetry;

