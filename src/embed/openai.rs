//! An embedder for any OpenAI-compatible embeddings endpoint (`POST {base}/v1/embeddings`):
//! OpenAI itself, Azure-style gateways, vLLM, Ollama, LM Studio, text-embeddings-inference…
//!
//! - Texts are sent in batches of [`OpenAiConfig::batch_size`] as
//!   `{"model": .., "input": [..]}` (plus `"dimensions"` when configured); the response's
//!   `data[].index` decides the order, whatever order the server lists them in.
//! - Connection errors, timeouts, `408`, `429` and `5xx` are retried up to
//!   [`OpenAiConfig::max_retries`] times with exponential backoff and jitter (a
//!   `Retry-After: <seconds>` header is honoured, up to 30 s); when they run out the error
//!   is [`EmbedError::Unavailable`]. Any other non-success status is
//!   [`EmbedError::Failed`] at once, carrying the server's `error.message`.
//! - A `2xx` whose body is not the expected JSON (not JSON at all, the wrong number of
//!   embeddings, bad indices) is [`EmbedError::Failed`] without retry: that is a wrong
//!   `base_url` or an incompatible server, which retrying does not fix. A body cut off in
//!   transit is a transport error and is retried.
//! - The vector length is taken from the configuration, or else learnt from the first
//!   successful response (see [`OpenAiEmbedder::probe`]); from then on a response of
//!   another length is [`EmbedError::Failed`].
//! - Empty texts are not sent (OpenAI rejects them); they get a zero vector, like the
//!   other embedders give them.
//! - The API key is only ever put in the `Authorization` header (marked sensitive); it is
//!   never logged and `Debug` output redacts it.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};

use super::{EmbedError, Embedder, normalize};

/// The longest `Retry-After` that is honoured; a longer one is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// The text [`OpenAiEmbedder::probe`] embeds.
const PROBE_TEXT: &str = "dimension probe";

/// How much of an unexpected response body goes into an error message.
const BODY_SNIPPET: usize = 300;

/// Settings of an [`OpenAiEmbedder`]. Build with [`OpenAiConfig::new`] and change the
/// public fields as needed.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Where the API lives, e.g. `https://api.openai.com` or `http://localhost:11434/v1`;
    /// with or without the trailing `/v1` (`/embeddings` is appended).
    pub base_url: String,
    /// The model name sent with every request, e.g. `text-embedding-3-small`.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set (and not blank).
    pub api_key: Option<String>,
    /// Asks the model for vectors of this length (`"dimensions"` in the request; only
    /// some models support it) and makes it the expected length from the start.
    pub dimensions: Option<usize>,
    /// Limit on each HTTP request, connecting included. Default 30 s.
    pub timeout: Duration,
    /// Retries after the first attempt of a batch. Default 4.
    pub max_retries: u32,
    /// Texts per request. Default 128 (OpenAI accepts up to 2048).
    pub batch_size: usize,
    /// Delay before the first retry; it doubles for each further retry, up to
    /// `max_backoff`, and is then jittered down by up to half. Default 200 ms.
    pub backoff: Duration,
    /// Ceiling of the backoff delay. Default 5 s.
    pub max_backoff: Duration,
}

impl OpenAiConfig {
    /// The defaults: no key, the model's own dimensions, 30 s timeout, 4 retries,
    /// batches of 128, backoff from 200 ms to 5 s.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            dimensions: None,
            timeout: Duration::from_secs(30),
            max_retries: 4,
            batch_size: 128,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("dimensions", &self.dimensions)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("batch_size", &self.batch_size)
            .field("backoff", &self.backoff)
            .field("max_backoff", &self.max_backoff)
            .finish()
    }
}

