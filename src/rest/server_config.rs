//! `/api/v2/config/...`: the server-wide memory settings and resources that MemMachine
//! 0.4's client configuration API reads and writes. Settings the server can change while
//! it runs (`runtime_settings`) are shown as in effect and changed by the PUTs; resources
//! fixed at start-up (store, embedder, language model) are accepted only as they are.
//! Per-project episodic switches live at `/memory/episodic/config`.

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::Body;
use super::config_updates::{
    EpisodicUpdate, LongTermUpdate, MemoryUpdate, SemanticUpdate, ShortTermUpdate,
};
use super::{ApiError, Gateway};
use memmachine_core::error::Error;
use memmachine_domain::auth::{Access, Caller};
use memmachine_domain::resource_status::{Kind, Status};
use memmachine_domain::retrieval::ranking::{Mode, Ranking};
use memmachine_domain::runtime_settings::{Change, Effective};

/// What the server was started with, for the configuration API.
pub struct Settings {
    /// The store's description (URL redacted), shown to admin keys.
    store: String,
    /// The store's kind alone, shown to org keys: where it is concerns the operator.
    store_kind: &'static str,
    llm_model: Option<String>,
}

impl Settings {
    pub fn of(config: &crate::config::ServeConfig) -> Settings {
        Settings {
            store: config.store.describe(),
            store_kind: config.store.kind(),
            llm_model: config.llm.model.clone(),
        }
    }
}

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new()
        .routes(routes!(get_config))
        .routes(routes!(get_resources))
        .routes(routes!(update_memory))
        .routes(routes!(get_episodic, update_episodic))
        .routes(routes!(get_long_term, update_long_term))
        .routes(routes!(get_short_term, update_short_term))
        .routes(routes!(get_semantic, update_semantic))
        .routes(routes!(add_embedder))
        .routes(routes!(add_language_model))
        .routes(routes!(delete_embedder))
        .routes(routes!(delete_language_model))
        .routes(routes!(retry_embedder))
        .routes(routes!(retry_language_model))
        .routes(routes!(retry_reranker))
}

type Reply<T> = Result<Json<T>, ApiError>;

