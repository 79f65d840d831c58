//! The domain as every transport sees it (gRPC, REST, MCP): projects, memories and
//! semantic memory over one store, with their background workers.

use std::sync::Arc;

use crate::config::ServeConfig;
use memmachine_core::error::{Error, Result};
use memmachine_domain::episodic::EpisodicMemory;
use memmachine_domain::episodic::embedding::EmbeddingQueue;
use memmachine_domain::memory::Memories;
use memmachine_domain::metrics::Metrics;
use memmachine_domain::projects::Projects;
use memmachine_domain::retrieval::index_cache::IndexCache;
use memmachine_domain::retrieval::segment::Segments;
use memmachine_domain::runtime_settings::{Effective, Resources, RuntimeSettings};
use memmachine_domain::semantic::SemanticMemory;

/// The domain services; cheap to clone (each is a handle).
#[derive(Clone)]
pub struct Domain {
    pub projects: Projects,
    pub memories: Memories,
    pub semantic: SemanticMemory,
    /// The deprecated v1 API over the same projects and memories.
    pub legacy: memmachine_domain::legacy::Legacy,
    /// The rerankers projects may name (for the configuration API).
    pub rerankers: memmachine_domain::rerank::Rerankers,
    /// The server-wide settings changeable at run time (`/api/v2/config`).
    pub settings: RuntimeSettings,
    pub metrics: Arc<Metrics>,
    /// Model usage per org and the orgs' daily token budgets.
    pub usage: memmachine_domain::usage::Usage,
    /// Forgetting a subject, with receipts (`LifecycleService.ForgetSubject`).
    pub forget: memmachine_domain::forget::Forget,
    /// Watching projects' changes (`ChangeService`, the SSE route).
    pub changes: memmachine_domain::changes::Changes,
    /// The projects' in-memory indexes (saved as segments at shutdown).
    pub index: Arc<IndexCache>,
}

