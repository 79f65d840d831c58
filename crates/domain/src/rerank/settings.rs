//! The rerankers' settings (`--reranker-base-url` and its kin).

use crate::urls::SecretUrl;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// The request shape of a rerank endpoint (`--reranker-api`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
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
    pub base_url: Option<SecretUrl>,
    pub model: Option<String>,
    pub api: RerankApi,
    pub api_key: Option<Secret>,
    pub timeout: std::time::Duration,
    pub retries: u32,
    pub candidates: usize,
}

/// The rerankers' flags, environment variables and config file keys.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// Hugging Face cross-encoder (sequence-classification) model directory: offers
    /// projects the reranker `cross-encoder`
    #[arg(long, env = "MEMMACHINE_RERANKER_MODEL_DIR")]
    pub reranker_model_dir: Option<PathBuf>,
    /// Rerank endpoint (POST {URL}/rerank: TEI, Jina, Cohere, vLLM, Infinity): offers
    /// projects the reranker `remote`
    #[arg(long, env = "MEMMACHINE_RERANKER_BASE_URL")]
    pub reranker_base_url: Option<SecretUrl>,
    /// Model name sent to --reranker-base-url
    #[arg(long, env = "MEMMACHINE_RERANKER_MODEL")]
    pub reranker_model: Option<String>,
    /// Request shape of --reranker-base-url: cohere (Cohere, Jina, vLLM, Infinity,
    /// LocalAI: "documents") or tei ("texts") [default: cohere]
    #[arg(long, env = "MEMMACHINE_RERANKER_API")]
    pub reranker_api: Option<RerankApi>,
    /// Longest a rerank may take, in seconds, retries included; past it the search
    /// answers in the fused order
    #[arg(
        long,
        env = "MEMMACHINE_RERANKER_TIMEOUT",
        visible_alias = "reranker-timeout-secs",
        default_value_t = 5.0
    )]
    pub reranker_timeout: f64,
    /// Retries of a failed call to --reranker-base-url
    #[arg(long, env = "MEMMACHINE_RERANKER_RETRIES", default_value_t = 2)]
    pub reranker_retries: u32,
    /// Candidates a reranker scores (at least the search's top_k)
    #[arg(long, env = "MEMMACHINE_RERANK_CANDIDATES", default_value_t = super::registry::DEFAULT_CANDIDATES)]
    pub rerank_candidates: usize,
    /// API key of the rerank endpoint: only from the environment
    /// (MEMMACHINE_RERANKER_API_KEY) or the config file
    #[arg(skip)]
    pub reranker_api_key: Option<Secret>,
}

impl Flags {
    pub fn settings(&self) -> Result<Settings, String> {
        if self.rerank_candidates == 0 {
            return Err("--rerank-candidates must be at least 1".into());
        }
        if self.reranker_base_url.is_none()
            && (self.reranker_model.is_some() || self.reranker_api.is_some())
        {
            return Err("--reranker-model and --reranker-api need --reranker-base-url".into());
        }
        Ok(Settings {
            timeout: crate::flags::positive(self.reranker_timeout, "reranker-timeout")?,
            model_dir: self.reranker_model_dir.clone(),
            base_url: self.reranker_base_url.clone(),
            model: self.reranker_model.clone(),
            api: self.reranker_api.unwrap_or_default(),
            api_key: self.reranker_api_key.clone(),
            retries: self.reranker_retries,
            candidates: self.rerank_candidates,
        })
    }
}
