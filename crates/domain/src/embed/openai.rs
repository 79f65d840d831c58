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
use serde::{Deserialize, Serialize};

use super::{EmbedError, Embedder, normalize};
use crate::openai_http::{Api, Endpoint, Failed, Retries, Retrying};
use crate::secret::Secret;
use crate::urls::SecretUrl;

/// The longest `Retry-After` that is honoured; a longer one is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// The text [`OpenAiEmbedder::probe`] embeds.
const PROBE_TEXT: &str = "dimension probe";

/// The embeddings API, as [`crate::openai_http`] sends to it and names it in messages.
const API: Api = Api {
    name: "openai embedder",
    endpoint: "embeddings endpoint",
    path: "embeddings",
    response: "OpenAI embeddings response",
    max_retry_after: MAX_RETRY_AFTER,
    // The server's message is kept as sent, as this client always has.
    tidy_errors: false,
};

/// Settings of an [`OpenAiEmbedder`]. Build with [`OpenAiConfig::new`] and change the
/// public fields as needed.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Where the API lives, e.g. `https://api.openai.com` or `http://localhost:11434/v1`;
    /// with or without the trailing `/v1` (`/embeddings` is appended).
    pub base_url: SecretUrl,
    /// The model name sent with every request, e.g. `text-embedding-3-small`.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set (and not blank).
    pub api_key: Option<Secret>,
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
    pub fn new(base_url: impl Into<SecretUrl>, model: impl Into<String>) -> OpenAiConfig {
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
            .field("api_key", &self.api_key)
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
    http: Endpoint,
    retries: Retries,
    /// The known vector length; 0 while unknown.
    dimensions: AtomicUsize,
    /// Prompt tokens the endpoint reported so far.
    tokens: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("id", &self.id)
            .field("endpoint", &self.http.display())
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
        let http = Endpoint::new(
            &API,
            &config.base_url,
            config.api_key.as_ref(),
            config.timeout,
        )
        .map_err(EmbedError::Failed)?;

        let id = match config.dimensions {
            Some(d) => format!("openai:{model}:{d}"),
            None => format!("openai:{model}"),
        };
        Ok(OpenAiEmbedder {
            id,
            dimensions: AtomicUsize::new(config.dimensions.unwrap_or(0)),
            retries: Retries {
                max_retries: config.max_retries,
                backoff: config.backoff,
                max_backoff: config.max_backoff,
            },
            config,
            http,
            tokens: Default::default(),
        })
    }

    /// The URL requests go to (password and query values redacted).
    pub fn endpoint(&self) -> &str {
        self.http.display()
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
                endpoint = %self.http.display(),
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
        let on_retry = |r: &Retrying<'_>| {
            tracing::warn!(
                endpoint = %self.http.display(),
                attempt = r.attempt,
                of = r.of,
                delay_ms = r.delay.as_millis() as u64,
                error = %r.message,
                "embedding request failed; retrying"
            );
        };
        self.http
            .post_with_retries(request, &self.retries, None, on_retry, |_, _| false)
            .await
            .map_err(|failed| match failed {
                Failed::Refused { message, .. } | Failed::Fatal(message) => {
                    EmbedError::Failed(message)
                }
                Failed::GaveUp { message, .. } => EmbedError::Unavailable(message),
            })
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
                self.http.display()
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
                self.config.model,
                self.http.display()
            )));
        }
        let expected =
            match self
                .dimensions
                .compare_exchange(0, len, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    tracing::info!(
                        endpoint = %self.http.display(),
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
            self.config.model,
            self.http.display()
        )))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_appends_embeddings_to_the_base() {
        for base in ["http://h:1", "http://h:1/v1/"] {
            let e = OpenAiEmbedder::new(OpenAiConfig::new(base, "m")).unwrap();
            assert_eq!(e.endpoint(), "http://h:1/v1/embeddings", "{base}");
        }
        let bad = OpenAiEmbedder::new(OpenAiConfig::new("ftp://h/", "m")).unwrap_err();
        assert!(
            bad.to_string().contains("openai embedder: base_url"),
            "{bad}"
        );
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
