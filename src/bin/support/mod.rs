//! What the two benchmark binaries (`memmachine-bench`, `memmachine-locomo`) share: the
//! server process they measure and latency percentiles. Each uses only part of it.
#![allow(dead_code)]

pub mod latencies;
pub mod locomo;
pub mod server;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, BoxError>;
