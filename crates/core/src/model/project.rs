//! Projects and their configuration.

use super::weights::{RankingWeights, RankingWeightsUpdate};
use super::{ProjectHandle, ProjectKey};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectConfig {
    pub embedder: String,
    pub reranker: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpisodicConfig {
    pub enabled: bool,
    pub long_term_memory_enabled: bool,
    pub short_term_memory_enabled: bool,
    /// Dense and hybrid ranking treat the participants a question names apart: the
    /// question is embedded without their names, and their turns are preferred.
    pub participant_aware: bool,
    /// How long after its `created_at` an episode is kept (microseconds); `None`: forever.
    pub episode_retention_micros: Option<i64>,
    /// How hybrid ranking weighs its parts (stored as one JSON object).
    pub ranking_weights: RankingWeights,
}

impl Default for EpisodicConfig {
    fn default() -> Self {
        EpisodicConfig {
            enabled: true,
            long_term_memory_enabled: true,
            short_term_memory_enabled: true,
            participant_aware: true,
            episode_retention_micros: None,
            ranking_weights: RankingWeights::DEFAULT,
        }
    }
}

/// A partial update: `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default)]
pub struct EpisodicConfigUpdate {
    pub enabled: Option<bool>,
    pub long_term_memory_enabled: Option<bool>,
    pub short_term_memory_enabled: Option<bool>,
    pub participant_aware: Option<bool>,
    /// `Some(None)` clears the retention (keep forever).
    pub episode_retention_micros: Option<Option<i64>>,
    /// The weights set; the others are kept.
    pub ranking_weights: RankingWeightsUpdate,
}

impl EpisodicConfig {
    pub fn apply(self, update: EpisodicConfigUpdate) -> EpisodicConfig {
        EpisodicConfig {
            enabled: update.enabled.unwrap_or(self.enabled),
            long_term_memory_enabled: update
                .long_term_memory_enabled
                .unwrap_or(self.long_term_memory_enabled),
            short_term_memory_enabled: update
                .short_term_memory_enabled
                .unwrap_or(self.short_term_memory_enabled),
            participant_aware: update.participant_aware.unwrap_or(self.participant_aware),
            episode_retention_micros: update
                .episode_retention_micros
                .unwrap_or(self.episode_retention_micros),
            ranking_weights: update.ranking_weights.apply(self.ranking_weights),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    /// The store's own handle for the project, never shown to clients.
    pub internal_id: ProjectHandle,
    pub key: ProjectKey,
    pub description: String,
    pub config: ProjectConfig,
    pub episodic: EpisodicConfig,
    /// Microseconds since the Unix epoch.
    pub created_at_micros: i64,
}
