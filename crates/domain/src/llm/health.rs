//! Whether the language model's endpoint fails every call the same way (a wrong model
//! name, a key that is refused, a server that is down): then it is reported once (an
//! ERROR line, the `memmachine_llm_endpoint_failing` gauge and `/config/resources`).
//! One that refuses every call ([`LlmError::Failed`]) is then no longer called but for
//! one probe at a growing interval, until a call succeeds or an operator asks for a
//! retry; one that is down is paced by each batch's own backoff. A request the endpoint
//! refuses ([`LlmError::Rejected`]) says nothing of the endpoint: it neither counts nor
//! resets.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Completion, LlmError};

/// Consecutive calls failing with the same error that make the endpoint failing.
const FAILING_AFTER: u32 = 3;
/// The wait before the first probe of a failing endpoint; it doubles after each failed
/// probe, up to [`MAX_PROBE_INTERVAL`].
const FIRST_PROBE_INTERVAL: Duration = Duration::from_secs(30);
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(600);

/// A failing endpoint, as `/config/resources` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// The error every one of these calls ended with.
    pub error: String,
    /// Calls that failed with it in a row.
    pub failures: u32,
    /// When the first of them failed.
    pub since: chrono::DateTime<chrono::Utc>,
    /// How long until the next probe (zero: the next call is one).
    pub next_probe_in: Duration,
}

/// What a call's outcome changed, for the caller to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Now failing: every one of the last calls failed with this error.
    Failing(Failing),
    /// Answering again after failing.
    Recovered,
}

#[derive(Default)]
pub struct Health {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last failure's error, its digits left out (request ids, counts), and how
    /// many calls in a row ended with it.
    error: String,
    key: String,
    streak: u32,
    since: Option<chrono::DateTime<chrono::Utc>>,
    failing: bool,
    /// Probes that failed since the endpoint was found failing.
    probes: u32,
    /// Whether calls wait for probes: only while the endpoint refuses them
    /// ([`LlmError::Failed`]). An outage ([`LlmError::Unavailable`]) is reported the
    /// same, but each batch's own backoff paces it, so that work resumes as soon as the
    /// endpoint heals.
    gating: bool,
    next_probe: Option<Instant>,
}

fn key(error: &str) -> String {
    error.chars().filter(|c| !c.is_ascii_digit()).collect()
}

fn probe_interval(probes: u32) -> Duration {
    FIRST_PROBE_INTERVAL
        .saturating_mul(2u32.saturating_pow(probes.min(16)))
        .min(MAX_PROBE_INTERVAL)
}

impl Health {
    /// Takes in one call's outcome.
    pub fn record(&self, result: &Result<Completion, LlmError>) -> Option<Change> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let error = match result {
            Ok(_) => {
                let was = state.failing;
                *state = State::default();
                return was.then_some(Change::Recovered);
            }
            Err(LlmError::Rejected(_)) => return None,
            Err(err) => crate::resource_status::Status::of::<(), _>(&Err(err))
                .error()
                .unwrap_or_default()
                .to_string(),
        };
        state.gating = matches!(result, Err(LlmError::Failed(_)));
        let key = key(&error);
        if key == state.key {
            state.streak += 1;
        } else {
            state.key = key;
            state.streak = 1;
            state.since = Some(chrono::Utc::now());
        }
        state.error = error;
        if state.failing {
            // A failed probe: the next one waits longer.
            state.probes += 1;
            state.next_probe = Some(Instant::now() + probe_interval(state.probes));
            return None;
        }
        if state.streak < FAILING_AFTER {
            return None;
        }
        state.failing = true;
        state.probes = 0;
        state.next_probe = Some(Instant::now() + probe_interval(0));
        Some(Change::Failing(state.failing_now()?))
    }

    /// The endpoint's failure, when it is failing.
    pub fn failing(&self) -> Option<Failing> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.failing_now()
    }

    /// None: call now (not failing, or this caller is the probe, and the next one waits
    /// for its turn). Some: how long until the next probe.
    pub fn wait(&self) -> Option<Duration> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !state.failing || !state.gating {
            return None;
        }
        let now = Instant::now();
        match state.next_probe {
            Some(at) if at > now => Some(at - now),
            _ => {
                // Until this probe's outcome is in, nobody else calls.
                state.next_probe = Some(now + probe_interval(state.probes));
                None
            }
        }
    }

    /// Probes at once (an operator fixed the endpoint and asks for a retry).
    pub fn probe_now(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.failing {
            state.next_probe = None;
        }
    }
}

