//! The OpenAI-compatible chat client against a scripted chat-completions server over
//! real HTTP: what it sends, how it falls back when the endpoint does not take a JSON
//! schema, what it retries and for how long, its call rate, and its metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::chat::{ChatCall, ChatServer, ScriptedReply};
use memmachine_domain::llm::measured::Measured;
use memmachine_domain::llm::openai::{OpenAiChat, OpenAiChatConfig};
use memmachine_domain::llm::{ChatMessage, ChatRequest, LanguageModel, LlmError, Purpose, Role};
use memmachine_domain::metrics::Metrics;
use serde_json::json;

const ANSWER: &str = r#"{"facts": ["likes tea"]}"#;

/// Fast retries, so that the tests do not wait for the production backoff.
fn config(server: &ChatServer) -> OpenAiChatConfig {
    let mut config = OpenAiChatConfig::new(server.url.clone(), "test-model");
    config.backoff = Duration::from_millis(10);
    config.max_backoff = Duration::from_millis(50);
    config.timeout = Duration::from_secs(10);
    config
}

fn client(server: &ChatServer) -> OpenAiChat {
    OpenAiChat::new(config(server)).expect("client")
}

fn schema() -> serde_json::Value {
    json!({"type": "object", "properties": {"facts": {"type": "array", "items": {"type": "string"}}}})
}

fn request(purpose: Purpose) -> ChatRequest {
    ChatRequest {
        purpose,
        messages: vec![
            ChatMessage::system("You extract facts."),
            ChatMessage::user("I like tea."),
        ],
        json_schema: Some(("facts".to_string(), schema())),
    }
}

fn content(text: &str) -> ScriptedReply {
    ScriptedReply::Content(text.to_string())
}

/// Answers the n-th call with `replies[n]`, and any later one with the last reply.
fn in_turn(replies: Vec<ScriptedReply>) -> impl Fn(&ChatCall) -> ScriptedReply + Send + Sync {
    let n = AtomicUsize::new(0);
    move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst);
        replies[i.min(replies.len() - 1)].clone()
    }
}

#[tokio::test]
async fn sends_the_schema_and_returns_the_content_with_tokens() {
    let server = ChatServer::start(|_| content(ANSWER));
    let llm = client(&server);
    assert_eq!(llm.id(), "openai:test-model");

    let completion = llm.complete(&request(Purpose::Extraction)).await.unwrap();
    assert_eq!(completion.content, ANSWER);
    // The scripted server counts words: 3 + 3 in, 3 out.
    assert_eq!(completion.prompt_tokens, 6);
    assert_eq!(completion.completion_tokens, 3);

    let calls = server.calls();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.model, "test-model");
    assert_eq!(call.system, "You extract facts.");
    assert_eq!(call.user, "I like tea.");
    assert_eq!(
        call.messages,
        vec![
            ("system".to_string(), "You extract facts.".to_string()),
            ("user".to_string(), "I like tea.".to_string()),
        ]
    );
    assert_eq!(
        call.response_format,
        Some(json!({"type": "json_schema",
                    "json_schema": {"name": "facts", "schema": schema(), "strict": false}}))
    );
    assert_eq!(call.body["temperature"], json!(0.0));
    assert_eq!(call.authorization, None);
}

#[tokio::test]
async fn plain_text_requests_send_no_response_format() {
    let server = ChatServer::start(|_| content("A short summary."));
    let llm = client(&server);
    let completion = llm
        .complete(&ChatRequest {
            purpose: Purpose::Summary,
            messages: vec![
                ChatMessage::system("Summarise."),
                ChatMessage {
                    role: Role::Assistant,
                    content: "Earlier summary.".into(),
                },
                ChatMessage::user("New messages."),
            ],
            json_schema: None,
        })
        .await
        .unwrap();
    assert_eq!(completion.content, "A short summary.");
    let call = &server.calls()[0];
    assert_eq!(call.response_format, None);
    assert_eq!(call.messages[1].0, "assistant");
}

