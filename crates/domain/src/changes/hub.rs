//! One task per server that wakes watchers when their project's log moves: it reads the
//! heads of every watched project in one query each poll interval (writes through other
//! replicas), or at once when poked (writes through this one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::model::{ChangeSeq, ProjectHandle};
use crate::store::Store;

/// A watched project's latest change as the hub last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    At(ChangeSeq),
    Gone,
}

pub struct Hub {
    store: Weak<dyn Store>,
    watched: Mutex<HashMap<ProjectHandle, watch::Sender<Head>>>,
    poke: Arc<Notify>,
}

impl Hub {
    pub(super) fn start(store: Arc<dyn Store>, interval: Duration) -> Arc<Hub> {
        let hub = Arc::new(Hub {
            store: Arc::downgrade(&store),
            watched: Mutex::new(HashMap::new()),
            poke: Arc::new(Notify::new()),
        });
        let weak = Arc::downgrade(&hub);
        let poke = hub.poke.clone();
        tokio::spawn(async move {
            loop {
                let Some(hub) = weak.upgrade() else { return };
                let poked = poke.notified();
                if !hub.poll().await {
                    return;
                }
                // Not holding the hub while asleep, so that it can be dropped.
                drop(hub);
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = poked => {}
                }
            }
        });
        hub
    }

    /// Wakes the poll now (a write through this server committed).
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// Projects with at least one watcher.
    pub fn watched_projects(&self) -> usize {
        self.watched.lock().expect("hub lock").len()
    }

    /// Watchers on this server.
    pub fn watchers(&self) -> usize {
        let watched = self.watched.lock().expect("hub lock");
        watched.values().map(|s| s.receiver_count()).sum()
    }

    /// The head of `project` as it moves; `head` is where it is now.
    pub(super) fn subscribe(
        &self,
        project: ProjectHandle,
        head: ChangeSeq,
    ) -> watch::Receiver<Head> {
        let mut watched = self.watched.lock().expect("hub lock");
        let sender = watched
            .entry(project)
            .or_insert_with(|| watch::channel(Head::At(head)).0);
        sender.send_if_modified(|seen| match seen {
            Head::At(seen) if *seen < head => {
                *seen = head;
                true
            }
            _ => false,
        });
        sender.subscribe()
    }

    /// One look at the heads of every watched project; false once the store is gone.
    async fn poll(&self) -> bool {
        let projects: Vec<ProjectHandle> = {
            let mut watched = self.watched.lock().expect("hub lock");
            watched.retain(|_, sender| sender.receiver_count() > 0);
            watched.keys().copied().collect()
        };
        if projects.is_empty() {
            return self.store.strong_count() > 0;
        }
        let Some(store) = self.store.upgrade() else {
            return false;
        };
        let heads = match store.feed_heads(&projects).await {
            Ok(heads) => heads,
            Err(crate::error::Error::Closed) => return false,
            Err(err) => {
                tracing::warn!(error = %err, "reading the watched projects' heads failed");
                return true;
            }
        };
        let heads: HashMap<ProjectHandle, ChangeSeq> =
            heads.into_iter().map(|h| (h.project, h.change)).collect();
        let watched = self.watched.lock().expect("hub lock");
        for project in projects {
            let Some(sender) = watched.get(&project) else {
                continue;
            };
            let now = heads.get(&project).map_or(Head::Gone, |c| Head::At(*c));
            sender.send_if_modified(|seen| {
                let moved = match (*seen, now) {
                    (Head::At(seen), Head::At(now)) => now > seen,
                    (Head::At(_), Head::Gone) => true,
                    (Head::Gone, _) => false,
                };
                if moved {
                    *seen = now;
                }
                moved
            });
        }
        true
    }
}