impl State {
    fn failing_now(&self) -> Option<Failing> {
        if !self.failing {
            return None;
        }
        Some(Failing {
            error: self.error.clone(),
            failures: self.streak,
            since: self.since.unwrap_or_else(chrono::Utc::now),
            next_probe_in: self.next_probe.map_or(Duration::ZERO, |at| {
                at.saturating_duration_since(Instant::now())
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(message: &str) -> Result<Completion, LlmError> {
        Err(LlmError::Failed(message.into()))
    }

    fn ok() -> Result<Completion, LlmError> {
        Ok(Completion {
            content: "{}".into(),
            prompt_tokens: 1,
            completion_tokens: 1,
        })
    }

    #[test]
    fn the_same_failure_three_times_in_a_row_is_the_endpoints() {
        let health = Health::default();
        assert_eq!(
            health.record(&failed("404: model m1 not found (request 17)")),
            None
        );
        // A different error starts the count again; digits do not make it different.
        assert_eq!(health.record(&failed("timed out")), None);
        assert_eq!(
            health.record(&failed("404: model m1 not found (request 18)")),
            None
        );
        assert_eq!(
            health.record(&failed("404: model m1 not found (request 19)")),
            None
        );
        assert!(health.failing().is_none());
        let Some(Change::Failing(failing)) =
            health.record(&failed("404: model m1 not found (request 20)"))
        else {
            panic!("the third same failure in a row makes it failing");
        };
        assert_eq!(failing.failures, 3);
        assert!(failing.error.contains("model m1 not found"));
        // Reported once: more of the same change nothing.
        assert_eq!(health.record(&failed("404: model m1 not found")), None);
        assert!(health.failing().is_some());
        assert_eq!(health.record(&ok()), Some(Change::Recovered));
        assert!(health.failing().is_none());
        assert_eq!(health.record(&ok()), None);
        // Requests refused as sent are theirs, not the endpoint's.
        for _ in 0..5 {
            assert_eq!(
                health.record(&Err(LlmError::Rejected("too long".into()))),
                None
            );
        }
        assert!(health.failing().is_none());
    }

    #[test]
    fn a_failing_endpoint_is_probed_by_one_caller_at_a_time() {
        let health = Health::default();
        assert_eq!(health.wait(), None);
        for _ in 0..FAILING_AFTER {
            health.record(&failed("down"));
        }
        let wait = health.wait().expect("waits for the first probe");
        assert!(wait > Duration::from_secs(25) && wait <= FIRST_PROBE_INTERVAL);
        health.probe_now();
        assert_eq!(health.wait(), None, "the prober calls");
        assert!(health.wait().is_some(), "the others wait for its outcome");
        health.record(&failed("down"));
        let wait = health.wait().expect("a failed probe waits longer");
        assert!(wait > FIRST_PROBE_INTERVAL, "{wait:?}");
        assert_eq!(probe_interval(20), MAX_PROBE_INTERVAL);

        // An outage is reported, but calls are not held back: batches back off alone.
        let health = Health::default();
        let down = || {
            Err(LlmError::Unavailable {
                message: "connection refused".into(),
                retry_after: None,
            })
        };
        for _ in 0..FAILING_AFTER {
            health.record(&down());
        }
        assert!(health.failing().is_some());
        assert_eq!(health.wait(), None);
    }
}
