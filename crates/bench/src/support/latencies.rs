//! Latency samples and their percentiles.

use std::time::Duration;

/// Latencies of one phase, sorted.
pub struct Latencies(Vec<Duration>);

impl Latencies {
    pub fn new(mut samples: Vec<Duration>) -> Latencies {
        samples.sort_unstable();
        Latencies(samples)
    }

    /// Nearest-rank percentile in milliseconds.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.0.len() as f64).ceil() as usize;
        ms(self.0[rank.clamp(1, self.0.len()) - 1])
    }

    /// How many samples there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn mean(&self) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        ms(self.0.iter().sum::<Duration>()) / self.0.len() as f64
    }

    pub fn max(&self) -> f64 {
        self.0.last().copied().map_or(f64::NAN, ms)
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
