//! Semantic memory on PostgreSQL: `SemanticSets`, `SemanticFeatures`, `SemanticQueue`
//! and `Summaries` for `PostgresStore`. Sets, set types, categories and tags are in
//! `semantic_sets`, features and their vectors in `semantic_features`, the ingestion
//! queue in `semantic_queue` and short-term summaries in `semantic_summaries`. Each call runs in one transaction.
//!
//! Beside the trait, as inherent methods, the shapes the trait takes after the merge:
//! `add_episodes_routed` with the embedder to queue the episodes for, and
//! `claim_feature_embeddings` / `release_feature_embeddings` (leases, like
//! `claim_embeddings`).

use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgConnection;

use super::PostgresStore;
use super::error::db_error;
use super::helpers::raw_ids;
use super::{
    episodes, feature_history, semantic_features as features, semantic_queue as queue,
    semantic_sets as sets, semantic_summaries as summaries,
};
use memmachine_core::access::ProjectAccess;
use memmachine_core::error::Result;
use memmachine_core::model::{
    AddedEpisode, CategoryId, Episode, EpisodeHandle, FeatureId, NewEpisode, ProjectConfig,
    ProjectHandle, ProjectKey, SetId, SetTypeId, TagId,
};
use memmachine_core::store::{
    Batch, Category, CategoryOwner, ClaimRule, Feature, FeatureOp, FeatureUpdate, IndexedFeature,
    NewCategory, NewFeature, NewSet, NewSetType, PendingFeatureEmbedding, SetConfig, SetRow,
    SetType, Summary, Tag,
};
use memmachine_core::store::{
    Routing, SemanticFeatures, SemanticQueue, SemanticSets, Summaries, routing_of_stored,
};

/// Runs `f` in a transaction and commits what it did when it succeeds.
macro_rules! in_tx {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let mut tx = $store.pool().begin().await.map_err(db_error)?;
        let value = {
            let $tx: &mut PgConnection = &mut tx;
            $body.await?
        };
        tx.commit().await.map_err(db_error)?;
        Ok(value)
    }};
}

/// Runs `f` on a pooled connection, outside any explicit transaction.
macro_rules! on_conn {
    ($store:expr, |$conn:ident| $body:expr) => {{
        let mut conn = $store.pool().acquire().await.map_err(db_error)?;
        let $conn: &mut PgConnection = &mut conn;
        $body.await
    }};
}

#[async_trait]
impl SemanticSets for PostgresStore {
    async fn create_set_type(&self, key: &ProjectAccess, set_type: NewSetType) -> Result<SetType> {
        in_tx!(self, |tx| sets::create_set_type(tx, key, &set_type))
    }

    async fn list_set_types(&self, key: &ProjectAccess) -> Result<Vec<SetType>> {
        on_conn!(self, |conn| sets::list_set_types(conn, key))
    }

    async fn delete_set_type(&self, internal_id: SetTypeId) -> Result<bool> {
        in_tx!(self, |tx| sets::delete_set_type(tx, internal_id.raw()))
    }

    async fn ensure_sets(&self, key: &ProjectAccess, new: Vec<NewSet>) -> Result<Vec<SetRow>> {
        in_tx!(self, |tx| sets::ensure_sets_of(tx, key, &new))
    }

    async fn find_set(&self, set_id: &str) -> Result<Option<SetRow>> {
        on_conn!(self, |conn| sets::find_set(conn, set_id))
    }

    async fn project_config(&self, project: ProjectHandle) -> Result<Option<ProjectConfig>> {
        on_conn!(self, |conn| sets::project_config(conn, project.raw()))
    }

    async fn list_sets(&self, key: &ProjectAccess) -> Result<Vec<SetRow>> {
        on_conn!(self, |conn| sets::list_sets(conn, key))
    }

    async fn configure_set(&self, set: SetId, config: SetConfig) -> Result<()> {
        in_tx!(self, |tx| sets::configure_set(tx, set.raw(), &config))
    }

    async fn add_category(&self, owner: CategoryOwner, category: NewCategory) -> Result<Category> {
        in_tx!(self, |tx| sets::add_category(tx, owner, &category))
    }

    async fn find_category(&self, id: &str) -> Result<Option<Category>> {
        on_conn!(self, |conn| sets::find_category(conn, id))
    }

    async fn categories_of(&self, owners: &[CategoryOwner]) -> Result<Vec<Category>> {
        on_conn!(self, |conn| sets::categories_of(conn, owners))
    }

    async fn delete_category(&self, internal_id: CategoryId, of_sets: &[SetId]) -> Result<()> {
        let of_sets = raw_ids(of_sets, SetId::raw);
        in_tx!(self, |tx| sets::delete_category(
            tx,
            internal_id.raw(),
            &of_sets
        ))
    }

