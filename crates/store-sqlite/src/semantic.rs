//! Semantic memory on SQLite: `SemanticSets`, `SemanticFeatures`, `SemanticQueue` and
//! `Summaries` for `SqliteStore`. Sets, set types, categories and tags are in
//! `semantic_sets`, features and their vectors in `semantic_features`, the ingestion
//! queue in `semantic_queue` and short-term summaries in `semantic_summaries`. Reads go through the read pool, writes through
//! the writer, each call in one transaction.

use async_trait::async_trait;
use rusqlite::Connection;

use super::error::storage_error;
use super::helpers::raw_ids;
use super::{
    SqliteStore, feature_history, semantic_features as features, semantic_queue as queue,
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

fn resolve_episodes(
    conn: &Connection,
    key: &ProjectKey,
    uids: &[uuid::Uuid],
) -> Result<Vec<EpisodeHandle>> {
    super::episodes::rows_of(
        conn,
        key,
        uids,
        "a feature cites episodes of its project only",
    )
    .map(|(_, rows)| rows.into_iter().map(EpisodeHandle::from_raw).collect())
}

fn semantic_version(conn: &Connection, org_id: &str) -> Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(version), 0) FROM semantic_versions WHERE org_id = ?1")
        .and_then(|mut stmt| stmt.query_row([org_id], |row| row.get(0)))
        .map_err(storage_error)
}

#[async_trait]
impl SemanticSets for SqliteStore {
    async fn create_set_type(&self, key: &ProjectAccess, set_type: NewSetType) -> Result<SetType> {
        let key = key.clone();
        self.writer
            .write(move |conn| sets::create_set_type(conn, &key, &set_type))
            .await
    }

    async fn list_set_types(&self, key: &ProjectAccess) -> Result<Vec<SetType>> {
        let key = key.clone();
        self.readers
            .read(move |tx| sets::list_set_types(tx, &key))
            .await
    }

    async fn delete_set_type(&self, internal_id: SetTypeId) -> Result<bool> {
        self.writer
            .write(move |conn| sets::delete_set_type(conn, internal_id.raw()))
            .await
    }

    async fn ensure_sets(&self, key: &ProjectAccess, new: Vec<NewSet>) -> Result<Vec<SetRow>> {
        let key = key.clone();
        self.writer
            .write(move |conn| sets::ensure_sets_of(conn, &key, &new))
            .await
    }

    async fn find_set(&self, set_id: &str) -> Result<Option<SetRow>> {
        let set_id = set_id.to_string();
        self.readers
            .read(move |tx| sets::find_set(tx, &set_id))
            .await
    }

    async fn project_config(&self, project: ProjectHandle) -> Result<Option<ProjectConfig>> {
        self.readers
            .read(move |tx| sets::project_config(tx, project.raw()))
            .await
    }

    async fn list_sets(&self, key: &ProjectAccess) -> Result<Vec<SetRow>> {
        let key = key.clone();
        self.readers.read(move |tx| sets::list_sets(tx, &key)).await
    }

    async fn configure_set(&self, set: SetId, config: SetConfig) -> Result<()> {
        self.writer
            .write(move |conn| sets::configure_set(conn, set.raw(), &config))
            .await
    }

    async fn add_category(&self, owner: CategoryOwner, category: NewCategory) -> Result<Category> {
        self.writer
            .write(move |conn| sets::add_category(conn, owner, &category))
            .await
    }

    async fn find_category(&self, id: &str) -> Result<Option<Category>> {
        let id = id.to_string();
        self.readers
            .read(move |tx| sets::find_category(tx, &id))
            .await
    }

    async fn categories_of(&self, owners: &[CategoryOwner]) -> Result<Vec<Category>> {
        let owners = owners.to_vec();
        self.readers
            .read(move |tx| sets::categories_of(tx, &owners))
            .await
    }

    async fn delete_category(&self, internal_id: CategoryId, of_sets: &[SetId]) -> Result<()> {
        let of_sets = raw_ids(of_sets, SetId::raw);
        self.writer
            .write(move |conn| sets::delete_category(conn, internal_id.raw(), &of_sets))
            .await
    }

    async fn disable_category(&self, set: SetId, name: &str) -> Result<()> {
        let name = name.to_string();
        self.writer
            .write(move |conn| sets::disable_category(conn, set.raw(), &name))
            .await
    }

    async fn disabled_categories(&self, set: SetId) -> Result<Vec<String>> {
        self.readers
            .read(move |tx| sets::disabled_categories(tx, set.raw()))
            .await
    }