#[derive(Debug, Serialize, ToSchema)]
pub struct ResourceInfo {
    name: String,
    provider: String,
    /// `ready`, `failed` or `pending`.
    status: &'static str,
    error: Option<String>,
    /// The local embedder's product kernel (`--embedder-kernel`), e.g. `avx512-bf16`.
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel: Option<String>,
    /// The language model's `response_format`, as learnt from the endpoint's answers:
    /// `json_schema`, `json_object with schema`, `json_object` or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'static str>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Resources {
    embedders: Vec<ResourceInfo>,
    language_models: Vec<ResourceInfo>,
    rerankers: Vec<ResourceInfo>,
    databases: Vec<ResourceInfo>,
    /// What is missing and what that means (no embedder, no language model); this
    /// server's addition, left out when nothing is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<&'static str>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LongTermConfig {
    backend: Option<String>,
    embedder: Option<String>,
    reranker: Option<String>,
    vector_graph_store: Option<String>,
    vector_store: Option<String>,
    segment_store: Option<String>,
    properties_schema: Option<std::collections::BTreeMap<String, String>>,
    enabled: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ShortTermConfig {
    llm_model: Option<String>,
    message_capacity: Option<usize>,
    enabled: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EpisodicConfig {
    long_term_memory: LongTermConfig,
    short_term_memory: ShortTermConfig,
    enabled: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SemanticConfig {
    enabled: bool,
    database: Option<String>,
    storage_backend: Option<String>,
    feature_store: Option<String>,
    vector_collection: Option<String>,
    llm_model: Option<String>,
    embedding_model: Option<String>,
    /// Messages that start an ingestion (this server's addition).
    ingestion_trigger_messages: usize,
    ingestion_trigger_age_seconds: u64,
    /// The dimensions of the server's embedder's vectors.
    vector_dimensions: Option<usize>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Config {
    resources: Resources,
    episodic_memory: EpisodicConfig,
    semantic_memory: SemanticConfig,
}

/// The embedders this server offers: (name, dimensions).
fn embedders(gateway: &Gateway) -> Result<Vec<(String, usize)>, ApiError> {
    let domain = gateway.domain()?;
    Ok(domain
        .semantic
        .embedders()
        .all()
        .iter()
        .map(|e| (e.id().to_string(), e.dimensions()))
        .collect())
}

fn default_embedder(gateway: &Gateway) -> Result<Option<String>, ApiError> {
    Ok(gateway
        .domain()?
        .semantic
        .embedders()
        .default_embedder()
        .map(|e| e.id().to_string()))
}

/// What a project may name in `config.reranker`: the ranking modes (provider
/// `memmachine`), then the rerankers this server offers (provider: the model's id, e.g.
/// `cross-encoder:ms-marco-MiniLM-L-6-v2`).
fn rerankers(gateway: &Gateway) -> Result<Vec<(String, String)>, ApiError> {
    let domain = gateway.domain()?;
    let modes = Mode::NAMES
        .iter()
        .map(|m| (m.to_string(), "memmachine".to_string()));
    let offered = domain
        .rerankers
        .all()
        .into_iter()
        .map(|(name, id)| (name.to_string(), id.to_string()));
    Ok(modes.chain(offered).collect())
}

/// What an org key is told of a failure: that it failed. The error names the server's
/// endpoints and hosts, which concern the operator (an admin key sees it).
const FAILED_FOR_ORG: &str = "the last call failed; an admin key sees why";

/// Who sees the server's own details (store location, endpoints, errors): an admin
/// key, or anyone without --auth. An org key sees what concerns its org.
fn operator(caller: &Caller) -> bool {
    !matches!(caller, Caller::Org { .. })
}

/// Where the store is, as `caller` may see it.
fn store_shown(gateway: &Gateway, caller: &Caller) -> String {
    if operator(caller) {
        gateway.settings.store.clone()
    } else {
        gateway.settings.store_kind.to_string()
    }
}

fn info(name: String, provider: String, status: Status, caller: &Caller) -> ResourceInfo {
    let error = status.error().map(|e| {
        if operator(caller) {
            e.to_string()
        } else {
            FAILED_FOR_ORG.to_string()
        }
    });
    ResourceInfo {
        name,
        provider,
        status: status.name(),
        error,
        kernel: None,
        response_format: None,
    }
}

/// The last outcome of the language model's calls (`Pending` without one); while the
/// endpoint fails every call the same way, that, since when and the next probe.
fn language_model_status(gateway: &Gateway) -> Result<Status, ApiError> {
    let calls = gateway.admission.metrics.last_calls();
    let domain = gateway.domain()?;
    let Some(model) = domain.semantic.model() else {
        return Ok(Status::Pending);
    };
    if let Some(failing) = model.health().and_then(|h| h.failing()) {
        return Ok(Status::Failed(format!(
            "fails every call the same way ({} in a row since {}; semantic ingestion \
             only probes it, next in {} s): {}",
            failing.failures,
            failing
                .since
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            failing.next_probe_in.as_secs(),
            failing.error
        )));
    }
    Ok(calls.status(Kind::LanguageModel, model.id()))
}

/// The `response_format` the language model's endpoint takes, as learnt so far.
fn language_model_format(gateway: &Gateway) -> Result<Option<&'static str>, ApiError> {
    Ok(gateway
        .domain()?
        .semantic
        .model()
        .and_then(|m| m.response_format()))
}

/// Each resource with how its last real call ended; the database is asked now.
async fn resources(gateway: &Gateway, caller: &Caller) -> Result<Resources, ApiError> {
    let settings = &gateway.settings;
    let calls = gateway.admission.metrics.last_calls();
    let kind_of = |id: &str| id.split(':').next().unwrap_or(id).to_string();
    let llm = language_model_status(gateway)?;
    let database = Status::of(&gateway.domain()?.semantic.store().health().await);
    let mut notes = Vec::new();
    if default_embedder(gateway)?.is_none() {
        notes.push(memmachine_domain::resource_status::NO_EMBEDDER);
    }
    if !gateway.domain()?.semantic.has_model() {
        notes.push(memmachine_domain::resource_status::NO_LANGUAGE_MODEL);
    }
    Ok(Resources {
        notes,
        embedders: gateway
            .domain()?
            .semantic
            .embedders()
            .all()
            .iter()
            .map(|e| {
                let id = e.id().to_string();
                let status = calls.status(Kind::Embedder, &id);
                ResourceInfo {
                    kernel: e.kernel().map(str::to_string),
                    ..info(id.clone(), kind_of(&id), status, caller)
                }
            })
            .collect(),
        language_models: settings
            .llm_model
            .iter()
            .map(|m| {
                let provider = "openai-chat-completions".to_string();
                ResourceInfo {
                    response_format: language_model_format(gateway).ok().flatten(),
                    ..info(m.clone(), provider, llm.clone(), caller)
                }
            })
            .collect(),
        rerankers: rerankers(gateway)?
            .into_iter()
            .map(|(name, provider)| {
                // Ranking modes run in-process: nothing to call, always ready.
                let status = if provider == "memmachine" {
                    Status::Ready
                } else {
                    calls.status(Kind::Reranker, &name)
                };
                // `remote:<endpoint>` names a URL when no model was given.
                let provider = if operator(caller) || !provider.contains("://") {
                    provider
                } else {
                    kind_of(&provider)
                };
                info(name, provider, status, caller)
            })
            .collect(),
        databases: vec![info(
            store_shown(gateway, caller),
            settings.store_kind.to_string(),
            database,
            caller,
        )],
    })
}

/// The ranking of projects that name none, by its name (the server's own default
/// resolved: hybrid with an embedder, else lexical).
fn ranking(gateway: &Gateway, effective: &Effective) -> Result<String, ApiError> {
    // As search decides it (the console shows this one too).
    Ok(match &effective.ranking {
        Ranking::Default => {
            let embedder = default_embedder(gateway)?;
            Mode::default_for(embedder.is_some()).name().into()
        }
        named => named.name().into(),
    })
}

fn effective(gateway: &Gateway) -> Result<Effective, ApiError> {
    Ok(gateway.domain()?.settings.current())
}

fn episodic(gateway: &Gateway, caller: &Caller) -> Result<EpisodicConfig, ApiError> {
    let settings = &gateway.settings;
    let effective = effective(gateway)?;
    Ok(EpisodicConfig {
        long_term_memory: LongTermConfig {
            backend: Some("event".into()),
            embedder: default_embedder(gateway)?,
            reranker: Some(ranking(gateway, &effective)?),
            vector_graph_store: None,
            vector_store: None,
            segment_store: Some(store_shown(gateway, caller)),
            properties_schema: None,
            enabled: effective.long_term_enabled,
        },
        short_term_memory: ShortTermConfig {
            llm_model: settings.llm_model.clone(),
            message_capacity: (effective.short_term_chars > 0)
                .then_some(effective.short_term_chars),
            enabled: effective.short_term_enabled,
        },
        enabled: effective.episodic_enabled,
    })
}

fn semantic(gateway: &Gateway, caller: &Caller) -> Result<SemanticConfig, ApiError> {
    let settings = &gateway.settings;
    let effective = effective(gateway)?;
    let dimensions = gateway
        .domain()?
        .semantic
        .embedders()
        .default_embedder()
        .map(|e| e.dimensions());
    Ok(SemanticConfig {
        // Ingestion needs a language model: without one semantic memory is shown off.
        enabled: effective.semantic_enabled && effective.has_model,
        database: Some(store_shown(gateway, caller)),
        storage_backend: Some(store_shown(gateway, caller)),
        feature_store: None,
        vector_collection: None,
        llm_model: settings.llm_model.clone(),
        embedding_model: default_embedder(gateway)?,
        ingestion_trigger_messages: effective.trigger_messages,
        ingestion_trigger_age_seconds: effective.trigger_age.as_secs(),
        vector_dimensions: dimensions,
    })
}

/// Every setting and resource. An org key is shown what concerns its org: the store's
/// kind, not where it is, and that a resource failed, not why.
#[utoipa::path(get, path = "/config", tag = "Configuration",
    responses((status = 200, body = Config)))]
async fn get_config(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
) -> Reply<Config> {
    Ok(Json(Config {
        resources: resources(&gateway, &caller).await?,
        episodic_memory: episodic(&gateway, &caller)?,
        semantic_memory: semantic(&gateway, &caller)?,
    }))
}

/// Each resource: `ready` after its last call succeeded, `failed` (with the error) after
/// it failed, `pending` before any call; the database is asked at once.
#[utoipa::path(get, path = "/config/resources", tag = "Configuration",
    responses((status = 200, body = Resources)))]
