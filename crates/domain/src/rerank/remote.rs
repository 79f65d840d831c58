//! A reranker behind `POST {base_url}/rerank`, the shape that Hugging Face
//! text-embeddings-inference (TEI), Jina, Cohere and the servers copying them (vLLM,
//! Infinity, LocalAI) speak: a query and documents in, a score per document out.
//!
//! - The request is Cohere's and Jina's, `{"model", "query", "documents", "top_n",
//!   "return_documents": false}` (`model` only when configured), or with
//!   [`RerankApi::Tei`] TEI's, `{"query", "texts", "truncate": true, "raw_scores": false,
//!   "return_text": false}`.
//! - Either answer is read, whichever the API: TEI's `[{"index", "score"}]` and
//!   Cohere's `{"results": [{"index", "relevance_score"}]}`; results come best first and
//!   `index` puts them back in input order. Exactly one result per document is
//!   expected: anything else (a missing or repeated index, a body that is not one of
//!   those) is [`RerankError::Failed`].
//! - Connection errors, timeouts, `408`, `429` and `5xx` are retried up to
//!   [`RemoteConfig::max_retries`] times with a short backoff (or the `Retry-After` the
//!   endpoint asks for), all within [`RemoteConfig::timeout`]; past it, or when retries
//!   run out, the error is [`RerankError::Unavailable`]. Other refusals (`4xx`) are
//!   [`RerankError::Failed`] at once.
//! - The API key goes in `Authorization: Bearer` only (see [`crate::openai_http`]).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::RerankApi;
use super::{RerankError, Reranker};
use crate::openai_http::{Api, Endpoint, Failed, Retries, Retrying};
use crate::secret::Secret;
use crate::urls::SecretUrl;

/// The rerank API, as [`crate::openai_http`] sends to it and names it in messages. A
/// `Retry-After` is honoured for as long as [`RemoteConfig::timeout`] allows.
const API: Api = Api {
    name: "remote reranker",
    endpoint: "rerank endpoint",
    path: "rerank",
    response: "answer of POST /rerank",
    max_retry_after: Duration::from_secs(3600),
    tidy_errors: true,
};

/// Settings of a [`RemoteReranker`]. Build with [`RemoteConfig::new`] and change the
/// public fields as needed.
#[derive(Clone)]
pub struct RemoteConfig {
    /// Where the API lives; `/rerank` is appended (`http://localhost:8080` for TEI,
    /// `https://api.jina.ai/v1`, `https://api.cohere.com/v2`).
    pub base_url: SecretUrl,
    /// Sent as `"model"` when set (Cohere and Jina need it; TEI serves one model).
    pub model: Option<String>,
    /// Which request shape to send.
    pub api: RerankApi,
    /// Sent as `Authorization: Bearer <key>` when set (and not blank).
    pub api_key: Option<Secret>,
    /// Longest one rerank may take, retries and their waits included. Default 5 s.
    pub timeout: Duration,
    /// Retries after the first attempt. Default 2.
    pub max_retries: u32,
    /// Delay before the first retry, doubling up to `max_backoff`, jittered. 100 ms.
    pub backoff: Duration,
    /// Ceiling of the backoff delay. Default 1 s.
    pub max_backoff: Duration,
}

impl RemoteConfig {
    pub fn new(base_url: impl Into<SecretUrl>) -> RemoteConfig {
        RemoteConfig {
            base_url: base_url.into(),
            model: None,
            api: RerankApi::Cohere,
            api_key: None,
            timeout: Duration::from_secs(5),
            max_retries: 2,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api", &self.api)
            .field("api_key", &self.api_key)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

pub struct RemoteReranker {
    id: String,
    config: RemoteConfig,
    http: Endpoint,
    retries: Retries,
}

impl fmt::Debug for RemoteReranker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteReranker")
            .field("id", &self.id)
            .field("endpoint", &self.http.display())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RemoteReranker {
    /// Checks the configuration and builds the HTTP client; no request is made.
    pub fn new(config: RemoteConfig) -> Result<RemoteReranker, RerankError> {
        let http = Endpoint::unversioned(
            &API,
            &config.base_url,
            config.api_key.as_ref(),
            config.timeout,
        )
        .map_err(RerankError::Failed)?;
        let model = config
            .model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty());
        let id = match model {
            Some(model) => format!("remote:{model}"),
            None => format!("remote:{}", http.display()),
        };
        Ok(RemoteReranker {
            id,
            retries: Retries {
                max_retries: config.max_retries,
                backoff: config.backoff,
                max_backoff: config.max_backoff,
            },
            config,
            http,
        })
    }

    /// The URL requests go to (password and query values redacted).
    pub fn endpoint(&self) -> &str {
        self.http.display()
    }

    async fn send(&self, request: &RerankRequest<'_>) -> Result<RerankResponse, RerankError> {
        let on_retry = |r: &Retrying<'_>| {
            tracing::warn!(
                endpoint = %self.http.display(),
                attempt = r.attempt,
                of = r.of,
                delay_ms = r.delay.as_millis() as u64,
                error = %r.message,
                "rerank request failed; retrying"
            );
        };
        let sent = self
            .http
            .post_with_retries(request, &self.retries, None, on_retry, |_, _| false);
        match tokio::time::timeout(self.config.timeout, sent).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(Failed::Refused { message, .. } | Failed::Fatal(message))) => {
                Err(RerankError::Failed(message))
            }
            Ok(Err(Failed::GaveUp { message, .. })) => Err(RerankError::Unavailable(message)),
            Err(_) => Err(RerankError::Unavailable(format!(
                "rerank endpoint {} did not answer within {:?}",
                self.http.display(),
                self.config.timeout
            ))),
        }
    }
}

