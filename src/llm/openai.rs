//! A language model behind any OpenAI-compatible chat-completions endpoint
//! (`POST {base}/v1/chat/completions`): OpenAI itself, Azure-style gateways, vLLM, Ollama,
//! LM Studio, llama.cpp's server…
//!
//! - Requests are `{"model", "messages", "temperature": 0}` (the same messages should get
//!   the same features), plus a `response_format` when the request has a JSON schema.
//! - Not every endpoint takes `{"type": "json_schema"}` (older Ollama, vLLM and LM Studio
//!   versions, some gateways). When one answers `400` (or `422`) to it, the same request
//!   is sent again with `{"type": "json_object"}`, and then without any
//!   `response_format`. The first format that works is remembered for later calls; a
//!   request refused in every format remembers nothing (it was the request, not the
//!   format) and is [`LlmError::Failed`].
//! - Likewise a `400` that names `temperature` (OpenAI's reasoning models take only the
//!   default) sends the request again without it, and later calls leave it out.
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
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};

use super::{ChatRequest, Completion, LanguageModel, LlmError, Purpose};

/// The longest `Retry-After` that is waited for between attempts; a longer one is cut to
/// this (and still handed to the caller in [`LlmError::Unavailable`]).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How much of an unexpected response body goes into an error message.
const BODY_SNIPPET: usize = 300;

/// Settings of an [`OpenAiChat`]. Build with [`OpenAiChatConfig::new`] and change the
/// public fields as needed.
#[derive(Clone)]
pub struct OpenAiChatConfig {
    /// Where the API lives, e.g. `https://api.openai.com` or `http://localhost:11434/v1`;
    /// with or without the trailing `/v1` (`/chat/completions` is appended).
    pub base_url: String,
    /// The model name sent with every request, e.g. `gpt-4o-mini`.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set (and not blank).
    pub api_key: Option<String>,
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
}

impl OpenAiChatConfig {
    /// The defaults: no key, 60 s timeout, 3 retries, backoff from 200 ms to 10 s, no
    /// rate limit.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiChatConfig {
        OpenAiChatConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            max_calls_per_minute: None,
        }
    }
}

impl fmt::Debug for OpenAiChatConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChatConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("backoff", &self.backoff)
            .field("max_backoff", &self.max_backoff)
            .field("max_calls_per_minute", &self.max_calls_per_minute)
            .finish()
    }
}

/// How a request with a JSON schema asks for its format, most constrained first; an
/// endpoint that refuses one is asked the next way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Format {
    /// `{"type": "json_schema", "json_schema": {..}}`.
    JsonSchema = 0,
    /// `{"type": "json_object"}`: valid JSON, the schema only in the prompt.
    JsonObject = 1,
    /// No `response_format`: the prompt alone asks for JSON.
    Unconstrained = 2,
}

impl Format {
    fn from_u8(value: u8) -> Format {
        match value {
            0 => Format::JsonSchema,
            1 => Format::JsonObject,
            _ => Format::Unconstrained,
        }
    }

    fn next(self) -> Option<Format> {
        match self {
            Format::JsonSchema => Some(Format::JsonObject),
            Format::JsonObject => Some(Format::Unconstrained),
            Format::Unconstrained => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Format::JsonSchema => "json_schema",
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
            Format::JsonObject => Some(serde_json::json!({"type": "json_object"})),
            Format::Unconstrained => None,
        }
    }
}

