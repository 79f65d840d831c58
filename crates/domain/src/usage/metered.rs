//! An embedder that counts its calls as one scope's `embedding` usage: tokens as the
//! language model's are estimated (a quarter of the characters), since embedding
//! endpoints report only a total, and local models none.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Scope, Usage};
use crate::embed::{EmbedError, Embedder};
use crate::llm::estimate_tokens;

pub struct Metered {
    inner: Arc<dyn Embedder>,
    usage: Usage,
    scope: Scope,
}

impl Metered {
    /// Counts a successful call (written in the background: a search never waits).
    fn count(&self, chars: usize) {
        self.usage
            .record_embedding(&self.scope, estimate_tokens(chars));
    }
}

impl Usage {
    /// `embedder`, its calls counted as `scope`'s.
    pub fn metered(&self, embedder: Arc<dyn Embedder>, scope: Scope) -> Arc<dyn Embedder> {
        Arc::new(Metered {
            inner: embedder,
            usage: self.clone(),
            scope,
        })
    }
}

#[async_trait]
impl Embedder for Metered {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn dimensions(&self) -> usize {
        self.inner.dimensions()
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let vectors = self.inner.embed(texts).await?;
        self.count(texts.iter().map(|t| t.chars().count()).sum());
        Ok(vectors)
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let vector = self.inner.embed_query(text).await?;
        self.count(text.chars().count());
        Ok(vector)
    }

    fn tokens(&self) -> u64 {
        self.inner.tokens()
    }
}
