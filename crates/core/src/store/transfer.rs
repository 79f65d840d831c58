//! The row operations `memmachine export` and `import` need beyond the other traits:
//! writing rows with the ids, sequence numbers and timestamps they had in another
//! store, and reading episode vectors with the embedders that made them. The file
//! format, the order of rows, the refusal rules and the mapping of public ids to a
//! target's handles are the domain's (`memmachine::transfer`).

use async_trait::async_trait;

use super::semantic_features::NewFeature;
use super::semantic_sets::{SetRow, SetType};
use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{Episode, EpisodeHandle, FeatureId, Project, SetId};

/// An episode's vector as stored, with the id of the embedder that made it.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeVector {
    pub uid: uuid::Uuid,
    pub sequence_num: i64,
    pub embedder: String,
    pub vector: Vec<f32>,
}

/// A feature to write as it was: its public id, fields and keys (`feature`), the set it
/// belongs to and the episodes it cites (the target's internal ids), and its timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoredFeature {
    pub set: SetId,
    pub feature: NewFeature,
    pub citations: Vec<EpisodeHandle>,
    pub created_at_micros: i64,
    pub updated_at_micros: i64,
}

#[async_trait]
pub trait TransferStore: Send + Sync {
    /// Creates the project with exactly these fields (its creation time and episodic
    /// settings included; `internal_id` is ignored) or, when it exists (the universal
    /// project always does), sets them on it. Returns the stored project.
    async fn restore_project(&self, project: &Project) -> Result<Project>;

    /// Stores these episodes with their own uids and sequence numbers, all or none
    /// (`AlreadyExists` when a uid or a sequence number is taken), moves the project's
    /// next sequence number past the highest, and appends one `Added` change per
    /// episode to its log, as `add_episodes` does; nothing is queued for a vector.
    /// Returns their handles, in input order. `NotFound` when the project does not exist.
    async fn restore_episodes(
        &self,
        key: &ProjectAccess,
        episodes: Vec<Episode>,
    ) -> Result<Vec<EpisodeHandle>>;

    /// The project's episodes' vectors (of any embedder) for episodes with
    /// `sequence_num > after_seq`, in sequence order, at most `limit`.
    async fn episode_vectors(
        &self,
        key: &ProjectAccess,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<EpisodeVector>>;

    /// The set type with this public id.
    async fn find_set_type(&self, id: &str) -> Result<Option<SetType>>;

    /// Stores the set type with its public id, fields and creation time, in `project`
    /// or, for `None`, at the level of its org (`set_type.org_id`); `internal_id` and
    /// `project` of `set_type` are ignored. `AlreadyExists` when the id is taken.
    async fn restore_set_type(
        &self,
        project: Option<&ProjectAccess>,
        set_type: &SetType,
    ) -> Result<SetType>;

    /// Stores the set with its set id, fields (its `set_type`: the target's internal id)
    /// and creation time, in `project` or, for `None`, at the level of its org;
    /// `internal_id` and `project` of `set` are ignored. `AlreadyExists` when the set id
    /// is taken.
    async fn restore_set(&self, project: Option<&ProjectAccess>, set: &SetRow) -> Result<SetRow>;

    /// Deletes the set with everything in it (its categories and their tags, disabled
    /// names, features with their citations and vectors, queued messages), moving its
    /// org's semantic version; false when there is no such set.
    async fn delete_set(&self, internal_id: SetId) -> Result<bool>;

    /// Stores these features with their public ids, fields, keys, timestamps and
    /// citations, all or none (`AlreadyExists` when an id is taken, `NotFound` when a set
    /// or a cited episode does not exist), moving their orgs' semantic versions; nothing
    /// is queued for a vector. Returns their internal ids, in input order.
    async fn restore_features(&self, features: Vec<RestoredFeature>) -> Result<Vec<FeatureId>>;
}
