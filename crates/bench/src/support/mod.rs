//! What several workloads share beside the testkit's (the server process they measure,
//! API keys, LoCoMo): latency percentiles, CPU use, Prometheus readings and a scripted
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
pub mod stage_split;

pub use memmachine_testkit::server::measured as server;
pub use memmachine_testkit::{BoxError, Result, api_key, locomo};
