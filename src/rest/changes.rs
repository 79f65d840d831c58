//! `GET /api/v2/memories/changes`: a project's changes as Server-Sent Events, the REST
//! face of `ChangeService.WatchChanges`. Each change is one event whose `id` is its
//! cursor (so a browser's EventSource resumes by itself through `Last-Event-ID`) and
//! whose data is JSON in the gateway's shapes; comments keep idle connections alive.
//! Errors before the stream starts are the gateway's JSON errors; a cursor older than
//! the kept feed is 410 Gone naming the oldest cursor (`detail.resume_after` too). An
//! error after the start (cut off for reading too slowly, the server draining) is a
//! last event named `error`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Extension, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::shapes::{EpisodeJson, FeatureJson};
use super::{ApiError, Gateway};
use crate::admission::watch::admit_change_stream;
use crate::store::MemoryChangeKind;
use memmachine_core::error::Error;
use memmachine_core::model::ProjectKey;
use memmachine_domain::auth::Access;
use memmachine_domain::changes::{WatchKind, Watched};

pub fn routes() -> OpenApiRouter<Gateway> {
    OpenApiRouter::new().routes(routes!(watch_changes))
}

/// Which project, and where to resume.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ChangesQuery {
    #[serde(default)]
    org_id: String,
    #[serde(default)]
    project_id: String,
    /// The cursor of the last change processed (the `Last-Event-ID` header wins);
    /// absent: only changes from now on.
    #[serde(default)]
    after: String,
}

/// One change: the `data` of an event whose `event` is the kind and `id` the cursor.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeJson {
    cursor: String,
    /// `episode_added`, `episode_deleted`, `feature_added`, `feature_updated`,
    /// `feature_deleted`, `summary_replaced` or `project_deleted` (the last event).
    kind: &'static str,
    /// RFC 3339, when it committed.
    at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    episode_uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    episode: Option<EpisodeJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    feature_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    feature: Option<FeatureJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<String>,
}

const LAST_EVENT_ID: &str = "last-event-id";
/// Comments sent on an idle stream, so that proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[utoipa::path(get, path = "/memories/changes", tag = "Memories", params(ChangesQuery),
    responses((status = 200, content_type = "text/event-stream", body = ChangeJson),
              (status = 403), (status = 404), (status = 410), (status = 422), (status = 429)))]
async fn watch_changes(
    State(gateway): State<Gateway>,
    Extension(caller): Extension<Access>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let Query(query) = Query::<ChangesQuery>::try_from_uri(request.uri())
        .map_err(|r| Error::invalid("query", r.body_text()))?;
    let headers = request.headers();
    let key = caller.project(&query.org_id, &query.project_id)?;
    let after = headers
        .get(LAST_EVENT_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map_or(query.after, str::to_string);
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string());
    let admission = &gateway.admission;
    let place = admit_change_stream(&admission.change_streams, caller.key_id(), &peer)?;
    let domain = gateway.domain()?;
    let stream = domain
        .changes
        .watch(&key, &after)
        .await
        .map_err(|err| match err {
            Error::OutOfRange { .. } => ApiError::from(err).with_status(http::StatusCode::GONE),
            other => ApiError::from(other),
        })?;
    let relay = domain
        .changes
        .relay(stream, admission.closing.clone(), Box::new(place));
    let events =
        futures::stream::unfold((relay, key, false), |(mut relay, key, done)| async move {
            if done {
                return None;
            }
            let (event, done) = match relay.recv().await? {
                Ok(w) => (event(&key, w), false),
                Err(err) => (error_event(err), true),
            };
            Some((Ok::<_, Infallible>(event), (relay, key, done)))
        });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

fn kind(kind: WatchKind) -> &'static str {
    match kind {
        WatchKind::Memory(MemoryChangeKind::EpisodeAdded) => "episode_added",
        WatchKind::Memory(MemoryChangeKind::EpisodeDeleted) => "episode_deleted",
        WatchKind::Memory(MemoryChangeKind::FeatureAdded) => "feature_added",
        WatchKind::Memory(MemoryChangeKind::FeatureUpdated) => "feature_updated",
        WatchKind::Memory(MemoryChangeKind::FeatureDeleted) => "feature_deleted",
        WatchKind::Memory(MemoryChangeKind::SummaryReplaced) => "summary_replaced",
        WatchKind::ProjectDeleted => "project_deleted",
    }
}

fn event(key: &ProjectKey, w: Watched) -> Event {
    let kind = kind(w.kind);
    let mut json = ChangeJson {
        cursor: w.cursor.clone(),
        kind,
        at: super::shapes::time(w.at_micros),
        episode_uid: None,
        episode: None,
        feature_id: None,
        feature: None,
        summary: None,
    };
    if let Some(c) = w.change {
        json.episode_uid = c.episode_uid.map(|u| u.to_string());
        json.episode = c.episode.map(|e| EpisodeJson::new(key, e));
        json.feature_id = c.feature_id;
        json.feature = c.feature.map(|f| FeatureJson::new(f, None, true));
        json.summary = c.summary;
    }
    let data = serde_json::to_string(&json).unwrap_or_else(|_| "{}".into());
    Event::default().id(w.cursor).event(kind).data(data)
}

/// The reason a stream ended early, as its last event.
fn error_event(err: Error) -> Event {
    let code = memmachine_domain::metrics::code_name(err.grpc_code());
    let message = err.bounded().to_string();
    let data = serde_json::json!({"code": code, "message": message}).to_string();
    Event::default().event("error").data(data)
}
