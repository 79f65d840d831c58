//! The MCP tools: each decodes its arguments, calls one domain function within the
//! session's scope and renders the answer as JSON text. Domain errors are tool errors
//! (`isError`, with the message) so the agent reads them; nothing here panics.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, InitializeRequestParams, InitializeResult,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router,
};
use serde::{Deserialize, Serialize};

use super::Scope;
use crate::domain::Domain;
use memmachine_core::error::Error;
use memmachine_core::model::filter::{self, Expr, Field, SystemField};
use memmachine_core::model::{Episode, ScoreParts, ScoredEpisode};
use memmachine_domain::episodic::{MessageInput, SearchInput};
use memmachine_domain::memory::{ListInput, Listed, MemoryKind};
use memmachine_domain::rank_together::{Item, Ranked, Source};
use memmachine_domain::semantic::model::Feature;

/// Where a handler's scope comes from.
#[derive(Clone)]
enum Binding {
    /// The command line's (stdio: one process, one scope).
    Fixed(Scope),
    /// Each HTTP request's (its URL, checked against the caller by `http`), bound to
    /// the session by its first request, the `initialize`.
    Session(Arc<OnceLock<Scope>>),
}

/// The MCP server of one session.
#[derive(Clone)]
pub struct MemoryTools {
    /// Set once the domain is ready (the REST listener serves before that).
    domain: Arc<OnceLock<Domain>>,
    binding: Binding,
    #[allow(dead_code)] // read by the code `tool_handler` generates
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MemoryType {
    Episodic,
    Semantic,
}

impl From<MemoryType> for MemoryKind {
    fn from(t: MemoryType) -> MemoryKind {
        match t {
            MemoryType::Episodic => MemoryKind::Episodic,
            MemoryType::Semantic => MemoryKind::Semantic,
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct AddMemoryInput {
    /// What was said or learned, as the user's message
    pub content: String,
    /// Role of the message: user (default), assistant, system or tool
    #[serde(default)]
    pub role: Option<String>,
    /// String tags stored with the episode (filterable as m.KEY)
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Memory types to add to; empty: episodic, and semantic when the server has a
    /// language model
    #[serde(default)]
    pub types: Vec<MemoryType>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SearchMemoryInput {
    /// What to look for, in natural language
    pub query: String,
    /// How many results per memory type [default: 10]
    #[serde(default)]
    pub top_k: Option<i32>,
    /// Memory types to search; empty: both episodic and semantic
    #[serde(default)]
    pub types: Vec<MemoryType>,
    /// A filter on episodes, e.g. `m.topic = 'food'` (see the server's filter syntax)
    #[serde(default)]
    pub filter: Option<String>,
    /// Also answer `ranked`: episodes and features in one ranking, where the episodes a
    /// matching feature cites count as evidence [default: false]
    #[serde(default)]
    pub rank_together: bool,
    /// Give each episode `score_parts`: what its score is made of (lexical, dense,
    /// context, session, time, participant) [default: false]
    #[serde(default)]
    pub explain: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListMemoriesInput {
    /// episodic (default) or semantic
    #[serde(default)]
    pub memory_type: Option<MemoryType>,
    /// Page size [default: 100]
    #[serde(default)]
    pub page_size: Option<i32>,
    /// The next_page_token of the previous page
    #[serde(default)]
    pub page_token: Option<String>,
    /// A filter on what is listed
    #[serde(default)]
    pub filter: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DeleteMemoryInput {
    /// Ids of the episodes (or features) to delete
    pub ids: Vec<String>,
    /// episodic (default) or semantic
    #[serde(default)]
    pub memory_type: Option<MemoryType>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GetProfileInput {
    /// Page size [default: 100]
    #[serde(default)]
    pub page_size: Option<i32>,
    /// The next_page_token of the previous page
    #[serde(default)]
    pub page_token: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GetUsageInput {
    /// From this time (RFC 3339) [default: the start of the current UTC day]
    #[serde(default)]
    pub since: Option<String>,
}

/// No parameters: the estimate is of the scoped project.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct EstimateExtractionInput {}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ForgetUserInput {
    /// Count what would be removed, remove nothing [default: false]
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Serialize)]
struct EpisodeOut<'a> {
    id: String,
    content: &'a str,
    producer: &'a str,
    role: &'a str,
    created_at: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    score_parts: Option<ScoreParts>,
}

/// A ranked episode, with the parts of its score when the search asked for them.
fn scored_episode(s: &ScoredEpisode) -> EpisodeOut<'_> {
    EpisodeOut {
        score_parts: s.parts,
        ..episode(&s.episode, Some(s.score))
    }
}

fn episode(e: &Episode, score: Option<f64>) -> EpisodeOut<'_> {
    EpisodeOut {
        id: e.uid.to_string(),
        content: &e.content,
        producer: &e.producer_id,
        role: &e.producer_role,
        created_at: time(e.created_at_micros),
        metadata: &e.metadata,
        score,
        score_parts: None,
    }
}

#[derive(Serialize)]
struct FeatureOut<'a> {
    id: &'a str,
    set_id: &'a str,
    category: &'a str,
    tag: &'a str,
    feature: &'a str,
    value: &'a str,
    updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f64>,
}

fn feature(f: &Feature, score: Option<f64>) -> FeatureOut<'_> {
    FeatureOut {
        id: &f.id,
        set_id: &f.set_id,
        category: &f.category,
        tag: &f.tag,
        feature: &f.feature,
        value: &f.value,
        updated_at: time(f.updated_at_micros),
        score,
    }
}

/// An item of a ranking together: `episode` or `feature`, with the fused score and
/// its parts.
fn ranked(r: &Ranked) -> serde_json::Value {
    let source = match r.source {
        Source::Episodic => "episodic",
        Source::Semantic => "semantic",
        Source::Both => "both",
    };
    let mut out = serde_json::json!({
        "source": source,
        "score": r.score,
        "episodic": r.episodic,
        "semantic": r.semantic,
    });
    match &r.item {
        Item::Episode(hit) => {
            out["episode"] = serde_json::json!(episode(&hit.episode, Some(hit.score)));
            out["citing_feature_ids"] = serde_json::json!(r.citing);
        }
        Item::Feature(hit) => {
            out["feature"] = serde_json::json!(feature(&hit.feature, Some(hit.score)));
            let citations: Vec<String> = hit
                .feature
                .citations
                .iter()
                .map(ToString::to_string)
                .collect();
            out["citations"] = serde_json::json!(citations);
        }
    }
    out
}

fn time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map_or_else(|| micros.to_string(), |t| t.to_rfc3339())
}

/// The scoped user's episodes: a value the domain ANDs onto the caller's parsed
/// filter, so no filter text can reach another user's.
fn users_episodes(user: &str) -> Expr {
    filter::equals(Field::System(SystemField::ProducerId), user)
}

/// A domain error as the agent sees it; faults of the server stay in its log.
fn failed(err: Error) -> CallToolResult {
    let message = match &err {
        Error::Internal(_) | Error::Closed => {
            tracing::error!(error = %err, "MCP tool failed");
            "internal error of the memory server (see its log)".to_string()
        }
        _ => err.to_string(),
    };
    CallToolResult::error(vec![ContentBlock::text(message)])
}

fn refused(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

fn answer(value: serde_json::Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value.to_string())])
}

