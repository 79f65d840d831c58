//! The embedder's settings (`--embedder` and its kin).

use crate::urls::SecretUrl;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// Where `memmachine model fetch` puts all-MiniLM-L6-v2, and where `serve` looks.
pub const DEFAULT_MODEL_DIR: &str = "./memmachine-models/all-MiniLM-L6-v2";

/// The precision of the local embedder's products (`--embedder-precision`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedderPrecision {
    /// bf16 where the CPU has AMX, else f32.
    #[default]
    Auto,
    F32,
    Bf16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedderKind {
    None,
    Hash,
    Local,
    Openai,
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// `None` when not asked for: local if a model is in `model_dir`, else none.
    pub kind: Option<EmbedderKind>,
    pub model_dir: PathBuf,
    pub base_url: Option<SecretUrl>,
    pub model: Option<String>,
    pub dimensions: Option<usize>,
    pub precision: EmbedderPrecision,
    pub api_key: Option<Secret>,
}

/// The embedder's flags, environment variables and config file keys.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// Embedder: none, hash, local or openai [default: local when a model is in
    /// --model-dir, else none]
    #[arg(long, env = "MEMMACHINE_EMBEDDER")]
    pub embedder: Option<EmbedderKind>,
    /// Hugging Face sentence-embedding model directory
    #[arg(long, env = "MEMMACHINE_MODEL_DIR", default_value = DEFAULT_MODEL_DIR)]
    pub model_dir: PathBuf,
    /// OpenAI-compatible embeddings endpoint, e.g. http://localhost:11434/v1
    #[arg(long, env = "MEMMACHINE_EMBEDDER_BASE_URL")]
    pub embedder_base_url: Option<SecretUrl>,
    /// Model name sent to the OpenAI-compatible endpoint
    #[arg(long, env = "MEMMACHINE_EMBEDDER_MODEL")]
    pub embedder_model: Option<String>,
    /// Vector length: of the hash embedder [default: 256], or asked of the endpoint
    #[arg(long, env = "MEMMACHINE_EMBEDDER_DIMENSIONS")]
    pub embedder_dimensions: Option<usize>,
    /// Products of the local embedder: f32, bf16 (on AMX: about twice as fast, vectors
    /// within a cosine of 0.999), or auto (bf16 where the CPU has AMX)
    #[arg(
        long,
        env = "MEMMACHINE_EMBEDDER_PRECISION",
        value_enum,
        default_value_t
    )]
    pub embedder_precision: EmbedderPrecision,
    /// API key of the embeddings endpoint: only from the environment
    /// (MEMMACHINE_EMBEDDER_API_KEY) or the config file
    #[arg(skip)]
    pub embedder_api_key: Option<Secret>,
}

impl Flags {
    pub fn settings(&self) -> Settings {
        Settings {
            kind: self.embedder,
            model_dir: self.model_dir.clone(),
            base_url: self.embedder_base_url.clone(),
            model: self.embedder_model.clone(),
            dimensions: self.embedder_dimensions,
            precision: self.embedder_precision,
            api_key: self.embedder_api_key.clone(),
        }
    }
}
