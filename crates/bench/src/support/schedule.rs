//! When the clients of a load run start their calls: as fast as possible (closed loop)
//! or at a fixed total rate (open loop), after a warm-up that is not counted, until a
//! deadline and/or a number of counted calls.
//!
//! At a fixed rate call `n` is due at `start + n / rate` whether or not earlier calls
//! have answered, and its latency is taken from that due time: a server that falls
//! behind makes the calls queued behind it late, and that lateness is counted
//! (coordinated omission is not hidden).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Schedule {
    start: Instant,
    warmup: Duration,
    /// No call starts at or after this.
    end: Option<Instant>,
    /// Calls per second over all clients; 0 means as fast as possible.
    rate: f64,
    max_ops: Option<u64>,
    /// The next call's number, at a fixed rate.
    next: AtomicU64,
    /// Counted calls started so far.
    counted: AtomicU64,
}

/// A call a client may make now.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// When it was due (at a fixed rate) or started (as fast as possible): its
    /// latency is measured from here.
    pub due: Instant,
    /// After the warm-up: recorded.
    pub counted: bool,
}

impl Schedule {
    /// `duration` counts from the end of the warm-up; `max_ops` counts calls after it.
    pub fn new(
        start: Instant,
        warmup: Duration,
        duration: Option<Duration>,
        rate: f64,
        max_ops: Option<u64>,
    ) -> Schedule {
        Schedule {
            start,
            warmup,
            end: duration.map(|d| start + warmup + d),
            rate,
            max_ops,
            next: AtomicU64::new(0),
            counted: AtomicU64::new(0),
        }
    }

    /// At a fixed rate (calls have due times of their own).
    pub fn paced(&self) -> bool {
        self.rate > 0.0
    }

    /// When counting starts.
    pub fn measure_start(&self) -> Instant {
        self.start + self.warmup
    }

    /// Waits until the next call is due and returns it, or `None` when the run is
    /// over for this client.
    pub async fn next(&self) -> Option<Slot> {
        let due = if self.rate > 0.0 {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let due = self.start + Duration::from_secs_f64(n as f64 / self.rate);
            if self.end.is_some_and(|end| due >= end) {
                return None;
            }
            tokio::time::sleep_until(due.into()).await;
            due
        } else {
            Instant::now()
        };
        // Calls still due when the deadline passes (the server fell behind) are not
        // made: `unsent` reports them.
        if self.end.is_some_and(|end| Instant::now() >= end) {
            return None;
        }
        let counted = due >= self.measure_start();
        if counted
            && let Some(max) = self.max_ops
            && self.counted.fetch_add(1, Ordering::Relaxed) >= max
        {
            return None;
        }
        Some(Slot { due, counted })
    }

    /// At a fixed rate, the counted calls that were due but never started because the
    /// run ended first (0 as fast as possible).
    pub fn unsent(&self, started: u64) -> u64 {
        if self.rate <= 0.0 {
            return 0;
        }
        let first = (self.warmup.as_secs_f64() * self.rate).ceil() as u64;
        let issued = self.next.load(Ordering::Relaxed);
        let due_end = match self.end {
            Some(end) => ((end - self.start).as_secs_f64() * self.rate).ceil() as u64,
            None => issued,
        };
        let mut due = due_end.saturating_sub(first);
        if let Some(max) = self.max_ops {
            due = due.min(max);
        }
        due.saturating_sub(started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn max_ops_bounds_the_counted_calls() {
        let schedule = Schedule::new(Instant::now(), Duration::ZERO, None, 0.0, Some(5));
        let mut n = 0;
        while let Some(slot) = schedule.next().await {
            assert!(slot.counted);
            n += 1;
        }
        assert_eq!(n, 5);
        assert!(schedule.next().await.is_none());
    }

    #[tokio::test]
    async fn a_fixed_rate_spaces_the_due_times() {
        let start = Instant::now();
        let schedule = Schedule::new(start, Duration::ZERO, None, 1000.0, Some(3));
        let mut dues = Vec::new();
        while let Some(slot) = schedule.next().await {
            dues.push(slot.due - start);
        }
        assert_eq!(
            dues,
            [0, 1, 2].map(Duration::from_millis),
            "due times are the schedule's, not the wake-ups'"
        );
        assert_eq!(schedule.unsent(3), 0);
    }
}
