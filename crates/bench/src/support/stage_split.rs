//! Where each search's time went, by the server's own account (its `server-timing`
//! answer to the `memmachine-timing` request header): the stages the server clocks,
//! the rest of its handling, and the transport (the client's time less the server's).

use std::time::Duration;

use memmachine_domain::search_time::{ASK_HEADER, REPORT_HEADER, Timing};
use memmachine_domain::stage_time::Stage;

use super::latencies::Latencies;

/// The parts reported, in order.
const PARTS: [&str; 9] = [
    "embedding",
    "lexical",
    "dense",
    "fusion",
    "store",
    "server rest",
    "server total",
    "transport",
    "client total",
];

/// Each search's parts, in microseconds.
#[derive(Default)]
pub struct StageSplit {
    samples: Vec<[u64; PARTS.len()]>,
    /// Searches whose answer held no timing.
    pub missing: usize,
}

/// Asks the server for the search's timing.
pub fn ask<T>(request: &mut tonic::Request<T>) {
    request
        .metadata_mut()
        .insert(ASK_HEADER, tonic::metadata::MetadataValue::from_static("1"));
}

impl StageSplit {
    /// Adds one search: the answer's metadata and the time the client measured.
    pub fn add(&mut self, metadata: &tonic::metadata::MetadataMap, client: Duration) {
        let timing = (metadata.get(REPORT_HEADER))
            .and_then(|value| value.to_str().ok())
            .and_then(Timing::parse);
        let Some(timing) = timing else {
            self.missing += 1;
            return;
        };
        let client = client.as_micros() as u64;
        let staged: u64 = timing.stages_us.iter().sum();
        let mut parts = [0u64; PARTS.len()];
        for (i, stage) in Stage::ALL.iter().enumerate() {
            parts[i] = timing.stage_us(*stage);
        }
        parts[5] = timing.total_us.saturating_sub(staged);
        parts[6] = timing.total_us;
        parts[7] = client.saturating_sub(timing.total_us);
        parts[8] = client;
        self.samples.push(parts);
    }

    /// `(part, p50 ms, p99 ms)` of each part.
    pub fn percentiles(&self) -> Vec<(&'static str, f64, f64)> {
        (PARTS.iter().enumerate())
            .map(|(i, name)| {
                let part = (self.samples.iter())
                    .map(|s| Duration::from_micros(s[i]))
                    .collect();
                let part = Latencies::new(part);
                (*name, part.percentile(50.0), part.percentile(99.0))
            })
            .collect()
    }
}