async fn get_resources(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
) -> Reply<Resources> {
    Ok(Json(resources(&gateway, &caller).await?))
}

#[utoipa::path(get, path = "/config/memory/episodic", tag = "Configuration",
    responses((status = 200, body = EpisodicConfig)))]
async fn get_episodic(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
) -> Reply<EpisodicConfig> {
    Ok(Json(episodic(&gateway, &caller)?))
}

#[utoipa::path(get, path = "/config/memory/episodic/long_term", tag = "Configuration",
    responses((status = 200, body = LongTermConfig)))]
async fn get_long_term(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
) -> Reply<LongTermConfig> {
    Ok(Json(episodic(&gateway, &caller)?.long_term_memory))
}

#[utoipa::path(get, path = "/config/memory/episodic/short_term", tag = "Configuration",
    responses((status = 200, body = ShortTermConfig)))]
async fn get_short_term(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
) -> Reply<ShortTermConfig> {
    Ok(Json(episodic(&gateway, &caller)?.short_term_memory))
}

#[utoipa::path(get, path = "/config/memory/semantic", tag = "Configuration",
    responses((status = 200, body = SemanticConfig)))]
async fn get_semantic(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
) -> Reply<SemanticConfig> {
    Ok(Json(semantic(&gateway, &caller)?))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Updated {
    success: bool,
    message: String,
}

/// A change of a setting fixed at start-up.
fn read_only(what: &str, how: &str) -> ApiError {
    ApiError::from(Error::FailedPrecondition(format!(
        "{what} is set when the server starts and cannot change at run time: {how}"
    )))
}

/// Any JSON object (the resources MemMachine's client sends).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(value_type = Object)]
pub struct AnyObject(#[allow(dead_code)] serde_json::Map<String, serde_json::Value>);

/// Applies a change (admin keys only under --auth): in effect for the next request here,
/// stored so a restart and every replica keep it.
async fn apply(
    gateway: &Gateway,
    caller: &Caller,
    what: &str,
    change: Result<Change, Error>,
) -> Reply<Updated> {
    caller.require_admin(&format!("changing the {what}"))?;
    gateway.domain()?.settings.update(change?).await?;
    Ok(Json(Updated {
        success: true,
        message: format!("{what} updated"),
    }))
}

/// Both memory types' settings at once, as the sub-routes below take them.
#[utoipa::path(put, path = "/config/memory", tag = "Configuration",
    request_body = MemoryUpdate, responses((status = 200, body = Updated), (status = 400),
    (status = 403), (status = 412)))]
