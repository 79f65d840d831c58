//! A scripted OpenAI-compatible chat model, served from the benchmark's own process so
//! that semantic ingestion can be measured without a real model: `POST
//! /v1/chat/completions` answers at once with a real chat-completion body
//! (`choices[0].message.content` and `usage`), and counts the calls by purpose.
//!
//! - **Extraction** (the system prompt says "memory of a conversation"): one `add`
//!   command per message of the batch, read from the user message after `## New
//!   messages` (header lines `[3] Caroline (user):`, the text on the lines after): tag
//!   `preferences` (or the category's first tag when it has no such tag), feature the
//!   first 3 words, value the rest cut to 60 characters (the whole text when there is no
//!   rest: a value must not be empty), citing that message.
//! - **Consolidation** ("tidy a memory"): keeps every feature it is shown.
//! - **Summary** ("running summary"): a short text.
//!
//! The server and the protocol's bodies are the testkit's (`memmachine_testkit::chat`),
//! shared with the tests' scripted model; the script and the counters are the bench's.
//! The tests' model is not used here: it records every call (whole bodies, behind a
//! lock) and cannot count request bytes or unreadable requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use memmachine_testkit::chat::{self as protocol, Loopback, batch_messages};
use serde_json::{Value, json};

/// What a call was for, told from its system prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Extraction = 0,
    Consolidation = 1,
    Summary = 2,
    Other = 3,
}

impl Purpose {
    pub const ALL: [Purpose; 4] = [
        Purpose::Extraction,
        Purpose::Consolidation,
        Purpose::Summary,
        Purpose::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Extraction => "extraction",
            Purpose::Consolidation => "consolidation",
            Purpose::Summary => "summary",
            Purpose::Other => "other",
        }
    }

    fn of(system: &str) -> Purpose {
        if system.contains("memory of a conversation") {
            Purpose::Extraction
        } else if system.contains("tidy a memory") {
            Purpose::Consolidation
        } else if system.contains("running summary") {
            Purpose::Summary
        } else {
            Purpose::Other
        }
    }
}

#[derive(Default)]
struct Counters {
    calls: [AtomicU64; 4],
    /// Request body bytes, by purpose.
    bytes: [AtomicU64; 4],
    /// Calls that carried an earlier answer of ours (a correction after an invalid one).
    corrections: AtomicU64,
    /// Messages shown in extraction prompts.
    extraction_messages: AtomicU64,
    /// `add` commands answered.
    adds: AtomicU64,
    /// Features shown in consolidation prompts.
    consolidation_features: AtomicU64,
    /// Requests that were not a chat request we could read (answered 400).
    malformed: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChatCounts {
    pub calls: [u64; 4],
    pub bytes: [u64; 4],
    pub corrections: u64,
    pub extraction_messages: u64,
    pub adds: u64,
    pub consolidation_features: u64,
    pub malformed: u64,
}

impl ChatCounts {
    pub fn calls(&self, purpose: Purpose) -> u64 {
        self.calls[purpose as usize]
    }

    pub fn bytes(&self, purpose: Purpose) -> u64 {
        self.bytes[purpose as usize]
    }

    pub fn total_calls(&self) -> u64 {
        self.calls.iter().sum()
    }
}

/// The scripted model, listening on a loopback ephemeral port until dropped.
pub struct ScriptedChat {
    pub addr: SocketAddr,
    counters: Arc<Counters>,
    server: Loopback,
}

impl ScriptedChat {
    /// Starts serving on the current tokio runtime.
    pub async fn start() -> std::io::Result<ScriptedChat> {
        let counters = Arc::new(Counters::default());
        let app = axum::Router::new()
            .route(protocol::COMPLETIONS_PATH, axum::routing::post(complete))
            .with_state(counters.clone());
        let server = Loopback::serve(app)?;
        Ok(ScriptedChat {
            addr: server.addr,
            counters,
            server,
        })
    }

