//! Where the server is in its life: starting (store opening, model loading), serving,
//! or draining. Health reports it, and memory calls outside `Serving` are refused with
//! `UNAVAILABLE`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use tokio::sync::Notify;

use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use memmachine_core::error::{Error, Result};

/// Health names of the memory services, reported one by one.
pub const SERVICES: [&str; 2] = [
    "memmachine.v2.ProjectService",
    "memmachine.v2.MemoryService",
];
/// Health name that is SERVING for as long as the process runs (liveness probes: a
/// server that is loading or draining is alive).
pub const LIVENESS: &str = "liveness";
/// What a memory call is told before start-up has finished.
pub const STARTING: &str = "the server is starting; retry shortly";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Starting = 0,
    Serving = 1,
    Draining = 2,
}

pub struct Lifecycle {
    phase: AtomicU8,
    health: HealthReporter,
    in_flight: Arc<InFlight>,
    /// Set once shutdown began; held while health is reported, so that a start-up
    /// finishing during the drain never reports SERVING after NOT_SERVING.
    stopping: tokio::sync::Mutex<bool>,
    /// Health said NOT_SERVING for the drain (memory calls may still be admitted).
    announced: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct InFlight {
    calls: AtomicUsize,
    idle: Notify,
}

/// One admitted memory call, counted until dropped.
pub struct CallGuard(Arc<InFlight>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.0.calls.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Lifecycle {
    /// Starts in `Starting`, with health saying so.
    pub async fn new(health: HealthReporter) -> Lifecycle {
        let lifecycle = Lifecycle {
            phase: AtomicU8::new(Phase::Starting as u8),
            health,
            in_flight: Arc::default(),
            stopping: tokio::sync::Mutex::new(false),
            announced: std::sync::atomic::AtomicBool::new(false),
        };
        lifecycle
            .health
            .set_service_status(LIVENESS, ServingStatus::Serving)
            .await;
        lifecycle.report(ServingStatus::NotServing).await;
        lifecycle
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::SeqCst) {
            0 => Phase::Starting,
            1 => Phase::Serving,
            _ => Phase::Draining,
        }
    }

    /// Ready: memory calls are admitted and health says SERVING (unless shutdown has
    /// begun).
    pub async fn serving(&self) {
        let stopping = self.stopping.lock().await;
        if *stopping {
            return;
        }
        if self
            .phase
            .compare_exchange(
                Phase::Starting as u8,
                Phase::Serving as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            self.report(ServingStatus::Serving).await;
        }
    }

    /// Health says NOT_SERVING from now on; memory calls are still admitted until
    /// `refuse_new` (so that load balancers see the change before calls fail).
    pub async fn not_ready(&self) {
        let mut stopping = self.stopping.lock().await;
        *stopping = true;
        self.announced.store(true, Ordering::SeqCst);
        self.report(ServingStatus::NotServing).await;
    }

    /// The phase health reports: `Draining` from the start of the drain, while memory
    /// calls are still admitted, so that balancers stop sending before they are refused.
    pub fn reported(&self) -> Phase {
        if self.announced.load(Ordering::SeqCst) {
            Phase::Draining
        } else {
            self.phase()
        }
    }

    /// New memory calls are refused from now on; calls in flight go on.
    pub fn refuse_new(&self) {
        self.phase.store(Phase::Draining as u8, Ordering::SeqCst);
    }

    /// Resolves once no admitted memory call is in flight.
    pub async fn idle(&self) {
        loop {
            let notified = self.in_flight.idle.notified();
            if self.in_flight.calls.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Admits a memory call (counted until the guard drops), or `Unavailable` while
    /// starting or draining.
    pub fn admit(&self) -> Result<CallGuard> {
        self.in_flight.calls.fetch_add(1, Ordering::SeqCst);
        let guard = CallGuard(self.in_flight.clone());
        match self.phase() {
            Phase::Serving => Ok(guard),
            Phase::Starting => Err(Error::Unavailable(STARTING.into())),
            Phase::Draining => Err(Error::Unavailable(
                "the server is shutting down; retry on another replica".into(),
            )),
        }
    }

    async fn report(&self, status: ServingStatus) {
        for name in SERVICES.into_iter().chain([""]) {
            self.health.set_service_status(name, status).await;
        }
    }
}
