//! What the benchmark binaries (`memmachine-bench`, `memmachine-locomo`,
//! `memmachine-semantic-bench`) share: the server process they measure, latency
//! percentiles, CPU use, Prometheus readings and a scripted chat model. Each uses only
//! part of it.
#![allow(dead_code)]

pub mod chat;
pub mod corpus;
pub mod cpu;
pub mod latencies;
pub mod locomo;
pub mod metrics;
pub mod server;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, BoxError>;