    async fn sets_of_type(&self, set_type: SetTypeId) -> Result<Vec<SetRow>> {
        self.readers
            .read(move |tx| sets::sets_of_type(tx, set_type.raw()))
            .await
    }

    async fn add_tag(
        &self,
        category: CategoryId,
        id: &str,
        name: &str,
        description: &str,
    ) -> Result<Tag> {
        let (id, name, description) = (id.to_string(), name.to_string(), description.to_string());
        self.writer
            .write(move |conn| sets::add_tag(conn, category.raw(), &id, &name, &description))
            .await
    }

    async fn find_tag(&self, id: &str) -> Result<Option<Tag>> {
        let id = id.to_string();
        self.readers.read(move |tx| sets::find_tag(tx, &id)).await
    }

    async fn delete_tag(&self, internal_id: TagId) -> Result<()> {
        self.writer
            .write(move |conn| sets::delete_tag(conn, internal_id.raw()))
            .await
    }
}

#[async_trait]
impl SemanticFeatures for SqliteStore {
    async fn resolve_episodes(
        &self,
        key: &ProjectAccess,
        uids: &[uuid::Uuid],
    ) -> Result<Vec<EpisodeHandle>> {
        let key = key.clone();
        let uids = uids.to_vec();
        self.readers
            .read(move |tx| resolve_episodes(tx, &key, &uids))
            .await
    }

    async fn add_feature(
        &self,
        set: SetId,
        feature: NewFeature,
        citations: &[EpisodeHandle],
        embedder: Option<String>,
    ) -> Result<Feature> {
        let citations = citations.to_vec();
        self.writer
            .write(move |conn| {
                features::add(conn, set.raw(), &feature, &citations, embedder.as_deref())
            })
            .await
    }

    async fn find_feature(&self, id: &str) -> Result<Option<Feature>> {
        let id = id.to_string();
        self.readers.read(move |tx| features::find(tx, &id)).await
    }

    async fn features(&self, ids: &[FeatureId]) -> Result<Vec<Feature>> {
        let ids = raw_ids(ids, FeatureId::raw);
        self.readers
            .read(move |tx| features::by_ids(tx, &ids))
            .await
    }

    async fn update_feature(
        &self,
        internal_id: FeatureId,
        update: FeatureUpdate,
        embedder: Option<String>,
    ) -> Result<()> {
        self.writer
            .write(move |conn| {
                features::update(conn, internal_id.raw(), &update, embedder.as_deref())
            })
            .await
    }

    async fn delete_features(&self, ids: &[FeatureId]) -> Result<u64> {
        let ids = raw_ids(ids, FeatureId::raw);
        self.writer
            .write(move |conn| features::delete(conn, &ids))
            .await
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
        self.readers
            .read(move |tx| features::list(tx, &of_sets, after, limit))
            .await
    }

    async fn category_features(&self, set: SetId, category_key: &str) -> Result<Vec<Feature>> {
        let category_key = category_key.to_string();
        self.readers
            .read(move |tx| features::of_category(tx, set.raw(), &category_key))
            .await
    }

    async fn indexed_features(&self, of_sets: &[SetId]) -> Result<Vec<IndexedFeature>> {
        let of_sets = raw_ids(of_sets, SetId::raw);
        self.readers
            .read(move |tx| features::indexed(tx, &of_sets))
            .await
    }

    async fn semantic_version(&self, org_id: &str) -> Result<i64> {
        let read = org_id.to_string();
        self.readers
            .read_here(move |tx| semantic_version(tx, &read))
            .await
    }

    async fn claim_feature_embeddings(
        &self,
        limit: usize,
        lease: std::time::Duration,
    ) -> Result<Vec<PendingFeatureEmbedding>> {
        self.writer
            .write(move |conn| features::claim_vectors(conn, limit, lease))
            .await
    }

    async fn release_feature_embeddings(&self, ids: &[FeatureId]) -> Result<()> {
        let ids = raw_ids(ids, FeatureId::raw);
        self.writer
            .write(move |conn| features::release_vectors(conn, &ids))
            .await
    }

    async fn store_feature_embeddings(
        &self,
        embedder: &str,
        vectors: Vec<(FeatureId, Vec<f32>)>,
    ) -> Result<()> {
        let embedder = embedder.to_string();
        let vectors: Vec<(i64, Vec<f32>)> =
            vectors.into_iter().map(|(f, v)| (f.raw(), v)).collect();
        self.writer
            .write(move |conn| features::store_vectors(conn, &embedder, &vectors))
            .await
    }

