//! Named leases: one holder at a time does a piece of background work (a sweeper's
//! batch), so replicas sharing one store never do it twice.

use async_trait::async_trait;

use crate::error::Result;

#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes or renews the lease `name` for `holder` until `now + ttl_micros`: true when
    /// it was free, expired or already `holder`'s; false while another holder has it.
    async fn try_lease(&self, name: &str, holder: &str, ttl_micros: i64) -> Result<bool>;
    /// Gives the lease up if `holder` has it, so another holder need not wait for it to expire.
    async fn release_lease(&self, name: &str, holder: &str) -> Result<()>;
}
