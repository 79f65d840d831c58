//! The embedder's settings (`--embedder` and its kin), resolved.

use std::path::PathBuf;

use serde::Deserialize;

use crate::secret::Secret;

/// Where `memmachine model fetch` puts all-MiniLM-L6-v2, and where `serve` looks.
pub const DEFAULT_MODEL_DIR: &str = "./memmachine-models/all-MiniLM-L6-v2";

/// The precision of the local embedder's products (`--embedder-precision`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedderPrecision {
    /// bf16 where the CPU has AMX, else f32.
    #[default]
    Auto,
    F32,
    Bf16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
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
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub dimensions: Option<usize>,
    pub precision: EmbedderPrecision,
    pub api_key: Option<Secret>,
}
