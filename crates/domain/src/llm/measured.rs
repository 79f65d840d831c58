//! A language model that records its calls in the server's metrics: how many, how they
//! ended, the tokens they used and how long they took, by purpose; and how the last one
//! ended, for `/config/resources`; and whether the endpoint fails every call the same way
//! ([`super::health`]), said once.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::health::{Change, Health};
use super::{ChatRequest, Completion, LanguageModel, LlmError};
use crate::metrics::Metrics;

pub struct Measured {
    inner: Arc<dyn LanguageModel>,
    metrics: Arc<Metrics>,
    health: Health,
}

impl Measured {
    pub fn new(inner: Arc<dyn LanguageModel>, metrics: Arc<Metrics>) -> Measured {
        Measured {
            inner,
            metrics,
            health: Health::default(),
        }
    }

    fn report(&self, change: Change) {
        match change {
            Change::Failing(failing) => {
                self.metrics.set_llm_endpoint_failing(true);
                tracing::error!(
                    model = self.inner.id(),
                    failures = failing.failures,
                    error = %failing.error,
                    next_probe_secs = failing.next_probe_in.as_secs(),
                    "the language model fails every call the same way: semantic ingestion \
                     pauses (nothing is lost: messages stay queued) and probes it at growing \
                     intervals; /config/resources shows it, and POST \
                     /api/v2/config/resources/language_models/NAME/retry probes it at once"
                );
            }
            Change::Recovered => {
                self.metrics.set_llm_endpoint_failing(false);
                tracing::info!(
                    model = self.inner.id(),
                    "the language model answers again: semantic ingestion resumes"
                );
            }
        }
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
            Err(LlmError::Failed(_) | LlmError::Rejected(_)) => ("failed", 0, 0),
        };
        self.metrics.last_calls().record(
            crate::resource_status::Kind::LanguageModel,
            self.inner.id(),
            &result,
        );
        if let Some(change) = self.health.record(&result) {
            self.report(change);
        }
        self.metrics.record_llm_call(
            request.purpose.as_str(),
            outcome,
            started.elapsed().as_secs_f64(),
            prompt_tokens,
            completion_tokens,
        );
        result
    }

    fn response_format(&self) -> Option<&'static str> {
        self.inner.response_format()
    }

    fn health(&self) -> Option<&Health> {
        Some(&self.health)
    }
}