/// Embeds through an OpenAI-compatible `/v1/embeddings` endpoint (see the module docs).
pub struct OpenAiEmbedder {
    id: String,
    config: OpenAiConfig,
    client: reqwest::Client,
    endpoint: Url,
    /// `endpoint` without any user info, for messages and logs.
    endpoint_display: String,
    authorization: Option<HeaderValue>,
    /// The known vector length; 0 while unknown.
    dimensions: AtomicUsize,
    /// Prompt tokens the endpoint reported so far.
    tokens: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("id", &self.id)
            .field("endpoint", &self.endpoint_display)
            .field("dimensions", &self.dimensions())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl OpenAiEmbedder {
    /// Checks the configuration and builds the HTTP client; no request is made (call
    /// [`probe`](Self::probe) to check the endpoint and learn the vector length).
    pub fn new(config: OpenAiConfig) -> Result<OpenAiEmbedder, EmbedError> {
        let model = config.model.trim();
        if model.is_empty() {
            return Err(EmbedError::Failed(
                "openai embedder: the model name is empty".into(),
            ));
        }
        if config.batch_size == 0 {
            return Err(EmbedError::Failed(
                "openai embedder: batch_size must be at least 1".into(),
            ));
        }
        if config.dimensions == Some(0) {
            return Err(EmbedError::Failed(
                "openai embedder: dimensions must be at least 1".into(),
            ));
        }
        if config.timeout.is_zero() {
            return Err(EmbedError::Failed(
                "openai embedder: timeout must be above zero".into(),
            ));
        }
        let endpoint = endpoint(&config.base_url)?;
        let endpoint_display = redacted(&endpoint);

        let authorization = match config.api_key.as_deref().map(str::trim) {
            Some(key) if !key.is_empty() => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    EmbedError::Failed(
                        "openai embedder: the API key has characters not allowed in an HTTP header"
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
                EmbedError::Failed(format!(
                    "openai embedder: cannot build the HTTP client: {}",
                    chain(&e)
                ))
            })?;

        let id = match config.dimensions {
            Some(d) => format!("openai:{model}:{d}"),
            None => format!("openai:{model}"),
        };
        Ok(OpenAiEmbedder {
            id,
            dimensions: AtomicUsize::new(config.dimensions.unwrap_or(0)),
            config,
            client,
            endpoint,
            endpoint_display,
            authorization,
            tokens: Default::default(),
        })
    }

    /// The URL requests go to (user info, if any, redacted).
    pub fn endpoint(&self) -> &str {
        &self.endpoint_display
    }

    /// Embeds one short text to check the endpoint and record the vector length, which it
    /// returns. With configured dimensions it checks that the server honours them.
    pub async fn probe(&self) -> Result<usize, EmbedError> {
        let vectors = self.embed(&[PROBE_TEXT.to_string()]).await?;
        Ok(vectors.first().map_or(0, Vec::len))
    }

    /// One request (with its retries): the vectors of `input`, in order, normalised.
    async fn embed_batch(&self, input: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let request = EmbeddingRequest {
            model: self.config.model.trim(),
            input,
            dimensions: self.config.dimensions,
        };
        let response = self.send_with_retries(&request).await?;
        if let Some(usage) = &response.usage {
            if let Some(tokens) = usage.prompt_tokens {
                self.tokens
                    .fetch_add(tokens, std::sync::atomic::Ordering::Relaxed);
            }
            tracing::debug!(
                endpoint = %self.endpoint_display,
                texts = input.len(),
                prompt_tokens = usage.prompt_tokens,
                total_tokens = usage.total_tokens,
                "embedded batch"
            );
        }
        let mut vectors = self.in_input_order(response.data, input.len())?;
        for v in &mut vectors {
            self.check_dimensions(v.len())?;
            normalize(v);
        }
        Ok(vectors)
    }

    async fn send_with_retries(
        &self,
        request: &EmbeddingRequest<'_>,
    ) -> Result<EmbeddingResponse, EmbedError> {
        let attempts = self.config.max_retries.saturating_add(1);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let (message, retry_after) = match self.send_once(request).await {
                Ok(response) => return Ok(response),
                Err(Attempt::Fatal(message)) => return Err(EmbedError::Failed(message)),
                Err(Attempt::Retry {
                    message,
                    retry_after,
                }) => (message, retry_after),
            };
            if attempt >= attempts {
                return Err(EmbedError::Unavailable(format!(
                    "{message} (gave up after {attempt} attempts)"
                )));
            }
            let delay = match retry_after {
                Some(d) => d.min(MAX_RETRY_AFTER),
                None => self.backoff(attempt - 1),
            };
            tracing::warn!(
                endpoint = %self.endpoint_display,
                attempt,
                of = attempts,
                delay_ms = delay.as_millis() as u64,
                error = %message,
                "embedding request failed; retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    async fn send_once(
        &self,
        request: &EmbeddingRequest<'_>,
    ) -> Result<EmbeddingResponse, Attempt> {
        let mut builder = self.client.post(self.endpoint.clone()).json(request);
        if let Some(auth) = &self.authorization {
            builder = builder.header(AUTHORIZATION, auth.clone());
        }
        let response = builder.send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) if status.is_success() => return Err(self.transport_error(e)),
            Err(_) => Default::default(),
        };

        if status.is_success() {
            return serde_json::from_slice::<EmbeddingResponse>(&body).map_err(|e| {
                Attempt::Fatal(format!(
                    "embeddings endpoint {} returned a response that is not an OpenAI embeddings \
                     response ({e}); body starts: {}",
                    self.endpoint_display,
                    snippet(&body)
                ))
            });
        }
        let message = format!(
            "embeddings endpoint {} returned {status}: {}",
            self.endpoint_display,
            error_message(&body)
        );
        if retryable(status) {
            Err(Attempt::Retry {
                message,
                retry_after,
            })
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
            "embeddings endpoint {}: {what}: {}",
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

    /// Puts the response's items in input order (by `index`, or as listed when the
    /// server gives no indices), checking that there is exactly one per input.
    fn in_input_order(
        &self,
        data: Vec<EmbeddingData>,
        n: usize,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let bad = |what: String| {
            EmbedError::Failed(format!(
                "embeddings endpoint {} returned {what}",
                self.endpoint_display
            ))
        };
        if data.len() != n {
            return Err(bad(format!("{} embeddings for {n} texts", data.len())));
        }
        if data.iter().all(|d| d.index.is_none()) {
            return Ok(data.into_iter().map(|d| d.embedding).collect());
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; n];
        for d in data {
            let Some(i) = d.index else {
                return Err(bad("embeddings with and without an index".into()));
            };
            match slots.get_mut(i) {
                Some(slot @ None) => *slot = Some(d.embedding),
                Some(Some(_)) => return Err(bad(format!("index {i} twice"))),
                None => return Err(bad(format!("index {i} for {n} texts"))),
            }
        }
        Ok(slots.into_iter().flatten().collect())
    }

    /// Records the first vector length seen (when none is configured) and rejects any
    /// other.
    fn check_dimensions(&self, len: usize) -> Result<(), EmbedError> {
        if len == 0 {
            return Err(EmbedError::Failed(format!(
                "model {} at {} returned an empty embedding",
                self.config.model, self.endpoint_display
            )));
        }
        let expected =
            match self
                .dimensions
                .compare_exchange(0, len, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    tracing::info!(
                        endpoint = %self.endpoint_display,
                        model = %self.config.model,
                        dimensions = len,
                        "embedding dimensions learnt from the endpoint"
                    );
                    return Ok(());
                }
                Err(known) => known,
            };
        if len == expected {
            return Ok(());
        }
        let source = if self.config.dimensions.is_some() {
            "as configured"
        } else {
            "as earlier responses had"
        };
        Err(EmbedError::Failed(format!(
            "model {} at {} returned {len} dimensions, expected {expected} ({source}); \
             vectors of different lengths cannot be mixed",
            self.config.model, self.endpoint_display
        )))
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
impl Embedder for OpenAiEmbedder {
    /// `openai:<model>`, or `openai:<model>:<dimensions>` when dimensions are configured.
    fn id(&self) -> &str {
        &self.id
    }

    fn tokens(&self) -> u64 {
        self.tokens.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The configured dimensions, else the length learnt from the first successful
    /// response; **0 until then** (call [`OpenAiEmbedder::probe`] at startup to know it
    /// up front).
    fn dimensions(&self) -> usize {
        self.dimensions.load(Ordering::Acquire)
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Empty texts are not sent: OpenAI answers 400 to an empty string.
        let to_send: Vec<String> = texts.iter().filter(|t| !t.is_empty()).cloned().collect();
        let mut embedded = Vec::with_capacity(to_send.len());
        for batch in to_send.chunks(self.config.batch_size) {
            embedded.extend(self.embed_batch(batch).await?);
        }
        if to_send.len() == texts.len() {
            return Ok(embedded);
        }
        let mut dims = self.dimensions();
        if dims == 0 {
            dims = self.probe().await?;
        }
        let mut embedded = embedded.into_iter();
        Ok(texts
            .iter()
            .map(|t| {
                if t.is_empty() {
                    vec![0.0; dims]
                } else {
                    embedded.next().unwrap_or_default()
                }
            })
            .collect())
    }
}

/// What one attempt came to, when not a response.
enum Attempt {
    Retry {
        message: String,
        retry_after: Option<Duration>,
    },
    Fatal(String),
}

#[derive(Serialize)]
struct EmbeddingRequest<'a> {
    model: &'a str,
    input: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingData>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct EmbeddingData {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

/// `{base}/v1/embeddings`, or `{base}/embeddings` when `base` already ends in `/v1`.
fn endpoint(base_url: &str) -> Result<Url, EmbedError> {
    let base = base_url.trim().trim_end_matches('/');
    let full = if base.ends_with("/v1") {
        format!("{base}/embeddings")
    } else {
        format!("{base}/v1/embeddings")
    };
    let url = Url::parse(&full).map_err(|e| {
        EmbedError::Failed(format!(
            "openai embedder: invalid base_url {base_url:?}: {e}"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(EmbedError::Failed(format!(
            "openai embedder: base_url {base_url:?} is not an http(s) URL"
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

/// A `Retry-After` given in seconds (the HTTP-date form is ignored: backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
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
            .or_else(|| value.get("detail"))
            .and_then(|m| m.as_str());
        if let Some(message) = message {
            return message.to_string();
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
    let text = String::from_utf8_lossy(body);
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

/// A uniformly random number in `[0, 1)`, from the standard library's randomly keyed
/// hasher (jitter needs no better).
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
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
                "http://h:1/v1/embeddings",
                "{base}"
            );
        }
        assert_eq!(
            endpoint("https://gw.example/openai").unwrap().as_str(),
            "https://gw.example/openai/v1/embeddings"
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
        assert_eq!(error_message(b"<html>oops</html>"), "<html>oops</html>");
        assert_eq!(error_message(b""), "(empty body)");
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        let mut config = OpenAiConfig::new("http://h", "m");
        config.backoff = Duration::from_millis(200);
        config.max_backoff = Duration::from_secs(5);
        let e = OpenAiEmbedder::new(config).unwrap();
        for (retry, full) in [(0, 200), (1, 400), (2, 800), (5, 5000), (40, 5000)] {
            let d = e.backoff(retry);
            let full = Duration::from_millis(full);
            assert!(d >= full / 2 && d <= full, "retry {retry}: {d:?}");
        }
    }

    #[test]
    fn debug_redacts_the_key() {
        let mut config = OpenAiConfig::new("http://h", "m");
        config.api_key = Some("sk-very-secret".into());
        assert!(!format!("{config:?}").contains("sk-very-secret"));
        let e = OpenAiEmbedder::new(config).unwrap();
        assert!(!format!("{e:?}").contains("sk-very-secret"));
    }
}
