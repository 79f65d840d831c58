//! The embedding worker: takes episodes off the store's durable queue, embeds them in
//! batches and stores their vectors. Failures never lose an episode: it stays queued and
//! is retried with backoff (a crash before embedding leaves it queued for the restart).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::embed::{EmbedError, Embedder};
use crate::store::Store;

/// Episodes embedded per call to the embedder.
const BATCH: usize = 64;
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Wakes the worker when new episodes are queued.
#[derive(Clone, Default)]
pub struct EmbeddingQueue {
    wake: Arc<Notify>,
}

impl EmbeddingQueue {
    pub fn notify(&self) {
        self.wake.notify_one();
    }
}

/// Runs until the process ends.
pub async fn run_worker(store: Arc<dyn Store>, embedder: Arc<dyn Embedder>, queue: EmbeddingQueue) {
    let mut backoff = Duration::from_millis(500);
    let mut embedded: u64 = 0;
    loop {
        let pending = match store.pending_embeddings(BATCH).await {
            Ok(pending) => pending,
            Err(err) => {
                tracing::warn!(error = %err, "reading the embedding queue failed");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        if pending.is_empty() {
            if embedded > 0 {
                tracing::info!(
                    embedded,
                    embedder = embedder.id(),
                    "embedding queue drained"
                );
                embedded = 0;
            }
            // New episodes notify; the timeout covers anything queued behind our back.
            let _ = tokio::time::timeout(Duration::from_secs(5), queue.wake.notified()).await;
            continue;
        }
        let texts: Vec<String> = pending.iter().map(|p| p.content.clone()).collect();
        let result = embedder.embed(&texts).await.and_then(|vectors| {
            // 0: not known yet (an endpoint not probed); it checks consistency itself.
            let expected = embedder.dimensions();
            match vectors.iter().find(|v| expected > 0 && v.len() != expected) {
                Some(bad) => Err(EmbedError::Failed(format!(
                    "the embedder returned {} dimensions, expected {expected}",
                    bad.len()
                ))),
                None if vectors.len() != texts.len() => Err(EmbedError::Failed(format!(
                    "the embedder returned {} vectors for {} texts",
                    vectors.len(),
                    texts.len()
                ))),
                None => Ok(vectors),
            }
        });
        match result {
            Ok(vectors) => {
                let count = vectors.len() as u64;
                let rows = pending.iter().map(|p| p.episode).zip(vectors).collect();
                match store.store_embeddings(embedder.id(), rows).await {
                    Ok(()) => {
                        embedded += count;
                        backoff = Duration::from_millis(500);
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "storing vectors failed; will retry");
                        tokio::time::sleep(backoff).await;
                    }
                }
            }
            Err(err) => {
                // The episodes stay queued (and searchable lexically) until this works.
                tracing::warn!(error = %err, retry_in_ms = backoff.as_millis() as u64, "embedding failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