#[async_trait]
impl Reranker for RemoteReranker {
    /// `remote:<model>`, or `remote:<endpoint>` without a model name.
    fn id(&self) -> &str {
        &self.id
    }

    async fn score(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, RerankError> {
        if documents.is_empty() {
            return Ok(Vec::new());
        }
        let request = match self.config.api {
            RerankApi::Cohere => RerankRequest::Cohere {
                model: self.config.model.as_deref(),
                query,
                documents,
                top_n: documents.len(),
                return_documents: false,
            },
            RerankApi::Tei => RerankRequest::Tei {
                query,
                texts: documents,
                truncate: true,
                raw_scores: false,
                return_text: false,
            },
        };
        let response = self.send(&request).await?;
        in_input_order(response.ranked(), documents.len()).map_err(|what| {
            RerankError::Failed(format!(
                "rerank endpoint {} returned {what}",
                self.http.display()
            ))
        })
    }
}

/// The scores of `ranked` by index, checking there is exactly one per document.
fn in_input_order(ranked: Vec<Ranked>, n: usize) -> Result<Vec<f32>, String> {
    if ranked.len() != n {
        return Err(format!("{} results for {n} documents", ranked.len()));
    }
    let mut scores: Vec<Option<f32>> = vec![None; n];
    for r in ranked {
        match scores.get_mut(r.index) {
            Some(slot @ None) => *slot = Some(r.score),
            Some(Some(_)) => return Err(format!("index {} twice", r.index)),
            None => return Err(format!("index {} for {n} documents", r.index)),
        }
    }
    Ok(scores.into_iter().flatten().collect())
}

#[derive(Serialize)]
#[serde(untagged)]
enum RerankRequest<'a> {
    Cohere {
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<&'a str>,
        query: &'a str,
        documents: &'a [String],
        top_n: usize,
        return_documents: bool,
    },
    Tei {
        query: &'a str,
        texts: &'a [String],
        truncate: bool,
        raw_scores: bool,
        return_text: bool,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RerankResponse {
    /// Cohere, Jina, vLLM, Infinity.
    Results { results: Vec<Ranked> },
    /// TEI.
    List(Vec<Ranked>),
}

impl RerankResponse {
    fn ranked(self) -> Vec<Ranked> {
        match self {
            RerankResponse::Results { results } => results,
            RerankResponse::List(list) => list,
        }
    }
}

#[derive(Deserialize)]
struct Ranked {
    index: usize,
    #[serde(alias = "relevance_score")]
    score: f32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Vec<f32>, String> {
        let response: RerankResponse = serde_json::from_str(body).map_err(|e| e.to_string())?;
        in_input_order(response.ranked(), 3)
    }

    #[test]
    fn reads_both_answer_shapes_in_input_order() {
        let tei = r#"[{"index":2,"score":0.9},{"index":0,"score":0.5},{"index":1,"score":0.1}]"#;
        assert_eq!(parse(tei).unwrap(), [0.5, 0.1, 0.9]);
        let cohere = r#"{"id":"x","results":[{"index":1,"relevance_score":3.5,
            "document":{"text":"b"}},{"index":0,"relevance_score":1},{"index":2,
            "relevance_score":-2}],"meta":{}}"#;
        assert_eq!(parse(cohere).unwrap(), [1.0, 3.5, -2.0]);
    }

    #[test]
    fn refuses_answers_that_do_not_score_each_document_once() {
        let short = r#"[{"index":0,"score":1},{"index":1,"score":1}]"#;
        assert!(parse(short).unwrap_err().contains("2 results for 3"));
        let twice = r#"[{"index":0,"score":1},{"index":0,"score":1},{"index":1,"score":1}]"#;
        assert!(parse(twice).unwrap_err().contains("index 0 twice"));
        let beyond = r#"[{"index":0,"score":1},{"index":1,"score":1},{"index":3,"score":1}]"#;
        assert!(parse(beyond).unwrap_err().contains("index 3 for 3"));
        assert!(parse(r#"{"scores":[1,2,3]}"#).is_err());
        assert!(parse(r#"[{"index":0}]"#).is_err());
    }

    #[test]
    fn requests_take_each_api_s_shape() {
        let docs = vec!["a".to_string(), "b".to_string()];
        let cohere = RerankRequest::Cohere {
            model: None,
            query: "q",
            documents: &docs,
            top_n: 2,
            return_documents: false,
        };
        assert_eq!(
            serde_json::to_value(&cohere).unwrap(),
            serde_json::json!({"query": "q", "documents": ["a", "b"], "top_n": 2,
                               "return_documents": false})
        );
        let tei = RerankRequest::Tei {
            query: "q",
            texts: &docs,
            truncate: true,
            raw_scores: false,
            return_text: false,
        };
        assert_eq!(
            serde_json::to_value(&tei).unwrap(),
            serde_json::json!({"query": "q", "texts": ["a", "b"], "truncate": true,
                               "raw_scores": false, "return_text": false})
        );
    }
}
