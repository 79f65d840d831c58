//! A real local HTTP server speaking the OpenAI chat-completions protocol, scripted by
//! test: a function of each call decides the answer (content, an error status, a body
//! that is not a completion, or none at all), and every call is recorded. The server and
//! the protocol's bodies are the testkit's (`memmachine_testkit::chat`), shared with the
//! bench's scripted model, which answers from one fixed script and only counts.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use memmachine_testkit::chat::{self as protocol, Loopback};
use serde_json::Value;

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatCall {
    /// The system messages' contents, joined by blank lines.
    pub system: String,
    /// The user messages' contents, joined by blank lines.
    pub user: String,
    /// Every message as `(role, content)`, in order.
    pub messages: Vec<(String, String)>,
    pub model: String,
    pub response_format: Option<Value>,
    /// The `Authorization` header as sent.
    pub authorization: Option<String>,
    /// The whole request body, for what the fields above leave out (`temperature`…).
    pub body: Value,
}

impl ChatCall {
    /// `response_format.type`, if any (`json_schema`, `json_object`…).
    pub fn format_type(&self) -> Option<&str> {
        self.response_format.as_ref()?.get("type")?.as_str()
    }
}

/// How the server answers one call.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptedReply {
    /// A chat completion with this content.
    Content(String),
    /// A chat completion with this content and no `usage` (as some local servers answer).
    ContentWithoutUsage(String),
    /// This status with an OpenAI-style error body, and a `Retry-After` (seconds) if
    /// given.
    Status(u16, Option<u64>),
    /// This status with an OpenAI-style error body carrying this message.
    StatusMessage(u16, String),
    /// `200` with a body that is not a chat completion.
    Garbage,
    /// No answer for ten minutes (the client is meant to time out).
    Hang,
}

type Answer = Arc<dyn Fn(&ChatCall) -> ScriptedReply + Send + Sync>;

struct State {
    answer: RwLock<Answer>,
    calls: Mutex<Vec<ChatCall>>,
}

/// The server; it stops when dropped (connections in progress end with the runtime).
pub struct ChatServer {
    /// Base URL, ending in `/v1`.
    pub url: String,
    state: Arc<State>,
    _server: Loopback,
}

impl ChatServer {
    /// Serves `POST /v1/chat/completions` on a loopback port, answering with `answer`.
    /// Must be called within a Tokio runtime. `.await`ing the result is allowed too (it
    /// is ready at once), like the other scripted servers.
    pub fn start(
        answer: impl Fn(&ChatCall) -> ScriptedReply + Send + Sync + 'static,
    ) -> ChatServer {
        let state = Arc::new(State {
            answer: RwLock::new(Arc::new(answer)),
            calls: Mutex::default(),
        });
        let shared = state.clone();
        let app = axum::Router::new().route(
            protocol::COMPLETIONS_PATH,
            axum::routing::post(move |headers: HeaderMap, Json(body): Json<Value>| {
                let state = shared.clone();
                async move { reply(&state, &headers, &body).await }
            }),
        );
        let server = Loopback::serve(app).expect("serve the scripted chat model");
        ChatServer {
            url: server.base_url(),
            state,
            _server: server,
        }
    }

    /// Answers from now on with `answer`.
    pub fn set_answer(&self, answer: impl Fn(&ChatCall) -> ScriptedReply + Send + Sync + 'static) {
        *self.state.answer.write().unwrap() = Arc::new(answer);
    }

    /// Every call so far, in the order received.
    pub fn calls(&self) -> Vec<ChatCall> {
        self.state.calls.lock().unwrap().clone()
    }

    pub fn call_count(&self) -> usize {
        self.state.calls.lock().unwrap().len()
    }
}

impl std::future::IntoFuture for ChatServer {
    type Output = ChatServer;
    type IntoFuture = std::future::Ready<ChatServer>;

    fn into_future(self) -> Self::IntoFuture {
        std::future::ready(self)
    }
}

