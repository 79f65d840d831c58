//! Memories: add, search, list and delete (`/memories...`).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Extension, State};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::Body;
use super::projects::key;
use super::shapes::{EpisodeJson, FeatureJson, ProjectRef, RankedJson, ScoredEpisodeJson};
use super::{ApiError, Gateway};
use memmachine_core::error::{Error, Result, Violations};
use memmachine_domain::auth::Access;
use memmachine_domain::episodic::{MessageInput, SearchInput};
use memmachine_domain::memory::{ListInput, Listed, MemoryKind};

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new()
        .routes(routes!(add_memories))
        .routes(routes!(search_memories))
        .routes(routes!(list_memories))
        .routes(routes!(get_episodic))
        .routes(routes!(delete_episodic))
        .routes(routes!(delete_semantic))
}

type Reply<T> = std::result::Result<T, ApiError>;

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MemoryTypeJson {
    Episodic,
    Semantic,
}

impl From<MemoryTypeJson> for MemoryKind {
    fn from(t: MemoryTypeJson) -> MemoryKind {
        match t {
            MemoryTypeJson::Episodic => MemoryKind::Episodic,
            MemoryTypeJson::Semantic => MemoryKind::Semantic,
        }
    }
}

fn kinds(types: &[MemoryTypeJson]) -> Vec<MemoryKind> {
    types.iter().map(|t| MemoryKind::from(*t)).collect()
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct MessageJson {
    content: String,
    #[serde(default = "default_producer")]
    producer: String,
    #[serde(default)]
    produced_for: String,
    /// RFC 3339 (a time without an offset is UTC), or Unix seconds (milliseconds above
    /// 10^12); omitted or null is now.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    timestamp: serde_json::Value,
    #[serde(default)]
    role: String,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    /// Only `message` exists.
    #[serde(default)]
    episode_type: Option<String>,
    /// This server's: when the message expires (same forms as `timestamp`); omitted or
    /// null: the project's retention decides.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    expires_at: serde_json::Value,
    /// This server's: a message whose key the project stored within the idempotency
    /// window is not stored again; its original uid answers (at most 256 bytes).
    #[serde(default)]
    idempotency_key: Option<String>,
}

fn default_producer() -> String {
    "user".into()
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct AddMemories {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    /// Empty: every enabled type.
    #[serde(default)]
    types: Vec<MemoryTypeJson>,
    messages: Vec<MessageJson>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AddResult {
    uid: String,
    /// This server's: the message's idempotency key was stored already; `uid` is the
    /// stored episode's (MemMachine's client ignores the field).
    duplicate: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AddMemoriesResponse {
    results: Vec<AddResult>,
}

/// Stores the messages as episodes (all or none), in input order.
#[utoipa::path(post, path = "/memories", tag = "Memories", request_body = AddMemories,
    responses((status = 200, body = AddMemoriesResponse), (status = 404), (status = 422)))]
async fn add_memories(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<AddMemories>,
) -> Reply<Json<AddMemoriesResponse>> {
    let key = caller.project(&r.org_id, &r.project_id)?;
    let messages = messages(r.messages)?;
    let added = gateway
        .domain()?
        .memories
        .add(&key, &kinds(&r.types), messages)
        .await?;
    Ok(Json(AddMemoriesResponse {
        results: added
            .into_iter()
            .map(|a| AddResult {
                uid: a.uid.to_string(),
                duplicate: a.duplicate,
            })
            .collect(),
    }))
}

fn messages(messages: Vec<MessageJson>) -> Result<Vec<MessageInput>> {
    let mut violations = Violations::default();
    let inputs = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            if let Some(t) = m.episode_type.as_deref().filter(|t| *t != "message") {
                violations.add(
                    format!("messages[{i}].episode_type"),
                    format!("{t:?} is not an episode type (only \"message\")"),
                );
            }
            let expires_at = violations.check(timestamp(
                &format!("messages[{i}].expires_at"),
                &m.expires_at,
            ));
            let timestamp =
                violations.check(timestamp(&format!("messages[{i}].timestamp"), &m.timestamp));
            MessageInput {
                uid: None,
                content: m.content,
                producer: m.producer,
                produced_for: m.produced_for,
                timestamp: timestamp.flatten(),
                role: m.role,
                metadata: m.metadata,
                expires_at: expires_at.flatten(),
                idempotency_key: m.idempotency_key,
            }
        })
        .collect();
    violations.into_result()?;
    Ok(inputs)
}