    async fn disable_category(&self, set: SetId, name: &str) -> Result<()> {
        in_tx!(self, |tx| sets::disable_category(tx, set.raw(), name))
    }

    async fn disabled_categories(&self, set: SetId) -> Result<Vec<String>> {
        on_conn!(self, |conn| sets::disabled_categories(conn, set.raw()))
    }

    async fn sets_of_type(&self, set_type: SetTypeId) -> Result<Vec<SetRow>> {
        on_conn!(self, |conn| sets::sets_of_type(conn, set_type.raw()))
    }

    async fn add_tag(
        &self,
        category: CategoryId,
        id: &str,
        name: &str,
        description: &str,
    ) -> Result<Tag> {
        in_tx!(self, |tx| sets::add_tag(
            tx,
            category.raw(),
            id,
            name,
            description
        ))
    }

    async fn find_tag(&self, id: &str) -> Result<Option<Tag>> {
        on_conn!(self, |conn| sets::find_tag(conn, id))
    }

    async fn delete_tag(&self, internal_id: TagId) -> Result<()> {
        in_tx!(self, |tx| sets::delete_tag(tx, internal_id.raw()))
    }
}

#[async_trait]
impl SemanticFeatures for PostgresStore {
    async fn resolve_episodes(
        &self,
        key: &ProjectAccess,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<EpisodeHandle>> {
        on_conn!(self, |conn| async {
            let project = super::projects::require(&mut *conn, key).await?;
            episodes::rows_of(
                conn,
                &key.org_id,
                project,
                key,
                uids,
                "a feature cites episodes of its project only",
            )
            .await
            .map(|rows| rows.into_iter().map(EpisodeHandle::from_raw).collect())
        })
    }

    async fn add_feature(
        &self,
        set: SetId,
        feature: NewFeature,
        citations: &[EpisodeHandle],
        embedder: Option<String>,
    ) -> Result<Feature> {
        in_tx!(self, |tx| features::add(
            tx,
            set.raw(),
            &feature,
            citations,
            embedder.as_deref()
        ))
    }

    async fn find_feature(&self, id: &str) -> Result<Option<Feature>> {
        on_conn!(self, |conn| features::find(conn, id))
    }

    async fn features(&self, ids: &[FeatureId]) -> Result<Vec<Feature>> {
        let ids = raw_ids(ids, FeatureId::raw);
        on_conn!(self, |conn| features::by_ids(conn, &ids))
    }

    async fn update_feature(
        &self,
        internal_id: FeatureId,
        update: FeatureUpdate,
        embedder: Option<String>,
    ) -> Result<()> {
        in_tx!(self, |tx| features::update(
            tx,
            internal_id.raw(),
            &update,
            embedder.as_deref()
        ))
    }

    async fn delete_features(&self, ids: &[FeatureId]) -> Result<u64> {
        let ids = raw_ids(ids, FeatureId::raw);
        in_tx!(self, |tx| features::delete(tx, &ids))
    }

    async fn list_features(
        &self,
        of_sets: &[SetId],
        after: Option<FeatureId>,
        limit: usize,
    ) -> Result<Vec<Feature>> {
        let (of_sets, after) = (
            raw_ids(of_sets, SetId::raw),
            after.map_or(0, FeatureId::raw),
        );
        on_conn!(self, |conn| features::list(conn, &of_sets, after, limit))
    }

    async fn category_features(&self, set: SetId, category_key: &str) -> Result<Vec<Feature>> {
        on_conn!(self, |conn| features::of_category(
            conn,
            set.raw(),
            category_key
        ))
    }

    async fn indexed_features(&self, of_sets: &[SetId]) -> Result<Vec<IndexedFeature>> {
        let of_sets = raw_ids(of_sets, SetId::raw);
        on_conn!(self, |conn| features::indexed(conn, &of_sets))
    }

    async fn semantic_version(&self, org_id: &str) -> Result<i64> {
        sqlx::query_scalar(
            "SELECT COALESCE(MAX(version), 0)::bigint FROM semantic_versions WHERE org_id = $1",
        )
        .bind(org_id)
        .fetch_one(self.pool())
        .await
        .map_err(db_error)
    }

    async fn claim_feature_embeddings(
        &self,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<PendingFeatureEmbedding>> {
        on_conn!(self, |conn| features::claim_vectors(conn, limit, lease))
    }

    async fn release_feature_embeddings(&self, features: &[FeatureId]) -> Result<()> {
        let features = raw_ids(features, FeatureId::raw);
        on_conn!(self, |conn| features::release_vectors(conn, &features))
    }

    async fn store_feature_embeddings(
        &self,
        embedder: &str,
        vectors: Vec<(FeatureId, Vec<f32>)>,
    ) -> Result<()> {
        let vectors: Vec<(i64, Vec<f32>)> =
            vectors.into_iter().map(|(f, v)| (f.raw(), v)).collect();
        let dims = super::vectors::dimensions(vectors.iter().map(|(_, v)| v));
        let stored: Result<()> = in_tx!(self, |tx| features::store_vectors(tx, embedder, &vectors));
        stored?;
        self.ensure_hnsw("feature_embeddings", &dims).await;
        Ok(())
    }

    async fn abandon_feature_embeddings(&self, ids: &[FeatureId]) -> Result<()> {
        let ids = raw_ids(ids, FeatureId::raw);
        in_tx!(self, |tx| features::abandon_vectors(tx, &ids))
    }
}

#[async_trait]
impl SemanticQueue for PostgresStore {
    async fn add_episodes_routed(
        &self,
        key: &ProjectAccess,
        new: Vec<NewEpisode>,
        routing: Vec<Routing>,
        embedder: Option<&str>,
    ) -> Result<Vec<AddedEpisode>> {
        in_tx!(self, |tx| async {
            let added = episodes::add(&mut *tx, key, &new, embedder).await?;
            let routing = routing_of_stored(routing, &added.answers);
            queue::route(
                &mut *tx,
                added.project,
                &added.org_id,
                &added.rows,
                &routing,
            )
            .await?;
            Ok::<_, memmachine_core::error::Error>(added.answers)
        })
    }

    async fn claim_batch(&self, rule: ClaimRule) -> Result<Option<Batch>> {
        in_tx!(self, |tx| queue::claim(tx, &rule))
    }

    async fn apply_batch(
        &self,
        batch: &Batch,
        ops: Vec<FeatureOp>,
        embedder: Option<String>,
    ) -> Result<bool> {
        in_tx!(self, |tx| queue::apply(
            tx,
            batch,
            &ops,
            embedder.as_deref()
        ))
    }

    async fn preceding_episodes(
        &self,
        episodes: &[EpisodeHandle],
    ) -> Result<Vec<Option<(EpisodeHandle, Episode)>>> {
        on_conn!(self, |conn| queue::preceding(conn, episodes))
    }

    async fn release_batch(&self, batch: &Batch, not_before_micros: i64) -> Result<()> {
        in_tx!(self, |tx| queue::release(tx, batch, not_before_micros))
    }

    async fn fail_batch(&self, batch: &Batch, reason: &str) -> Result<()> {
        in_tx!(self, |tx| queue::fail(tx, batch, reason))
    }

    async fn consolidate(
        &self,
        set: SetId,
        remove: &[FeatureId],
        add: Vec<NewFeature>,
        embedder: Option<String>,
    ) -> Result<()> {
        let (set, remove) = (set.raw(), raw_ids(remove, FeatureId::raw));
        in_tx!(self, |tx| consolidate(
            tx,
            set,
            &remove,
            &add,
            embedder.as_deref()
        ))
    }
}

#[async_trait]
impl Summaries for PostgresStore {
    async fn summary(&self, key: &ProjectAccess) -> Result<Option<Summary>> {
        on_conn!(self, |conn| summaries::summary(conn, key))
    }

    async fn put_summary(
        &self,
        key: &ProjectAccess,
        summary: Summary,
        previous_last_seq: Option<i64>,
    ) -> Result<bool> {
        in_tx!(self, |tx| summaries::put(
            tx,
            key,
            &summary,
            previous_last_seq
        ))
    }

    async fn projects_changed(&self, after: i64) -> Result<(Vec<ProjectKey>, i64)> {
        in_tx!(self, |tx| summaries::projects_changed(tx, after))
    }

    async fn episodes_between(
        &self,
        key: &ProjectAccess,
        after_seq: i64,
        through_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        on_conn!(self, |conn| summaries::episodes_between(
            conn,
            key,
            after_seq,
            through_seq,
            limit
        ))
    }
}

/// Replaces `remove` by `add` in the set; the removed features' versions become the
/// survivors' history.
async fn consolidate(
    tx: &mut PgConnection,
    set: i64,
    remove: &[i64],
    add: &[NewFeature],
    embedder: Option<&str>,
) -> Result<()> {
    let survivors = features::consolidate(&mut *tx, set, remove, add, embedder).await?;
    let survivors: Vec<(i64, &str)> = survivors
        .into_iter()
        .zip(add.iter().map(|f| f.id.as_str()))
        .collect();
    feature_history::merge_into(tx, remove, &survivors).await
}
