//! A language model behind any OpenAI-compatible chat-completions endpoint
//! (`POST {base}/v1/chat/completions`): OpenAI itself, Azure-style gateways, vLLM, Ollama,
//! LM Studio, llama.cpp's server…
//!
//! - Requests are `{"model", "messages", "temperature": 0, "max_tokens"}` (the same
//!   messages should get the same features; a model stuck repeating itself stops at the
//!   cap), plus a `response_format` when the request has a JSON schema.
//! - Not every endpoint takes `{"type": "json_schema"}` (older Ollama, vLLM and LM Studio
//!   versions, llama-cpp-python's server, some gateways). When one refuses it, with a
//!   `400` or `422`, or with a `5xx` whose body names `response_format` (llama-cpp-python
//!   answers `500`), the same request is sent again with `{"type": "json_object",
//!   "schema": ..}` (llama-cpp-python turns that schema into a grammar), then
//!   `{"type": "json_object"}`, then without any `response_format`. The first format
//!   that works is remembered for later calls; a request refused in every format
//!   remembers nothing (it was the request, not the format) and is
//!   [`LlmError::Rejected`].
//! - Likewise a `400` that names `temperature` (OpenAI's reasoning models take only the
//!   default) or `max_tokens` sends the request again without it, and later calls leave
//!   it out.
//! - Connection errors, timeouts, `408`, `429` and `5xx` are retried up to
//!   [`OpenAiChatConfig::max_retries`] times with exponential backoff and jitter (a
//!   `Retry-After: <seconds>` header is honoured, up to 60 s); when they run out the
//!   error is [`LlmError::Unavailable`], carrying the last `Retry-After` the endpoint
//!   gave. Any other non-success status is [`LlmError::Failed`] at once, carrying the
//!   server's `error.message`.
//! - A `2xx` whose body is not a chat completion (not JSON, no choices, no content) is
//!   [`LlmError::Failed`] without retry: a wrong `base_url` or an incompatible server,
//!   which retrying does not fix. A body cut off in transit is retried.
//! - With [`OpenAiChatConfig::max_calls_per_minute`], every HTTP attempt (retries and
//!   format fallbacks included) first waits for its turn, so a flood of work makes the
//!   callers wait rather than the endpoint refuse (or bill) more than the quota.
//! - The API key is only ever put in the `Authorization` header (marked sensitive); it is
//!   never logged and `Debug` output redacts it.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use super::{ChatRequest, Completion, LanguageModel, LlmError, Purpose};
use crate::openai_http::{Api, Endpoint, Failed, Retries, Retrying, one_line};
use crate::secret::Secret;
use crate::urls::SecretUrl;

/// The longest `Retry-After` that is waited for between attempts; a longer one is cut to
/// this (and still handed to the caller in [`LlmError::Unavailable`]).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The chat-completions API, as [`crate::openai_http`] sends to it and names it in messages.
const API: Api = Api {
    name: "openai chat",
    endpoint: "chat endpoint",
    path: "chat/completions",
    response: "OpenAI chat completion",
    max_retry_after: MAX_RETRY_AFTER,
    tidy_errors: true,
};

/// Settings of an [`OpenAiChat`]. Build with [`OpenAiChatConfig::new`] and change the
/// public fields as needed.
#[derive(Clone)]
pub struct OpenAiChatConfig {
    /// Where the API lives, e.g. `https://api.openai.com` or `http://localhost:11434/v1`;
    /// with or without the trailing `/v1` (`/chat/completions` is appended).
    pub base_url: SecretUrl,
    /// The model name sent with every request, e.g. `gpt-4o-mini`.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set (and not blank).
    pub api_key: Option<Secret>,
    /// Limit on each HTTP request, connecting included. Default 60 s (a long extraction
    /// on a local model takes a while).
    pub timeout: Duration,
    /// Retries after the first attempt of a request. Default 3.
    pub max_retries: u32,
    /// Delay before the first retry; it doubles for each further retry, up to
    /// `max_backoff`, and is then jittered down by up to half. Default 200 ms.
    pub backoff: Duration,
    /// Ceiling of the backoff delay. Default 10 s.
    pub max_backoff: Duration,
    /// HTTP requests per minute at most, spread evenly (a burst of one); callers wait
    /// for their turn. None (the default): no limit.
    pub max_calls_per_minute: Option<u32>,
    /// Most tokens an answer may have (`max_tokens`). None: the endpoint's own limit.
    pub max_tokens: Option<u32>,
}