    /// The `--llm-base-url` to give the server.
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    pub fn counts(&self) -> ChatCounts {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ChatCounts {
            calls: std::array::from_fn(|i| load(&c.calls[i])),
            bytes: std::array::from_fn(|i| load(&c.bytes[i])),
            corrections: load(&c.corrections),
            extraction_messages: load(&c.extraction_messages),
            adds: load(&c.adds),
            consolidation_features: load(&c.consolidation_features),
            malformed: load(&c.malformed),
        }
    }
}

async fn complete(State(counters): State<Arc<Counters>>, body: String) -> Response {
    let request: Value = match serde_json::from_str(&body) {
        Ok(request) => request,
        Err(err) => return malformed(&counters, format!("not JSON: {err}")),
    };
    let Some(messages) = request["messages"].as_array() else {
        return malformed(&counters, "no messages".into());
    };
    let content_of = |role: &str| {
        messages
            .iter()
            .find(|m| m["role"] == role)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
    };
    let (system, user) = (content_of("system"), content_of("user"));
    let purpose = Purpose::of(system);
    counters.calls[purpose as usize].fetch_add(1, Ordering::Relaxed);
    counters.bytes[purpose as usize].fetch_add(body.len() as u64, Ordering::Relaxed);
    if messages.iter().any(|m| m["role"] == "assistant") {
        counters.corrections.fetch_add(1, Ordering::Relaxed);
    }
    let content = match purpose {
        Purpose::Extraction => {
            let (answer, shown, adds) = extraction_answer(system, user);
            counters
                .extraction_messages
                .fetch_add(shown as u64, Ordering::Relaxed);
            counters.adds.fetch_add(adds as u64, Ordering::Relaxed);
            answer
        }
        Purpose::Consolidation => {
            let ids = consolidation_ids(user);
            counters
                .consolidation_features
                .fetch_add(ids.len() as u64, Ordering::Relaxed);
            json!({"consolidated_memories": [], "keep_memories": ids}).to_string()
        }
        Purpose::Summary => "The speakers caught up on their week and their plans.".to_string(),
        Purpose::Other => "OK".to_string(),
    };
    let prompt_tokens = (body.len() / 4) as u64;
    let completion_tokens = (content.len() / 4).max(1) as u64;
    let answer = protocol::completion(
        request["model"].as_str().unwrap_or("scripted"),
        &content,
        prompt_tokens,
        completion_tokens,
    );
    ([(CONTENT_TYPE, "application/json")], answer.to_string()).into_response()
}

fn malformed(counters: &Counters, message: String) -> Response {
    counters.malformed.fetch_add(1, Ordering::Relaxed);
    let body = protocol::error_body(&message, "invalid_request_error", None);
    (
        StatusCode::BAD_REQUEST,
        [(CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The tag to use: `preferences` if the category lists it (or lists none), else the
/// first tag it lists (`- name: description` lines after "Use only these tags:").
fn tag_of(system: &str) -> String {
    let Some((_, list)) = system.split_once("Use only these tags:\n") else {
        return "preferences".into();
    };
    let tags: Vec<&str> = list
        .lines()
        .map_while(|l| l.strip_prefix("- "))
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    if tags.is_empty() || tags.contains(&"preferences") {
        "preferences".into()
    } else {
        tags[0].to_string()
    }
}

fn truncate(text: &str, chars: usize) -> String {
    text.chars()
        .take(chars)
        .collect::<String>()
        .trim()
        .to_string()
}

/// The extraction answer for a prompt, with how many messages it showed and how many
/// `add` commands the answer holds.
fn extraction_answer(system: &str, user: &str) -> (String, usize, usize) {
    let tag = tag_of(system);
    let messages = batch_messages(user);
    let commands: Vec<Value> = messages
        .iter()
        .filter_map(|(n, text)| {
            let words: Vec<&str> = text.split_whitespace().collect();
            if words.is_empty() {
                return None;
            }
            let split = words.len().min(3);
            let feature = truncate(&words[..split].join(" "), 200);
            let rest = words[split..].join(" ");
            let value = if rest.is_empty() {
                feature.clone()
            } else {
                truncate(&rest, 60)
            };
            Some(json!({
                "command": "add",
                "tag": tag,
                "feature": feature,
                "value": value,
                "messages": [n]
            }))
        })
        .collect();
    let adds = commands.len();
    (
        json!({ "commands": commands }).to_string(),
        messages.len(),
        adds,
    )
}

/// The ids of the features listed in a consolidation prompt (a JSON list after
/// `Features:`).
fn consolidation_ids(user: &str) -> Vec<String> {
    let Some((_, list)) = user.split_once("Features:\n") else {
        return Vec::new();
    };
    match serde_json::from_str::<Value>(list.trim()) {
        Ok(Value::Array(features)) => features
            .iter()
            .filter_map(|f| f["id"].as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_batch_and_answers_one_add_per_message() {
        let user = "## Current features\n[]\n\n## New messages\n\
                    [1] Caroline (user):\nHey Mel! Good to see you again today.\n\
                    [2] Melanie (user):\nHi\nthere\n[3] Caroline (user):\nOk\n";
        let messages = batch_messages(user);
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1], (2, "Hi\nthere".to_string()));
        let system = "You maintain the \"profile\" memory of a conversation.\n\
                      Use only these tags:\n- preferences: likes\n- biography: who\n\nCompare";
        assert_eq!(tag_of(system), "preferences");
        let (answer, shown, adds) = extraction_answer(system, user);
        assert_eq!((shown, adds), (3, 3));
        let answer: Value = serde_json::from_str(&answer).unwrap();
        let first = &answer["commands"][0];
        assert_eq!(first["feature"], "Hey Mel! Good");
        assert_eq!(first["value"], "to see you again today.");
        assert_eq!(first["messages"], json!([1]));
        assert_eq!(answer["commands"][2]["value"], "Ok");
    }

    #[test]
    fn keeps_every_feature_it_is_shown() {
        let user = "Category: profile\nTag: preferences\nFeatures:\n\
                    [{\"id\":\"a\",\"feature\":\"f\",\"value\":\"v\"},{\"id\":\"b\"}]";
        assert_eq!(consolidation_ids(user), ["a", "b"]);
        assert_eq!(
            Purpose::of("You tidy a memory of facts."),
            Purpose::Consolidation
        );
        assert_eq!(
            Purpose::of("You keep a running summary of a conversation."),
            Purpose::Summary
        );
    }
}
