//! Hands the memory of dropped project indexes back to the system. glibc keeps freed
//! blocks inside its heaps (only the top of the main heap shrinks by itself), so with a
//! cache that evicts and loads all day, resident memory stayed well above what is held.

use std::sync::{Arc, Weak};
use std::time::Duration;

use memmachine_domain::retrieval::index_cache::IndexCache;

/// The least time between two trims: a trim walks every heap, under its lock.
const EVERY: Duration = Duration::from_secs(1);

/// Trims the heaps after indexes were dropped, at most once per `EVERY`; runs until the
/// cache is dropped.
pub fn spawn(index: &Arc<IndexCache>) {
    let weak: Weak<IndexCache> = Arc::downgrade(index);
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            tokio::time::sleep(EVERY).await;
            let Some(index) = weak.upgrade() else { return };
            let dropped = index.dropped();
            drop(index);
            if dropped != seen {
                seen = dropped;
                let _ = tokio::task::spawn_blocking(trim).await;
            }
        }
    });
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only releases free memory; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
