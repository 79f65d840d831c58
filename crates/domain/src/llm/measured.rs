//! A language model that records its calls in the server's metrics: how many, how they
//! ended, the tokens they used and how long they took, by purpose; and how the last one
//! ended, for `/config/resources`.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::{ChatRequest, Completion, LanguageModel, LlmError};
use crate::metrics::Metrics;

pub struct Measured {
    inner: Arc<dyn LanguageModel>,
    metrics: Arc<Metrics>,
}

impl Measured {
    pub fn new(inner: Arc<dyn LanguageModel>, metrics: Arc<Metrics>) -> Measured {
        Measured { inner, metrics }
    }
}

#[async_trait]
impl LanguageModel for Measured {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn complete(&self, request: &ChatRequest) -> Result<Completion, LlmError> {
        let started = Instant::now();
        let result = self.inner.complete(request).await;
        let (outcome, prompt_tokens, completion_tokens) = match &result {
            Ok(c) => ("ok", c.prompt_tokens, c.completion_tokens),
            Err(LlmError::Unavailable { .. }) => ("unavailable", 0, 0),
            Err(LlmError::Failed(_)) => ("failed", 0, 0),
        };
        self.metrics.last_calls().record(
            crate::resource_status::Kind::LanguageModel,
            self.inner.id(),
            &result,
        );
        self.metrics.record_llm_call(
            request.purpose.as_str(),
            outcome,
            started.elapsed().as_secs_f64(),
            prompt_tokens,
            completion_tokens,
        );
        result
    }
}