    async fn abandon_feature_embeddings(&self, ids: &[FeatureId]) -> Result<()> {
        let ids = raw_ids(ids, FeatureId::raw);
        self.writer
            .write(move |conn| features::abandon_vectors(conn, &ids))
            .await
    }
}

#[async_trait]
impl SemanticQueue for SqliteStore {
    async fn add_episodes_routed(
        &self,
        key: &ProjectAccess,
        episodes: Vec<NewEpisode>,
        routing: Vec<Routing>,
        embedder: Option<&str>,
    ) -> Result<Vec<AddedEpisode>> {
        let org_id = key.org_id.clone();
        self.add_episodes_then(key, episodes, embedder, move |conn, added| {
            let routing = routing_of_stored(routing, &added.answers);
            queue::route(conn, added.project, &org_id, &added.rows, &routing)
        })
        .await
    }

    async fn claim_batch(&self, rule: ClaimRule) -> Result<Option<Batch>> {
        // Finding a ready set scans the queue: done on a reader, so a backlog does not
        // hold up the writer; the claim re-checks that set under the write lock.
        let Some(set) = self
            .readers
            .read(move |tx| queue::ready_set(tx, &rule))
            .await?
        else {
            return Ok(None);
        };
        self.writer
            .write(move |conn| queue::claim(conn, set, &rule))
            .await
    }

    async fn apply_batch(
        &self,
        batch: &Batch,
        ops: Vec<FeatureOp>,
        embedder: Option<String>,
    ) -> Result<bool> {
        let batch = batch.clone();
        self.writer
            .write(move |conn| queue::apply(conn, &batch, &ops, embedder.as_deref()))
            .await
    }

    async fn release_batch(&self, batch: &Batch, not_before_micros: i64) -> Result<()> {
        let batch = batch.clone();
        self.writer
            .write(move |conn| queue::release(conn, &batch, not_before_micros))
            .await
    }

    async fn fail_batch(&self, batch: &Batch, reason: &str) -> Result<()> {
        let (batch, reason) = (batch.clone(), reason.to_string());
        self.writer
            .write(move |conn| queue::fail(conn, &batch, &reason))
            .await
    }

    async fn consolidate(
        &self,
        set: SetId,
        remove: &[FeatureId],
        add: Vec<NewFeature>,
        embedder: Option<String>,
    ) -> Result<()> {
        let (set, remove) = (set.raw(), raw_ids(remove, FeatureId::raw));
        self.writer
            .write(move |conn| {
                let survivors =
                    features::consolidate(conn, set, &remove, &add, embedder.as_deref())?;
                // The removed features' versions become the survivors' history.
                let survivors: Vec<(i64, &str)> = survivors
                    .into_iter()
                    .zip(add.iter().map(|f| f.id.as_str()))
                    .collect();
                feature_history::merge_into(conn, &remove, &survivors)
            })
            .await
    }

    async fn preceding_episodes(
        &self,
        episodes: &[EpisodeHandle],
    ) -> Result<Vec<Option<(EpisodeHandle, Episode)>>> {
        let episodes = episodes.to_vec();
        self.readers
            .read(move |tx| queue::preceding(tx, &episodes))
            .await
    }
}

#[async_trait]
impl Summaries for SqliteStore {
    async fn summary(&self, key: &ProjectAccess) -> Result<Option<Summary>> {
        let read = key.clone();
        self.readers
            .read_here(move |tx| summaries::summary(tx, &read))
            .await
    }

    async fn put_summary(
        &self,
        key: &ProjectAccess,
        summary: Summary,
        previous_last_seq: Option<i64>,
    ) -> Result<bool> {
        let key = key.clone();
        self.writer
            .write(move |conn| summaries::put(conn, &key, &summary, previous_last_seq))
            .await
    }

    async fn projects_changed(&self, after: i64) -> Result<(Vec<ProjectKey>, i64)> {
        self.writer
            .write(move |conn| summaries::projects_changed(conn, after))
            .await
    }

    async fn episodes_between(
        &self,
        key: &ProjectAccess,
        after_seq: i64,
        through_seq: i64,
        limit: usize,
    ) -> Result<Vec<Episode>> {
        let key = key.clone();
        self.readers
            .read(move |tx| summaries::episodes_between(tx, &key, after_seq, through_seq, limit))
            .await
    }
}
