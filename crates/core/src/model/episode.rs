//! Episodes: every message kept as it was said.

use std::collections::BTreeMap;

/// An episode to store; the store assigns `sequence_num`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEpisode {
    pub uid: uuid::Uuid,
    pub content: String,
    pub producer_id: String,
    pub producer_role: String,
    pub produced_for_id: String,
    pub episode_type: String,
    pub content_type: String,
    /// Microseconds since the Unix epoch.
    pub created_at_micros: i64,
    pub metadata: BTreeMap<String, String>,
    /// When the message itself expires (microseconds); `None`: the project's retention decides.
    pub expires_at_micros: Option<i64>,
    /// The client's key for the message: stored once per project within a window.
    pub idempotency: Option<Idempotency>,
}

/// A message's idempotency key; a message whose key the project stored at or after
/// `at_micros - window_micros` is not stored again (the stored episode answers for it).
#[derive(Debug, Clone, PartialEq)]
pub struct Idempotency {
    pub key: String,
    /// When the add happens (microseconds), recorded with the key.
    pub at_micros: i64,
    pub window_micros: i64,
}

/// What an add did with one message: stored it, or found its key already stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddedEpisode {
    /// The new episode's uid, or for a duplicate the uid of the episode stored first.
    pub uid: uuid::Uuid,
    pub sequence_num: i64,
    pub duplicate: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub uid: uuid::Uuid,
    pub content: String,
    pub producer_id: String,
    pub producer_role: String,
    pub produced_for_id: String,
    pub sequence_num: i64,
    pub episode_type: String,
    pub content_type: String,
    pub created_at_micros: i64,
    pub metadata: BTreeMap<String, String>,
    /// As read from the store, the message's own expiry; as answered by the domain, the
    /// effective one (the earlier of it and `created_at` plus the project's retention).
    pub expires_at_micros: Option<i64>,
}

impl Episode {
    /// About how many bytes the episode takes in an answer (its strings, and a little
    /// for the fixed fields and framing).
    pub fn approximate_bytes(&self) -> usize {
        let strings = self.content.len()
            + self.producer_id.len()
            + self.producer_role.len()
            + self.produced_for_id.len()
            + self.episode_type.len()
            + self.content_type.len();
        let metadata: usize = self
            .metadata
            .iter()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum();
        strings + metadata + 96
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScoredEpisode {
    pub episode: Episode,
    pub score: f64,
    /// What the score is made of: only when the search asked to explain it.
    pub parts: Option<super::ScoreParts>,
}

/// Stored names of the episode and content types.
pub const EPISODE_TYPE_MESSAGE: &str = "message";
pub const CONTENT_TYPE_STRING: &str = "string";
