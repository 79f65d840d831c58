//! Rerankers score a search's candidates against the query with a model that reads both
//! together, which ranks better than the fused lexical and vector scores alone. One
//! trait, with implementations a project chooses by name in `ProjectConfig.reranker`:
//! `cross-encoder` (a Hugging Face sequence-classification model run in-process,
//! `--reranker-model-dir`) and `remote` (a `POST /rerank` endpoint, `--reranker-base-url`).
//!
//! A reranker that fails or is too slow never fails a search: the episodic domain logs
//! it, counts it and answers in the fused order (see [`Rerankers::score`]).

pub mod cross_encoder;
pub mod random_model;
pub mod registry;
pub mod remote;
mod settings;

pub use registry::Rerankers;
pub use settings::{Flags, RerankApi, Settings};

use std::sync::Arc;

use async_trait::async_trait;

/// Why reranking failed.
#[derive(Debug, thiserror::Error)]
pub enum RerankError {
    /// Worth trying again later (the endpoint is down, overloaded, timed out).
    #[error("reranker unavailable: {0}")]
    Unavailable(String),
    /// Will not succeed on retry (a wrong answer, a model that cannot run the input).
    #[error("reranker failed: {0}")]
    Failed(String),
}

#[async_trait]
pub trait Reranker: Send + Sync {
    /// A stable name of the model and its settings, for logs (e.g.
    /// `cross-encoder:ms-marco-MiniLM-L-6-v2`).
    fn id(&self) -> &str;

    /// One score per document, in input order; higher is more relevant to `query`.
    /// Implementations that compute must not block the async executor.
    async fn score(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, RerankError>;
}

/// The rerankers the configuration offers projects: `cross-encoder` with
/// `--reranker-model-dir`, `remote` with `--reranker-base-url`.
pub async fn build(config: &Settings) -> Result<Rerankers, String> {
    let mut named: Vec<(&str, Arc<dyn Reranker>)> = Vec::new();
    if let Some(dir) = &config.model_dir {
        let dir = dir.clone();
        let model = tokio::task::spawn_blocking(move || cross_encoder::CrossEncoder::load(&dir))
            .await
            .map_err(|err| format!("loading the cross-encoder: {err}"))?
            .map_err(|err| format!("{err} (--reranker-model-dir)"))?;
        named.push((registry::CROSS_ENCODER, Arc::new(model)));
    }
    if let Some(base_url) = &config.base_url {
        let mut settings = remote::RemoteConfig::new(base_url.clone());
        settings.model = config.model.clone();
        settings.api = config.api;
        settings.api_key = config.api_key.clone();
        settings.timeout = config.timeout;
        settings.max_retries = config.retries;
        let remote = remote::RemoteReranker::new(settings).map_err(|e| e.to_string())?;
        tracing::info!(
            reranker = remote.id(),
            endpoint = remote.endpoint(),
            "remote reranker configured"
        );
        named.push((registry::REMOTE, Arc::new(remote)));
    }
    Ok(Rerankers::new(named, config.candidates, config.timeout))
}
