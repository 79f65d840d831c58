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

/// The local embedder's product kernel (`--embedder-kernel`); see
/// `memmachine_bert::Kernel`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EmbedderKernel {
    /// The fastest the CPU has whose vectors stay within a cosine of 0.999 of f32's
    /// (or as `--embedder-precision` asks).
    #[default]
    Auto,
    Amx,
    Avx512Int16,
    Avx512Int8,
    Avx512Bf16,
    Avx512,
    Avx2,
    Portable,
}

impl EmbedderKernel {
    /// The kernel asked for; `None` for auto.
    pub fn kernel(self) -> Option<memmachine_bert::Kernel> {
        use memmachine_bert::Kernel;
        Some(match self {
            EmbedderKernel::Auto => return None,
            EmbedderKernel::Amx => Kernel::Amx,
            EmbedderKernel::Avx512Int16 => Kernel::Avx512Int16,
            EmbedderKernel::Avx512Int8 => Kernel::Avx512Int8,
            EmbedderKernel::Avx512Bf16 => Kernel::Avx512Bf16,
            EmbedderKernel::Avx512 => Kernel::Avx512F32,
            EmbedderKernel::Avx2 => Kernel::Avx2,
            EmbedderKernel::Portable => Kernel::Portable,
        })
    }
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
    pub kernel: EmbedderKernel,
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
    /// Product kernel of the local embedder: auto, amx, avx512-int16, avx512-int8,
    /// avx512-bf16, avx512 (f32), avx2 or portable; one the CPU lacks is refused at
    /// start. auto takes the fastest whose vectors stay within a cosine of 0.999 of f32
    /// (int8 never), or follows --embedder-precision
    #[arg(long, env = "MEMMACHINE_EMBEDDER_KERNEL", value_enum, default_value_t)]
    pub embedder_kernel: EmbedderKernel,
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
            kernel: self.embedder_kernel,
            api_key: self.embedder_api_key.clone(),
        }
    }
}
