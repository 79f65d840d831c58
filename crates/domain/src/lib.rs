//! MemMachine's memory domain: projects, episodic and semantic memory, retrieval, the
//! legacy v1 sessions, moving data between stores and API keys, over the storage
//! contract of `memmachine-core` (never a backend), with the models (`embed`, `rerank`,
//! `llm`) and the settings each module owns. The server crate adds the transports.

pub use memmachine_core::{error, model, store, urls};

pub mod auth;
pub mod backoff;
pub mod batch_import;
pub mod changes;
pub mod embed;
pub mod episodic;
pub mod flags;
pub mod forget;
pub mod inference;
pub mod legacy;
pub mod limits;
pub mod llm;
pub mod memory;
pub mod metrics;
pub mod openai_http;
pub mod projects;
pub mod rank_together;
pub mod ranked_search;
pub mod redaction;
pub mod rerank;
pub mod resource_status;
pub mod retrieval;
pub mod round_trips;
pub mod runtime_settings;
pub mod search_plan;
pub mod search_time;
pub mod secret;
pub mod semantic;
pub mod stage_time;
pub mod transfer;
pub mod usage;
