//! A small MCP client over Streamable HTTP for tests that drive `/mcp` directly: JSON-RPC
//! requests POSTed with the session's `mcp-session-id` header, answers read as JSON or
//! as SSE `data:` lines.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The protocol version asked for (one without the per-request standard headers).
pub const PROTOCOL: &str = "2025-06-18";

/// One HTTP request's answer: its status, session header and JSON-RPC messages.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub session: Option<String>,
    pub body: String,
    pub messages: Vec<Value>,
}

/// The JSON-RPC messages of a body: the body itself, or its SSE `data:` lines.
fn messages(body: &str) -> Vec<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        return vec![value];
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

/// Sends one request to `{base}/mcp` with the scope `org`, `project`, `user`; `key` and
/// `session` are sent when given.
pub async fn send(
    http: &reqwest::Client,
    base: &str,
    scope: (&str, &str, &str),
    method: Method,
    key: Option<&str>,
    session: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let (org, project, user) = scope;
    let mut request = http
        .request(method, format!("{base}/mcp"))
        .query(&[("org", org), ("project", project), ("user", user)])
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", PROTOCOL);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.expect("send an MCP request");
    let status = response.status();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // A GET opens the session's standing stream: its status is all a test needs.
    let body = if status.is_success()
        && response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
        && body.is_none()
    {
        String::new()
    } else {
        response.text().await.unwrap_or_default()
    };
    Answer {
        status,
        session,
        messages: messages(&body),
        body,
    }
}

/// What a tool call answered: its `isError` and its text.
#[derive(Debug, Clone)]
pub struct ToolAnswer {
    pub is_error: bool,
    pub text: String,
}

/// An open session: the scope and key it was opened with.
pub struct Session {
    pub http: reqwest::Client,
    pub base: String,
    pub scope: (String, String, String),
    pub key: Option<String>,
    pub id: String,
    next_id: u64,
}

impl Session {
    /// `initialize` and `notifications/initialized`; `Err` with the answer when the
    /// server refused.
    pub async fn open(
        http: &reqwest::Client,
        base: &str,
        scope: (&str, &str, &str),
        key: Option<&str>,
    ) -> Result<Session, Answer> {
        let initialize = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "memmachine-tests", "version": "0"},
            },
        });
        let answer = send(
            http,
            base,
            scope,
            Method::POST,
            key,
            None,
            Some(&initialize),
        )
        .await;
        let Some(id) = answer
            .session
            .clone()
            .filter(|_| answer.status.is_success())
        else {
            return Err(answer);
        };
        let session = Session {
            http: http.clone(),
            base: base.to_string(),
            scope: (scope.0.into(), scope.1.into(), scope.2.into()),
            key: key.map(str::to_string),
            id,
            next_id: 1,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = session.post(key, &initialized).await;
        assert!(
            answer.status.is_success(),
            "notifications/initialized: {answer:?}"
        );
        Ok(session)
    }

    /// POSTs `body` in this session with `key` (not necessarily the session's).
    pub async fn post(&self, key: Option<&str>, body: &Value) -> Answer {
        self.raw(Method::POST, key, Some(body)).await
    }

    /// Any method in this session with `key`, at the session's URL.
    pub async fn raw(&self, method: Method, key: Option<&str>, body: Option<&Value>) -> Answer {
        let scope = (
            self.scope.0.as_str(),
            self.scope.1.as_str(),
            self.scope.2.as_str(),
        );
        self.raw_at(scope, method, key, body).await
    }

    /// Any method with this session's id, `key` and the URL of `scope` (as another
    /// caller holding the id would send it).
    pub async fn raw_at(
        &self,
        scope: (&str, &str, &str),
        method: Method,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        send(
            &self.http,
            &self.base,
            scope,
            method,
            key,
            Some(&self.id),
            body,
        )
        .await
    }

    /// A JSON-RPC request with `key`: its answer's `result`, or the whole answer.
    pub async fn request_as(
        &mut self,
        key: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Answer> {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = self.post(key, &body).await;
        let result = answer
            .messages
            .iter()
            .find(|m| m["id"] == json!(id))
            .and_then(|m| m.get("result"))
            .cloned();
        match result {
            Some(result) if answer.status.is_success() => Ok(result),
            _ => Err(answer),
        }
    }

    /// A JSON-RPC request with the session's own key.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, Answer> {
        let key = self.key.clone();
        self.request_as(key.as_deref(), method, params).await
    }

    /// `tools/call`; panics when the call is not answered with a result.
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> ToolAnswer {
        let result = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
            .unwrap_or_else(|answer| panic!("tools/call {name}: {answer:?}"));
        let text = result["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["text"].as_str())
            .collect::<String>();
        ToolAnswer {
            is_error: result["isError"].as_bool().unwrap_or(false),
            text,
        }
    }
}