impl OpenAiChatConfig {
    /// The defaults: no key, 60 s timeout, 3 retries, backoff from 200 ms to 10 s, no
    /// rate limit.
    pub fn new(base_url: impl Into<SecretUrl>, model: impl Into<String>) -> OpenAiChatConfig {
        OpenAiChatConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            max_calls_per_minute: None,
            max_tokens: None,
        }
    }
}

impl fmt::Debug for OpenAiChatConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChatConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("backoff", &self.backoff)
            .field("max_backoff", &self.max_backoff)
            .field("max_calls_per_minute", &self.max_calls_per_minute)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

/// How a request with a JSON schema asks for its format, most constrained first; an
/// endpoint that refuses one is asked the next way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Format {
    /// `{"type": "json_schema", "json_schema": {..}}`: OpenAI's structured outputs.
    JsonSchema = 0,
    /// `{"type": "json_object", "schema": {..}}`: llama-cpp-python's form, constrained by
    /// a grammar made from the schema.
    JsonObjectSchema = 1,
    /// `{"type": "json_object"}`: valid JSON, the schema only in the prompt.
    JsonObject = 2,
    /// No `response_format`: the prompt alone asks for JSON.
    Unconstrained = 3,
}

impl Format {
    fn from_u8(value: u8) -> Format {
        match value {
            0 => Format::JsonSchema,
            1 => Format::JsonObjectSchema,
            2 => Format::JsonObject,
            _ => Format::Unconstrained,
        }
    }

    fn next(self) -> Option<Format> {
        match self {
            Format::JsonSchema => Some(Format::JsonObjectSchema),
            Format::JsonObjectSchema => Some(Format::JsonObject),
            Format::JsonObject => Some(Format::Unconstrained),
            Format::Unconstrained => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Format::JsonSchema => "json_schema",
            Format::JsonObjectSchema => "json_object with schema",
            Format::JsonObject => "json_object",
            Format::Unconstrained => "none",
        }
    }

    /// The `response_format` to send for `schema` (`(name, schema)`).
    fn response_format(
        self,
        (name, schema): &(String, serde_json::Value),
    ) -> Option<serde_json::Value> {
        match self {
            Format::JsonSchema => Some(serde_json::json!({
                "type": "json_schema",
                // Not strict: strict mode demands a schema subset (every property
                // required, no additional properties) that callers need not keep to.
                "json_schema": {"name": name, "schema": schema, "strict": false},
            })),
            Format::JsonObjectSchema => {
                Some(serde_json::json!({"type": "json_object", "schema": schema}))
            }
            Format::JsonObject => Some(serde_json::json!({"type": "json_object"})),
            Format::Unconstrained => None,
        }
    }
}

/// Whether an error message is about the response format asked for, which a server
/// may refuse with any status (llama-cpp-python: a `500`).
fn names_response_format(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["response_format", "response format", "json_schema"]
        .iter()
        .any(|name| message.contains(name))
}

