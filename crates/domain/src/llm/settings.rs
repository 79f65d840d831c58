//! The language model's settings (`--llm-base-url` and its kin).

use crate::urls::SecretUrl;
use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// The language model's flags, environment variables and config file keys.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// Cap on language-model calls per minute; 0 is no cap
    #[arg(
        long,
        env = "MEMMACHINE_LLM_MAX_CALLS_PER_MINUTE",
        default_value_t = 60
    )]
    pub llm_max_calls_per_minute: u32,
    /// Language-model tokens each org may use per UTC day unless given its own budget
    /// (`memmachine budget set`); over it, its semantic ingestion pauses. 0 is unlimited
    #[arg(long, env = "MEMMACHINE_LLM_DAILY_TOKENS_PER_ORG", default_value_t = 0)]
    #[serde(default)]
    pub llm_daily_tokens_per_org: u64,
    /// Most tokens one language-model answer may have (`max_tokens`: a small model stuck
    /// repeating itself stops there); 0 leaves it to the endpoint
    #[arg(long, env = "MEMMACHINE_LLM_MAX_TOKENS", default_value_t = 2048)]
    #[serde(default = "default_max_tokens")]
    pub llm_max_tokens: u32,
    /// Seconds one language-model call may take
    #[arg(long, env = "MEMMACHINE_LLM_TIMEOUT", default_value_t = 60.0)]
    pub llm_timeout: f64,
    /// OpenAI-compatible chat-completions endpoint for semantic memory and summaries
    #[arg(long, env = "MEMMACHINE_LLM_BASE_URL")]
    pub llm_base_url: Option<SecretUrl>,
    /// Chat model name sent to --llm-base-url
    #[arg(long, env = "MEMMACHINE_LLM_MODEL")]
    pub llm_model: Option<String>,
    /// API key of the chat endpoint: only from the environment (MEMMACHINE_LLM_API_KEY)
    /// or the config file
    #[arg(skip)]
    pub llm_api_key: Option<Secret>,
}

fn default_max_tokens() -> u32 {
    2048
}

impl Flags {
    pub fn settings(&self) -> Result<Settings, String> {
        Ok(Settings {
            base_url: self.llm_base_url.clone(),
            model: self.llm_model.clone(),
            api_key: self.llm_api_key.clone(),
            max_calls_per_minute: Some(self.llm_max_calls_per_minute).filter(|n| *n > 0),
            max_tokens: Some(self.llm_max_tokens).filter(|n| *n > 0),
            timeout: crate::flags::positive(self.llm_timeout, "llm-timeout")?,
            daily_tokens_per_org: self.llm_daily_tokens_per_org,
        })
    }
}

/// The language model settings, resolved.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub base_url: Option<SecretUrl>,
    pub model: Option<String>,
    pub api_key: Option<Secret>,
    /// `None`: no cap.
    pub max_calls_per_minute: Option<u32>,
    /// `None`: the endpoint's own limit.
    pub max_tokens: Option<u32>,
    pub timeout: std::time::Duration,
    /// The daily token budget of orgs without their own; 0 is unlimited.
    pub daily_tokens_per_org: u64,
}
