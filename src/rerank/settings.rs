//! The rerankers' settings (`--reranker-base-url` and its kin), resolved.

use std::path::PathBuf;

use serde::Deserialize;

use crate::secret::Secret;

/// The request shape of a rerank endpoint (`--reranker-api`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RerankApi {
    /// `"documents"`: Cohere, Jina, vLLM, Infinity, LocalAI.
    #[default]
    Cohere,
    /// `"texts"`: Hugging Face text-embeddings-inference.
    Tei,
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// Offers `cross-encoder`.
    pub model_dir: Option<PathBuf>,
    /// Offers `remote`.
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api: RerankApi,
    pub api_key: Option<Secret>,
    pub timeout: std::time::Duration,
    pub retries: u32,
    pub candidates: usize,
}
