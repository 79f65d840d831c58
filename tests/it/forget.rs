//! Forgetting a subject (`LifecycleService.ForgetSubject`) on two replicas over one
//! store (SQLite: two processes on one file; PostgreSQL: a database of the test server):
//! forgotten through one, nothing derived from the subject's episodes is returned by any
//! call of the other, while everyone else's memories stay; the dry run counts the same
//! without removing anything; the receipt is kept.
//!
//! sqlite-only: starts its replicas on stores of its own choosing.

use std::collections::BTreeSet;

use crate::common;
use crate::common::ServerProcess;
use crate::common::child::Run;
use crate::common::mcp_http::Session;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::lifecycle_service_client::LifecycleServiceClient;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use serde_json::json;
use tonic::Code;
use tonic::transport::Channel;

/// Every text derived from the subject's episodes carries it; nothing else does.
const MARK: &str = "zanzibar";
const ORG: &str = "acme";

struct Shared {
    dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Shared {
    async fn sqlite() -> Option<Shared> {
        Some(Shared {
            dir: tempfile::tempdir().unwrap(),
            args: Vec::new(),
        })
    }

    async fn postgres() -> Option<Shared> {
        if common::postgres::servers_on_postgres() {
            // The SQLite variant's servers already run on PostgreSQL.
            return None;
        }
        let url = common::postgres::fresh_database().await?;
        Some(Shared {
            dir: tempfile::tempdir().unwrap(),
            args: vec!["--store".into(), url],
        })
    }

    fn start(&self) -> ServerProcess {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend_from_slice(&["--embedder", "hash", "--rest-listen", "127.0.0.1:0"]);
        ServerProcess::start(self.dir.path(), &args)
    }
}

struct Client {
    channel: Channel,
}

impl Client {
    async fn connect(server: &ServerProcess) -> Client {
        let channel = Channel::from_shared(server.url())
            .unwrap()
            .connect()
            .await
            .unwrap();
        Client { channel }
    }

    fn memory(&self) -> MemoryServiceClient<Channel> {
        MemoryServiceClient::new(self.channel.clone())
    }

    fn semantic(&self) -> SemanticServiceClient<Channel> {
        SemanticServiceClient::new(self.channel.clone())
    }

    fn lifecycle(&self) -> LifecycleServiceClient<Channel> {
        LifecycleServiceClient::new(self.channel.clone())
    }