/// Builds the domain and starts its background work. What takes time before the server
/// can serve: the embedder (a model to load, an endpoint to reach), queueing what it
/// must embed, and a cross-encoder to load.
pub async fn start(
    config: &ServeConfig,
    store: Arc<dyn crate::store::Store>,
    metrics: Arc<Metrics>,
) -> Result<Domain> {
    let embedders = memmachine_domain::embed::build(&config.embedder)
        .await
        .map_err(Error::FailedPrecondition)?
        .measured(&metrics);
    let waiting =
        memmachine_domain::episodic::embedding::queue_missing(store.as_ref(), &embedders).await?;
    match embedders.default_embedder() {
        None => tracing::warn!(
            model_dir = %config.embedder.model_dir.display(),
            "{}",
            memmachine_domain::resource_status::NO_EMBEDDER
        ),
        Some(embedder) => tracing::info!(
            embedder = embedder.id(),
            dimensions = embedder.dimensions(),
            waiting,
            "embedder ready; episodes without a vector are being embedded"
        ),
    }
    let llm = memmachine_domain::llm::build(&config.llm, &metrics)?;
    let rerankers = memmachine_domain::rerank::build(&config.reranker)
        .await
        .map_err(Error::FailedPrecondition)?
        .measured(&metrics);
    let projects = Projects::new(store.clone(), config.limits, embedders.clone())
        .with_rerankers(rerankers.clone());
    let queue = EmbeddingQueue::default();
    let usage =
        memmachine_domain::usage::Usage::new(store.clone(), config.llm.daily_tokens_per_org);
    memmachine_domain::episodic::embedding::spawn_counted_workers(
        store.clone(),
        &embedders,
        &queue,
        metrics.clone(),
        config.embedding_lease,
        Some(usage.clone()),
    );
    let settings = runtime_settings(config, &store, &embedders, &rerankers, llm.is_some()).await?;
    let semantic = SemanticMemory::new(store.clone(), config.limits, embedders.clone(), llm)
        .with_usage(usage.clone())
        .with_ingest(config.ingest);
    store
        .set_feature_history_limit(config.feature_history_limit)
        .await?;
    memmachine_domain::semantic::ingest::spawn_workers(
        semantic.clone(),
        config.ingest,
        settings.clone(),
        metrics.clone(),
    );
    memmachine_domain::semantic::embedding::spawn(semantic.clone(), config.embedding_lease);
    memmachine_domain::semantic::summary::spawn(
        semantic.clone(),
        config.limits.short_term_window,
        settings.clone(),
    );
    let mut index = IndexCache::new(store.clone(), config.index_memory);
    if let Some(dir) = &config.index_segments {
        let id = store.store_id().await?;
        match Segments::open(dir, id) {
            Ok(segments) => index = index.with_segments(Arc::new(segments)),
            Err(err) => tracing::warn!(
                dir = %dir.display(),
                error = %err,
                "cannot use the index segment directory; indexes are rebuilt on start"
            ),
        }
    }
    let index = Arc::new(index);
    let projects = projects.with_index(index.clone());
    let observed = Arc::downgrade(&index);
    metrics.observe_index(Box::new(move || {
        observed.upgrade().map_or((0, 0), |index| index.usage())
    }));
    memmachine_domain::retrieval::index_cache::spawn_feed_pruner(&store, config.changes.retention);
    crate::heap_trim::spawn(&index);
    let changes =
        memmachine_domain::changes::Changes::start(store.clone(), config.changes, &metrics);
    memmachine_domain::episodic::retention::spawn(&store, config.retention, Some(&index));
    let index_handle = index.clone();
    let episodic = EpisodicMemory::new(store.clone(), index.clone(), config.limits)
        .with_embedders(embedders.clone(), queue)
        .with_rerankers(rerankers.clone())
        .with_settings(settings.clone())
        .with_usage(usage.clone())
        .with_changes(changes.clone());
    // Searches work meanwhile: a project not yet loaded loads on its first search.
    let warm = config.warm_indexes;
    let warming = index.clone();
    tokio::spawn(async move {
        if !warm {
            return;
        }
        let embedder_of = |p: &memmachine_core::model::Project| {
            embedders
                .for_project(&p.config.embedder)
                .map(|e| e.id().to_string())
        };
        match warming.warm_up(embedder_of).await {
            Ok(projects) => tracing::info!(projects, "project indexes loaded"),
            Err(err) => tracing::warn!(error = %err, "loading project indexes failed"),
        }
    });
    let memories =
        Memories::new(projects.clone(), episodic, semantic.clone()).with_metrics(metrics.clone());
    let forget = memmachine_domain::forget::Forget::new(store.clone(), projects.clone())
        .with_index(index_handle.clone());
    let legacy = memmachine_domain::legacy::Legacy::new(
        projects.clone(),
        memories.clone(),
        store,
        config.limits,
    );
    Ok(Domain {
        projects,
        memories,
        semantic,
        legacy,
        rerankers,
        settings,
        metrics,
        usage,
        forget,
        changes,
        index: index_handle,
    })
}

/// The settings changeable at run time, over the flags' values, and what is fixed.
async fn runtime_settings(
    config: &ServeConfig,
    store: &Arc<dyn crate::store::Store>,
    embedders: &memmachine_domain::embed::Embedders,
    rerankers: &memmachine_domain::rerank::Rerankers,
    has_model: bool,
) -> Result<RuntimeSettings> {
    let base = Effective::of_flags(&config.limits, config.ingest.triggers(), has_model);
    let rankings = memmachine_domain::retrieval::ranking::Mode::NAMES
        .iter()
        .map(|m| m.to_string())
        .chain(
            rerankers
                .all()
                .into_iter()
                .map(|(name, _)| name.to_string()),
        )
        .collect();
    let resources = Resources {
        store: config.store.describe(),
        store_kind: config.store.kind().to_string(),
        embedder: embedders
            .default_embedder()
            .map(|e| (e.id().to_string(), e.dimensions())),
        llm_model: config.llm.model.clone(),
        rankings,
    };
    let store: Arc<dyn crate::store::SettingsStore> = store.clone();
    RuntimeSettings::load(store, base, resources).await
}