/// Completes chats through an OpenAI-compatible `/v1/chat/completions` endpoint (see the
/// module docs).
pub struct OpenAiChat {
    id: String,
    config: OpenAiChatConfig,
    client: reqwest::Client,
    endpoint: Url,
    /// `endpoint` without any user info, for messages and logs.
    endpoint_display: String,
    authorization: Option<HeaderValue>,
    /// The most constrained [`Format`] the endpoint is known to take; it only ever moves
    /// to a less constrained one.
    format: AtomicU8,
    /// Whether `"temperature": 0` is sent; cleared once the endpoint refuses it.
    temperature: AtomicBool,
    /// Shared by every call of this client: the quota is the endpoint's, not a caller's.
    limiter: Option<DefaultDirectRateLimiter>,
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("id", &self.id)
            .field("endpoint", &self.endpoint_display)
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
        if config.timeout.is_zero() {
            return Err(LlmError::Failed(
                "openai chat: timeout must be above zero".into(),
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
        let endpoint = endpoint(&config.base_url)?;
        let endpoint_display = redacted(&endpoint);

        let authorization = match config.api_key.as_deref().map(str::trim) {
            Some(key) if !key.is_empty() => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    LlmError::Failed(
                        "openai chat: the API key has characters not allowed in an HTTP header"
                            .into(),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
            _ => None,
        };

        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .user_agent(concat!("memmachine/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                LlmError::Failed(format!(
                    "openai chat: cannot build the HTTP client: {}",
                    chain(&e)
                ))
            })?;

        Ok(OpenAiChat {
            id: format!("openai:{model}"),
            config,
            client,
            endpoint,
            endpoint_display,
            authorization,
            format: AtomicU8::new(Format::JsonSchema as u8),
            temperature: AtomicBool::new(true),
            limiter,
        })
    }

    /// The URL requests go to (user info, if any, redacted).
    pub fn endpoint(&self) -> &str {
        &self.endpoint_display
    }

    fn current_format(&self) -> Format {
        Format::from_u8(self.format.load(Ordering::Relaxed))
    }

    /// Remembers what a successful request was sent with, for later calls.
    fn learn(&self, format: Option<Format>, temperature: bool) {
        if let Some(format) = format {
            let before = Format::from_u8(self.format.fetch_max(format as u8, Ordering::Relaxed));
            if before < format {
                tracing::info!(
                    endpoint = %self.endpoint_display,
                    model = %self.config.model,
                    response_format = format.as_str(),
                    "the chat endpoint does not take a stricter response_format; using this one from now on"
                );
            }
        }
        if !temperature && self.temperature.swap(false, Ordering::Relaxed) {
            tracing::info!(
                endpoint = %self.endpoint_display,
                model = %self.config.model,
                "the chat endpoint does not take temperature 0; leaving it out from now on"
            );
        }
    }

    /// One request body (with its retries), up to the parsed response.
    async fn send_with_retries(
        &self,
        body: &ChatBody<'_>,
        purpose: Purpose,
    ) -> Result<ChatResponse, Failure> {
        let attempts = self.config.max_retries.saturating_add(1);
        let mut attempt = 0u32;
        let mut last_retry_after = None;
        loop {
            attempt += 1;
            if let Some(limiter) = &self.limiter {
                limiter.until_ready().await;
            }
            let (message, retry_after) = match self.send_once(body).await {
                Ok(response) => return Ok(response),
                Err(Attempt::Fatal(message)) => {
                    return Err(Failure::Error(LlmError::Failed(message)));
                }
                Err(Attempt::Rejected(message)) => return Err(Failure::Rejected(message)),
                Err(Attempt::Retry {
                    message,
                    retry_after,
                }) => (message, retry_after),
            };
            last_retry_after = retry_after.or(last_retry_after);
            if attempt >= attempts {
                return Err(Failure::Error(LlmError::Unavailable {
                    message: format!("{message} (gave up after {attempt} attempts)"),
                    retry_after: last_retry_after,
                }));
            }
            let delay = match retry_after {
                Some(d) => d.min(MAX_RETRY_AFTER),
                None => self.backoff(attempt - 1),
            };
            tracing::warn!(
                endpoint = %self.endpoint_display,
                purpose = purpose.as_str(),
                attempt,
                of = attempts,
                delay_ms = delay.as_millis() as u64,
                error = %message,
                "chat completion request failed; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    async fn send_once(&self, body: &ChatBody<'_>) -> Result<ChatResponse, Attempt> {
        let mut builder = self.client.post(self.endpoint.clone()).json(body);
        if let Some(auth) = &self.authorization {
            builder = builder.header(AUTHORIZATION, auth.clone());
        }
        let response = builder.send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(e) if status.is_success() => return Err(self.transport_error(e)),
            Err(_) => Default::default(),
        };

        if status.is_success() {
            return serde_json::from_slice::<ChatResponse>(&bytes).map_err(|e| {
                Attempt::Fatal(format!(
                    "chat endpoint {} returned a response that is not an OpenAI chat \
                     completion ({e}); body starts: {}",
                    self.endpoint_display,
                    snippet(&bytes)
                ))
            });
        }
        let message = format!(
            "chat endpoint {} returned {status}: {}",
            self.endpoint_display,
            error_message(&bytes)
        );
        if retryable(status) {
            Err(Attempt::Retry {
                message,
                retry_after,
            })
        } else if status == StatusCode::BAD_REQUEST || status == StatusCode::UNPROCESSABLE_ENTITY {
            // 422: what FastAPI-based servers answer to a field they do not know.
            Err(Attempt::Rejected(message))
        } else {
            Err(Attempt::Fatal(message))
        }
    }

    fn transport_error(&self, e: reqwest::Error) -> Attempt {
        let what = if e.is_timeout() {
            format!("timed out after {:?}", self.config.timeout)
        } else if e.is_connect() {
            "cannot connect".to_string()
        } else {
            "request failed".to_string()
        };
        let fatal = e.is_builder() || e.is_redirect();
        let message = format!(
            "chat endpoint {}: {what}: {}",
            self.endpoint_display,
            chain(&e.without_url())
        );
        if fatal {
            Attempt::Fatal(message)
        } else {
            Attempt::Retry {
                message,
                retry_after: None,
            }
        }
    }

    /// The first choice's content and the token counts of a parsed response.
    fn completion(&self, response: ChatResponse, purpose: Purpose) -> Result<Completion, LlmError> {
        let bad = |what: &str| {
            LlmError::Failed(format!(
                "chat endpoint {} returned {what}",
                self.endpoint_display
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
                endpoint = %self.endpoint_display,
                purpose = purpose.as_str(),
                "the chat completion was cut off at the model's token limit"
            );
        }
        let usage = response.usage.unwrap_or_default();
        Ok(Completion {
            content,
            prompt_tokens: usage.prompt_tokens.unwrap_or(0),
            completion_tokens: usage.completion_tokens.unwrap_or(0),
        })
    }

    /// The delay before retry number `retry` (0 = the first retry): `backoff * 2^retry`,
    /// at most `max_backoff`, then a uniformly random part of up to half of it removed.
    fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        let base = self
            .config
            .backoff
            .saturating_mul(factor)
            .min(self.config.max_backoff);
        base.mul_f64(0.5 + 0.5 * random_unit())
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
        let mut temperature = self.temperature.load(Ordering::Relaxed);
        loop {
            let body = ChatBody {
                model: self.config.model.trim(),
                messages: &messages,
                temperature: temperature.then_some(0.0),
                response_format: format
                    .zip(request.json_schema.as_ref())
                    .and_then(|(f, schema)| f.response_format(schema)),
            };
            let message = match self.send_with_retries(&body, request.purpose).await {
                Ok(response) => {
                    let completion = self.completion(response, request.purpose)?;
                    self.learn(format, temperature);
                    return Ok(completion);
                }
                Err(Failure::Error(e)) => return Err(e),
                Err(Failure::Rejected(message)) => message,
            };
            // The request was refused as sent: perhaps for what it asked of the endpoint
            // rather than for what it said. Only a later success is remembered.
            if temperature && message.to_ascii_lowercase().contains("temperature") {
                temperature = false;
            } else if let Some(next) = format.and_then(Format::next) {
                format = Some(next);
            } else {
                return Err(LlmError::Failed(message));
            }
            tracing::warn!(
                endpoint = %self.endpoint_display,
                purpose = request.purpose.as_str(),
                response_format = format.map_or("none", Format::as_str),
                temperature,
                error = %message,
                "chat endpoint refused the request; sending it again asking less"
            );
        }
    }
}

/// What one attempt came to, when not a response.
enum Attempt {
    Retry {
        message: String,
        retry_after: Option<Duration>,
    },
    /// `400`/`422`: refused as sent; without `response_format` or `temperature` it may
    /// pass.
    Rejected(String),
    Fatal(String),
}

/// What one request body (with its retries) came to, when not a response.
enum Failure {
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
    response_format: Option<serde_json::Value>,
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

/// `{base}/v1/chat/completions`, or `{base}/chat/completions` when `base` already ends
/// in `/v1`.
fn endpoint(base_url: &str) -> Result<Url, LlmError> {
    let base = base_url.trim().trim_end_matches('/');
    let full = if base.ends_with("/v1") {
        format!("{base}/chat/completions")
    } else {
        format!("{base}/v1/chat/completions")
    };
    let url = Url::parse(&full).map_err(|e| {
        LlmError::Failed(format!("openai chat: invalid base_url {base_url:?}: {e}"))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(LlmError::Failed(format!(
            "openai chat: base_url {base_url:?} is not an http(s) URL"
        )));
    }
    Ok(url)
}

/// `url` with any password replaced, for messages and logs.
fn redacted(url: &Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("redacted"));
    }
    url.to_string()
}

fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
}

/// A `Retry-After` given in seconds, at most an hour (the HTTP-date form is ignored:
/// backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs.min(3600)));
    }
    let secs = value.parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(3600.0)))
}