impl MemoryTools {
    /// Tools bound to the command line's scope.
    pub fn fixed(domain: Domain, scope: Scope) -> MemoryTools {
        let cell = OnceLock::new();
        let _ = cell.set(domain);
        MemoryTools::new(Arc::new(cell), Binding::Fixed(scope))
    }

    /// Tools of one HTTP session, bound to the scope of its requests' URLs.
    pub fn per_session(domain: Arc<OnceLock<Domain>>) -> MemoryTools {
        MemoryTools::new(domain, Binding::Session(Arc::default()))
    }

    fn new(domain: Arc<OnceLock<Domain>>, binding: Binding) -> MemoryTools {
        MemoryTools {
            domain,
            binding,
            tool_router: Self::tool_router(),
        }
    }

    /// The scope of this request, and the domain; a refusal names why.
    fn reach(&self, ctx: &RequestContext<RoleServer>) -> Result<(&Domain, Scope), CallToolResult> {
        let scope = self.scope(ctx).map_err(refused)?;
        let domain = self.domain.get().ok_or_else(|| {
            refused("the memory server is starting; retry in a moment".to_string())
        })?;
        Ok((domain, scope))
    }

    /// The session's scope. Over HTTP a session is bound to the scope of its first
    /// request; a later request of it for another scope is refused.
    fn scope(&self, ctx: &RequestContext<RoleServer>) -> Result<Scope, String> {
        match &self.binding {
            Binding::Fixed(scope) => Ok(scope.clone()),
            Binding::Session(bound) => {
                let asked = ctx
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|parts| parts.extensions.get::<Scope>())
                    .cloned()
                    .ok_or_else(|| "the request carries no scope".to_string())?;
                let session = bound.get_or_init(|| asked.clone());
                if *session == asked {
                    Ok(asked)
                } else {
                    Err(format!(
                        "refused: this session is bound to {session}, not {asked}; open a new \
                         session with that URL"
                    ))
                }
            }
        }
    }
}

