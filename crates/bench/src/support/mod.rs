//! What the benchmark binaries (`memmachine-bench ingest-search`, `memmachine-bench locomo`,
//! `memmachine-bench semantic`, `memmachine-bench load`) share: the server process they
//! measure, API keys, latency percentiles, CPU use, Prometheus readings and a scripted
//! chat model; and the load generator's call mix, schedule, per-call statistics and
//! process samples. Each uses only part of it.
#![allow(dead_code)]

pub mod call_stats;
pub mod chat;
pub mod corpus;
pub mod cpu;
pub mod latencies;
pub mod metrics;
pub mod mix;
pub mod process_sample;
pub mod rng;
pub mod schedule;
pub mod server;

pub use memmachine_testkit::{BoxError, Result, api_key, locomo};
