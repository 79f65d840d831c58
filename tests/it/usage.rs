//! Language-model usage and daily token budgets over real gRPC, with a scripted
//! OpenAI-compatible chat server: figures per purpose as the endpoint reports them (or
//! estimated when it does not), admin-only budgets, and an org over its budget whose
//! semantic ingestion pauses (queue kept) while its adds and searches, and other orgs,
//! go on.

use std::time::Duration;

use crate::common::InProcess;
use crate::common::calls::{create_project, with_key};
use crate::common::chat::{ChatCall, ChatServer, ScriptedReply, favourite_commands, words};
use crate::common::child::Run;
use crate::common::keys::create_key;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::usage_service_client::UsageServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType, UsagePurpose};
use tonic::Code;
use tonic::transport::Channel;

async fn server(chat: &ChatServer, default_budget: u64, auth: bool) -> InProcess {
    let url = chat.url.clone();
    InProcess::start_with(move |config| {
        config.llm.base_url = Some(memmachine_core::urls::SecretUrl::new(url));
        config.llm.model = Some("scripted".into());
        config.llm.max_calls_per_minute = None;
        config.llm.daily_tokens_per_org = default_budget;
        config.ingest.trigger_messages = 1;
        config.ingest.trigger_age = Duration::ZERO;
        // One worker: batches are claimed one at a time, oldest queued first.
        config.ingest.workers = 1;
        config.auth = auth;
    })
    .await
}

/// Adds one message from alice to the org's project `p` (created the first time).
async fn add(channel: &Channel, org: &str, content: &str) {
    let _ = create_project(channel, None, org, "p").await;
    MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: org.into(),
            project_id: "p".into(),
            types: vec![],
            messages: vec![pb::MemoryMessage {
                content: content.into(),
                producer: "alice".into(),
                role: "user".into(),
                ..Default::default()
            }],
        })
        .await
        .unwrap();
}

