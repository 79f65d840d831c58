//! The language model's settings (`--llm-base-url` and its kin), resolved.

use crate::secret::Secret;

#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<Secret>,
    /// `None`: no cap.
    pub max_calls_per_minute: Option<u32>,
    pub timeout: std::time::Duration,
}
