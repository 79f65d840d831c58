//! Language models, for semantic memory: extracting features (facts, preferences) from
//! messages, consolidating them and summarising. One trait, [`LanguageModel`], with an
//! implementation for any OpenAI-compatible chat-completions endpoint
//! ([`openai::OpenAiChat`]) and a wrapper that records calls in the server's metrics
//! ([`measured::Measured`]).
//!
//! Errors are split the way the callers need them: [`LlmError::Unavailable`] leaves the
//! work queued for a later attempt; [`LlmError::Rejected`] is this request's fault (it
//! is tried a few times, then set aside); [`LlmError::Failed`] is the endpoint's (a
//! refused key, an unknown model, a body that is not a completion): retrying later may
//! find it fixed, and [`health`] reports it when every call ends so.

pub mod answer;
pub mod health;
pub mod measured;
pub mod openai;
pub mod ordered;
mod settings;

pub use settings::{Flags, Settings};

use crate::urls::SecretUrl;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::metrics::Metrics;

/// What a call is for; the metrics are labelled with it, and logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Features extracted from new messages.
    Extraction,
    /// Features of one kind merged and deduplicated.
    Consolidation,
    /// A summary of a conversation or of features.
    Summary,
}

impl Purpose {
    /// The metric label: `extraction`, `consolidation` or `summary`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Purpose::Extraction => "extraction",
            Purpose::Consolidation => "consolidation",
            Purpose::Summary => "summary",
        }
    }
}

/// Who says a [`ChatMessage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    /// The role as the chat-completions API names it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::System,
            content: content.into(),
        }
    }

    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::User,
            content: content.into(),
        }
    }

    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub purpose: Purpose,
    pub messages: Vec<ChatMessage>,
    /// JSON schema the answer must follow (sent as response_format json_schema when the
    /// endpoint accepts it); None: plain text.
    ///
    /// Endpoints that do not accept a schema are asked for a JSON object, or nothing at
    /// all, instead: the prompt itself must still ask for JSON, and the caller must check
    /// what comes back.
    pub json_schema: Option<(String /*schema name*/, serde_json::Value)>,
}

/// Tokens in `chars` characters of text, estimated as a quarter of the characters
/// (rounded up): OpenAI's rule of thumb for English, used when an endpoint reports no
/// `usage` and for embedder calls.
pub fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

/// The model's answer, with the tokens the endpoint counted (estimated by
/// [`estimate_tokens`] when it did not say).
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub content: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Why a call brought no answer.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// Worth retrying later (down, overloaded, timed out, 429/5xx after retries ran out);
    /// retry_after from the endpoint if it said.
    #[error("language model unavailable: {message}")]
    Unavailable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The endpoint cannot serve any request as configured (auth, an unknown model, a
    /// body that is not a chat completion): fixed only by its operator.
    #[error("language model failed: {0}")]
    Failed(String),
    /// This request was refused in every form (`400`/`422`: too long for the context,
    /// say), while others may pass.
    #[error("language model refused the request: {0}")]
    Rejected(String),
}

#[async_trait]
pub trait LanguageModel: Send + Sync {
    /// e.g. "openai:gpt-4o-mini" ; never contains the key
    fn id(&self) -> &str;

    /// One chat completion. Implementations retry transient failures themselves; an
    /// [`LlmError::Unavailable`] means they gave up for now.
    async fn complete(&self, request: &ChatRequest) -> Result<Completion, LlmError>;

    /// The `response_format` the endpoint is known to take, as learnt from its answers
    /// (e.g. `json_schema`); None: not an HTTP endpoint.
    fn response_format(&self) -> Option<&'static str> {
        None
    }

    /// Whether the endpoint fails every call the same way; None: no record is kept.
    fn health(&self) -> Option<&health::Health> {
        None
    }
}

/// The language model `--llm-base-url` and `--llm-model` name, measured in `metrics`;
/// None when neither is given (semantic memory then extracts nothing). No request is
/// made: an endpoint that is down must not stop the server (work waits until it answers).
pub fn build(
    config: &Settings,
    metrics: &Arc<Metrics>,
) -> Result<Option<Arc<dyn LanguageModel>>, crate::error::Error> {
    let given = |s: Option<&str>| {
        s.map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let (base_url, model) = match (
        given(config.base_url.as_ref().map(SecretUrl::expose)),
        given(config.model.as_deref()),
    ) {
        (Some(base_url), Some(model)) => (base_url, model),
        (None, None) => {
            // Said once here (and in /config/resources): searches then answer without
            // semantic memory distilled from messages, which looks like a silent failure.
            tracing::warn!("{}", crate::resource_status::NO_LANGUAGE_MODEL);
            return Ok(None);
        }
        _ => {
            return Err(crate::error::Error::FailedPrecondition(
                "a language model needs both --llm-base-url and --llm-model".into(),
            ));
        }
    };
    let mut settings = openai::OpenAiChatConfig::new(base_url, model);
    settings.api_key = config.api_key.clone();
    if !config.timeout.is_zero() {
        settings.timeout = config.timeout;
    }
    settings.max_calls_per_minute = config.max_calls_per_minute.filter(|n| *n > 0);
    settings.max_tokens = config.max_tokens.filter(|n| *n > 0);
    let chat = openai::OpenAiChat::new(settings)
        .map_err(|e| crate::error::Error::FailedPrecondition(e.to_string()))?;
    tracing::info!(
        model = chat.id(),
        endpoint = chat.endpoint(),
        max_calls_per_minute = config.max_calls_per_minute,
        max_tokens = config.max_tokens,
        "language model configured"
    );
    Ok(Some(Arc::new(measured::Measured::new(
        Arc::new(chat),
        metrics.clone(),
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(base_url: Option<&str>, model: Option<&str>) -> Settings {
        Settings {
            base_url: base_url.map(SecretUrl::new),
            model: model.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn build_needs_both_url_and_model_or_neither() {
        let metrics = Arc::new(Metrics::new());
        assert!(build(&config(None, None), &metrics).unwrap().is_none());
        assert!(
            build(&config(Some(" "), Some("")), &metrics)
                .unwrap()
                .is_none()
        );
        assert!(build(&config(Some("http://h"), None), &metrics).is_err());
        assert!(build(&config(None, Some("m")), &metrics).is_err());
        assert!(build(&config(Some("not a url"), Some("m")), &metrics).is_err());
        let llm = build(&config(Some("http://h/v1"), Some("gpt-4o-mini")), &metrics)
            .unwrap()
            .expect("a model");
        assert_eq!(llm.id(), "openai:gpt-4o-mini");
    }

    #[test]
    fn purposes_have_metric_labels() {
        assert_eq!(Purpose::Extraction.as_str(), "extraction");
        assert_eq!(Purpose::Consolidation.as_str(), "consolidation");
        assert_eq!(Purpose::Summary.as_str(), "summary");
    }
}