async fn feature_values(channel: &Channel, org: &str) -> Vec<String> {
    let mut values: Vec<String> = MemoryServiceClient::new(channel.clone())
        .list_memories(pb::ListMemoriesRequest {
            org_id: org.into(),
            project_id: "p".into(),
            r#type: MemoryType::Semantic as i32,
            page_size: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .features
        .into_iter()
        .map(|f| f.value)
        .collect();
    values.sort();
    values.dedup();
    values
}

async fn wait_for_value(channel: &Channel, org: &str, value: &str) {
    for _ in 0..400 {
        if feature_values(channel, org)
            .await
            .iter()
            .any(|v| v == value)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{org} never got the feature {value:?}");
}

async fn usage(
    channel: &Channel,
    key: Option<&str>,
    org: &str,
    project: Option<&str>,
) -> Result<pb::GetUsageResponse, tonic::Status> {
    UsageServiceClient::new(channel.clone())
        .get_usage(with_key(
            pb::GetUsageRequest {
                org_id: org.into(),
                project_id: project.map(str::to_string),
                since: None,
            },
            key,
        ))
        .await
        .map(|r| r.into_inner())
}

async fn set_budget(
    channel: &Channel,
    key: Option<&str>,
    org: &str,
    daily_tokens: i64,
) -> Result<pb::Budget, tonic::Status> {
    UsageServiceClient::new(channel.clone())
        .set_budget(with_key(
            pb::SetBudgetRequest {
                org_id: org.into(),
                daily_tokens,
            },
            key,
        ))
        .await
        .map(|r| r.into_inner().budget.unwrap())
}

/// (calls, prompt, completion) of one purpose.
fn figures(response: &pb::GetUsageResponse, purpose: UsagePurpose) -> (i64, i64, i64) {
    let f = response
        .usage
        .iter()
        .find(|f| f.purpose == purpose as i32)
        .expect("every purpose is reported");
    (f.calls, f.prompt_tokens, f.completion_tokens)
}

/// Waits until the org's extraction figures equal `expected` of the calls the chat
/// server received so far (calls in flight are recorded once they return).
async fn wait_for_figures(
    channel: &Channel,
    chat: &ChatServer,
    org: &str,
    expected: impl Fn(&[ChatCall]) -> (i64, i64, i64),
) -> (i64, i64, i64) {
    let mut last = (0, 0, 0);
    for _ in 0..400 {
        let calls = chat.calls();
        let want = expected(&calls);
        last = figures(
            &usage(channel, None, org, None).await.unwrap(),
            UsagePurpose::Extraction,
        );
        if !calls.is_empty() && last == want {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "extraction usage {last:?} never matched {:?}",
        expected(&chat.calls())
    );
}

#[tokio::test]
async fn usage_is_recorded_per_purpose_with_the_endpoints_figures() {
    let chat = ChatServer::start(|call| ScriptedReply::Content(favourite_commands(call)));
    let server = server(&chat, 0, false).await;
    let channel = server.channel().await;
    add(&channel, "counted", "My favourite colour is blue.").await;
    wait_for_value(&channel, "counted", "blue").await;
    // The scripted endpoint reports a word count as tokens.
    let (calls, prompt, completion) = wait_for_figures(&channel, &chat, "counted", |calls| {
        let prompt: usize = calls
            .iter()
            .flat_map(|c| &c.messages)
            .map(|(_, m)| words(m))
            .sum();
        let completion: usize = calls.iter().map(|c| words(&favourite_commands(c))).sum();
        (calls.len() as i64, prompt as i64, completion as i64)
    })
    .await;
    assert!(calls >= 1 && prompt > 0 && completion > 0);
    let report = usage(&channel, None, "counted", Some("p")).await.unwrap();
    assert_eq!(figures(&report, UsagePurpose::Extraction).0, calls);
    for purpose in [
        UsagePurpose::Consolidation,
        UsagePurpose::Summary,
        UsagePurpose::Embedding,
    ] {
        assert_eq!(figures(&report, purpose), (0, 0, 0), "{purpose:?}");
    }
    let budget = report.budget.unwrap();
    assert_eq!(budget.daily_tokens, 0, "unlimited by default");
    assert_eq!(budget.used_today, prompt + completion);
    assert_eq!(budget.paused_until, None);
    // Another project, another org: nothing.
    let other = usage(&channel, None, "counted", Some("elsewhere"))
        .await
        .unwrap();
    assert_eq!(figures(&other, UsagePurpose::Extraction), (0, 0, 0));
    let other = usage(&channel, None, "another-org", None).await.unwrap();
    assert_eq!(figures(&other, UsagePurpose::Extraction), (0, 0, 0));
    // A time still to come is refused.
    let err = UsageServiceClient::new(channel.clone())
        .get_usage(pb::GetUsageRequest {
            org_id: "counted".into(),
            project_id: None,
            since: Some(prost_types::Timestamp {
                seconds: chrono::Utc::now().timestamp() + 3600,
                nanos: 0,
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

#[tokio::test]
async fn usage_is_estimated_when_the_endpoint_does_not_report_it() {
    let chat =
        ChatServer::start(|call| ScriptedReply::ContentWithoutUsage(favourite_commands(call)));
    let server = server(&chat, 0, false).await;
    let channel = server.channel().await;
    add(&channel, "estimated", "My favourite tree is oak.").await;
    wait_for_value(&channel, "estimated", "oak").await;
    // A quarter of the characters, rounded up, per call.
    let (_, prompt, completion) = wait_for_figures(&channel, &chat, "estimated", |calls| {
        let quarter = |chars: usize| chars.div_ceil(4) as i64;
        let prompt = calls
            .iter()
            .map(|c| quarter(c.messages.iter().map(|(_, m)| m.chars().count()).sum()))
            .sum();
        let completion = calls
            .iter()
            .map(|c| quarter(favourite_commands(c).chars().count()))
            .sum();
        (calls.len() as i64, prompt, completion)
    })
    .await;
    assert!(prompt > 0 && completion > 0);
}

#[tokio::test]
async fn a_batch_whose_answers_stay_invalid_counts_its_tokens() {
    let chat = ChatServer::start(|_| ScriptedReply::Content("this is not JSON".into()));
    let server = server(&chat, 0, false).await;
    let channel = server.channel().await;
    add(&channel, "invalid", "My favourite bird is a wren.").await;
    // One call and two corrections per category, then the batch fails: every call
    // counted.
    let (calls, prompt, completion) = wait_for_figures(&channel, &chat, "invalid", |calls| {
        let prompt: usize = calls
            .iter()
            .flat_map(|c| &c.messages)
            .map(|(_, m)| words(m))
            .sum();
        (calls.len() as i64, prompt as i64, 4 * calls.len() as i64)
    })
    .await;
    assert!(calls >= 3, "{calls}");
    assert!(prompt > 0 && completion > 0);
}

#[tokio::test]
async fn budgets_need_an_admin_key_and_org_keys_read_only_their_org() {
    let chat = ChatServer::start(|call| ScriptedReply::Content(favourite_commands(call)));
    let server = server(&chat, 500, true).await;
    let dir = server.data_dir.path().to_path_buf();
    let admin = create_key(&dir, &["--admin"]);
    let acme = create_key(&dir, &["--org", "acme"]);
    let channel = server.channel().await;

    let err = set_budget(&channel, Some(&acme), "acme", 1_000_000)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = set_budget(&channel, None, "acme", 10).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let err = set_budget(&channel, Some(&admin), "acme", -1)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // The default applies until the org has its own.
    let own = usage(&channel, Some(&acme), "acme", None).await.unwrap();
    assert_eq!(own.budget.unwrap().daily_tokens, 500);
    let set = set_budget(&channel, Some(&admin), "acme", 2000)
        .await
        .unwrap();
    assert_eq!(set.daily_tokens, 2000);
    let own = usage(&channel, Some(&acme), "acme", None).await.unwrap();
    assert_eq!(own.budget.unwrap().daily_tokens, 2000);

    let err = usage(&channel, Some(&acme), "globex", None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let globex = usage(&channel, Some(&admin), "globex", None).await.unwrap();
    assert_eq!(globex.budget.unwrap().daily_tokens, 500);
}

#[tokio::test]
async fn an_org_over_its_budget_pauses_its_ingestion_until_the_budget_is_raised() {
    let chat = ChatServer::start(|call| ScriptedReply::Content(favourite_commands(call)));
    // One token a day by default: the first call spends it.
    let server = server(&chat, 1, false).await;
    let channel = server.channel().await;
    set_budget(&channel, None, "free", 0).await.unwrap();

    add(&channel, "thrifty", "My favourite colour is blue.").await;
    wait_for_value(&channel, "thrifty", "blue").await;
    let report = usage(&channel, None, "thrifty", None).await.unwrap();
    let budget = report.budget.unwrap();
    assert_eq!(budget.daily_tokens, 1);
    assert!(budget.used_today >= 1);
    let midnight = (chrono::Utc::now().timestamp() / 86_400 + 1) * 86_400;
    assert_eq!(
        budget.paused_until.map(|t| t.seconds),
        Some(midnight),
        "paused until the next UTC midnight"
    );

    // Queued before the other org's message, yet not taken to the model while paused;
    // its adds and searches go on.
    add(&channel, "thrifty", "My favourite food is pasta.").await;
    add(&channel, "free", "My favourite food is sushi.").await;
    wait_for_value(&channel, "free", "sushi").await;
    assert!(
        chat.calls().iter().all(|c| !c.user.contains("pasta")),
        "a paused org's messages reach no model"
    );
    assert!(
        !feature_values(&channel, "thrifty")
            .await
            .contains(&"pasta".to_string())
    );
    let found = MemoryServiceClient::new(channel.clone())
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "thrifty".into(),
            project_id: "p".into(),
            query: "pasta".into(),
            types: vec![MemoryType::Episodic as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodic_memory
        .unwrap();
    let contents: Vec<&str> = found
        .long_term_memory
        .iter()
        .filter_map(|s| s.episode.as_ref())
        .chain(&found.short_term_memory)
        .map(|e| e.content.as_str())
        .collect();
    assert!(contents.iter().any(|c| c.contains("pasta")), "{contents:?}");
    let free = usage(&channel, None, "free", None)
        .await
        .unwrap()
        .budget
        .unwrap();
    assert_eq!((free.daily_tokens, free.paused_until), (0, None));

    // Raising the budget resumes it at once, with the queue as it was.
    let raised = set_budget(&channel, None, "thrifty", 1_000_000)
        .await
        .unwrap();
    assert_eq!(raised.paused_until, None);
    wait_for_value(&channel, "thrifty", "pasta").await;
}

/// The REST gateway's `/usage` routes, `memmachine usage` and `budget set`, and the MCP
/// `get_usage` tool: the same figures, the same rules (admin-only budgets, org keys on
/// their own org), the default budget from `--llm-daily-tokens-per-org`.
#[tokio::test]
async fn rest_cli_and_mcp_read_usage_and_set_budgets() {
    use crate::common::ServerProcess;
    use crate::common::mcp_http::Session;
    use serde_json::{Value, json};

    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        data.path(),
        &[
            "--embedder",
            "none",
            "--rest-listen",
            "127.0.0.1:0",
            "--auth",
            "--llm-daily-tokens-per-org",
            "700",
        ],
    );
    let admin = create_key(data.path(), &["--admin"]);
    let acme = create_key(data.path(), &["--org", "acme"]);
    let http = reqwest::Client::new();
    let base = server.rest_url();
    let post = |key: &str, path: &str, body: Value| {
        let request = http
            .post(format!("{base}/api/v2{path}"))
            .bearer_auth(key)
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };

    let (status, body) = post(
        &admin,
        "/usage/budget",
        json!({"org_id": "acme", "daily_tokens": 1234}),
    )
    .await;
    assert_eq!(
        (status, body["daily_tokens"].as_i64()),
        (200, Some(1234)),
        "{body}"
    );
    let (status, _) = post(
        &acme,
        "/usage/budget",
        json!({"org_id": "acme", "daily_tokens": 9}),
    )
    .await;
    assert_eq!(status, 403);
    let (status, body) = post(&acme, "/usage", json!({"org_id": "acme"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"].as_array().unwrap().len(), 4, "{body}");
    assert_eq!(body["usage"][0]["purpose"], "extraction");
    assert_eq!(body["budget"]["daily_tokens"], 1234);
    assert_eq!(body["budget"]["paused_until"], Value::Null);
    let (status, _) = post(&acme, "/usage", json!({"org_id": "globex"})).await;
    assert_eq!(status, 403);
    let (status, body) = post(&admin, "/usage", json!({"org_id": "globex"})).await;
    assert_eq!(
        (status, body["budget"]["daily_tokens"].as_i64()),
        (200, Some(700))
    );
    let (status, body) = post(
        &acme,
        "/usage",
        json!({"org_id": "acme", "since": "yesterday"}),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");

    // The command line, with the key from the environment.
    let cli = |key: &str, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_memmachine"))
            .args(args)
            .args(["--addr", server.addr.as_str()])
            .env("MEMMACHINE_API_KEY", key)
            .env_remove("MEMMACHINE_ORG")
            .env_remove("MEMMACHINE_PROJECT")
            .run()
    };
    let out = cli(&acme, &["usage", "--org", "acme", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["budget"]["daily_tokens"], 1234, "{report}");
    let out = cli(
        &acme,
        &["budget", "set", "--org", "globex", "--daily-tokens", "55"],
    );
    assert_eq!(out.status.code(), Some(7), "PERMISSION_DENIED");
    let out = cli(
        &admin,
        &["budget", "set", "--org", "globex", "--daily-tokens", "55"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("budget: 55 tokens a day"));
    let out = cli(&admin, &["usage", "--org", "globex"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("extraction") && text.contains("budget: 55"),
        "{text}"
    );

    // MCP: the session's org only.
    let mut session = Session::open(&http, &base, ("acme", "notes", "alice"), Some(&acme))
        .await
        .expect("open a session");
    let answer = session.call_tool("get_usage", json!({})).await;
    assert!(!answer.is_error, "{}", answer.text);
    let usage: Value = serde_json::from_str(&answer.text).unwrap();
    assert_eq!(usage["org_id"], "acme");
    assert_eq!(usage["budget"]["daily_tokens"], 1234, "{usage}");
}

/// The episode's embedding (in the background) and a search's query embedding: two
/// embedding calls counted for the org and project (tokens estimated, a quarter of the
/// characters), with no language model involved.
#[tokio::test]
async fn episodes_and_searches_count_their_embeddings() {
    let server = InProcess::start_with(|config| {
        config.embedder.kind = Some(memmachine::config::EmbedderKind::Hash);
    })
    .await;
    let channel = server.channel().await;
    add(&channel, "embedded", "The launch is on Tuesday.").await;
    let query = "when is the launch";
    MemoryServiceClient::new(channel.clone())
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "embedded".into(),
            project_id: "p".into(),
            query: query.into(),
            types: vec![MemoryType::Episodic as i32],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut last = (0, 0, 0);
    for _ in 0..100 {
        let report = usage(&channel, None, "embedded", Some("p")).await.unwrap();
        last = figures(&report, UsagePurpose::Embedding);
        if last.0 >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The episode is embedded as "producer: content".
    let episode = "alice: The launch is on Tuesday.";
    let tokens = episode.len().div_ceil(4) + query.len().div_ceil(4);
    assert_eq!(last, (2, tokens as i64, 0));
    // Embedding is counted, not budgeted.
    let report = usage(&channel, None, "embedded", None).await.unwrap();
    assert_eq!(report.budget.unwrap().used_today, 0);
}
