//! The storage trait of semantic memory (its rows are in `semantic_*` and `summaries`): rows only. Which sets a message lands in, how
//! facts are matched, ranked and merged are the domain's (`semantic/`); a backend
//! stores, finds and changes rows, each call in one transaction. Methods that take a
//! project key resolve it inside their transaction (`NotFound` when it is gone).

use async_trait::async_trait;

use super::semantic_features::{
    Feature, FeatureUpdate, IndexedFeature, NewFeature, PendingFeatureEmbedding,
};
use super::semantic_queue::{Batch, ClaimRule, FeatureOp, Routing};
use super::semantic_sets::{
    Category, CategoryOwner, NewCategory, NewSet, NewSetType, SetConfig, SetRow, SetType, Tag,
};
use super::summaries::Summary;
use crate::error::Result;
use crate::model::{
    CategoryId, Episode, EpisodeHandle, FeatureId, NewEpisode, ProjectConfig, ProjectHandle,
    ProjectKey, SetId, SetTypeId, TagId,
};

#[async_trait]
pub trait SemanticStore: Send + Sync {
    /// Stores the episodes as `EpisodeStore::add_episodes` does (queued for a vector
    /// from `embedder`, logged in the change feed) and, in the same transaction, creates
    /// the sets of `routing` that do not exist and queues the episodes for them. Returns
    /// the episodes' sequence numbers.
    async fn add_episodes_routed(
        &self,
        key: &ProjectKey,
        episodes: Vec<NewEpisode>,
        routing: Vec<Routing>,
        embedder: Option<&str>,
    ) -> Result<Vec<i64>>;

    // Set types.

    /// `AlreadyExists` naming the existing one when a visible set type has the same
    /// level and tags.
    async fn create_set_type(&self, key: &ProjectKey, set_type: NewSetType) -> Result<SetType>;
    /// The project's own set types and its org's org-level ones.
    async fn list_set_types(&self, key: &ProjectKey) -> Result<Vec<SetType>>;
    /// Deletes it with its templates; its sets stay (as sets of no type).
    async fn delete_set_type(&self, internal_id: SetTypeId) -> Result<bool>;

    // Sets.

    /// Creates the sets that do not exist (by `set_id`) and returns all of them.
    async fn ensure_sets(&self, key: &ProjectKey, sets: Vec<NewSet>) -> Result<Vec<SetRow>>;
    async fn find_set(&self, set_id: &str) -> Result<Option<SetRow>>;
    /// The configuration of the project with this internal id (`None`: it is gone).
    async fn project_config(&self, project: ProjectHandle) -> Result<Option<ProjectConfig>>;
    /// The project's sets and its org's org-level sets, by set id.
    async fn list_sets(&self, key: &ProjectKey) -> Result<Vec<SetRow>>;
    async fn configure_set(&self, set: SetId, config: SetConfig) -> Result<()>;

    // Categories and tags.

    /// `AlreadyExists` when the owner has a category of that name.
    async fn add_category(&self, owner: CategoryOwner, category: NewCategory) -> Result<Category>;
    async fn find_category(&self, id: &str) -> Result<Option<Category>>;
    /// Categories (with their tags) owned by these owners.
    async fn categories_of(&self, owners: Vec<CategoryOwner>) -> Result<Vec<Category>>;
    /// Deletes the category, its tags and the features of `sets` in a category of its
    /// name (the sets that used it).
    async fn delete_category(&self, internal_id: CategoryId, sets: Vec<SetId>) -> Result<()>;
    async fn disable_category(&self, set: SetId, name: &str) -> Result<()>;
    async fn disabled_categories(&self, set: SetId) -> Result<Vec<String>>;
    /// Sets of the set type (internal ids).
    async fn sets_of_type(&self, set_type: SetTypeId) -> Result<Vec<SetRow>>;
    /// `AlreadyExists` when the category has a tag of that name.
    async fn add_tag(
        &self,
        category: CategoryId,
        id: &str,
        name: &str,
        description: &str,
    ) -> Result<Tag>;
    async fn find_tag(&self, id: &str) -> Result<Option<Tag>>;
    async fn delete_tag(&self, internal_id: TagId) -> Result<()>;

