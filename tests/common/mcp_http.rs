//! A minimal MCP client over Streamable HTTP (`/mcp` on the REST listener): the
//! `initialize` handshake, then `tools/call` on the session it opened. Answers may come
//! as JSON or as a server-sent event stream; the one answering the request is returned.

use serde_json::{Value, json};

const PROTOCOL: &str = "2025-06-18";

pub struct McpSession {
    http: reqwest::Client,
    /// `http://ADDR/mcp?org=..&project=..&user=..`
    url: String,
    key: Option<String>,
    pub session_id: String,
    next_id: u64,
}

/// What a tool call answered: its text, and whether it is an error (`isError`).
#[derive(Debug, Clone)]
pub struct ToolAnswer {
    pub text: String,
    pub is_error: bool,
}

impl McpSession {
    /// Opens a session at `url` (with a bearer `key` when given).
    pub async fn open(url: &str, key: Option<&str>) -> Result<McpSession, String> {
        let mut session = McpSession {
            http: reqwest::Client::new(),
            url: url.to_string(),
            key: key.map(str::to_string),
            session_id: String::new(),
            next_id: 1,
        };
        let (answer, headers) = session
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "memmachine-tests", "version": "1"},
                }),
            )
            .await?;
        if answer.get("error").is_some() {
            return Err(format!("initialize failed: {answer}"));
        }
        session.session_id = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .ok_or("initialize answered no mcp-session-id")?
            .to_string();
        let status = session
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .status();
        if !status.is_success() {
            return Err(format!("notifications/initialized answered {status}"));
        }
        Ok(session)
    }

    /// Calls the tool `name` with `arguments`.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Result<ToolAnswer, String> {
        let (answer, _) = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await?;
        if let Some(error) = answer.get("error") {
            // A protocol error (arguments that do not decode): an error the agent reads.
            return Ok(ToolAnswer {
                text: error["message"].as_str().unwrap_or_default().to_string(),
                is_error: true,
            });
        }
        let result = &answer["result"];
        let text = result["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<String>()
            })
            .unwrap_or_default();
        Ok(ToolAnswer {
            text,
            is_error: result["isError"].as_bool().unwrap_or(false),
        })
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .json(body);
        if !self.session_id.is_empty() {
            request = request.header("mcp-session-id", &self.session_id);
        }
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        request
    }

    async fn request(
        &mut self,
        method: &str,
        params: Value,
    ) -> Result<(Value, reqwest::header::HeaderMap), String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut response = self
            .post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let headers = response.headers().clone();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(format!("{method} answered HTTP {status}: {body}"));
        }
        // An event stream may stay open after the answer: read until it arrives.
        let mut text = String::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            text.push_str(&String::from_utf8_lossy(&chunk));
            if let Some(answer) = answer_in(&text, id) {
                return Ok((answer, headers));
            }
        }
        answer_in(&text, id)
            .map(|answer| (answer, headers))
            .ok_or_else(|| format!("{method} got no answer: {text}"))
    }
}

/// The JSON-RPC answer with `id` in a JSON body or in an event stream's `data:` lines.
fn answer_in(text: &str, id: u64) -> Option<Value> {
    let is_answer = |v: &Value| v["id"].as_u64() == Some(id);
    if let Ok(value) = serde_json::from_str::<Value>(text.trim())
        && is_answer(&value)
    {
        return Some(value);
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(is_answer)
}
