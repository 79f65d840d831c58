//! The retention sweeper: deletes expired episodes (their own `expires_at`, or the
//! project's retention) in bounded batches through the store's episode deletion, the
//! path a client's delete takes, so citations, summaries, vectors, queued semantic and
//! embedding work and the indexes (through the change feed) follow. A named lease in the
//! store makes one replica at a time sweep; reads hide expired episodes meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::model::ProjectKey;
use crate::store::Store;
use memmachine_core::access::{Access, ProjectAccess};

/// The lease's name in the store.
pub const LEASE: &str = "retention-sweeper";
/// Episodes deleted per batch (one store read, one delete per project in it).
pub const BATCH: usize = 500;
/// Batches one sweep does at most before it lets the next sweep (maybe another
/// replica's) go on, so that a huge backlog never holds one task forever.
const MAX_BATCHES: usize = 200;

/// Retention's flags, environment variables and config file keys.
#[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// Seconds between sweeps of expired episodes (an expired episode is deleted at most
    /// about this late; it is never returned meanwhile)
    #[arg(
        long,
        env = "MEMMACHINE_RETENTION_SWEEP_INTERVAL",
        default_value_t = 15.0
    )]
    pub retention_sweep_interval: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    pub interval: Duration,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        crate::flags::defaults::<Flags>()
            .settings()
            .expect("the declared defaults are valid")
    }
}

impl Flags {
    pub fn settings(&self) -> Result<RetentionSettings, String> {
        Ok(RetentionSettings {
            interval: crate::flags::positive(
                self.retention_sweep_interval,
                "retention-sweep-interval",
            )?,
        })
    }
}

/// What one sweep deleted, per project.
pub type Swept = BTreeMap<ProjectKey, u64>;

/// Starts the sweeper; it stops once the store is dropped. The swept projects' index
/// segments (`index`) are deleted after each sweep: they hold what expired.
pub fn spawn(
    store: &Arc<dyn Store>,
    settings: RetentionSettings,
    index: Option<&Arc<crate::retrieval::index_cache::IndexCache>>,
) {
    let weak = Arc::downgrade(store);
    let index = index.map(Arc::downgrade);
    let holder = uuid::Uuid::new_v4().to_string();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(store) = weak.upgrade() else { return };
            match sweep(store.as_ref(), &holder, settings.interval).await {
                Ok(swept) if swept.is_empty() => {}
                Ok(swept) => {
                    let index = index.as_ref().and_then(std::sync::Weak::upgrade);
                    for (project, deleted) in &swept {
                        if let Some(index) = &index {
                            index.erase(&Access::system(project.clone())).await;
                        }
                        tracing::info!(project = %project, deleted, "expired episodes deleted");
                    }
                }
                Err(err) => tracing::warn!(error = %err, "retention sweep failed"),
            }
        }
    });
}

/// One sweep by `holder`: nothing unless it holds the lease; else expired episodes in
/// batches until none are left (or `MAX_BATCHES`), renewing the lease per batch.
pub async fn sweep(store: &dyn Store, holder: &str, interval: Duration) -> Result<Swept> {
    // Long enough for a batch; short enough that a replica that died is replaced soon.
    let ttl = (interval * 4).max(Duration::from_secs(60)).as_micros() as i64;
    let mut swept = Swept::new();
    for _ in 0..MAX_BATCHES {
        if !store.try_lease(LEASE, holder, ttl).await? {
            break;
        }
        let now = chrono::Utc::now().timestamp_micros();
        let expired = store.expired_episodes(now, BATCH).await?;
        if expired.is_empty() {
            break;
        }
        let mut by_project: BTreeMap<ProjectKey, Vec<uuid::Uuid>> = BTreeMap::new();
        for (key, uid) in expired {
            by_project.entry(key).or_default().push(uid);
        }
        for (key, uids) in by_project {
            // A sweep: no caller asked.
            let deleted = delete(store, &Access::system(key.clone()), &uids).await?;
            *swept.entry(key).or_default() += deleted;
        }
    }
    Ok(swept)
}

/// Deletes the episodes; one deleted meanwhile (by a client) is skipped, not an error.
async fn delete(store: &dyn Store, key: &ProjectAccess, uids: &[uuid::Uuid]) -> Result<u64> {
    match store.delete_episodes(key, uids).await {
        Err(Error::NotFound(_)) => {
            let mut deleted = 0;
            for uid in uids {
                match store.delete_episodes(key, std::slice::from_ref(uid)).await {
                    Ok(n) => deleted += n,
                    Err(Error::NotFound(_)) => {}
                    Err(err) => return Err(err),
                }
            }
            Ok(deleted)
        }
        other => other,
    }
}