    // Features.

    /// Internal ids of these episodes of the project, in order; `NotFound` naming those
    /// that are not in it.
    async fn resolve_episodes(
        &self,
        key: &ProjectKey,
        uids: Vec<uuid::Uuid>,
    ) -> Result<Vec<EpisodeHandle>>;
    async fn add_feature(
        &self,
        set: SetId,
        feature: NewFeature,
        citations: Vec<EpisodeHandle>,
        embedder: Option<String>,
    ) -> Result<Feature>;
    async fn find_feature(&self, id: &str) -> Result<Option<Feature>>;
    /// Features by internal id, in the order asked (missing ones left out).
    async fn features(&self, ids: Vec<FeatureId>) -> Result<Vec<Feature>>;
    async fn update_feature(
        &self,
        internal_id: FeatureId,
        update: FeatureUpdate,
        embedder: Option<String>,
    ) -> Result<()>;
    /// Deletes those of these features that exist; returns how many.
    async fn delete_features(&self, ids: Vec<FeatureId>) -> Result<u64>;
    /// Features of these sets after feature `after` (from the first: `None`), in id
    /// order.
    async fn list_features(
        &self,
        sets: Vec<SetId>,
        after: Option<FeatureId>,
        limit: usize,
    ) -> Result<Vec<Feature>>;
    /// Features of one set in one category (matching `category_key`, normalised).
    async fn category_features(&self, set: SetId, category_key: &str) -> Result<Vec<Feature>>;
    /// The searchable fields of every feature of these sets.
    async fn indexed_features(&self, sets: Vec<SetId>) -> Result<Vec<IndexedFeature>>;
    /// A number that changes whenever a feature of the org is added, changed or deleted.
    async fn semantic_version(&self, org_id: &str) -> Result<i64>;

    // Ingestion.

    /// Claims the queued messages of one set that is ready by `rule`, under a new lease.
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
        episodes: Vec<EpisodeHandle>,
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
        remove: Vec<FeatureId>,
        add: Vec<NewFeature>,
        embedder: Option<String>,
    ) -> Result<()>;

    // Feature vectors.

    /// Claims up to `limit` features waiting for a vector whose lease is free or
    /// expired, oldest first, leasing them for `lease`.
    async fn claim_feature_embeddings(
        &self,
        limit: usize,
        lease: std::time::Duration,
    ) -> Result<Vec<PendingFeatureEmbedding>>;
    /// Frees the leases of these queued features (a failed attempt).
    async fn release_feature_embeddings(&self, features: Vec<FeatureId>) -> Result<()>;
    async fn store_feature_embeddings(
        &self,
        embedder: &str,
        vectors: Vec<(FeatureId, Vec<f32>)>,
    ) -> Result<()>;
    /// Takes these features off the vector queue without one.
    async fn abandon_feature_embeddings(&self, features: Vec<FeatureId>) -> Result<()>;

    // Summaries.

    async fn summary(&self, key: &ProjectKey) -> Result<Option<Summary>>;
    /// Stores the project's summary if its current one still ends at `previous_last_seq`
    /// (`None`: there is none) and no episode it covers was deleted meanwhile; false
    /// when it changed.
    async fn put_summary(
        &self,
        key: &ProjectKey,
        summary: Summary,
        previous_last_seq: Option<i64>,
    ) -> Result<bool>;
    /// Projects (keys) with episodes added since `after` (a store cursor), and the new
    /// cursor: what the summariser looks at.
    async fn projects_changed(&self, after: i64) -> Result<(Vec<ProjectKey>, i64)>;
    /// Episodes with `after_seq < seq <= through_seq`, oldest first, at most `limit`.
    async fn episodes_between(
        &self,
        key: &ProjectKey,
        after_seq: i64,
        through_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>>;
}
