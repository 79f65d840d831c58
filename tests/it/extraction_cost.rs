//! What semantic extraction costs, made visible and bounded, over real gRPC with a
//! scripted chat model: feature embeddings counted as embedding usage, the dry-run
//! estimate of a project's backlog checked against what extracting it then spent, and
//! the per-project pause (adds go on, nothing reaches the model, kept across a restart,
//! resumed on demand).

use std::time::Duration;

use crate::common::InProcess;
use crate::common::calls::{create_project, with_key};
use crate::common::chat::{ChatServer, ScriptedReply, favourite_commands};
use crate::common::keys::create_key;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use memmachine_proto::v2::usage_service_client::UsageServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType, UsagePurpose};
use tonic::Code;
use tonic::transport::Channel;

const ORG: &str = "cost";
/// The age after which a set's messages are taken however few they are.
const TRIGGER_AGE: Duration = Duration::from_secs(1);

fn configure(config: &mut memmachine::config::ServeConfig, chat_url: String) {
    config.llm.base_url = Some(memmachine_core::urls::SecretUrl::new(chat_url));
    config.llm.model = Some("scripted".into());
    config.llm.max_calls_per_minute = None;
    // Only the age triggers: a backlog is extracted in batches of the most a batch holds.
    config.ingest.trigger_messages = 1000;
    config.ingest.trigger_age = TRIGGER_AGE;
    config.ingest.workers = 1;
    config.ingest.max_batch = 20;
}

async fn server(chat: &ChatServer) -> InProcess {
    let url = chat.url.clone();
    InProcess::start_with(move |config| configure(config, url)).await
}

async fn add(channel: &Channel, project: &str, contents: &[String]) {
    MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            types: vec![],
            messages: contents
                .iter()
                .map(|c| pb::MemoryMessage {
                    content: c.clone(),
                    producer: "alice".into(),
                    role: "user".into(),
                    ..Default::default()
                })
                .collect(),
        })
        .await
        .unwrap();
}