/// Completes chats through an OpenAI-compatible `/v1/chat/completions` endpoint (see the
/// module docs).
pub struct OpenAiChat {
    id: String,
    config: OpenAiChatConfig,
    http: Endpoint,
    retries: Retries,
    /// The most constrained [`Format`] the endpoint is known to take; it only ever moves
    /// to a less constrained one.
    format: AtomicU8,
    /// Whether `"temperature": 0` is sent; cleared once the endpoint refuses it.
    temperature: AtomicBool,
    /// Whether `max_tokens` is sent (when configured); cleared once the endpoint refuses
    /// it.
    max_tokens: AtomicBool,
    /// Shared by every call of this client: the quota is the endpoint's, not a caller's.
    limiter: Option<DefaultDirectRateLimiter>,
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("id", &self.id)
            .field("endpoint", &self.http.display())
            .field("format", &self.current_format().as_str())
            .field("temperature", &self.temperature.load(Ordering::Relaxed))
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiChat {
    /// Checks the configuration and builds the HTTP client; no request is made.
    pub fn new(config: OpenAiChatConfig) -> Result<OpenAiChat, LlmError> {
        let model = config.model.trim();
        if model.is_empty() {
            return Err(LlmError::Failed(
                "openai chat: the model name is empty".into(),
            ));
        }
        let limiter = match config.max_calls_per_minute {
            None => None,
            Some(n) => {
                let n = NonZeroU32::new(n).ok_or_else(|| {
                    LlmError::Failed("openai chat: max_calls_per_minute must be at least 1".into())
                })?;
                // A burst of one spreads the calls evenly: n per minute, one every 60/n s.
                Some(RateLimiter::direct(
                    Quota::per_minute(n).allow_burst(NonZeroU32::MIN),
                ))
            }
        };
        let http = Endpoint::new(
            &API,
            &config.base_url,
            config.api_key.as_ref(),
            config.timeout,
        )
        .map_err(LlmError::Failed)?;

        Ok(OpenAiChat {
            id: format!("openai:{model}"),
            retries: Retries {
                max_retries: config.max_retries,
                backoff: config.backoff,
                max_backoff: config.max_backoff,
            },
            config,
            http,
            format: AtomicU8::new(Format::JsonSchema as u8),
            temperature: AtomicBool::new(true),
            max_tokens: AtomicBool::new(true),
            limiter,
        })
    }

    /// The URL requests go to (password and query values redacted).
    pub fn endpoint(&self) -> &str {
        self.http.display()
    }

    pub(crate) fn current_format(&self) -> Format {
        Format::from_u8(self.format.load(Ordering::Relaxed))
    }

    /// Remembers what a successful request was sent with, for later calls.
    fn learn(&self, format: Option<Format>, sent: Sent) {
        let Sent {
            temperature,
            max_tokens,
        } = sent;
        if let Some(format) = format {
            let before = Format::from_u8(self.format.fetch_max(format as u8, Ordering::Relaxed));
            if before < format {
                tracing::info!(
                    endpoint = %self.http.display(),
                    model = %self.config.model,
                    response_format = format.as_str(),
                    "the chat endpoint does not take a stricter response_format; using this one from now on"
                );
            }
        }
        if !temperature && self.temperature.swap(false, Ordering::Relaxed) {
            tracing::info!(
                endpoint = %self.http.display(),
                model = %self.config.model,
                "the chat endpoint does not take temperature 0; leaving it out from now on"
            );
        }
        if !max_tokens && self.max_tokens.swap(false, Ordering::Relaxed) {
            tracing::info!(
                endpoint = %self.http.display(),
                model = %self.config.model,
                "the chat endpoint does not take max_tokens; leaving it out from now on"
            );
        }
    }

    /// One request body (with its retries), up to the parsed response.
    async fn send_with_retries(
        &self,
        body: &ChatBody<'_>,
        purpose: Purpose,
    ) -> Result<ChatResponse, Failure> {
        let asks_format = body.response_format.is_some();
        let refusal = |status: StatusCode, message: &str| {
            asks_format && status.is_server_error() && names_response_format(message)
        };
        let on_retry = |r: &Retrying<'_>| {
            tracing::warn!(
                endpoint = %self.http.display(),
                purpose = purpose.as_str(),
                attempt = r.attempt,
                of = r.of,
                delay_ms = r.delay.as_millis() as u64,
                error = %r.message,
                "chat completion request failed; retrying"
            );
        };
        let limiter = self.limiter.as_ref();
        self.http
            .post_with_retries(body, &self.retries, limiter, on_retry, refusal)
            .await
            .map_err(|failed| match failed {
                // 422: what FastAPI-based servers answer to a field they do not know; a
                // 5xx is here only when it named the response format.
                Failed::Refused { status, message }
                    if status == StatusCode::BAD_REQUEST
                        || status == StatusCode::UNPROCESSABLE_ENTITY
                        || status.is_server_error() =>
                {
                    Failure::Rejected(message)
                }
                Failed::Refused { message, .. } | Failed::Fatal(message) => {
                    Failure::Error(LlmError::Failed(message))
                }
                Failed::GaveUp {
                    message,
                    retry_after,
                } => Failure::Error(LlmError::Unavailable {
                    message,
                    retry_after,
                }),
            })
    }