/// A message's time as Unix seconds and nanoseconds, in the forms MemMachine accepts
/// (read as filters read them, `model::instant`).
fn timestamp(field: &str, value: &serde_json::Value) -> Result<Option<(i64, i32)>> {
    use memmachine_core::model::instant;
    let time = match value {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::Number(n) => n.as_f64().and_then(instant::from_unix),
        serde_json::Value::String(s) => instant::parse(s),
        _ => None,
    };
    let time = time.ok_or_else(|| {
        Error::invalid(
            field,
            format!("{value} is not an RFC 3339 time or Unix seconds"),
        )
    })?;
    Ok(Some((
        time.timestamp(),
        time.timestamp_subsec_nanos() as i32,
    )))
}

/// `as_of` in micros, read as a message's time is.
fn as_of(value: &serde_json::Value) -> Result<Option<i64>> {
    Ok(timestamp("as_of", value)?.map(|(seconds, nanos)| {
        seconds
            .saturating_mul(1_000_000)
            .saturating_add(i64::from(nanos / 1000))
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct SearchMemories {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    query: String,
    /// 1 to the server's page limit [default: 10].
    #[serde(default)]
    top_k: Option<i32>,
    #[serde(default)]
    filter: String,
    #[serde(default)]
    set_metadata: BTreeMap<String, String>,
    #[serde(default)]
    expand_context: i32,
    #[serde(default)]
    score_threshold: Option<f64>,
    #[serde(default)]
    types: Vec<MemoryTypeJson>,
    /// Accepted for MemMachine's clients; this server has no retrieval agent, so the
    /// search is the same either way.
    #[serde(default)]
    agent_mode: bool,
    /// This server's addition: the features as they were at this time (RFC 3339 or
    /// Unix seconds; semantic memory only).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    as_of: serde_json::Value,
    /// This server's addition: also answer `ranked`, episodes and features ranked
    /// together (the episodes a matching feature cites count as evidence).
    #[serde(default)]
    rank_together: bool,
    /// With `rank_together`: the features' weight against the episodes' (0 to 10)
    /// [default: the server's].
    #[serde(default)]
    semantic_weight: Option<f64>,
    /// This server's: each long-term episode carries `score_parts`, what its score is
    /// made of.
    #[serde(default)]
    explain: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResponse {
    status: i32,
    content: SearchContent,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchContent {
    #[serde(skip_serializing_if = "Option::is_none")]
    episodic_memory: Option<EpisodicResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    semantic_memory: Option<Vec<FeatureJson>>,
    /// With `rank_together`: episodes and features in one ranking, best first.
    #[serde(skip_serializing_if = "Option::is_none")]
    ranked: Option<Vec<RankedJson>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EpisodicResult {
    long_term_memory: LongTerm,
    short_term_memory: ShortTerm,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LongTerm {
    episodes: Vec<ScoredEpisodeJson>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ShortTerm {
    episodes: Vec<ScoredEpisodeJson>,
    /// Empty when there is no summary (MemMachine answers `[""]`, which clients then
    /// show as a blank summary).
    episode_summary: Vec<String>,
}

#[utoipa::path(post, path = "/memories/search", tag = "Memories", request_body = SearchMemories,
    responses((status = 200, body = SearchResponse), (status = 404), (status = 422)))]
async fn search_memories(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<SearchMemories>,
) -> Reply<Json<SearchResponse>> {
    let key = caller.project(&r.org_id, &r.project_id)?;
    let _ = r.agent_mode;
    let types = kinds(&r.types);
    let input = SearchInput {
        query: r.query,
        top_k: r.top_k,
        filter: r.filter,
        expand_context: r.expand_context,
        score_threshold: r.score_threshold,
        scope: None,
        blank_query_ranks_nothing: true,
        as_of: as_of(&r.as_of)?,
        rank_together: r.rank_together,
        semantic_weight: r.semantic_weight,
        explain: r.explain,
    };
    let found = gateway
        .domain()?
        .memories
        .search(&key, &types, input, &r.set_metadata)
        .await?;
    let wants = |kind| types.is_empty() || types.contains(&kind);
    let episodic = found.episodic;
    let mut summaries = episodic.summaries;
    summaries.retain(|s| !s.trim().is_empty());
    Ok(Json(SearchResponse {
        status: 0,
        content: SearchContent {
            episodic_memory: wants(MemoryKind::Episodic).then(|| EpisodicResult {
                long_term_memory: LongTerm {
                    episodes: episodic
                        .long_term
                        .into_iter()
                        .map(ScoredEpisodeJson::scored)
                        .collect(),
                },
                short_term_memory: ShortTerm {
                    episodes: episodic
                        .short_term
                        .into_iter()
                        .map(|e| ScoredEpisodeJson::new(e, None))
                        .collect(),
                    episode_summary: summaries,
                },
            }),
            semantic_memory: wants(MemoryKind::Semantic).then(|| {
                found
                    .semantic
                    .into_iter()
                    .map(|hit| FeatureJson::new(hit.feature, Some(hit.score), true))
                    .collect()
            }),
            ranked: r
                .rank_together
                .then(|| found.ranked.into_iter().map(RankedJson::new).collect()),
        },
    }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct ListMemories {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    #[serde(default)]
    page_size: Option<i32>,
    /// 0-based page number.
    #[serde(default)]
    page_num: u32,
    /// This server's addition: the `next_page_token` of the page before (empty for the
    /// first). Given, even empty, the answer carries `next_page_token`, and each page
    /// costs one read however deep (a `page_num` walks the pages before it).
    #[serde(default)]
    page_token: Option<String>,
    #[serde(default)]
    filter: String,
    #[serde(default)]
    set_metadata: BTreeMap<String, String>,
    /// [default: both kinds, as MemMachine; episodic when `page_token` is given]
    #[serde(default, rename = "type")]
    memory_type: Option<MemoryTypeJson>,
    /// This server's addition: the features as they were at this time (RFC 3339 or
    /// Unix seconds; semantic memory only).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    as_of: serde_json::Value,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ListResponse {
    status: i32,
    content: ListContent,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ListContent {
    #[serde(skip_serializing_if = "Option::is_none")]
    episodic_memory: Option<Vec<EpisodeJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    semantic_memory: Option<Vec<FeatureJson>>,
    /// Only when the request gave `page_token`: the next page's, empty after the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_page_token: Option<String>,
}

/// One page of episodes in `sequence_num` order, or of features.
#[utoipa::path(post, path = "/memories/list", tag = "Memories", request_body = ListMemories,
    responses((status = 200, body = ListResponse), (status = 404), (status = 422)))]
async fn list_memories(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<ListMemories>,
) -> Reply<Json<ListResponse>> {
    let key = key(
        &caller,
        &ProjectRef {
            org_id: r.org_id.clone(),
            project_id: r.project_id.clone(),
        },
    )?;
    let memories = &gateway.domain()?.memories;
    let wants_token = r.page_token.is_some();
    // No type and no token: MemMachine answers the page of both kinds.
    let both = r.memory_type.is_none() && !wants_token;
    let as_of = as_of(&r.as_of)?;
    let input = |kind| ListInput {
        kind,
        page_size: r.page_size,
        page_token: r.page_token.clone().unwrap_or_default(),
        page_num: r.page_num,
        filter: r.filter.clone(),
        set_metadata: r.set_metadata.clone(),
        scope: None,
        as_of,
    };
    let kind = r.memory_type.map(MemoryKind::from);
    let listed = memories.list(&key, input(kind)).await?;
    // As in search, features are listed under the filter only when it names their
    // fields alone; a filter of episode fields lists none.
    let mut features = None;
    if both {
        features = Some(Vec::new());
        if memmachine_domain::semantic::parse_filter("filter", &r.filter).is_ok()
            && let Listed::Features(listed, _) = memories
                .list(&key, input(Some(MemoryKind::Semantic)))
                .await?
        {
            features = Some(listed);
        }
    }
    let mut content = match listed {
        Listed::Episodes(episodes, next) => ListContent {
            episodic_memory: Some(
                episodes
                    .into_iter()
                    .map(|e| EpisodeJson::new(&key, e))
                    .collect(),
            ),
            semantic_memory: None,
            next_page_token: wants_token.then_some(next),
        },
        Listed::Features(features, next) => ListContent {
            episodic_memory: None,
            semantic_memory: Some(
                features
                    .into_iter()
                    .map(|f| FeatureJson::new(f, None, true))
                    .collect(),
            ),
            next_page_token: wants_token.then_some(next),
        },
    };
    if let Some(features) = features {
        content.semantic_memory = Some(
            features
                .into_iter()
                .map(|f| FeatureJson::new(f, None, true))
                .collect(),
        );
    }
    Ok(Json(ListResponse { status: 0, content }))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct GetEpisodic {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    /// Episode uids, 1 to 100 (also read as gRPC's `episode_ids`).
    #[serde(alias = "episode_ids")]
    episodic_ids: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GetEpisodicResponse {
    status: i32,
    content: GetEpisodicContent,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GetEpisodicContent {
    /// The episodes found, in the order asked.
    episodic_memory: Vec<EpisodeJson>,
    /// The ids asked that are not episodes of this project (deleted, or never were).
    missing: Vec<String>,
}

/// Episodes of this project by uid (this server's addition, as the gRPC `GetEpisodes`
/// of the MCP and v1 paths): what a feature's citations name.
#[utoipa::path(post, path = "/memories/episodic/get", tag = "Memories", request_body = GetEpisodic,
    responses((status = 200, body = GetEpisodicResponse), (status = 404), (status = 422)))]
async fn get_episodic(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<GetEpisodic>,
) -> Reply<Json<GetEpisodicResponse>> {
    let key = key(
        &caller,
        &ProjectRef {
            org_id: r.org_id.clone(),
            project_id: r.project_id.clone(),
        },
    )?;
    let found = gateway
        .domain()?
        .memories
        .get_episodes_by_id(&key, "episodic_ids", &r.episodic_ids)
        .await?;
    let mut content = GetEpisodicContent {
        episodic_memory: Vec::new(),
        missing: Vec::new(),
    };
    for (id, episode) in r.episodic_ids.into_iter().zip(found) {
        match episode {
            Some(e) => content.episodic_memory.push(EpisodeJson::new(&key, e)),
            None => content.missing.push(id),
        }
    }
    Ok(Json(GetEpisodicResponse { status: 0, content }))
}

/// One id, a list of ids, or both.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DeleteEpisodic {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    #[serde(default)]
    episodic_id: String,
    /// Also read as gRPC's `episode_ids`.
    #[serde(default, alias = "episode_ids")]
    episodic_ids: Vec<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct DeleteSemantic {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    #[serde(default)]
    semantic_id: String,
    /// Also read as gRPC's `feature_ids`.
    #[serde(default, alias = "feature_ids")]
    semantic_ids: Vec<String>,
}

fn ids(one: String, many: Vec<String>) -> Vec<String> {
    let mut ids: Vec<String> = std::iter::once(one)
        .filter(|id| !id.is_empty())
        .chain(many)
        .collect();
    ids.dedup();
    ids
}

/// Deletes the episodes of this project among the ids; an id that is not one (deleted, of
/// another project, never was) is skipped, as MemMachine succeeds for it.
#[utoipa::path(post, path = "/memories/episodic/delete", tag = "Memories",
    request_body = DeleteEpisodic, responses((status = 204), (status = 404), (status = 422)))]
async fn delete_episodic(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<DeleteEpisodic>,
) -> Reply<StatusCode> {
    let key = caller.project(&r.org_id, &r.project_id)?;
    gateway
        .domain()?
        .memories
        .delete_episodes_present(&key, &ids(r.episodic_id, r.episodic_ids))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/memories/semantic/delete", tag = "Memories",
    request_body = DeleteSemantic, responses((status = 204), (status = 404), (status = 422)))]
async fn delete_semantic(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    Body(r): Body<DeleteSemantic>,
) -> Reply<StatusCode> {
    let key = caller.project(&r.org_id, &r.project_id)?;
    gateway
        .domain()?
        .memories
        .delete_features_present(&key, &ids(r.semantic_id, r.semantic_ids))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