async fn feature_values(channel: &Channel, project: &str) -> Vec<String> {
    MemoryServiceClient::new(channel.clone())
        .list_memories(pb::ListMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
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
        .collect()
}

async fn wait_for_value(channel: &Channel, project: &str, value: &str) {
    for _ in 0..400 {
        if feature_values(channel, project)
            .await
            .iter()
            .any(|v| v == value)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{project} never got the feature {value:?}");
}

async fn estimate(
    channel: &Channel,
    key: Option<&str>,
    org: &str,
    project: &str,
) -> Result<pb::EstimateExtractionResponse, tonic::Status> {
    UsageServiceClient::new(channel.clone())
        .estimate_extraction(with_key(
            pb::EstimateExtractionRequest {
                org_id: org.into(),
                project_id: project.into(),
            },
            key,
        ))
        .await
        .map(|r| r.into_inner())
}

async fn set_paused(
    channel: &Channel,
    key: Option<&str>,
    org: &str,
    project: &str,
    paused: bool,
) -> Result<bool, tonic::Status> {
    UsageServiceClient::new(channel.clone())
        .set_extraction_paused(with_key(
            pb::SetExtractionPausedRequest {
                org_id: org.into(),
                project_id: project.into(),
                paused,
            },
            key,
        ))
        .await
        .map(|r| r.into_inner().paused)
}

fn backlog(response: &pb::EstimateExtractionResponse) -> pb::ExtractionEstimate {
    response.estimate.clone().expect("an estimate")
}

/// (calls, prompt, completion) of one purpose, of one project.
async fn figures(channel: &Channel, project: &str, purpose: UsagePurpose) -> (i64, i64, i64) {
    let report = UsageServiceClient::new(channel.clone())
        .get_usage(pb::GetUsageRequest {
            org_id: ORG.into(),
            project_id: Some(project.into()),
            since: None,
        })
        .await
        .unwrap()
        .into_inner();
    let f = report
        .usage
        .iter()
        .find(|f| f.purpose == purpose as i32)
        .expect("every purpose is reported");
    (f.calls, f.prompt_tokens, f.completion_tokens)
}

/// Extraction calls (not summaries or consolidations) whose messages mention `text`.
fn extraction_calls(chat: &ChatServer, text: &str) -> usize {
    chat.calls()
        .iter()
        .filter(|c| c.system.contains("memory of a conversation") && c.user.contains(text))
        .count()
}

/// A feature added by hand is embedded in the background: one more embedding call for
/// its project, its tokens a quarter of the text embedded.
#[tokio::test]
async fn feature_embeddings_count_as_embedding_usage() {
    let server = InProcess::start_with(|config| {
        config.embedder.kind = Some(memmachine::config::EmbedderKind::Hash);
    })
    .await;
    let channel = server.channel().await;
    create_project(&channel, None, ORG, "p").await.unwrap();
    assert_eq!(
        figures(&channel, "p", UsagePurpose::Embedding).await,
        (0, 0, 0)
    );
    let mut semantic = SemanticServiceClient::new(channel.clone());
    let set_id = semantic
        .get_set_id(pb::GetSetIdRequest {
            org_id: ORG.into(),
            project_id: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .set_id;
    semantic
        .add_category(pb::AddCategoryRequest {
            org_id: ORG.into(),
            project_id: "p".into(),
            set_id: set_id.clone(),
            category_name: "notes".into(),
            prompt: "notes".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    semantic
        .add_feature(pb::AddFeatureRequest {
            org_id: ORG.into(),
            project_id: "p".into(),
            set_id,
            category_name: "notes".into(),
            tag: "drinks".into(),
            feature: "favourite tea".into(),
            value: "green".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut last = (0, 0, 0);
    for _ in 0..100 {
        last = figures(&channel, "p", UsagePurpose::Embedding).await;
        if last.0 > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A feature is embedded as "feature: value".
    let tokens = "favourite tea: green".len().div_ceil(4) as i64;
    assert_eq!(last, (1, tokens, 0));
}

/// A paused project's messages are queued but reach no model, past the trigger age and
/// across a restart, while another project of the org is extracted; resumed, they are.
#[tokio::test]
async fn a_paused_project_keeps_its_queue_until_resumed() {
    let chat = ChatServer::start(|call| ScriptedReply::Content(favourite_commands(call)));
    let mut first = server(&chat).await;
    let channel = first.channel().await;
    for project in ["held", "free"] {
        create_project(&channel, None, ORG, project).await.unwrap();
    }
    assert!(set_paused(&channel, None, ORG, "held", true).await.unwrap());
    let held = [
        "My favourite colour is blue.".to_string(),
        "My favourite food is pasta.".to_string(),
    ];
    add(&channel, "held", &held).await;
    add(
        &channel,
        "free",
        &["My favourite tea is green.".to_string()],
    )
    .await;
    wait_for_value(&channel, "free", "green").await;
    tokio::time::sleep(TRIGGER_AGE * 2).await;
    assert_eq!(
        extraction_calls(&chat, "blue"),
        0,
        "a paused project reaches no model"
    );
    let e = backlog(&estimate(&channel, None, ORG, "held").await.unwrap());
    assert!(e.paused);
    assert_eq!(e.pending_messages, 2, "its queue is kept");

    // Restarted on the same store: still paused.
    let store = first.store.clone();
    first.begin_stop();
    (&mut first.task).await.unwrap().unwrap();
    let url = chat.url.clone();
    let second = InProcess::start_with(move |config| {
        configure(config, url);
        config.store = store;
    })
    .await;
    let channel = second.channel().await;
    tokio::time::sleep(TRIGGER_AGE * 2).await;
    assert_eq!(extraction_calls(&chat, "blue"), 0);
    let e = backlog(&estimate(&channel, None, ORG, "held").await.unwrap());
    assert!(e.paused, "the pause is kept across a restart");
    assert_eq!(e.pending_messages, 2);

    assert!(
        !set_paused(&channel, None, ORG, "held", false)
            .await
            .unwrap()
    );
    wait_for_value(&channel, "held", "blue").await;
    wait_for_value(&channel, "held", "pasta").await;
    let e = backlog(&estimate(&channel, None, ORG, "held").await.unwrap());
    assert!(!e.paused);
    assert_eq!((e.pending_messages, e.calls), (0, 0));
    drop(first);
}

/// A known backlog: 25 messages of alice queued for two sets (the project's, given one
/// category, and alice's, with its built-in profile category; the org's has none, so
/// nothing is queued for it), in batches of 20. The estimate's calls are what extraction then makes, and
/// its prompt tokens are close to what it counted.
#[tokio::test]
async fn the_estimate_of_a_backlog_matches_what_extracting_it_spends() {
    let chat =
        ChatServer::start(|_| ScriptedReply::ContentWithoutUsage(r#"{"commands":[]}"#.into()));
    let server = server(&chat).await;
    let channel = server.channel().await;
    create_project(&channel, None, ORG, "p").await.unwrap();
    let mut semantic = SemanticServiceClient::new(channel.clone());
    let set_id = semantic
        .get_set_id(pb::GetSetIdRequest {
            org_id: ORG.into(),
            project_id: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .set_id;
    semantic
        .add_category(pb::AddCategoryRequest {
            org_id: ORG.into(),
            project_id: "p".into(),
            set_id,
            category_name: "plans".into(),
            prompt: "What the team plans to do and when.".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    set_paused(&channel, None, ORG, "p", true).await.unwrap();
    let messages: Vec<String> = (1..=25)
        .map(|i| format!("Note number {i}: we met and talked about nothing in particular."))
        .collect();
    add(&channel, "p", &messages).await;

    let response = estimate(&channel, None, ORG, "p").await.unwrap();
    let e = backlog(&response);
    assert_eq!(
        (e.pending_messages, e.sets, e.max_batch_messages, e.batches),
        (25, 2, 20, 4),
        "{e:?}"
    );
    // Two batches in each of two sets of one category.
    assert_eq!(e.calls, 4, "{e:?}");
    let chars: usize = messages.iter().map(|m| m.chars().count()).sum();
    assert!(
        e.prompt_tokens > (2 * chars / 4) as i64,
        "both categories see every message: {e:?}"
    );
    assert_eq!(e.completion_tokens, 4 * 10 + 2 * 25 * 20);
    let budget = response.budget.unwrap();
    assert_eq!(budget.daily_tokens, 0);
    assert_eq!(response.tokens_left_today, None, "unlimited");

    set_paused(&channel, None, ORG, "p", false).await.unwrap();
    let mut done = (0, 0, 0);
    for _ in 0..400 {
        let left = backlog(&estimate(&channel, None, ORG, "p").await.unwrap());
        done = figures(&channel, "p", UsagePurpose::Extraction).await;
        if left.pending_messages == 0 && done.0 >= e.calls {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(done.0, e.calls, "the calls estimated are the calls made");
    assert_eq!(extraction_calls(&chat, "Note number"), e.calls as usize);
    let off = (done.1 - e.prompt_tokens).abs() as f64 / done.1 as f64;
    assert!(
        off < 0.05,
        "prompt tokens: estimated {}, counted {}",
        e.prompt_tokens,
        done.1
    );
}

/// Bad ids, unknown projects and other orgs' keys.
#[tokio::test]
async fn estimates_and_pauses_refuse_bad_input_and_other_orgs() {
    let chat = ChatServer::start(|call| ScriptedReply::Content(favourite_commands(call)));
    let url = chat.url.clone();
    let server = InProcess::start_with(move |config| {
        configure(config, url);
        config.auth = true;
    })
    .await;
    let dir = server.data_dir.path().to_path_buf();
    let admin = create_key(&dir, &["--admin"]);
    let acme = create_key(&dir, &["--org", "acme"]);
    let channel = server.channel().await;
    create_project(&channel, Some(&admin), "acme", "p")
        .await
        .unwrap();
    create_project(&channel, Some(&admin), "globex", "p")
        .await
        .unwrap();

    let e = estimate(&channel, Some(&acme), "acme", "p").await.unwrap();
    assert!(!backlog(&e).paused);
    assert!(
        set_paused(&channel, Some(&acme), "acme", "p", true)
            .await
            .unwrap()
    );

    let err = estimate(&channel, Some(&acme), "globex", "p")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = set_paused(&channel, Some(&acme), "globex", "p", true)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = estimate(&channel, None, "acme", "p").await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    let err = estimate(&channel, Some(&acme), "acme", "absent")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = set_paused(&channel, Some(&acme), "acme", "absent", true)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    for (org, project) in [("acme", "bad id!"), ("acme", &"x".repeat(129))] {
        let err = estimate(&channel, Some(&acme), org, project)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        let err = set_paused(&channel, Some(&acme), org, project, true)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    }
    let err = estimate(&channel, Some(&admin), "bad org!", "p")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

/// The REST routes, `memmachine extraction estimate|pause|resume` and the MCP
/// `estimate_extraction` tool: the same calls, the same rules (an org key on its own
/// org's projects).
#[tokio::test]
async fn rest_cli_and_mcp_estimate_pause_and_resume() {
    use crate::common::ServerProcess;
    use crate::common::child::Run;
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
            "--semantic-batch-messages",
            "7",
            "--auth",
        ],
    );
    let acme = create_key(data.path(), &["--org", "acme"]);
    let http = reqwest::Client::new();
    let base = server.rest_url();
    let post = |path: &str, body: Value| {
        let request = http
            .post(format!("{base}/api/v2{path}"))
            .bearer_auth(&acme)
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
    let (status, body) = post("/projects", json!({"org_id": "acme", "project_id": "p"})).await;
    assert!((200..300).contains(&status), "{status} {body}");

    let (status, body) = post(
        "/usage/extraction/paused",
        json!({"org_id": "acme", "project_id": "p", "paused": true}),
    )
    .await;
    assert_eq!(
        (status, body["paused"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    let (status, body) = post(
        "/usage/extraction/estimate",
        json!({"org_id": "acme", "project_id": "p"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["paused"], true, "{body}");
    assert_eq!(body["pending_messages"], 0, "{body}");
    assert_eq!(body["max_batch_messages"], 7, "the server's flag: {body}");
    assert_eq!(body["budget"]["daily_tokens"], 0, "{body}");
    assert_eq!(body["tokens_left_today"], Value::Null, "{body}");
    for (asked, code) in [
        (json!({"org_id": "globex", "project_id": "p"}), 403),
        (json!({"org_id": "acme", "project_id": "absent"}), 404),
    ] {
        let (status, body) = post("/usage/extraction/estimate", asked).await;
        assert_eq!(status, code, "{body}");
    }
    let (status, body) = post(
        "/usage/extraction/paused",
        json!({"org_id": "acme", "project_id": "bad id!", "paused": true}),
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");

    // The command line, with the key from the environment.
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_memmachine"))
            .args(args)
            .args(["--addr", server.addr.as_str()])
            .env("MEMMACHINE_API_KEY", &acme)
            .env_remove("MEMMACHINE_ORG")
            .env_remove("MEMMACHINE_PROJECT")
            .run()
    };
    let out = cli(&[
        "extraction",
        "estimate",
        "--org",
        "acme",
        "--project",
        "p",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let estimate: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(estimate["paused"], true, "{estimate}");
    let out = cli(&["extraction", "resume", "--org", "acme", "--project", "p"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("extraction of p: running"));
    let out = cli(&["extraction", "estimate", "--org", "acme", "--project", "p"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("running") && text.contains("0 messages queued"),
        "{text}"
    );
    let out = cli(&["extraction", "pause", "--org", "globex", "--project", "p"]);
    assert_eq!(out.status.code(), Some(7), "PERMISSION_DENIED");
    let out = cli(&[
        "extraction",
        "pause",
        "--org",
        "acme",
        "--project",
        "absent",
    ]);
    assert_eq!(out.status.code(), Some(5), "NOT_FOUND");

    // MCP: the session's project.
    let mut session = Session::open(&http, &base, ("acme", "p", "alice"), Some(&acme))
        .await
        .expect("open a session");
    let answer = session.call_tool("estimate_extraction", json!({})).await;
    assert!(!answer.is_error, "{}", answer.text);
    let estimate: Value = serde_json::from_str(&answer.text).unwrap();
    assert_eq!(
        (
            &estimate["org_id"],
            &estimate["project_id"],
            &estimate["paused"]
        ),
        (&json!("acme"), &json!("p"), &json!(false)),
        "{estimate}"
    );
}