/// The message of an error body: OpenAI's `{"error":{"message":..}}`, the
/// `{"error":".."}` or `{"message":".."}` of other servers, else the start of the body.
fn error_message(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        let message = value
            .pointer("/error/message")
            .or_else(|| value.get("error").filter(|e| e.is_string()))
            .or_else(|| value.get("message"))
            .or_else(|| value.get("detail").filter(|d| d.is_string()))
            .and_then(|m| m.as_str());
        if let Some(message) = message {
            return one_line(message);
        }
        // FastAPI's 422: {"detail": [{"loc": [..], "msg": ..}, ..]}.
        if let Some(detail) = value.get("detail") {
            return snippet(detail.to_string().as_bytes());
        }
    }
    if body.is_empty() {
        "(empty body)".to_string()
    } else {
        snippet(body)
    }
}

/// The start of `body`, lossily decoded, on one line.
fn snippet(body: &[u8]) -> String {
    one_line(&String::from_utf8_lossy(body))
}

/// The start of `text` on one line.
fn one_line(text: &str) -> String {
    let mut out: String = text.chars().take(BODY_SNIPPET).collect();
    if text.chars().count() > BODY_SNIPPET {
        out.push('…');
    }
    out.replace(['\n', '\r'], " ")
}

/// An error with its sources ("a: b: c"); reqwest's own message alone says little.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A uniformly random number in `[0, 1)` from the operating system (0 in the unheard-of
/// case that it has none to give: the jitter is then fixed, not the delay unbounded).
fn random_unit() -> f64 {
    (getrandom::u64().unwrap_or(0) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_accepts_base_with_or_without_v1() {
        for base in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
            " http://h:1/v1/ ",
        ] {
            assert_eq!(
                endpoint(base).unwrap().as_str(),
                "http://h:1/v1/chat/completions",
                "{base}"
            );
        }
        assert_eq!(
            endpoint("https://gw.example/openai").unwrap().as_str(),
            "https://gw.example/openai/v1/chat/completions"
        );
        assert!(endpoint("not a url").is_err());
        assert!(endpoint("ftp://h/").is_err());
    }

    #[test]
    fn redacts_password_in_endpoint() {
        let url = endpoint("https://user:secret@h/").unwrap();
        assert!(!redacted(&url).contains("secret"));
    }

    #[test]
    fn parses_retry_after_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("0.5"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(500)));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("999999"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3600)));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn extracts_error_messages() {
        assert_eq!(
            error_message(br#"{"error":{"message":"bad model","type":"x"}}"#),
            "bad model"
        );
        assert_eq!(error_message(br#"{"error":"nope"}"#), "nope");
        assert_eq!(error_message(br#"{"message":"m"}"#), "m");
        assert_eq!(error_message(br#"{"detail":"d"}"#), "d");
        assert!(error_message(br#"{"detail":[{"msg":"extra field"}]}"#).contains("extra field"));
        assert_eq!(error_message(b"<html>oops</html>"), "<html>oops</html>");
        assert_eq!(error_message(b""), "(empty body)");
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let mut config = OpenAiChatConfig::new("http://h", "m");
        config.backoff = Duration::from_millis(200);
        config.max_backoff = Duration::from_secs(5);
        let c = OpenAiChat::new(config).unwrap();
        for (retry, full) in [(0, 200), (1, 400), (2, 800), (5, 5000), (40, 5000)] {
            let d = c.backoff(retry);
            let full = Duration::from_millis(full);
            assert!(d >= full / 2 && d <= full, "retry {retry}: {d:?}");
        }
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
        assert_eq!(Format::JsonSchema.next(), Some(Format::JsonObject));
        assert_eq!(Format::JsonObject.next(), Some(Format::Unconstrained));
        assert_eq!(Format::Unconstrained.next(), None);
        for f in [
            Format::JsonSchema,
            Format::JsonObject,
            Format::Unconstrained,
        ] {
            assert_eq!(Format::from_u8(f as u8), f);
        }
        let c = OpenAiChat::new(OpenAiChatConfig::new("http://h", "m")).unwrap();
        c.learn(Some(Format::JsonObject), true);
        c.learn(Some(Format::JsonSchema), true);
        assert_eq!(c.current_format(), Format::JsonObject);
        assert!(c.temperature.load(Ordering::Relaxed));
        c.learn(None, false);
        assert!(!c.temperature.load(Ordering::Relaxed));
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