async fn update_memory(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(update): Body<MemoryUpdate>,
) -> Reply<Updated> {
    // MemMachine answers 400 (not its usual 422) for a body naming neither part.
    if update.is_empty() {
        return Err(ApiError::from(Error::invalid(
            "episodic_memory",
            "at least one of episodic_memory or semantic_memory must be given",
        ))
        .with_status(http::StatusCode::BAD_REQUEST));
    }
    apply(
        &gateway,
        &caller,
        "memory configuration",
        update.into_change(),
    )
    .await
}

/// The server-wide switches (ANDed with each project's), the short-term capacity and
/// the default ranking change at once; the embedder, store, backend and language
/// model are accepted only as they are (412 naming the field and why otherwise).
#[utoipa::path(put, path = "/config/memory/episodic", tag = "Configuration",
    request_body = EpisodicUpdate, responses((status = 200, body = Updated),
    (status = 400), (status = 403), (status = 412)))]
async fn update_episodic(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(update): Body<EpisodicUpdate>,
) -> Reply<Updated> {
    let mut change = Change::default();
    let change = update.into_change(&mut change).map(|()| change);
    apply(&gateway, &caller, "episodic memory configuration", change).await
}

#[utoipa::path(put, path = "/config/memory/episodic/long_term", tag = "Configuration",
    request_body = LongTermUpdate, responses((status = 200, body = Updated),
    (status = 400), (status = 403), (status = 412)))]
async fn update_long_term(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(update): Body<LongTermUpdate>,
) -> Reply<Updated> {
    let mut change = Change::default();
    update.into_change(&mut change);
    apply(
        &gateway,
        &caller,
        "long-term memory configuration",
        Ok(change),
    )
    .await
}

#[utoipa::path(put, path = "/config/memory/episodic/short_term", tag = "Configuration",
    request_body = ShortTermUpdate, responses((status = 200, body = Updated),
    (status = 400), (status = 403), (status = 412)))]
async fn update_short_term(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(update): Body<ShortTermUpdate>,
) -> Reply<Updated> {
    let mut change = Change::default();
    update.into_change(&mut change);
    apply(
        &gateway,
        &caller,
        "short-term memory configuration",
        Ok(change),
    )
    .await
}

/// Semantic memory's switch and ingestion triggers change at once; its store, model
/// and embedder are accepted only as they are.
#[utoipa::path(put, path = "/config/memory/semantic", tag = "Configuration",
    request_body = SemanticUpdate, responses((status = 200, body = Updated),
    (status = 400), (status = 403), (status = 412)))]
async fn update_semantic(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(update): Body<SemanticUpdate>,
) -> Reply<Updated> {
    let mut change = Change::default();
    update.into_change(&mut change);
    apply(
        &gateway,
        &caller,
        "semantic memory configuration",
        Ok(change),
    )
    .await
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ResourceUpdated {
    success: bool,
    status: &'static str,
    error: Option<String>,
}

#[utoipa::path(post, path = "/config/resources/embedders", tag = "Configuration",
    request_body = AnyObject, responses((status = 412)))]
