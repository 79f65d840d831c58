//! The one retry delay of the domain: doubling from a first delay up to a ceiling, with a
//! random part taken off so that clients failing together do not retry together. Used by
//! the HTTP clients ([`crate::openai_http`]), the embedding workers and semantic ingestion.

use std::time::Duration;

/// How long to wait before each retry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// The delay before the first retry.
    pub first: Duration,
    /// The ceiling of the doubled delay.
    pub max: Duration,
    /// The largest share of a delay taken off at random, in `[0, 1]` (0: none).
    pub jitter: f64,
}

impl Backoff {
    /// The delay before retry number `retry` (0 = the first retry): `first * 2^retry`, at
    /// most `max`, then a uniformly random part of up to `jitter` of it taken off.
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        let base = self.first.saturating_mul(factor).min(self.max);
        if self.jitter <= 0.0 {
            return base;
        }
        base.mul_f64(1.0 - self.jitter.min(1.0) * random_unit())
    }
}

/// A uniformly random number in `[0, 1)` from the operating system (0 in the unheard-of
/// case that it has none to give: the jitter is then fixed, not the delay unbounded).
pub(crate) fn random_unit() -> f64 {
    (getrandom::u64().unwrap_or(0) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_with_jitter_and_is_capped() {
        let b = Backoff {
            first: Duration::from_millis(200),
            max: Duration::from_secs(5),
            jitter: 0.5,
        };
        for (retry, full) in [(0, 200), (1, 400), (2, 800), (5, 5000), (40, 5000)] {
            let d = b.delay(retry);
            let full = Duration::from_millis(full);
            assert!(d >= full / 2 && d <= full, "retry {retry}: {d:?}");
        }
    }

    #[test]
    fn without_jitter_the_delay_is_exact() {
        let b = Backoff {
            first: Duration::from_millis(500),
            max: Duration::from_secs(60),
            jitter: 0.0,
        };
        let delays: Vec<u128> = (0..9).map(|r| b.delay(r).as_millis()).collect();
        assert_eq!(
            delays,
            [500, 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000]
        );
    }

    #[test]
    fn a_quarter_of_jitter_takes_off_at_most_a_quarter() {
        let b = Backoff {
            first: Duration::from_secs(2),
            max: Duration::from_secs(900),
            jitter: 0.25,
        };
        for _ in 0..200 {
            let d = b.delay(3);
            assert!(
                d > Duration::from_secs(12) && d <= Duration::from_secs(16),
                "{d:?}"
            );
        }
        assert!(b.delay(u32::MAX) <= Duration::from_secs(900));
    }

    #[test]
    fn random_unit_is_in_range() {
        for _ in 0..1000 {
            let x = random_unit();
            assert!((0.0..1.0).contains(&x), "{x}");
        }
    }
}