    /// The first choice's content and the token counts of a parsed response.
    /// `prompt_chars`: the request's characters, to count its tokens when the endpoint
    /// does not say.
    fn completion(
        &self,
        response: ChatResponse,
        purpose: Purpose,
        prompt_chars: usize,
    ) -> Result<Completion, LlmError> {
        let bad = |what: &str| {
            LlmError::Failed(format!(
                "chat endpoint {} returned {what}",
                self.http.display()
            ))
        };
        let Some(choice) = response.choices.into_iter().next() else {
            return Err(bad("a chat completion without choices"));
        };
        let content = match (choice.message.content, choice.message.refusal) {
            (Some(content), _) => content,
            (None, Some(refusal)) => {
                return Err(bad(&format!("a refusal: {}", one_line(&refusal))));
            }
            (None, None) => return Err(bad("a chat completion without content")),
        };
        if choice.finish_reason.as_deref() == Some("length") {
            // Kept: the caller's parsing decides whether a cut-off answer is of use.
            tracing::warn!(
                endpoint = %self.http.display(),
                purpose = purpose.as_str(),
                "the chat completion was cut off at the model's token limit"
            );
        }
        // Endpoints that leave `usage` out (some local servers) are still counted, by
        // estimate: budgets must hold whatever the endpoint reports.
        let usage = response.usage.unwrap_or_default();
        Ok(Completion {
            prompt_tokens: usage
                .prompt_tokens
                .unwrap_or_else(|| super::estimate_tokens(prompt_chars)),
            completion_tokens: usage
                .completion_tokens
                .unwrap_or_else(|| super::estimate_tokens(content.chars().count())),
            content,
        })
    }
}

#[async_trait]
impl LanguageModel for OpenAiChat {
    /// `openai:<model>`.
    fn id(&self) -> &str {
        &self.id
    }

    async fn complete(&self, request: &ChatRequest) -> Result<Completion, LlmError> {
        if request.messages.is_empty() {
            return Err(LlmError::Failed(
                "openai chat: a request needs at least one message".into(),
            ));
        }
        let messages: Vec<WireMessage<'_>> = request
            .messages
            .iter()
            .map(|m| WireMessage {
                role: m.role.as_str(),
                content: &m.content,
            })
            .collect();
        let mut format = request.json_schema.as_ref().map(|_| self.current_format());
        let mut sent = Sent {
            temperature: self.temperature.load(Ordering::Relaxed),
            max_tokens: self.config.max_tokens.is_some() && self.max_tokens.load(Ordering::Relaxed),
        };
        loop {
            let body = ChatBody {
                model: self.config.model.trim(),
                messages: &messages,
                temperature: sent.temperature.then_some(0.0),
                max_tokens: self.config.max_tokens.filter(|_| sent.max_tokens),
                response_format: format
                    .zip(request.json_schema.as_ref())
                    .and_then(|(f, schema)| f.response_format(schema))
                    .map(super::ordered::Ordered),
            };
            let message = match self.send_with_retries(&body, request.purpose).await {
                Ok(response) => {
                    let prompt_chars = messages.iter().map(|m| m.content.chars().count()).sum();
                    let completion = self.completion(response, request.purpose, prompt_chars)?;
                    self.learn(format, sent);
                    return Ok(completion);
                }
                Err(Failure::Error(e)) => return Err(e),
                Err(Failure::Rejected(message)) => message,
            };
            // The request was refused as sent: perhaps for what it asked of the endpoint
            // rather than for what it said. Only a later success is remembered.
            let lower = message.to_ascii_lowercase();
            if sent.temperature && lower.contains("temperature") {
                sent.temperature = false;
            } else if sent.max_tokens && lower.contains("max_tokens") {
                sent.max_tokens = false;
            } else if let Some(next) = format.and_then(Format::next) {
                format = Some(next);
            } else {
                return Err(LlmError::Rejected(message));
            }
            tracing::warn!(
                endpoint = %self.http.display(),
                purpose = request.purpose.as_str(),
                response_format = format.map_or("none", Format::as_str),
                temperature = sent.temperature,
                max_tokens = sent.max_tokens,
                error = %message,
                "chat endpoint refused the request; sending it again asking less"
            );
        }
    }

