//! What the two scripted OpenAI-compatible chat models share: a loopback HTTP server on
//! the current Tokio runtime, the protocol's answer bodies, and the reading of an
//! extraction prompt's message batch. The tests' `ChatServer` (tests/it/common/chat.rs)
//! answers from a per-test function and records every call; the bench's `ScriptedChat`
//! answers from one fixed script and only counts, so that recording never weighs on a run.

use std::net::SocketAddr;

use serde_json::{Value, json};

/// Where the chat-completions protocol is served.
pub const COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// An HTTP server on a loopback ephemeral port; it stops when dropped.
pub struct Loopback {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Loopback {
    /// Serves `app` on the current Tokio runtime; the port is bound when this returns.
    pub fn serve(app: axum::Router) -> std::io::Result<Loopback> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                eprintln!("scripted chat server stopped: {err}");
            }
        });
        Ok(Loopback { addr, task })
    }

    /// The base URL a client is given (`--llm-base-url`), ending in `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A chat completion of `content` by `model`, with these token counts as its `usage`.
pub fn completion(model: &str, content: &str, prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": chrono::Utc::now().timestamp(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    })
}

/// An OpenAI-style error body: `message`, `type` and, if given, `code`.
pub fn error_body(message: &str, kind: &str, code: Option<u16>) -> Value {
    let mut error = json!({"message": message, "type": kind});
    if let Some(code) = code {
        error["code"] = code.into();
    }
    json!({ "error": error })
}

/// The message number of a header line `[3] Caroline (user):`.
fn header_number(line: &str) -> Option<u64> {
    let rest = line.strip_prefix('[')?;
    let (number, rest) = rest.split_once("] ")?;
    (rest.ends_with("):") && rest.contains(" (")).then_some(())?;
    number.parse().ok()
}

/// The numbered messages of an extraction prompt's user message, after `## New
/// messages` (a header line `[3] Caroline (user):`, then the text's lines): (number,
/// text).
pub fn batch_messages(user: &str) -> Vec<(u64, String)> {
    let Some((_, listed)) = user.split_once("## New messages\n") else {
        return Vec::new();
    };
    let mut messages: Vec<(u64, String)> = Vec::new();
    for line in listed.lines() {
        if let Some(n) = header_number(line) {
            messages.push((n, String::new()));
        } else if let Some((_, text)) = messages.last_mut() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(line);
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_numbered_messages_of_a_batch() {
        let user = "## Current features\n[]\n\n## New messages\n\
                    [1] Caroline (user):\nHey Mel!\n\
                    [2] Melanie (user):\nHi\nthere\n[x] not a header\n";
        assert_eq!(
            batch_messages(user),
            [
                (1, "Hey Mel!".to_string()),
                (2, "Hi\nthere\n[x] not a header".to_string())
            ]
        );
        assert!(batch_messages("[1] Caroline (user):\nno batch heading").is_empty());
    }

    #[test]
    fn an_error_body_carries_its_code_only_when_given() {
        assert_eq!(
            error_body("no", "invalid_request_error", None),
            json!({"error": {"message": "no", "type": "invalid_request_error"}})
        );
        assert_eq!(
            error_body("busy", "scripted_error", Some(429))["error"]["code"],
            429
        );
    }
}