async fn reply(state: &State, headers: &HeaderMap, body: &Value) -> Response {
    let call = parse_call(headers, body);
    state.calls.lock().unwrap().push(call.clone());
    let answer = state.answer.read().unwrap().clone();
    match answer(&call) {
        ScriptedReply::ContentWithoutUsage(content) => {
            let mut body = completion(&call, &content);
            body.as_object_mut().unwrap().remove("usage");
            Json(body).into_response()
        }
        ScriptedReply::Content(content) => Json(completion(&call, &content)).into_response(),
        ScriptedReply::Status(code, retry_after) => error(code, None, retry_after),
        ScriptedReply::StatusMessage(code, message) => error(code, Some(message), None),
        ScriptedReply::Garbage => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/html")],
            "<html><body>this is not a chat completion</body></html>",
        )
            .into_response(),
        ScriptedReply::Hang => {
            tokio::time::sleep(Duration::from_secs(600)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}

/// A chat completion of `content`, with `usage` counted in words (see [`words`]).
fn completion(call: &ChatCall, content: &str) -> Value {
    let prompt_tokens: usize = call.messages.iter().map(|(_, c)| words(c)).sum();
    protocol::completion(
        &call.model,
        content,
        prompt_tokens as u64,
        words(content) as u64,
    )
}

/// An OpenAI-style error answer.
fn error(code: u16, message: Option<String>, retry_after: Option<u64>) -> Response {
    let status = StatusCode::from_u16(code).expect("a valid status code");
    let message = message.unwrap_or_else(|| format!("scripted reply: {status}"));
    let body = Json(protocol::error_body(&message, "scripted_error", Some(code)));
    match retry_after {
        Some(secs) => (status, [(header::RETRY_AFTER, secs.to_string())], body).into_response(),
        None => (status, body).into_response(),
    }
}

fn parse_call(headers: &HeaderMap, body: &Value) -> ChatCall {
    let messages: Vec<(String, String)> = body["messages"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    let field = |name: &str| m[name].as_str().unwrap_or_default().to_string();
                    (field("role"), field("content"))
                })
                .collect()
        })
        .unwrap_or_default();
    let joined = |role: &str| {
        messages
            .iter()
            .filter(|(r, _)| r == role)
            .map(|(_, c)| c.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    ChatCall {
        system: joined("system"),
        user: joined("user"),
        model: body["model"].as_str().unwrap_or_default().to_string(),
        response_format: body.get("response_format").cloned(),
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        messages,
        body: body.clone(),
    }
}

/// Tokens, as this server counts them: words.
pub fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// What the scripted model knows: "My favourite X is Y." adds (tag preferences),
/// "Actually my favourite X is Y." updates, "I no longer have a favourite X." deletes;
/// consolidation merges everything into one feature; summaries count messages.
pub fn favourites(call: &ChatCall) -> ScriptedReply {
    if call.system.contains("running summary") {
        let count = call.user.lines().filter(|l| l.starts_with('[')).count();
        let previous = call
            .user
            .split("## Summary so far\n")
            .nth(1)
            .and_then(|s| s.lines().next())
            .unwrap_or("");
        let before: usize = previous
            .strip_prefix("summary of ")
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        return ScriptedReply::Content(format!("summary of {} messages", before + count));
    }
    if call.system.contains("tidy a memory") {
        let values: Vec<String> = call
            .user
            .split("\"value\":\"")
            .skip(1)
            .filter_map(|s| s.split('"').next())
            .map(str::to_string)
            .collect();
        return ScriptedReply::Content(
            serde_json::json!({
                "consolidated_memories": [{"tag": "preferences", "feature": "favourites", "value": values.join(", ")}],
                "keep_memories": []
            })
            .to_string(),
        );
    }
    ScriptedReply::Content(favourite_commands(call))
}

/// The extraction answer of [`favourites`] alone: add, update and delete commands.
pub fn favourite_commands(call: &ChatCall) -> String {
    let mut commands = Vec::new();
    let lines = protocol::batch_messages(&call.user)
        .into_iter()
        .flat_map(|(number, text)| {
            let lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines.into_iter().map(move |line| (number, line))
        });
    for (number, line) in lines {
        let text = line.trim_end_matches('.');
        let command = if let Some(rest) = text.strip_prefix("Actually my favourite ") {
            rest.split_once(" is ")
                .map(|(f, v)| ("update", format!("favourite {f}"), v.to_string()))
        } else if let Some(rest) = text.strip_prefix("My favourite ") {
            rest.split_once(" is ")
                .map(|(f, v)| ("add", format!("favourite {f}"), v.to_string()))
        } else {
            text.strip_prefix("I no longer have a favourite ")
                .map(|f| ("delete", format!("favourite {f}"), String::new()))
        };
        if let Some((command, feature, value)) = command {
            commands.push(serde_json::json!({
                "command": command, "tag": "preferences", "feature": feature,
                "value": value, "messages": [number]
            }));
        }
    }
    serde_json::json!({ "commands": commands }).to_string()
}
