//! What the calls of one kind did in a load run: their latencies and their failures
//! by gRPC status code.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::latencies::Latencies;

#[derive(Default)]
pub struct CallStats {
    /// Every call's latency, failures included (a failure answered fast still took
    /// the caller that long).
    pub latencies: Vec<Duration>,
    /// Failed calls by canonical status code name (`UNAVAILABLE`, ...).
    pub errors: BTreeMap<&'static str, u64>,
}

impl CallStats {
    pub fn record(&mut self, latency: Duration, outcome: Result<(), tonic::Code>) {
        self.latencies.push(latency);
        if let Err(code) = outcome {
            *self.errors.entry(code_name(code)).or_insert(0) += 1;
        }
    }

    pub fn merge(&mut self, other: CallStats) {
        self.latencies.extend(other.latencies);
        for (code, n) in other.errors {
            *self.errors.entry(code).or_insert(0) += n;
        }
    }

    pub fn count(&self) -> usize {
        self.latencies.len()
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Count, throughput over `wall`, latency percentiles and errors, sorting the
    /// latencies.
    pub fn summary(&self, wall: Duration) -> Summary {
        Summary {
            count: self.count(),
            ops_per_sec: self.count() as f64 / wall.as_secs_f64().max(1e-9),
            latencies: Latencies::new(self.latencies.clone()),
            errors: self.errors.clone(),
        }
    }
}

pub struct Summary {
    pub count: usize,
    pub ops_per_sec: f64,
    pub latencies: Latencies,
    pub errors: BTreeMap<&'static str, u64>,
}

impl Summary {
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// `CODE=n ...`, or `0`.
    pub fn errors_text(&self) -> String {
        if self.errors.is_empty() {
            return "0".into();
        }
        let parts: Vec<String> = self
            .errors
            .iter()
            .map(|(code, n)| format!("{code}={n}"))
            .collect();
        parts.join(" ")
    }

    pub fn to_json(&self) -> Value {
        let l = &self.latencies;
        // NaN (no calls) is not JSON; null says "no samples".
        let finite = |v: f64| v.is_finite().then_some(v);
        json!({
            "count": self.count,
            "ok": self.count as u64 - self.error_count(),
            "ops_per_sec": self.ops_per_sec,
            "latency_ms": {
                "p50": finite(l.percentile(50.0)),
                "p90": finite(l.percentile(90.0)),
                "p99": finite(l.percentile(99.0)),
                "max": finite(l.max()),
                "mean": finite(l.mean()),
            },
            "errors": self.errors,
        })
    }
}

pub use memmachine_domain::metrics::code_name;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_calls_and_errors_by_code() {
        let mut a = CallStats::default();
        a.record(Duration::from_millis(1), Ok(()));
        a.record(Duration::from_millis(3), Err(tonic::Code::Unavailable));
        let mut b = CallStats::default();
        b.record(Duration::from_millis(2), Err(tonic::Code::Unavailable));
        a.merge(b);
        let summary = a.summary(Duration::from_secs(1));
        assert_eq!(summary.count, 3);
        assert_eq!(summary.errors_text(), "UNAVAILABLE=2");
        assert_eq!(summary.to_json()["ok"], 1);
        assert_eq!(summary.latencies.percentile(50.0), 2.0);
    }
}
