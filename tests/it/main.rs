//! Every integration test, in one binary (one link of the server instead of one per
//! file): a module per area, named as its file. `common` holds what they share;
//! `conformance` is the storage traits' suite on SQLite and PostgreSQL.
//!
//! Run one area with a name filter: `cargo test --test it -- grpc_api::`.

mod auth;
mod change_feed;
mod child_processes;
mod cli_client;
mod cli_commands;
mod common;
mod conformance;
mod console;
mod crash_loop;
mod disk_faults;
mod durability;
mod embedding_worker;
mod examples;
mod external_clients;
mod extreme_values;
mod feature_history;
mod filter_props;
mod forget;
mod fuzz_regressions;
mod grpc_api;
mod grpc_web;
mod hostile_clients;
mod idempotency;
mod import;
mod isolation_model;
mod isolation_scopes;
mod legacy_v1;
mod lifecycle;
mod limits;
mod llm_client;
mod load_generator;
mod local_embedder;
mod locomo_recall;
mod mcp;
mod mcp_session_binding;
mod observability;
mod openai_embedder;
mod ops_visibility;
mod postgres_store;
mod real_model;
mod replicas;
mod rerank;
mod rest_api;
mod retention;
mod semantic_crash;
mod semantic_isolation;
mod semantic_memory;
mod slow_clients;
mod slow_dependencies;
mod tls;
mod transfer;
mod usage;