async fn add_embedder(_body: Body<AnyObject>) -> Reply<ResourceUpdated> {
    Err(read_only(
        "the set of embedders",
        "pass --embedder (and --model-dir or --embedder-base-url/--embedder-model) and restart",
    ))
}

#[utoipa::path(post, path = "/config/resources/language_models", tag = "Configuration",
    request_body = AnyObject, responses((status = 412)))]
async fn add_language_model(_body: Body<AnyObject>) -> Reply<ResourceUpdated> {
    Err(read_only(
        "the set of language models",
        "pass --llm-base-url/--llm-model and restart",
    ))
}

#[utoipa::path(delete, path = "/config/resources/embedders/{name}", tag = "Configuration",
    params(("name" = String, Path)), responses((status = 412), (status = 404)))]
async fn delete_embedder(
    State(gateway): State<Gateway>,
    Path(name): Path<String>,
) -> Reply<Updated> {
    embedder_named(&gateway, &name)?;
    Err(read_only(
        "the set of embedders",
        "pass --embedder and restart",
    ))
}

#[utoipa::path(delete, path = "/config/resources/language_models/{name}",
    tag = "Configuration", params(("name" = String, Path)),
    responses((status = 412), (status = 404)))]
async fn delete_language_model(
    State(gateway): State<Gateway>,
    Path(name): Path<String>,
) -> Reply<Updated> {
    language_model_named(&gateway, &name)?;
    Err(read_only(
        "the set of language models",
        "restart without --llm-base-url",
    ))
}

fn embedder_named(gateway: &Gateway, name: &str) -> Result<(), ApiError> {
    if embedders(gateway)?.iter().any(|(n, _)| n == name) {
        Ok(())
    } else {
        Err(Error::NotFound(format!("no embedder named {name:?}")).into())
    }
}

fn language_model_named(gateway: &Gateway, name: &str) -> Result<(), ApiError> {
    if gateway.settings.llm_model.as_deref() == Some(name) {
        Ok(())
    } else {
        Err(Error::NotFound(format!("no language model named {name:?}")).into())
    }
}

/// The resource's status as it stands: calls are retried by the work that needs them
/// (the embedding and ingestion workers, the next search), not by this route.
fn as_it_stands(status: Status, caller: &Caller) -> Reply<ResourceUpdated> {
    let shown = info(String::new(), String::new(), status, caller);
    Ok(Json(ResourceUpdated {
        success: shown.error.is_none(),
        status: shown.status,
        error: shown.error,
    }))
}

#[utoipa::path(post, path = "/config/resources/embedders/{name}/retry", tag = "Configuration",
    params(("name" = String, Path)), responses((status = 200, body = ResourceUpdated), (status = 404)))]
async fn retry_embedder(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Path(name): Path<String>,
) -> Reply<ResourceUpdated> {
    embedder_named(&gateway, &name)?;
    let calls = gateway.admission.metrics.last_calls();
    as_it_stands(calls.status(Kind::Embedder, &name), &caller)
}

#[utoipa::path(post, path = "/config/resources/language_models/{name}/retry",
    tag = "Configuration", params(("name" = String, Path)),
    responses((status = 200, body = ResourceUpdated), (status = 404)))]
async fn retry_language_model(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Path(name): Path<String>,
) -> Reply<ResourceUpdated> {
    language_model_named(&gateway, &name)?;
    // An operator's retry probes a failing endpoint at once rather than at its next
    // turn (an org key cannot make the server call it more often).
    if operator(&caller)
        && let Some(health) = gateway.domain()?.semantic.model().and_then(|m| m.health())
    {
        health.probe_now();
        gateway.domain()?.semantic.wake_handle().notify_waiters();
    }
    as_it_stands(language_model_status(&gateway)?, &caller)
}

#[utoipa::path(post, path = "/config/resources/rerankers/{name}/retry", tag = "Configuration",
    params(("name" = String, Path)), responses((status = 200, body = ResourceUpdated), (status = 404)))]
async fn retry_reranker(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Path(name): Path<String>,
) -> Reply<ResourceUpdated> {
    match rerankers(&gateway)?.into_iter().find(|(n, _)| *n == name) {
        Some((_, provider)) if provider == "memmachine" => as_it_stands(Status::Ready, &caller),
        Some(_) => {
            let calls = gateway.admission.metrics.last_calls();
            as_it_stands(calls.status(Kind::Reranker, &name), &caller)
        }
        None => Err(Error::NotFound(format!("no reranker named {name:?}")).into()),
    }
}
