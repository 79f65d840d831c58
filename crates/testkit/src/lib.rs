//! The harness the integration tests (`tests/it`) and the benchmarks
//! (`memmachine-bench ingest-search`) share: the real `memmachine` binary as a child process on SQLite
//! or PostgreSQL, gRPC calls and API keys against it, listings read page after page,
//! and the LoCoMo data set.

pub mod api_key;
pub mod calls;
pub mod child;
pub mod keys;
pub mod locomo;
pub mod paging;
pub mod postgres;
pub mod server;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, BoxError>;