#[tokio::test]
async fn accepts_a_base_url_without_v1() {
    let server = ChatServer::start(|_| content(ANSWER));
    let base = server.url.trim_end_matches("/v1").to_string();
    let llm = OpenAiChat::new(OpenAiChatConfig::new(format!("{base}/"), "m")).unwrap();
    assert_eq!(llm.endpoint(), format!("{}/chat/completions", server.url));
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    assert_eq!(server.call_count(), 1);
}

#[tokio::test]
async fn falls_back_to_json_object_when_json_schema_is_refused_and_remembers() {
    let server = ChatServer::start(|call| {
        if call.format_type() == Some("json_schema") {
            ScriptedReply::Status(400, None)
        } else {
            content(ANSWER)
        }
    });
    let llm = client(&server);
    let completion = llm.complete(&request(Purpose::Extraction)).await.unwrap();
    assert_eq!(completion.content, ANSWER);
    let formats: Vec<_> = server
        .calls()
        .iter()
        .map(|c| c.format_type().map(str::to_string))
        .collect();
    assert_eq!(
        formats,
        [
            Some("json_schema".to_string()),
            Some("json_object".to_string())
        ]
    );
    // llama-cpp-python's form: the schema beside the type, for a grammar.
    let calls = server.calls();
    assert_eq!(
        calls[1].response_format.as_ref().unwrap()["schema"],
        schema()
    );

    // Later calls go straight to the format that worked.
    llm.complete(&request(Purpose::Consolidation))
        .await
        .unwrap();
    let calls = server.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[2].format_type(), Some("json_object"));
    assert_eq!(llm.response_format(), Some("json_object with schema"));
}

/// What llama-cpp-python 0.3.36's server answers (`500`) to a `json_schema`
/// response_format, as recorded from it.
const LLAMA_CPP_PYTHON_REFUSAL: &str = "1 validation error:\n  {'type': 'literal_error', \
     'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or \
     'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or \
     'json_object'\"}}\n\n  File \"/venv/lib/python3.11/site-packages/llama_cpp/server/app.py\", \
     line 376, in create_chat_completion\n    POST /v1/chat/completions";

#[tokio::test]
async fn a_500_naming_the_response_format_is_a_refusal_not_an_outage() {
    let server = ChatServer::start(|call| {
        if call.format_type() == Some("json_schema") {
            ScriptedReply::StatusMessage(500, LLAMA_CPP_PYTHON_REFUSAL.into())
        } else {
            content(ANSWER)
        }
    });
    let llm = client(&server);
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    let calls = server.calls();
    // Not retried as an outage: straight to the next format.
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(calls[1].format_type(), Some("json_object"));
    assert_eq!(
        calls[1].response_format.as_ref().unwrap()["schema"],
        schema()
    );
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    assert_eq!(server.call_count(), 3);

    // A 500 that says nothing of the format is still an outage, retried as one.
    let server = ChatServer::start(in_turn(vec![
        ScriptedReply::StatusMessage(500, "CUDA out of memory".into()),
        content(ANSWER),
    ]));
    let llm = client(&server);
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    let calls = server.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].format_type(), Some("json_schema"));
}

#[tokio::test]
async fn max_tokens_is_sent_and_left_out_once_refused() {
    let server = ChatServer::start(|call| {
        if call.body.get("max_tokens").is_some() {
            ScriptedReply::StatusMessage(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model.".into(),
            )
        } else {
            content(ANSWER)
        }
    });
    let mut config = config(&server);
    config.max_tokens = Some(512);
    let llm = OpenAiChat::new(config).unwrap();
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    let calls = server.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].body["max_tokens"], 512);
    assert!(calls[1].body.get("max_tokens").is_none());
    assert!(calls[2].body.get("max_tokens").is_none());
    assert!(calls.iter().all(|c| c.format_type() == Some("json_schema")));
}

#[tokio::test]
async fn falls_back_to_no_response_format_when_every_format_is_refused() {
    let server = ChatServer::start(|call| {
        if call.response_format.is_some() {
            ScriptedReply::StatusMessage(400, "response_format is not supported".into())
        } else {
            content(ANSWER)
        }
    });
    let llm = client(&server);
    assert_eq!(
        llm.complete(&request(Purpose::Extraction))
            .await
            .unwrap()
            .content,
        ANSWER
    );
    assert_eq!(server.call_count(), 4);
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    let calls = server.calls();
    assert_eq!(calls.len(), 5);
    assert_eq!(calls[4].response_format, None);
}

