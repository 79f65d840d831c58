//! Semantic memory's ingestion queue: batches of messages claimed under a lease and
//! the feature changes applied with them.

use super::semantic_features::NewFeature;
use super::semantic_sets::{NewSet, SetRow};
use crate::model::{Episode, EpisodeHandle};

/// One change the model asked for, applied in the batch's transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureOp {
    /// Adds the feature, or cites these episodes in the one with the same keys and value.
    Add {
        feature: NewFeature,
        citations: Vec<EpisodeHandle>,
    },
    /// Sets the value of the features with these keys (adding one when there is none)
    /// and cites these episodes.
    Update {
        feature: NewFeature,
        citations: Vec<EpisodeHandle>,
    },
    /// Deletes the features with this `match_key`.
    Delete { match_key: String },
}

/// Queued messages of one set, claimed under a lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub set: SetRow,
    /// The claim's token: only its holder may apply, release or fail the batch.
    pub lease: String,
    /// The episodes with their handles, in sequence order.
    pub messages: Vec<(EpisodeHandle, Episode)>,
    /// Attempts made on these messages so far.
    pub attempts: u32,
}

/// When a set's queued messages are ready for the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClaimRule {
    /// At least this many pending messages...
    pub min_messages: usize,
    /// ...or one queued at least this long ago (microseconds).
    pub max_age_micros: i64,
    /// Most messages in one batch.
    pub max_batch: usize,
    /// How long the claim holds (microseconds).
    pub lease_micros: i64,
    pub now_micros: i64,
}

/// Which episodes of a batch go to which sets' ingestion queues (indices into the
/// batch).
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    pub set: NewSet,
    pub episodes: Vec<usize>,
}