#[tool_router]
impl MemoryTools {
    #[tool(
        description = "Store a message in memory, as said by the scoped user (episodic; \
                       semantic too when the server has a language model). Returns the \
                       new episode ids."
    )]
    async fn add_memory(
        &self,
        Parameters(input): Parameters<AddMemoryInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (domain, scope) = match self.reach(&ctx) {
            Ok(reached) => reached,
            Err(refusal) => return Ok(refusal),
        };
        let message = MessageInput {
            uid: None,
            content: input.content,
            producer: scope.user.clone(),
            produced_for: String::new(),
            timestamp: None,
            role: input.role.unwrap_or_else(|| "user".to_string()),
            metadata: input.metadata,
            expires_at: None,
            idempotency_key: None,
        };
        let types: Vec<MemoryKind> = input.types.into_iter().map(Into::into).collect();
        Ok(
            match domain
                .memories
                .add(&scope.project, &types, vec![message])
                .await
            {
                Ok(added) => answer(serde_json::json!({
                    "ids": added.iter().map(|a| a.uid.to_string()).collect::<Vec<_>>()
                })),
                Err(err) => failed(err),
            },
        )
    }

    #[tool(
        description = "Search the scoped user's memories: episodes (what was said) and \
                       semantic features (facts about the user and the project), best first."
    )]
    async fn search_memory(
        &self,
        Parameters(input): Parameters<SearchMemoryInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (domain, scope) = match self.reach(&ctx) {
            Ok(reached) => reached,
            Err(refusal) => return Ok(refusal),
        };
        let types: Vec<MemoryKind> = input.types.iter().copied().map(Into::into).collect();
        // Episodes: the user's own. Features: the org's, the project's and the user's
        // sets, which `sets` selects.
        let search = SearchInput {
            query: input.query,
            top_k: input.top_k,
            filter: input.filter.unwrap_or_default(),
            expand_context: 0,
            score_threshold: None,
            scope: Some(users_episodes(&scope.user)),
            blank_query_ranks_nothing: false,
            as_of: None,
            rank_together: input.rank_together,
            semantic_weight: None,
            explain: input.explain,
        };
        let sets = BTreeMap::from([(
            memmachine_domain::semantic::sets::PRODUCER_TAG.to_string(),
            scope.user.clone(),
        )]);
        Ok(
            match domain
                .memories
                .search(&scope.project, &types, search, &sets)
                .await
            {
                // The project's rolling summary is left out: it covers every user.
                Ok(found) => answer({
                    let mut out = serde_json::json!({
                        "episodes": found.episodic.long_term.iter()
                            .map(scored_episode).collect::<Vec<_>>(),
                        "recent_episodes": found.episodic.short_term.iter()
                            .map(|e| episode(e, None)).collect::<Vec<_>>(),
                        "features": found.semantic.iter()
                            .map(|s| feature(&s.feature, Some(s.score))).collect::<Vec<_>>(),
                    });
                    if input.rank_together {
                        out["ranked"] = found.ranked.iter().map(ranked).collect();
                    }
                    out
                }),
                Err(err) => failed(err),
            },
        )
    }

    #[tool(
        description = "List the scoped user's episodes (oldest first), or with \
                       memory_type semantic the features of the org's, the project's and \
                       the user's sets; paged."
    )]
    async fn list_memories(
        &self,
        Parameters(input): Parameters<ListMemoriesInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (domain, scope) = match self.reach(&ctx) {
            Ok(reached) => reached,
            Err(refusal) => return Ok(refusal),
        };
        let kind = input.memory_type.unwrap_or(MemoryType::Episodic);
        let list = ListInput {
            as_of: None,
            kind: Some(kind.into()),
            page_size: input.page_size,
            page_token: input.page_token.unwrap_or_default(),
            page_num: 0,
            filter: input.filter.unwrap_or_default(),
            // Features are confined by the sets `set_metadata` selects.
            scope: match kind {
                MemoryType::Episodic => Some(users_episodes(&scope.user)),
                MemoryType::Semantic => None,
            },
            set_metadata: BTreeMap::from([(
                memmachine_domain::semantic::sets::PRODUCER_TAG.to_string(),
                scope.user.clone(),
            )]),
        };
        Ok(match domain.memories.list(&scope.project, list).await {
            Ok(Listed::Episodes(episodes, next)) => answer(serde_json::json!({
                "episodes": episodes.iter().map(|e| episode(e, None)).collect::<Vec<_>>(),
                "next_page_token": next,
            })),
            Ok(Listed::Features(features, next)) => answer(serde_json::json!({
                "features": features.iter().map(|f| feature(f, None)).collect::<Vec<_>>(),
                "next_page_token": next,
            })),
            Err(err) => failed(err),
        })
    }

    #[tool(
        description = "Delete episodes (or, with memory_type semantic, features) of the \
                       scoped project by id. An id that is not one of the project's is an \
                       error."
    )]
    async fn delete_memory(
        &self,
        Parameters(input): Parameters<DeleteMemoryInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (domain, scope) = match self.reach(&ctx) {
            Ok(reached) => reached,
            Err(refusal) => return Ok(refusal),
        };
        // Only the scoped user's own episodes and profile features.
        let deleted = match input.memory_type.unwrap_or(MemoryType::Episodic) {
            MemoryType::Episodic => {
                domain
                    .memories
                    .delete_episodes_of(&scope.project, &scope.user, &input.ids)
                    .await
            }
            MemoryType::Semantic => {
                let user_set =
                    memmachine_domain::semantic::sets::user_set(&scope.project, &scope.user).set_id;
                domain
                    .memories
                    .delete_features_in_set(&scope.project, &user_set, &input.ids)
                    .await
            }
        };
        Ok(match deleted {
            // Ids of other projects are not found, as unknown ones: nothing says they exist.
            Ok(n) if n < input.ids.len() as u64 => failed(Error::NotFound(format!(
                "not found in {scope}: {} of the {} ids are not episodes of this project \
                 ({n} deleted)",
                input.ids.len() as u64 - n,
                input.ids.len()
            ))),
            Ok(n) => answer(serde_json::json!({ "deleted": n })),
            Err(err) => failed(err),
        })
    }

    #[tool(
        description = "Read the scoped user's profile: the semantic features of the \
                       user's own set (preferences, biography, relationships, ...)."
    )]
    async fn get_user_profile(
        &self,
        Parameters(input): Parameters<GetProfileInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (domain, scope) = match self.reach(&ctx) {
            Ok(reached) => reached,
            Err(refusal) => return Ok(refusal),
        };
        // The user's set alone, not the org's and project's it selects with it.
        let user_set =
            memmachine_domain::semantic::sets::user_set(&scope.project, &scope.user).set_id;
        let list = ListInput {
            as_of: None,
            kind: Some(MemoryKind::Semantic),
            page_size: input.page_size,
            page_token: input.page_token.unwrap_or_default(),
            page_num: 0,
            filter: String::new(),
            scope: Some(filter::equals(Field::System(SystemField::SetId), &user_set)),
            set_metadata: BTreeMap::from([(
                memmachine_domain::semantic::sets::PRODUCER_TAG.to_string(),
                scope.user.clone(),
            )]),
        };
        Ok(match domain.memories.list(&scope.project, list).await {
            Ok(Listed::Features(features, next)) => answer(serde_json::json!({
                "user": scope.user,
                "set_id": user_set,
                "features": features.iter().map(|f| feature(f, None)).collect::<Vec<_>>(),
                "next_page_token": next,
            })),
            Ok(Listed::Episodes(..)) => failed(Error::Internal(
                "a semantic listing answered episodes".into(),
            )),
            Err(err) => failed(err),
        })
    }

    #[tool(
        description = "Read the scoped org's language-model and embedder usage per \
                       purpose (calls and tokens) and its daily token budget: how much \
                       is used today and, when over it, until when semantic memory \
                       pauses."
    )]
    async fn get_usage(
        &self,
        Parameters(input): Parameters<GetUsageInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (domain, scope) = match self.reach(&ctx) {
            Ok(reached) => reached,
            Err(refusal) => return Ok(refusal),
        };
        let since = match input.since.as_deref().filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => match chrono::DateTime::parse_from_rfc3339(text) {
                Ok(t) => Some(t.timestamp_micros()),
                Err(e) => {
                    return Ok(failed(Error::invalid(
                        "since",
                        format!("not an RFC 3339 time: {e}"),
                    )));
                }
            },
        };
        let org_id = &scope.project.org_id;
        Ok(
            match domain.usage.report(&scope.project.org(), None, since).await {
                Ok(report) => answer(serde_json::json!({
                    "org_id": org_id,
                    "usage": report.usage.iter().map(|f| serde_json::json!({
                        "purpose": f.purpose,
                        "calls": f.calls,
                        "prompt_tokens": f.prompt_tokens,
                        "completion_tokens": f.completion_tokens,
                    })).collect::<Vec<_>>(),
                    "budget": {
                        "daily_tokens": report.budget.daily_tokens,
                        "used_today": report.budget.used_today,
                        "paused_until": report.budget.paused_until.map(time),
                    },
                })),
                Err(err) => failed(err),
            },
        )
    }

    #[tool(
        description = "Estimate what extracting the scoped project's queued messages \
                       into semantic memory will cost (no model is called): messages \
                       queued, model calls, prompt tokens (a quarter of the characters \
                       sent) and completion tokens (a guess), whether its extraction is \
                       paused, and the org's token budget left today."
    )]
    async fn estimate_extraction(
        &self,
        Parameters(_): Parameters<EstimateExtractionInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (domain, scope) = match self.reach(&ctx) {
            Ok(reached) => reached,
            Err(refusal) => return Ok(refusal),
        };
        Ok(
            match domain.semantic.estimate_extraction(&scope.project).await {
                Ok(e) => answer(serde_json::json!({
                    "org_id": scope.project.org_id,
                    "project_id": e.project_id,
                    "paused": e.paused,
                    "pending_messages": e.pending_messages,
                    "sets": e.sets,
                    "max_batch_messages": e.max_batch,
                    "batches": e.batches,
                    "calls": e.calls,
                    "prompt_tokens": e.prompt_tokens,
                    "completion_tokens": e.completion_tokens,
                    "tokens_left_today": e.tokens_left_today(),
                    "budget": {
                        "daily_tokens": e.budget.daily_tokens,
                        "used_today": e.budget.used_today,
                        "paused_until": e.budget.paused_until.map(time),
                    },
                })),
                Err(err) => failed(err),
            },
        )
    }

    #[tool(
        description = "Forget the scoped user in the scoped project: every episode they \
                       said or that was said to them, their profile set, and what derives \
                       from those episodes. With dry_run, only count. Returns the receipt \
                       (counts only)."
    )]
    async fn forget_user(
        &self,
        Parameters(input): Parameters<ForgetUserInput>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (domain, scope) = match self.reach(&ctx) {
            Ok(reached) => reached,
            Err(refusal) => return Ok(refusal),
        };
        let forgotten = domain
            .forget
            .forget_subject(
                &scope.project.org(),
                &scope.user,
                std::slice::from_ref(&scope.project.project_id),
                input.dry_run,
            )
            .await;
        Ok(match forgotten {
            Ok(receipt) => answer(serde_json::json!({
                "receipt_id": receipt.receipt_id,
                "user": receipt.subject,
                "dry_run": receipt.dry_run,
                "completed_at": time(receipt.completed_at_micros),
                "projects": receipt.projects.iter().map(|p| serde_json::json!({
                    "project_id": p.project_id,
                    "episodes_deleted": p.counts.episodes,
                    "features_deleted": p.counts.features,
                    "citations_removed": p.counts.citations,
                    "summaries_deleted": p.counts.summaries,
                    "sets_deleted": p.counts.sets,
                })).collect::<Vec<_>>(),
            })),
            Err(err) => failed(err),
        })
    }
}

#[tool_handler]
impl ServerHandler for MemoryTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memmachine", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "MemMachine memory of one user in one project: add_memory stores what the \
                 user says or what you learn; search_memory recalls it; list_memories, \
                 delete_memory and get_user_profile manage it.",
            )
    }

    /// Binds an HTTP session to the scope of its `initialize` (and refuses one the
    /// caller may not reach before anything else happens).
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        self.scope(&context)
            .map_err(|message| McpError::invalid_request(message, None))?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_scope_is_a_value_whatever_the_name() {
        for user in ["alice", "o'brien\\", "x') OR ('1' = '1"] {
            assert_eq!(
                users_episodes(user),
                Expr::Cmp {
                    field: Field::System(SystemField::ProducerId),
                    op: filter::CmpOp::Eq,
                    value: filter::Literal::Str(user.to_string()),
                }
            );
        }
    }
}
