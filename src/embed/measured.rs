//! An embedder that records its latency and volume in the server's metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;

use super::{EmbedError, Embedder};
use crate::metrics::Metrics;

pub struct Measured {
    inner: Arc<dyn Embedder>,
    metrics: Arc<Metrics>,
    /// The inner embedder's token count already recorded.
    tokens_seen: AtomicU64,
}

impl Measured {
    pub fn new(inner: Arc<dyn Embedder>, metrics: Arc<Metrics>) -> Measured {
        Measured {
            tokens_seen: AtomicU64::new(inner.tokens()),
            inner,
            metrics,
        }
    }
}

#[async_trait]
impl Embedder for Measured {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let started = Instant::now();
        let vectors = self.inner.embed(texts).await?;
        let total = self.inner.tokens();
        let before = self.tokens_seen.swap(total, Ordering::Relaxed);
        self.metrics.record_embedding(
            self.inner.id(),
            texts.len(),
            total.saturating_sub(before),
            started.elapsed(),
        );
        Ok(vectors)
    }

    fn tokens(&self) -> u64 {
        self.inner.tokens()
    }
}