#[tokio::test]
async fn a_request_refused_in_every_format_fails_and_is_not_remembered() {
    let server = ChatServer::start(|_| {
        ScriptedReply::StatusMessage(400, "maximum context length exceeded".into())
    });
    let llm = client(&server);
    let err = llm
        .complete(&request(Purpose::Extraction))
        .await
        .unwrap_err();
    match &err {
        LlmError::Rejected(message) => {
            assert!(message.contains("maximum context length"), "{err}")
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(server.call_count(), 4);

    server.set_answer(|_| content(ANSWER));
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    let calls = server.calls();
    assert_eq!(calls.len(), 5);
    assert_eq!(calls[4].format_type(), Some("json_schema"));
}

#[tokio::test]
async fn leaves_out_temperature_when_the_model_refuses_it() {
    let server = ChatServer::start(|call| {
        if call.body.get("temperature").is_some() {
            ScriptedReply::StatusMessage(
                400,
                "Unsupported value: 'temperature' does not support 0 with this model.".into(),
            )
        } else {
            content(ANSWER)
        }
    });
    let llm = client(&server);
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    let calls = server.calls();
    assert_eq!(calls.len(), 3);
    assert!(calls[1].body.get("temperature").is_none());
    assert!(calls[2].body.get("temperature").is_none());
    // The schema was not what the endpoint refused.
    assert!(calls.iter().all(|c| c.format_type() == Some("json_schema")));
}

#[tokio::test]
async fn retries_a_server_error() {
    let server = ChatServer::start(in_turn(vec![
        ScriptedReply::Status(500, None),
        ScriptedReply::Status(502, None),
        content(ANSWER),
    ]));
    let llm = client(&server);
    let completion = llm.complete(&request(Purpose::Extraction)).await.unwrap();
    assert_eq!(completion.content, ANSWER);
    assert_eq!(server.call_count(), 3);
}

#[tokio::test]
async fn waits_as_long_as_retry_after_says() {
    let server = ChatServer::start(in_turn(vec![
        ScriptedReply::Status(429, Some(1)),
        content(ANSWER),
    ]));
    let llm = client(&server);
    let started = Instant::now();
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert_eq!(server.call_count(), 2);
}

#[tokio::test]
async fn unavailable_once_the_retries_run_out() {
    let server = ChatServer::start(|_| ScriptedReply::Status(503, None));
    let mut config = config(&server);
    config.max_retries = 2;
    let llm = OpenAiChat::new(config).unwrap();
    let err = llm
        .complete(&request(Purpose::Extraction))
        .await
        .unwrap_err();
    match &err {
        LlmError::Unavailable {
            message,
            retry_after,
        } => {
            assert!(message.contains("503"), "{message}");
            assert_eq!(*retry_after, None);
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(server.call_count(), 3);
}

#[tokio::test]
async fn unavailable_carries_the_endpoints_retry_after() {
    let server = ChatServer::start(|_| ScriptedReply::Status(429, Some(7)));
    let mut config = config(&server);
    config.max_retries = 0;
    let llm = OpenAiChat::new(config).unwrap();
    let started = Instant::now();
    let err = llm
        .complete(&request(Purpose::Extraction))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(err, LlmError::Unavailable { retry_after: Some(d), .. } if d == Duration::from_secs(7)),
        "{err:?}"
    );
    assert_eq!(server.call_count(), 1);
}

#[tokio::test]
async fn a_request_that_hangs_times_out_and_is_retried() {
    let server = ChatServer::start(|_| ScriptedReply::Hang);
    let mut config = config(&server);
    config.timeout = Duration::from_millis(300);
    config.max_retries = 1;
    let llm = OpenAiChat::new(config).unwrap();
    let started = Instant::now();
    let err = llm
        .complete(&request(Purpose::Extraction))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    match &err {
        LlmError::Unavailable { message, .. } => assert!(message.contains("timed out"), "{err}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(server.call_count(), 2);
}

#[tokio::test]
async fn unauthorized_fails_at_once() {
    let server = ChatServer::start(|_| ScriptedReply::Status(401, None));
    let llm = client(&server);
    let err = llm
        .complete(&request(Purpose::Extraction))
        .await
        .unwrap_err();
    match &err {
        LlmError::Failed(message) => {
            assert!(message.contains("401"), "{message}");
            // The server's own error.message.
            assert!(message.contains("scripted reply"), "{message}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(server.call_count(), 1);
}

#[tokio::test]
async fn a_body_that_is_not_a_chat_completion_fails() {
    let server = ChatServer::start(|_| ScriptedReply::Garbage);
    let llm = client(&server);
    let err = llm
        .complete(&request(Purpose::Extraction))
        .await
        .unwrap_err();
    match &err {
        LlmError::Failed(message) => {
            assert!(
                message.contains("not an OpenAI chat completion"),
                "{message}"
            )
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(server.call_count(), 1);
}

#[tokio::test]
async fn the_call_rate_is_bounded() {
    let server = ChatServer::start(|_| content(ANSWER));

    // Unbounded, three calls at once are quick...
    let llm = client(&server);
    let request = request(Purpose::Extraction);
    let started = Instant::now();
    let results = futures::future::join_all((0..3).map(|_| llm.complete(&request))).await;
    assert!(results.iter().all(Result::is_ok));
    assert!(started.elapsed() < Duration::from_millis(800));

    // ...at 120 a minute (one every 0.5 s), they take a second.
    let mut config = config(&server);
    config.max_calls_per_minute = Some(120);
    let llm = OpenAiChat::new(config).unwrap();
    let started = Instant::now();
    let results = futures::future::join_all((0..3).map(|_| llm.complete(&request))).await;
    let elapsed = started.elapsed();
    assert!(results.iter().all(Result::is_ok));
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert_eq!(server.call_count(), 6);
}

#[tokio::test]
async fn the_key_goes_in_the_authorization_header_and_nowhere_else() {
    let server = ChatServer::start(|_| content(ANSWER));
    let mut config = config(&server);
    config.api_key = Some("sk-test-secret".into());
    assert!(!format!("{config:?}").contains("sk-test-secret"));
    let llm = OpenAiChat::new(config).unwrap();
    assert!(!format!("{llm:?}").contains("sk-test-secret"));
    assert!(!llm.id().contains("sk-test-secret"));

    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    let call = &server.calls()[0];
    assert_eq!(call.authorization.as_deref(), Some("Bearer sk-test-secret"));
    assert!(!call.body.to_string().contains("sk-test-secret"));
}

#[tokio::test]
async fn measured_records_calls_tokens_and_latency_by_purpose() {
    let server = ChatServer::start(|_| content(ANSWER));
    let mut config = config(&server);
    config.max_retries = 0;
    let metrics = Arc::new(Metrics::new());
    let llm = Measured::new(Arc::new(OpenAiChat::new(config).unwrap()), metrics.clone());
    assert_eq!(llm.id(), "openai:test-model");

    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    llm.complete(&request(Purpose::Extraction)).await.unwrap();
    server.set_answer(|_| ScriptedReply::Status(401, None));
    llm.complete(&request(Purpose::Summary)).await.unwrap_err();
    server.set_answer(|_| ScriptedReply::Status(503, None));
    llm.complete(&request(Purpose::Consolidation))
        .await
        .unwrap_err();
    metrics.record_semantic("features_added", 3);

    let text = metrics.encode();
    for line in [
        r#"memmachine_llm_calls_total{purpose="extraction",outcome="ok"} 2"#,
        r#"memmachine_llm_calls_total{purpose="summary",outcome="failed"} 1"#,
        r#"memmachine_llm_calls_total{purpose="consolidation",outcome="unavailable"} 1"#,
        r#"memmachine_llm_prompt_tokens_total{purpose="extraction"} 12"#,
        r#"memmachine_llm_completion_tokens_total{purpose="extraction"} 6"#,
        r#"memmachine_llm_call_seconds_count{purpose="extraction"} 2"#,
        r#"memmachine_llm_call_seconds_count{purpose="summary"} 1"#,
        r#"memmachine_semantic_events_total{event="features_added"} 3"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
}
