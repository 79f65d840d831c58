//! Per-caller limits: a request rate (token bucket) and a number of calls in flight.
//! A caller is its API key, or its IP address when authentication is off.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use memmachine_core::error::Error;

/// The limits of `memmachine serve` (`--rate-limit`, `--rate-burst`,
/// `--max-concurrent-per-key`); zero turns one off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallerLimits {
    /// Requests per second per caller.
    pub rate: u32,
    /// Requests a caller may send at once above the rate (at least the rate).
    pub burst: u32,
    /// Calls of one caller in flight at once.
    pub concurrent: u32,
}

/// How long a caller turned away for concurrency is told to wait.
const CONCURRENCY_RETRY: Duration = Duration::from_millis(100);
/// Forget idle callers once this many are tracked.
const PRUNE_AT: usize = 10_000;

pub struct Limiter {
    limits: CallerLimits,
    rate: Option<DefaultKeyedRateLimiter<String>>,
    in_flight: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Which limit turned a call away, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Rate,
    Concurrency,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Rate => "rate",
            Refusal::Concurrency => "concurrency",
        }
    }
}

impl Limiter {
    pub fn new(limits: CallerLimits) -> Limiter {
        let rate = NonZeroU32::new(limits.rate).map(|rate| {
            let burst = NonZeroU32::new(limits.burst.max(limits.rate)).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Limiter {
            limits,
            rate,
            in_flight: Mutex::default(),
        }
    }

    /// Admits one call of `caller`, or says which limit refused it, with an error that
    /// carries how long to wait. The permit must live as long as the call.
    pub fn admit(
        &self,
        caller: &str,
    ) -> std::result::Result<Option<OwnedSemaphorePermit>, (Refusal, Error)> {
        if let Some(rate) = &self.rate {
            if rate.len() > PRUNE_AT {
                rate.retain_recent();
            }
            let key = caller.to_string();
            if let Err(not_until) = rate.check_key(&key) {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                return Err((
                    Refusal::Rate,
                    exhausted(
                        format!(
                            "rate limit of {} requests per second exceeded; retry later",
                            self.limits.rate
                        ),
                        wait.max(Duration::from_millis(1)),
                    ),
                ));
            }
        }
        if self.limits.concurrent == 0 {
            return Ok(None);
        }
        let semaphore = {
            let mut map = self.in_flight.lock().expect("limiter lock");
            if map.len() > PRUNE_AT {
                map.retain(|_, s| s.available_permits() < self.limits.concurrent as usize);
            }
            map.entry(caller.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.limits.concurrent as usize)))
                .clone()
        };
        semaphore.try_acquire_owned().map(Some).map_err(|_| {
            (
                Refusal::Concurrency,
                exhausted(
                    format!(
                        "more than {} calls in flight for this caller; retry later",
                        self.limits.concurrent
                    ),
                    CONCURRENCY_RETRY,
                ),
            )
        })
    }
}

fn exhausted(message: String, retry_after: Duration) -> Error {
    Error::ResourceExhausted {
        message,
        retry_after: Some(retry_after),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memmachine_core::error::Result;

    fn check(limiter: &Limiter, caller: &str) -> Result<()> {
        limiter.admit(caller).map(drop).map_err(|(_, err)| err)
    }

    #[test]
    fn the_rate_is_per_caller_and_refusals_say_when_to_retry() {
        let limiter = Limiter::new(CallerLimits {
            rate: 1,
            burst: 2,
            concurrent: 0,
        });
        assert!(check(&limiter, "a").is_ok());
        assert!(check(&limiter, "a").is_ok());
        match check(&limiter, "a") {
            Err(Error::ResourceExhausted {
                retry_after: Some(wait),
                ..
            }) => assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1)),
            other => panic!("expected RESOURCE_EXHAUSTED, got {other:?}"),
        }
        assert!(
            check(&limiter, "b").is_ok(),
            "another caller is not affected"
        );
    }

    #[test]
    fn concurrency_counts_calls_in_flight() {
        let limiter = Limiter::new(CallerLimits {
            rate: 0,
            burst: 0,
            concurrent: 1,
        });
        let held = limiter.admit("a").unwrap();
        assert!(matches!(limiter.admit("a"), Err((Refusal::Concurrency, _))));
        assert!(limiter.admit("b").is_ok());
        drop(held);
        assert!(limiter.admit("a").is_ok());
    }
}
