//! The embedding worker: takes episodes off the store's durable queue, embeds them in
//! batches and stores their vectors. Failures never lose an episode: it stays queued and
//! is retried with backoff (a crash before embedding leaves it queued for the restart).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::embed::{EmbedError, Embedder, Embedders};
use crate::store::{PendingEmbedding, Store};

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

/// The text embedded for an episode: who said it, then what was said ("Caroline: I
/// went to a support group"), as BM25 indexes the speaker too. Questions name people,
/// and a vector that carries the speaker matches them (metadata-enriched document
/// embedding; on LoCoMo it lifts hybrid recall@10 by 2 points, see BENCHMARKS.md).
pub fn embedding_text(producer: &str, content: &str) -> String {
    if producer.is_empty() {
        content.to_string()
    } else {
        format!("{producer}: {content}")
    }
}

/// Runs until the process ends.
pub async fn run_worker(store: Arc<dyn Store>, embedders: Embedders, queue: EmbeddingQueue) {
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
                tracing::info!(embedded, "embedding queue drained");
                embedded = 0;
            }
            // New episodes notify; the timeout covers anything queued behind our back.
            let _ = tokio::time::timeout(Duration::from_secs(5), queue.wake.notified()).await;
            continue;
        }
        // One batch per embedder, oldest episodes first.
        let embedder_id = pending[0].embedder.clone();
        let batch: Vec<&PendingEmbedding> = pending
            .iter()
            .filter(|p| p.embedder == embedder_id)
            .collect();
        let Some(embedder) = embedders.by_id(&embedder_id) else {
            // The store queues only for the embedders it was given, which are these.
            tracing::error!(embedder = %embedder_id, "queued for an unknown embedder");
            tokio::time::sleep(MAX_BACKOFF).await;
            continue;
        };
        match embed_batch(embedder.as_ref(), &batch).await {
            Ok(vectors) => {
                let count = vectors.len() as u64;
                let rows = batch.iter().map(|p| p.episode).zip(vectors).collect();
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
                tracing::warn!(
                    error = %err,
                    embedder = embedder.id(),
                    retry_in_ms = backoff.as_millis() as u64,
                    "embedding failed"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One vector per episode of `batch`, of the embedder's length.
async fn embed_batch(
    embedder: &dyn Embedder,
    batch: &[&PendingEmbedding],
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let texts: Vec<String> = batch
        .iter()
        .map(|p| embedding_text(&p.producer_id, &p.content))
        .collect();
    let vectors = embedder.embed(&texts).await?;
    // 0: not known yet (an endpoint not probed); it checks consistency itself.
    let expected = embedder.dimensions();
    if let Some(bad) = vectors.iter().find(|v| expected > 0 && v.len() != expected) {
        return Err(EmbedError::Failed(format!(
            "the embedder returned {} dimensions, expected {expected}",
            bad.len()
        )));
    }
    if vectors.len() != texts.len() {
        return Err(EmbedError::Failed(format!(
            "the embedder returned {} vectors for {} texts",
            vectors.len(),
            texts.len()
        )));
    }
    Ok(vectors)
}
