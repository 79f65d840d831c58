//! Semantic memory's ingestion queue: batches of messages claimed under a lease and
//! the feature changes applied with them.

use async_trait::async_trait;

use super::semantic_features::NewFeature;
use super::semantic_sets::{NewSet, SetRow};
use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{AddedEpisode, Episode, EpisodeHandle, FeatureId, NewEpisode, SetId};

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

/// `routing` of a batch renumbered for the episodes an add stored (duplicates, not
/// stored, are dropped: they were queued when first stored); sets left empty go too.
pub fn routing_of_stored(routing: Vec<Routing>, answers: &[AddedEpisode]) -> Vec<Routing> {
    if !answers.iter().any(|a| a.duplicate) {
        return routing;
    }
    let mut position = Vec::with_capacity(answers.len());
    let mut stored = 0;
    for answer in answers {
        position.push((!answer.duplicate).then_some(stored));
        stored += usize::from(!answer.duplicate);
    }
    routing
        .into_iter()
        .filter_map(|r| {
            let episodes: Vec<usize> = r
                .episodes
                .iter()
                .filter_map(|&i| position.get(i).copied().flatten())
                .collect();
            (!episodes.is_empty()).then_some(Routing {
                set: r.set,
                episodes,
            })
        })
        .collect()
}

/// Ingestion: messages routed to sets' queues, claimed in batches under a lease, and
/// the feature changes applied with them.
#[async_trait]
pub trait SemanticQueue: Send + Sync {
    /// Stores the episodes as `EpisodeStore::add_episodes` does (queued for a vector
    /// from `embedder`, logged in the change feed) and, in the same transaction, creates
    /// the sets of `routing` that do not exist and queues the episodes for them (a
    /// duplicate, not stored, is not queued). Answers as `add_episodes`.
    async fn add_episodes_routed(
        &self,
        key: &ProjectAccess,
        episodes: Vec<NewEpisode>,
        routing: Vec<Routing>,
        embedder: Option<&str>,
    ) -> Result<Vec<AddedEpisode>>;

    /// Claims the queued messages of one set that is ready by `rule`, under a new lease;
    /// sets of orgs paused now (`UsageStore::set_pause`) are skipped, their queue kept,
    /// and so are the messages of projects whose extraction is paused
    /// (`ExtractionStore::set_extraction_paused`), in any set.
    async fn claim_batch(&self, rule: ClaimRule) -> Result<Option<Batch>>;

    /// Applies `ops` to the batch's set and takes its messages off the queue, in one
    /// transaction, if the lease still holds them (false: it was lost; nothing done).
    /// `embedder` queues the changed features for a vector.
    async fn apply_batch(
        &self,
        batch: &Batch,
        ops: Vec<FeatureOp>,
        embedder: Option<String>,
    ) -> Result<bool>;

    /// For each episode (internal id), the one just before it in its project, if any:
    /// what a message answers, shown to the model as context.
    async fn preceding_episodes(
        &self,
        episodes: &[EpisodeHandle],
    ) -> Result<Vec<Option<(EpisodeHandle, Episode)>>>;

    /// Gives the batch back, to be tried again no sooner than `not_before_micros`.
    async fn release_batch(&self, batch: &Batch, not_before_micros: i64) -> Result<()>;

    /// Marks the batch's messages failed with `reason`; they are not tried again.
    async fn fail_batch(&self, batch: &Batch, reason: &str) -> Result<()>;

    /// Replaces `remove` by `add` in one transaction; the new features cite the union of
    /// the removed ones' citations.
    async fn consolidate(
        &self,
        set: SetId,
        remove: &[FeatureId],
        add: Vec<NewFeature>,
        embedder: Option<String>,
    ) -> Result<()>;
}
