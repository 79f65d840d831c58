//! The harness the integration tests (`tests/it`) and the benchmarks
//! (`memmachine-bench ingest-search`) share: the real `memmachine` binary as a child process on SQLite
//! or PostgreSQL, gRPC calls and API keys against it, listings read page after page,
//! and the LoCoMo data set.

pub mod api_key;
pub mod calls;
pub mod chat;
pub mod child;
pub mod keys;
pub mod locomo;
pub mod paging;
pub mod postgres;
pub mod server;

/// A test that cannot run its real component (`what`: PostgreSQL, a browser, a proxy, a
/// tool): under `CI=true` the test fails, so that nothing passes by skipping there;
/// elsewhere it says so on stderr, and the caller returns.
pub fn cannot_run(what: &str, why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{what} cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: {what}: {why}");
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, BoxError>;
