//! The change feed clients follow (`ChangeService.WatchChanges`, the REST SSE route):
//! opaque cursors, one hub per server that wakes watchers when their project's log
//! moves, and each watcher's lazy stream of changes.

pub mod cursor;
mod flags;
mod hub;
mod pages;
mod relay;
mod stream;

pub use flags::{ChangeFeedSettings, Flags};
pub use hub::Hub;
pub use relay::Relay;
pub use stream::{ChangeStream, WatchKind, Watched};

use std::sync::Arc;

use crate::error::Result;
use crate::store::Store;
use memmachine_core::access::ProjectAccess;

/// Watching projects' changes: cheap to clone.
#[derive(Clone)]
pub struct Changes {
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    pages: Arc<pages::Pages>,
    settings: ChangeFeedSettings,
    /// Open streams on this server (the metrics' gauge).
    open: prometheus_client::metrics::gauge::Gauge,
}

impl Changes {
    /// Starts the hub's poll; it stops once every handle is dropped.
    pub fn start(
        store: Arc<dyn Store>,
        settings: ChangeFeedSettings,
        metrics: &crate::metrics::Metrics,
    ) -> Changes {
        let hub = Hub::start(store.clone(), settings.poll_interval);
        Changes {
            pages: Arc::new(pages::Pages::new(store.clone())),
            store,
            hub,
            settings,
            open: metrics.change_streams(),
        }
    }

    /// Hands `stream` to a transport (`Relay`), under the send timeout; `held` (its
    /// admission place) is given back when it ends, `closing` ends it on drain.
    pub fn relay(
        &self,
        stream: ChangeStream,
        closing: tokio::sync::watch::Receiver<bool>,
        held: Box<dyn Send>,
    ) -> Relay {
        let open = self.open.clone();
        open.inc();
        let counted = Box::new((held, OpenStream(open)));
        Relay::start(stream, self.settings.send_timeout, closing, counted)
    }

    pub fn settings(&self) -> &ChangeFeedSettings {
        &self.settings
    }

    /// Watchers of this server (for the metrics and tests).
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// A watcher's stream of `key`'s changes after cursor `after` (empty: from the
    /// head). `NotFound` for a project that does not exist, `InvalidArgument` for a
    /// cursor that is garbage or of another project (or of an earlier project of this
    /// id), `OutOfRange` for one older than the kept feed.
    pub async fn watch(&self, key: &ProjectAccess, after: &str) -> Result<ChangeStream> {
        let head = self.store.feed_head(key).await?;
        let start = if after.is_empty() {
            head.change
        } else {
            let (project, change) = cursor::decode(after)?;
            if project != head.project {
                return Err(crate::error::Error::invalid(
                    "after",
                    "the cursor is of another project (or of an earlier project of this id, \
                     since deleted); re-read with ListMemories and watch from the head",
                ));
            }
            if change > head.change {
                return Err(crate::error::Error::invalid(
                    "after",
                    "the cursor is past the project's latest change",
                ));
            }
            change
        };
        let head_rx = self.hub.subscribe(head.project, head.change);
        let mut stream = ChangeStream::new(self.pages.clone(), head.project, start, head_rx);
        if !after.is_empty() {
            stream.check_reachable().await?;
        }
        Ok(stream)
    }

    /// A write through this server just committed to some project: the hub looks at
    /// once rather than at its next poll.
    pub fn poke(&self) {
        self.hub.poke();
    }
}

/// Counts a stream in the gauge while it is open.
struct OpenStream(prometheus_client::metrics::gauge::Gauge);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.dec();
    }
}