    /// Stores one message; its uid.
    async fn add(
        &self,
        project: &str,
        content: &str,
        producer: &str,
        produced_for: &str,
    ) -> String {
        self.memory()
            .add_memories(pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                messages: vec![pb::MemoryMessage {
                    content: content.into(),
                    producer: producer.into(),
                    produced_for: produced_for.into(),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .results[0]
            .uid
            .clone()
    }

    /// The set these tags name, with a category `notes` to hold features.
    async fn set(&self, project: &str, org_level: bool, producer: Option<&str>) -> String {
        let set_id = self
            .semantic()
            .get_set_id(pb::GetSetIdRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                is_org_level: org_level,
                metadata_tags: producer
                    .map(|_| "producer_id".to_string())
                    .into_iter()
                    .collect(),
                set_metadata: producer
                    .map(|p| [("producer_id".to_string(), p.to_string())].into())
                    .unwrap_or_default(),
            })
            .await
            .unwrap()
            .into_inner()
            .set_id;
        self.semantic()
            .add_category(pb::AddCategoryRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                set_id: set_id.clone(),
                category_name: "notes".into(),
                prompt: "notes".into(),
                ..Default::default()
            })
            .await
            .or_else(|status| match status.code() {
                // Sets of one kind may share their categories (a set type's template).
                Code::AlreadyExists => Ok(tonic::Response::new(Default::default())),
                _ => Err(status),
            })
            .unwrap();
        set_id
    }

    async fn feature(
        &self,
        project: &str,
        set_id: &str,
        value: &str,
        citations: &[&str],
    ) -> String {
        self.semantic()
            .add_feature(pb::AddFeatureRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                set_id: set_id.into(),
                category_name: "notes".into(),
                tag: "facts".into(),
                feature: value.into(),
                value: value.into(),
                citations: citations.iter().map(|c| c.to_string()).collect(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .feature_id
    }

    async fn forget(&self, dry_run: bool) -> pb::ForgetReceipt {
        self.lifecycle()
            .forget_subject(pb::ForgetSubjectRequest {
                org_id: ORG.into(),
                subject: "alice".into(),
                project_ids: Vec::new(),
                dry_run,
            })
            .await
            .unwrap()
            .into_inner()
            .receipt
            .unwrap()
    }

    /// Everything a client can read about the project over gRPC, as text.
    async fn everything(&self, project: &str, feature_ids: &[String]) -> String {
        self.everything_as_of(project, feature_ids, None).await
    }

    /// [`Client::everything`], and with `as_of` also semantic memory as it was then and
    /// every feature's history.
    async fn everything_as_of(
        &self,
        project: &str,
        feature_ids: &[String],
        as_of: Option<prost_types::Timestamp>,
    ) -> String {
        let mut seen = String::new();
        if let Some(as_of) = as_of {
            let then = self
                .semantic()
                .search_features(pb::SearchFeaturesRequest {
                    org_id: ORG.into(),
                    project_id: project.into(),
                    query: "facts fruit kiwi secret".into(),
                    top_k: Some(100),
                    as_of: Some(as_of),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            seen.push_str(&format!("{then:?}\n"));
            let listed = self
                .memory()
                .list_memories(pb::ListMemoriesRequest {
                    org_id: ORG.into(),
                    project_id: project.into(),
                    r#type: pb::MemoryType::Semantic as i32,
                    page_size: Some(1000),
                    as_of: Some(as_of),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            seen.push_str(&format!("{listed:?}\n"));
            for id in feature_ids {
                match self
                    .lifecycle()
                    .get_feature_history(pb::GetFeatureHistoryRequest {
                        org_id: ORG.into(),
                        project_id: project.into(),
                        feature_id: id.clone(),
                    })
                    .await
                {
                    Ok(found) => seen.push_str(&format!("{:?}\n", found.into_inner())),
                    Err(status) => assert_eq!(status.code(), Code::NotFound, "{status:?}"),
                }
            }
        }
        for query in [MARK, "pears", "kiwi secret", "facts"] {
            let found = self
                .memory()
                .search_memories(pb::SearchMemoriesRequest {
                    org_id: ORG.into(),
                    project_id: project.into(),
                    query: query.into(),
                    top_k: Some(100),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            seen.push_str(&format!("{found:?}\n"));
            let features = self
                .semantic()
                .search_features(pb::SearchFeaturesRequest {
                    org_id: ORG.into(),
                    project_id: project.into(),
                    query: query.into(),
                    top_k: Some(100),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            seen.push_str(&format!("{features:?}\n"));
        }
        for kind in [pb::MemoryType::Episodic, pb::MemoryType::Semantic] {
            let listed = self
                .memory()
                .list_memories(pb::ListMemoriesRequest {
                    org_id: ORG.into(),
                    project_id: project.into(),
                    r#type: kind as i32,
                    page_size: Some(1000),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            seen.push_str(&format!("{listed:?}\n"));
        }
        for id in feature_ids {
            match self
                .semantic()
                .get_feature(pb::GetFeatureRequest {
                    org_id: ORG.into(),
                    project_id: project.into(),
                    feature_id: id.clone(),
                    load_citations: true,
                })
                .await
            {
                Ok(found) => seen.push_str(&format!("{:?}\n", found.into_inner())),
                Err(status) => assert_eq!(status.code(), Code::NotFound, "{status:?}"),
            }
        }
        seen
    }

    /// A feature that must still be there.
    async fn kept(&self, id: &str) -> pb::SemanticFeature {
        self.semantic()
            .get_feature(pb::GetFeatureRequest {
                org_id: ORG.into(),
                project_id: "one".into(),
                feature_id: id.into(),
                load_citations: true,
            })
            .await
            .unwrap()
            .into_inner()
            .feature
            .unwrap()
    }

    async fn episodic_count(&self, project: &str) -> usize {
        self.memory()
            .list_memories(pb::ListMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                r#type: pb::MemoryType::Episodic as i32,
                page_size: Some(1000),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .episodes
            .len()
    }
}

/// Everything the REST gateway answers about the project, as text.
async fn rest_everything(server: &ServerProcess, project: &str, uids: &[String]) -> String {
    let http = reqwest::Client::new();
    let base = format!("{}/api/v2", server.rest_url());
    let mut seen = String::new();
    let calls = [
        (
            "/memories/search",
            json!({"org_id": ORG, "project_id": project, "query": MARK, "top_k": 100}),
        ),
        (
            "/memories/list",
            json!({"org_id": ORG, "project_id": project, "type": "episodic", "page_size": 1000}),
        ),
        (
            "/memories/list",
            json!({"org_id": ORG, "project_id": project, "type": "semantic", "page_size": 1000}),
        ),
        (
            "/memories/episodic/get",
            json!({"org_id": ORG, "project_id": project, "episodic_ids": uids}),
        ),
    ];
    for (path, body) in calls {
        let answer = http
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
        seen.push_str(&answer.text().await.unwrap());
        seen.push('\n');
    }
    seen
}

/// The org exported by `memmachine export` over the same store.
fn exported(shared: &Shared) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .arg("export")
        .args(common::store_args(shared.dir.path()))
        .args(&shared.args)
        .args(["--org", ORG])
        .run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn assert_clean(seen: &str, alice: &[String], what: &str) {
    assert!(
        !seen.contains(MARK),
        "{what} still shows the subject: {seen}"
    );
    for uid in alice {
        assert!(
            !seen.contains(uid.as_str()),
            "{what} still names {uid}: {seen}"
        );
    }
}

fn counts(receipt: &pb::ForgetReceipt) -> Vec<pb::ForgetProjectCounts> {
    let mut lines = receipt.projects.clone();
    lines.sort_by(|a, b| a.project_id.cmp(&b.project_id));
    lines
}

async fn forget_reaches_every_call_of_the_other_replica(shared: Shared) {
    let (a_process, b_process) = (shared.start(), shared.start());
    let (a, b) = (
        Client::connect(&a_process).await,
        Client::connect(&b_process).await,
    );
    for project in ["one", "two"] {
        ProjectServiceClient::new(a.channel.clone())
            .create_project(pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // alice as producer and as recipient, in both projects; bob's stay.
    let alice = vec![
        a.add("one", &format!("{MARK} kiwi secret of alice"), "alice", "")
            .await,
        a.add(
            "one",
            &format!("{MARK} the bot tells alice a kiwi secret"),
            "bot",
            "alice",
        )
        .await,
        a.add("two", &format!("{MARK} alice again in two"), "alice", "")
            .await,
    ];
    let bob_one = a.add("one", "bob likes pears", "bob", "").await;
    let bob_two = a.add("two", "bob likes plums", "bob", "").await;

    let user_set = a.set("one", false, Some("alice")).await;
    let project_set = a.set("one", false, None).await;
    let org_set = a.set("one", true, None).await;
    let mut features = vec![
        a.feature("one", &user_set, &format!("{MARK} profile"), &[&alice[0]])
            .await,
        a.feature(
            "one",
            &project_set,
            &format!("{MARK} only hers"),
            &[&alice[0], &alice[1]],
        )
        .await,
        a.feature("one", &org_set, &format!("{MARK} org level"), &[&alice[0]])
            .await,
    ];
    // A feature cites episodes of its project only; the org's set is seen from both.
    let org_two = a
        .feature("two", &org_set, "both in two", &[&alice[2], &bob_two])
        .await;
    let shared_feature = a
        .feature(
            "one",
            &project_set,
            "fruit is liked",
            &[&alice[1], &bob_one],
        )
        .await;
    let manual = a.feature("one", &project_set, "manual note", &[]).await;
    let bobs = a
        .feature("one", &project_set, "bob and pears", &[&bob_one])
        .await;
    features.extend([shared_feature.clone(), manual.clone(), bobs.clone()]);

    // An earlier value of the shared fact, citing her, is kept in its history.
    a.semantic()
        .update_feature(pb::UpdateFeatureRequest {
            org_id: ORG.into(),
            project_id: "one".into(),
            feature_id: shared_feature.clone(),
            value: Some("fruit is loved".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = prost_types::Timestamp::from(std::time::SystemTime::now());
    let history = b.everything_as_of("one", &features, Some(before)).await;
    assert!(history.contains(MARK) && history.contains(alice[1].as_str()));

    // The dry run counts, removes nothing, keeps no receipt.
    let preview = a.forget(true).await;
    assert!(preview.dry_run);
    assert!(preview.receipt_id.is_empty());
    assert_eq!(a.episodic_count("one").await, 3);
    assert!(b.everything("one", &features).await.contains(MARK));

    let receipt = a.forget(false).await;
    assert!(!receipt.dry_run);
    assert!(!receipt.receipt_id.is_empty());
    assert_eq!(
        counts(&receipt),
        counts(&preview),
        "the dry run counted the same"
    );
    let one = &counts(&receipt)[0];
    assert_eq!(one.project_id, "one");
    assert_eq!(one.episodes_deleted, 2);
    assert_eq!(one.sets_deleted, 1);
    // The user set's feature, "only hers" and "org level" (left citing nothing).
    assert_eq!(one.features_deleted, 3);
    // "only hers" x2, "org level" x1 and "fruit is liked" x1.
    assert_eq!(one.citations_removed, 4);
    let two = &counts(&receipt)[1];
    assert_eq!(two.episodes_deleted, 1);
    assert_eq!(two.features_deleted, 0);
    assert_eq!(two.citations_removed, 1);

    // Replica B, which served before the forget, shows nothing of hers anywhere.
    for project in ["one", "two"] {
        assert_clean(
            &b.everything_as_of(project, &features, Some(before)).await,
            &alice,
            "gRPC",
        );
        assert_clean(
            &rest_everything(&b_process, project, std::slice::from_ref(&bob_one)).await,
            &alice,
            "REST",
        );
    }
    assert_clean(&exported(&shared), &alice, "export");
    let http = reqwest::Client::new();
    let mut mcp = Session::open(&http, &b_process.rest_url(), (ORG, "one", "bob"), None)
        .await
        .unwrap();
    for query in [MARK, "kiwi secret"] {
        let found = mcp
            .call_tool("search_memory", json!({"query": query, "top_k": 100}))
            .await;
        assert!(!found.is_error, "{}", found.text);
        assert_clean(&found.text, &alice, "MCP");
    }
    // Her episodes are gone by id too; others' stay, with what they support.
    let got: serde_json::Value = http
        .post(format!(
            "{}/api/v2/memories/episodic/get",
            b_process.rest_url()
        ))
        .json(&json!({"org_id": ORG, "project_id": "one", "episodic_ids": [alice[0], alice[1]]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        got["content"]["missing"].as_array().unwrap().len(),
        2,
        "{got}"
    );
    assert_eq!(b.episodic_count("one").await, 1);
    assert_eq!(b.episodic_count("two").await, 1);
    assert_eq!(
        b.kept(&shared_feature).await.citations,
        vec![bob_one.clone()]
    );
    assert!(b.kept(&manual).await.citations.is_empty());
    assert_eq!(b.kept(&bobs).await.citations, vec![bob_one.clone()]);
    assert_eq!(b.kept(&org_two).await.citations, vec![bob_two.clone()]);
    assert!(
        b.everything("two", &[]).await.contains(&bob_two),
        "bob's episode in two stays"
    );

    // The receipt is kept, the same through either replica, in its org only.
    let again = b
        .lifecycle()
        .get_forget_receipt(pb::GetForgetReceiptRequest {
            org_id: ORG.into(),
            receipt_id: receipt.receipt_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .receipt
        .unwrap();
    assert_eq!(again.receipt_id, receipt.receipt_id);
    assert_eq!(again.subject, "alice");
    assert_eq!(counts(&again), counts(&receipt));
    let elsewhere = b
        .lifecycle()
        .get_forget_receipt(pb::GetForgetReceiptRequest {
            org_id: "other".into(),
            receipt_id: receipt.receipt_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(elsewhere.code(), Code::NotFound);

    // A second forget finds nothing left.
    let nothing = b.forget(false).await;
    let left: BTreeSet<i64> = nothing
        .projects
        .iter()
        .flat_map(|p| {
            [
                p.episodes_deleted,
                p.features_deleted,
                p.citations_removed,
                p.sets_deleted,
            ]
        })
        .collect();
    assert_eq!(left, BTreeSet::from([0]));
}

async fn bad_requests_are_refused_and_change_nothing(shared: Shared) {
    let server = shared.start();
    let c = Client::connect(&server).await;
    ProjectServiceClient::new(c.channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: "one".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    c.add("one", "alice was here", "alice", "").await;
    let forget = |subject: &str, projects: Vec<String>| {
        let request = pb::ForgetSubjectRequest {
            org_id: ORG.into(),
            subject: subject.into(),
            project_ids: projects,
            dry_run: false,
        };
        let mut client = c.lifecycle();
        async move { client.forget_subject(request).await }
    };
    let empty = forget("", Vec::new()).await.unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    let long = forget(&"a".repeat(5000), Vec::new()).await.unwrap_err();
    assert_eq!(long.code(), Code::InvalidArgument);
    let many = forget("alice", (0..101).map(|i| format!("p{i}")).collect())
        .await
        .unwrap_err();
    assert_eq!(many.code(), Code::InvalidArgument);
    // A project that does not exist: nothing is done, not even in the one that does.
    let ghost = forget("alice", vec!["one".into(), "ghost".into()])
        .await
        .unwrap_err();
    assert_eq!(ghost.code(), Code::NotFound);
    assert_eq!(c.episodic_count("one").await, 1);
    let unknown = c
        .lifecycle()
        .get_forget_receipt(pb::GetForgetReceiptRequest {
            org_id: ORG.into(),
            receipt_id: uuid::Uuid::new_v4().to_string(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}

async fn the_rest_gateway_forgets_with_the_same_receipt(shared: Shared) {
    let server = shared.start();
    let c = Client::connect(&server).await;
    ProjectServiceClient::new(c.channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: "one".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    c.add("one", "alice was here", "alice", "").await;
    c.add("one", "bob was here", "bob", "").await;
    let http = reqwest::Client::new();
    let base = format!("{}/api/v2", server.rest_url());
    let post = |path: &str, body: serde_json::Value| {
        let request = http.post(format!("{base}{path}")).json(&body);
        async move {
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (status, dry) = post(
        "/forget",
        json!({"org_id": ORG, "subject": "alice", "dry_run": true}),
    )
    .await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["receipt_id"], "");
    assert_eq!(dry["projects"][0]["episodes_deleted"], 1, "{dry}");
    assert_eq!(c.episodic_count("one").await, 2);
    let (status, done) = post(
        "/forget",
        json!({"org_id": ORG, "subject": "alice", "project_ids": ["one"]}),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["projects"], dry["projects"]);
    assert_eq!(c.episodic_count("one").await, 1);
    let (status, kept) = post(
        "/forget/receipt",
        json!({"org_id": ORG, "receipt_id": done["receipt_id"]}),
    )
    .await;
    assert_eq!(status, 200, "{kept}");
    assert_eq!(kept, done);
    let (status, _) = post(
        "/forget/receipt",
        json!({"org_id": "other", "receipt_id": done["receipt_id"]}),
    )
    .await;
    assert_eq!(status, 404);
    // The CLI: a dry run counts bob's, and the receipt shows as stored.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_memmachine"))
            .args(args)
            .args(["--addr", server.addr.as_str(), "--org", ORG, "--json"])
            .run();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let bob = cli(&["forget", "--subject", "bob", "--dry-run"]);
    assert_eq!(bob["dry_run"], true);
    assert_eq!(bob["projects"][0]["episodes_deleted"], 1, "{bob}");
    assert_eq!(c.episodic_count("one").await, 1);
    let shown = cli(&["forget", "receipt", done["receipt_id"].as_str().unwrap()]);
    assert_eq!(shown["receipt_id"], done["receipt_id"]);
    assert_eq!(shown["projects"], done["projects"]);
    // MCP: the session's user forgets themself in the session's project.
    let mut mcp = Session::open(&http, &server.rest_url(), (ORG, "one", "carol"), None)
        .await
        .unwrap();
    let added = mcp
        .call_tool("add_memory", json!({"content": "carol was here"}))
        .await;
    assert!(!added.is_error, "{}", added.text);
    let dry = mcp.call_tool("forget_user", json!({"dry_run": true})).await;
    let dry: serde_json::Value = serde_json::from_str(&dry.text).unwrap();
    assert_eq!(dry["projects"][0]["episodes_deleted"], 1, "{dry}");
    assert_eq!(c.episodic_count("one").await, 2);
    let done = mcp.call_tool("forget_user", json!({})).await;
    let done: serde_json::Value = serde_json::from_str(&done.text).unwrap();
    assert_eq!(done["projects"], dry["projects"]);
    assert!(!done["receipt_id"].as_str().unwrap().is_empty());
    assert_eq!(c.episodic_count("one").await, 1);
    let (status, _) = post("/forget", json!({"org_id": ORG, "subject": ""})).await;
    assert_eq!(status, 422);
    let (status, _) = post(
        "/forget",
        json!({"org_id": ORG, "subject": "alice", "project_ids": ["ghost"]}),
    )
    .await;
    assert_eq!(status, 404);
}

macro_rules! forget_tests {
    ($backend:ident, $shared:expr) => {
        mod $backend {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn forget_reaches_every_call_of_the_other_replica() {
                let Some(shared) = $shared.await else { return };
                super::forget_reaches_every_call_of_the_other_replica(shared).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bad_requests_are_refused_and_change_nothing() {
                let Some(shared) = $shared.await else { return };
                super::bad_requests_are_refused_and_change_nothing(shared).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_rest_gateway_forgets_with_the_same_receipt() {
                let Some(shared) = $shared.await else { return };
                super::the_rest_gateway_forgets_with_the_same_receipt(shared).await;
            }
        }
    };
}

forget_tests!(sqlite, super::Shared::sqlite());
forget_tests!(postgres, super::Shared::postgres());
