//! An embedder that records its latency and volume in the server's metrics.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::{EmbedError, Embedder};
use crate::metrics::Metrics;

pub struct Measured {
    inner: Arc<dyn Embedder>,
    metrics: Arc<Metrics>,
}

impl Measured {
    pub fn new(inner: Arc<dyn Embedder>, metrics: Arc<Metrics>) -> Measured {
        Measured { inner, metrics }
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
        self.metrics
            .record_embedding(self.inner.id(), texts.len(), started.elapsed());
        Ok(vectors)
    }
}
