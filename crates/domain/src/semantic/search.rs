//! Ranking of features: one score across every selected set, from BM25 over a feature's
//! tag, name and value, fused with embedding similarity when the project has an
//! embedder. Each project's features live in an in-memory index, a cache of the store
//! rebuilt when the org's semantic version moves (one cheap read when nothing changed).

use memmachine_core::access::OpenProject;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::model::IndexedFeature;
use crate::error::Result;
use crate::model::ProjectHandle;
use crate::model::filter::{Expr, Field, SystemField};
use crate::model::filter_eval::{self, Fields, Value};
use crate::retrieval::bm25::Bm25Index;
use crate::retrieval::tokenize;
use crate::store::Store;

/// Cosine similarity above which a feature sharing no word with the query is related to
/// it: unrelated sentences score about 0 to 0.15 with MiniLM, exactly 0 with `hash`.
const MIN_RELATED_SIMILARITY: f32 = 0.15;

/// Projects whose feature index is kept in memory.
const CACHED_PROJECTS: usize = 256;

/// What a filter and the set selection read of a feature.
#[derive(Debug)]
pub struct FeatureFields {
    set_id: Box<str>,
    category: Box<str>,
    tag: Box<str>,
    feature: Box<str>,
    value: Box<str>,
    created_at_micros: i64,
    updated_at_micros: i64,
    metadata: BTreeMap<String, String>,
    /// The embedder id and vector, if it has one.
    vector: Option<(Box<str>, Box<[f32]>)>,
}

impl Fields for FeatureFields {
    fn get(&self, field: &Field) -> Option<Value<'_>> {
        fn text(s: &str) -> Option<Value<'_>> {
            (!s.is_empty()).then_some(Value::Text(s))
        }
        match field {
            Field::Metadata(key) => self.metadata.get(key).map(|v| Value::Text(v)),
            Field::System(SystemField::SetId) => text(&self.set_id),
            Field::System(SystemField::Category) => text(&self.category),
            Field::System(SystemField::Tag) => text(&self.tag),
            Field::System(SystemField::Feature) => text(&self.feature),
            Field::System(SystemField::Value) => text(&self.value),
            Field::System(SystemField::CreatedAt) => Some(Value::Time(self.created_at_micros)),
            Field::System(SystemField::UpdatedAt) => Some(Value::Time(self.updated_at_micros)),
            Field::System(_) => None,
        }
    }
}

impl FeatureFields {
    pub fn of(f: IndexedFeature) -> (i64, String, FeatureFields) {
        let text = format!("{} {} {}", f.tag, f.feature, f.value);
        (
            // The index keys features by the raw number, as it keys episodes.
            f.internal_id.raw(),
            text,
            FeatureFields {
                set_id: f.set_id.into(),
                category: f.category.into(),
                tag: f.tag.into(),
                feature: f.feature.into(),
                value: f.value.into(),
                created_at_micros: f.created_at_micros,
                updated_at_micros: f.updated_at_micros,
                metadata: f.metadata,
                vector: f.vector.map(|(e, v)| (e.into(), v.into())),
            },
        )
    }
}

/// The features of the sets one project sees, indexed.
pub struct ProjectFeatures {
    version: i64,
    index: Bm25Index<FeatureFields>,
}

impl ProjectFeatures {
    pub fn build(version: i64, features: Vec<IndexedFeature>) -> ProjectFeatures {
        // Features are not a conversation: no context field.
        let mut index = Bm25Index::with_context_window(0);
        for feature in features {
            let (id, text, fields) = FeatureFields::of(feature);
            index.insert(id, &text, fields);
        }
        ProjectFeatures { version, index }
    }

    /// The best features for `query` among those of `sets` (ids; `None`: all) passing
    /// `filter`, as
    /// `(internal id, score)`. With `vector` (the query's, by embedder `embedder`) the
    /// ranking is hybrid; features without a vector of that embedder rank by text.
    pub fn rank(
        &self,
        query: &str,
        vector: Option<(&str, &[f32])>,
        sets: Option<&HashSet<String>>,
        filter: Option<&Expr>,
        limit: usize,
    ) -> Vec<(i64, f32)> {
        let terms = tokenize::query_terms(query);
        let accept = |f: &FeatureFields| {
            sets.is_none_or(|s| s.contains(&*f.set_id))
                && filter.is_none_or(|e| filter_eval::matches(e, f))
        };
        match vector {
            None => self.index.search(&terms, limit, accept),
            Some((embedder, query_vector)) => {
                // Standardised scores rank features against each other, not against the
                // query: alone in its project an unrelated feature scores 0. One sharing
                // no word with the query and unlike it in meaning is left out.
                let worded: HashSet<i64> = self
                    .index
                    .search(&terms, self.index.len(), accept)
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect();
                self.index
                    .search_hybrid(
                        &terms,
                        |_, f: &FeatureFields| {
                            let (id, v) = f.vector.as_ref()?;
                            (&**id == embedder && v.len() == query_vector.len())
                                .then(|| crate::retrieval::dense::dot(v, query_vector))
                        },
                        limit,
                        accept,
                        |_: &FeatureFields| crate::retrieval::fusion::Prior::default(),
                        crate::retrieval::fusion::Options {
                            weights: &crate::retrieval::weights::RankingWeights::DEFAULT,
                            explain: false,
                            dense_candidates: None,
                        },
                    )
                    .into_iter()
                    .filter(|hit| {
                        worded.contains(&hit.handle)
                            || hit
                                .dense
                                .is_some_and(|d| d.similarity > MIN_RELATED_SIMILARITY)
                    })
                    .map(|hit| (hit.handle, hit.score))
                    .collect()
            }
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// Indexes by project (internal id), with when each was last used.
type Cache = HashMap<ProjectHandle, (u64, Arc<ProjectFeatures>)>;

/// Feature indexes by project (internal id), least recently used dropped first.
#[derive(Clone, Default)]
pub struct FeatureIndexes {
    cache: Arc<Mutex<Cache>>,
    clock: Arc<std::sync::atomic::AtomicU64>,
}

impl FeatureIndexes {
    /// The project's index, current with the store: rebuilt when the org's semantic
    /// version moved since it was built.
    pub async fn current(
        &self,
        store: &Arc<dyn Store>,
        project: &OpenProject,
    ) -> Result<Arc<ProjectFeatures>> {
        let version = crate::round_trips::call(store.semantic_version(&project.key.org_id)).await?;
        let tick = self
            .clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((used, index)) = cache.get_mut(&project.internal_id)
                && index.version == version
            {
                *used = tick;
                return Ok(index.clone());
            }
        }
        // The sets the project sees: its own and its org's org-level ones.
        let sets = crate::round_trips::call(store.list_sets(project.access())).await?;
        let ids: Vec<_> = sets.iter().map(|s| s.internal_id).collect();
        let features = crate::round_trips::call(store.indexed_features(&ids)).await?;
        let index = Arc::new(ProjectFeatures::build(version, features));
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHED_PROJECTS
            && let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| *k)
        {
            cache.remove(&oldest);
        }
        cache.insert(project.internal_id, (tick, index.clone()));
        Ok(index)
    }
}