    fn response_format(&self) -> Option<&'static str> {
        Some(self.current_format().as_str())
    }
}

/// What optional fields a request was sent with.
#[derive(Debug, Clone, Copy)]
struct Sent {
    temperature: bool,
    max_tokens: bool,
}

/// What one request body (with its retries) came to, when not a response.
enum Failure {
    /// `400`/`422` (or a `5xx` naming the response format): refused as sent; without
    /// `response_format`, `temperature` or `max_tokens` it may pass.
    Rejected(String),
    Error(LlmError),
}

#[derive(Serialize)]
struct ChatBody<'a> {
    model: &'a str,
    messages: &'a [WireMessage<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<super::ordered::Ordered>,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ResponseMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<String>,
    /// OpenAI's structured outputs: why the model declined, in place of content.
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Deserialize, Default)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_appends_chat_completions_to_the_base() {
        for base in ["http://h:1", "http://h:1/v1/"] {
            let c = OpenAiChat::new(OpenAiChatConfig::new(base, "m")).unwrap();
            assert_eq!(c.endpoint(), "http://h:1/v1/chat/completions", "{base}");
        }
        let bad = OpenAiChat::new(OpenAiChatConfig::new("ftp://h/", "m")).unwrap_err();
        assert!(bad.to_string().contains("openai chat: base_url"), "{bad}");
    }

    #[test]
    fn rejects_bad_settings() {
        assert!(OpenAiChat::new(OpenAiChatConfig::new("http://h", " ")).is_err());
        let mut config = OpenAiChatConfig::new("http://h", "m");
        config.max_calls_per_minute = Some(0);
        assert!(OpenAiChat::new(config).is_err());
        let mut config = OpenAiChatConfig::new("http://h", "m");
        config.timeout = Duration::ZERO;
        assert!(OpenAiChat::new(config).is_err());
    }

    #[test]
    fn formats_fall_back_in_order_and_never_back() {
        assert_eq!(Format::JsonSchema.next(), Some(Format::JsonObjectSchema));
        assert_eq!(Format::JsonObjectSchema.next(), Some(Format::JsonObject));
        assert_eq!(Format::JsonObject.next(), Some(Format::Unconstrained));
        assert_eq!(Format::Unconstrained.next(), None);
        for f in [
            Format::JsonSchema,
            Format::JsonObjectSchema,
            Format::JsonObject,
            Format::Unconstrained,
        ] {
            assert_eq!(Format::from_u8(f as u8), f);
        }
        let c = OpenAiChat::new(OpenAiChatConfig::new("http://h", "m")).unwrap();
        let all = Sent {
            temperature: true,
            max_tokens: true,
        };
        c.learn(Some(Format::JsonObject), all);
        c.learn(Some(Format::JsonSchema), all);
        assert_eq!(c.current_format(), Format::JsonObject);
        assert!(c.temperature.load(Ordering::Relaxed));
        c.learn(
            None,
            Sent {
                temperature: false,
                max_tokens: true,
            },
        );
        assert!(!c.temperature.load(Ordering::Relaxed));
        assert!(c.max_tokens.load(Ordering::Relaxed));
    }

    #[test]
    fn a_refusal_naming_the_response_format_is_recognised() {
        // llama-cpp-python's 500 to a json_schema response_format.
        assert!(names_response_format(
            "1 validation error for CreateChatCompletionRequest response_format.type: Input should be 'text' or 'json_object'"
        ));
        assert!(names_response_format("Unsupported JSON_SCHEMA"));
        assert!(!names_response_format("model overloaded"));
    }

    #[test]
    fn debug_redacts_the_key() {
        let mut config = OpenAiChatConfig::new("http://h", "m");
        config.api_key = Some("sk-very-secret".into());
        assert!(!format!("{config:?}").contains("sk-very-secret"));
        let c = OpenAiChat::new(config).unwrap();
        assert!(!format!("{c:?}").contains("sk-very-secret"));
        assert_eq!(c.id(), "openai:m");
    }
}
