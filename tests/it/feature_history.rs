//! Fact history over gRPC (issue 29, item 3): a feature's earlier versions are kept
//! when it is updated by hand, by extraction or by consolidation, and when it is
//! deleted; `GetFeatureHistory` lists them and `as_of` answers searches and listings with
//! the versions valid at a time. Backend-generic (`scripts/test.sh` reruns it on
//! PostgreSQL).

use std::time::Duration;

use crate::common::InProcess;
use crate::common::chat::{ChatServer, favourites};
use memmachine_proto::v2::lifecycle_service_client::LifecycleServiceClient;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use memmachine_proto::v2::{self as pb, FeatureChange, MemoryType};
use prost_types::Timestamp;
use tonic::Code;
use tonic::transport::Channel;

struct Client {
    projects: ProjectServiceClient<Channel>,
    memory: MemoryServiceClient<Channel>,
    semantic: SemanticServiceClient<Channel>,
    lifecycle: LifecycleServiceClient<Channel>,
}

async fn client(server: &InProcess) -> Client {
    let channel = server.channel().await;
    Client {
        projects: ProjectServiceClient::new(channel.clone()),
        memory: MemoryServiceClient::new(channel.clone()),
        semantic: SemanticServiceClient::new(channel.clone()),
        lifecycle: LifecycleServiceClient::new(channel),
    }
}

impl Client {
    async fn create(&mut self, org: &str, project: &str) {
        self.projects
            .create_project(pb::CreateProjectRequest {
                org_id: org.into(),
                project_id: project.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    async fn episode(&mut self, org: &str, project: &str, content: &str) -> String {
        self.memory
            .add_memories(pb::AddMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                types: vec![MemoryType::Episodic as i32],
                messages: vec![pb::MemoryMessage {
                    content: content.into(),
                    producer: "alice".into(),
                    role: "user".into(),
                    ..Default::default()
                }],
            })
            .await
            .unwrap()
            .into_inner()
            .results[0]
            .uid
            .clone()
    }

    /// A feature filed by hand in the project's set, citing `citations`.
    async fn add_feature(
        &mut self,
        org: &str,
        project: &str,
        value: &str,
        citations: Vec<String>,
    ) -> String {
        let set_id = self
            .semantic
            .get_set_id(pb::GetSetIdRequest {
                org_id: org.into(),
                project_id: project.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .set_id;
        self.semantic
            .add_feature(pb::AddFeatureRequest {
                org_id: org.into(),
                project_id: project.into(),
                set_id,
                category_name: "profile".into(),
                tag: "preferences".into(),
                feature: "food".into(),
                value: value.into(),
                citations,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .feature_id
    }

    async fn set_value(&mut self, org: &str, project: &str, id: &str, value: &str) {
        self.semantic
            .update_feature(pb::UpdateFeatureRequest {
                org_id: org.into(),
                project_id: project.into(),
                feature_id: id.into(),
                value: Some(value.into()),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    async fn history(
        &mut self,
        org: &str,
        project: &str,
        id: &str,
    ) -> Result<Vec<pb::FeatureVersion>, tonic::Status> {
        self.lifecycle
            .get_feature_history(pb::GetFeatureHistoryRequest {
                org_id: org.into(),
                project_id: project.into(),
                feature_id: id.into(),
            })
            .await
            .map(|r| r.into_inner().versions)
    }

    /// The values `SearchFeatures` finds for "food", as of `at`.
    async fn search(&mut self, org: &str, project: &str, at: Option<Timestamp>) -> Vec<String> {
        self.semantic
            .search_features(pb::SearchFeaturesRequest {
                org_id: org.into(),
                project_id: project.into(),
                query: "food".into(),
                as_of: at,
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

    /// The values of `SearchMemories` (semantic memory), as of `at`.
    async fn search_memories(
        &mut self,
        org: &str,
        project: &str,
        at: Option<Timestamp>,
    ) -> Vec<String> {
        self.memory
            .search_memories(pb::SearchMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                query: "food".into(),
                types: vec![MemoryType::Semantic as i32],
                as_of: at,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .semantic_memory
            .into_iter()
            .map(|f| f.value)
            .collect()
    }

    /// The values semantic `ListMemories` lists, as of `at`.
    async fn list(&mut self, org: &str, project: &str, at: Option<Timestamp>) -> Vec<String> {
        self.memory
            .list_memories(pb::ListMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                r#type: MemoryType::Semantic as i32,
                as_of: at,
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
}

fn shape(versions: &[pb::FeatureVersion]) -> Vec<(&str, FeatureChange, bool)> {
    versions
        .iter()
        .map(|v| (v.value.as_str(), v.changed_by(), v.valid_to.is_some()))
        .collect()
}

#[tokio::test]
async fn an_update_keeps_the_old_version_and_as_of_reads_it_even_after_deletion() {
    let server = InProcess::start().await;
    let mut c = client(&server).await;
    c.create("acme", "p").await;
    let said = c.episode("acme", "p", "I love pizza").await;
    let id = c
        .add_feature("acme", "p", "pizza", vec![said.clone()])
        .await;
    c.set_value("acme", "p", &id, "sushi").await;

    let history = c.history("acme", "p", &id).await.unwrap();
    assert_eq!(
        shape(&history),
        [
            ("pizza", FeatureChange::Manual, true),
            ("sushi", FeatureChange::Manual, false),
        ]
    );
    assert_eq!(history[0].citations, [said]);
    assert_eq!(history[0].valid_to, history[1].valid_from);
    assert_eq!(
        (history[0].tag.as_str(), history[0].feature_name.as_str()),
        ("preferences", "food")
    );
    assert_eq!(history[0].category, "profile");

    // As of the first version's start: its value, on every call that takes as_of.
    let then = history[0].valid_from;
    assert_eq!(c.search("acme", "p", then).await, ["pizza"]);
    assert_eq!(c.search_memories("acme", "p", then).await, ["pizza"]);
    assert_eq!(c.list("acme", "p", then).await, ["pizza"]);
    assert_eq!(c.search("acme", "p", None).await, ["sushi"]);
    assert_eq!(c.list("acme", "p", None).await, ["sushi"]);
    // Before the feature existed: nothing; in the future: the current state.
    let before = history[0].valid_from.map(|t| Timestamp {
        seconds: t.seconds - 1,
        ..t
    });
    assert!(c.search("acme", "p", before).await.is_empty());
    let future = Some(Timestamp {
        seconds: chrono::Utc::now().timestamp() + 3600,
        nanos: 0,
    });
    assert_eq!(c.search("acme", "p", future).await, ["sushi"]);

    // Deleted: the history keeps the final version and the deletion.
    c.memory
        .delete_semantic_memories(pb::DeleteSemanticMemoriesRequest {
            org_id: "acme".into(),
            project_id: "p".into(),
            feature_ids: vec![id.clone()],
        })
        .await
        .unwrap();
    let history = c.history("acme", "p", &id).await.unwrap();
    assert_eq!(
        shape(&history),
        [
            ("pizza", FeatureChange::Manual, true),
            ("sushi", FeatureChange::Manual, true),
            ("sushi", FeatureChange::Deletion, true),
        ]
    );
    assert_eq!(history[2].valid_from, history[2].valid_to);
    assert!(c.search("acme", "p", None).await.is_empty());
    assert_eq!(
        c.search("acme", "p", history[1].valid_from).await,
        ["sushi"]
    );
    assert_eq!(c.list("acme", "p", history[1].valid_from).await, ["sushi"]);
}

#[tokio::test]
async fn history_is_scoped_to_the_callers_org_and_project() {
    let server = InProcess::start().await;
    let mut c = client(&server).await;
    c.create("acme", "p").await;
    c.create("acme", "q").await;
    c.create("other", "p").await;
    let id = c.add_feature("acme", "p", "pizza", vec![]).await;
    assert_eq!(c.history("acme", "p", &id).await.unwrap().len(), 1);
    for (org, project, what) in [
        ("other", "p", "another org"),
        ("acme", "q", "another project"),
    ] {
        let err = c.history(org, project, &id).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{what}: {err:?}");
    }
    let unknown = uuid::Uuid::new_v4().to_string();
    for bad in [unknown.as_str(), "not-a-uuid"] {
        let err = c.history("acme", "p", bad).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{bad}");
    }
    let err = c
        .semantic
        .search_features(pb::SearchFeaturesRequest {
            org_id: "acme".into(),
            project_id: "p".into(),
            query: "food".into(),
            as_of: Some(Timestamp {
                seconds: 1,
                nanos: -1,
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

#[tokio::test]
async fn the_bound_drops_the_oldest_versions() {
    let server = InProcess::start_with(|config| config.feature_history_limit = 2).await;
    let mut c = client(&server).await;
    c.create("acme", "p").await;
    let id = c.add_feature("acme", "p", "v0", vec![]).await;
    for value in ["v1", "v2", "v3"] {
        c.set_value("acme", "p", &id, value).await;
    }
    let history = c.history("acme", "p", &id).await.unwrap();
    let values: Vec<&str> = history.iter().map(|v| v.value.as_str()).collect();
    assert_eq!(values, ["v1", "v2", "v3"], "two kept, and the current one");
}

#[tokio::test]
async fn consolidation_keeps_its_sources_history() {
    let chat = ChatServer::start(favourites);
    let url = chat.url.clone();
    let server = InProcess::start_with(move |config| {
        config.llm.base_url = Some(memmachine_core::urls::SecretUrl::new(url));
        config.llm.model = Some("scripted".into());
        config.llm.max_calls_per_minute = None;
        config.ingest.trigger_messages = 1;
        config.ingest.trigger_age = Duration::ZERO;
        config.ingest.consolidation_threshold = 3;
    })
    .await;
    let mut c = client(&server).await;
    let messages = ["fruit is fig", "drink is tea", "book is Emma"]
        .iter()
        .map(|m| pb::MemoryMessage {
            content: format!("My favourite {m}."),
            producer: "alice".into(),
            role: "user".into(),
            ..Default::default()
        })
        .collect();
    c.memory
        .add_memories(pb::AddMemoriesRequest {
            messages,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut merged = None;
    for _ in 0..200 {
        let features = c
            .memory
            .list_memories(pb::ListMemoriesRequest {
                r#type: MemoryType::Semantic as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .features;
        if let [only] = features.as_slice()
            && only.feature_name == "favourites"
        {
            merged = Some(only.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let merged = merged.expect("the features were merged");
    let history = c.history("", "", &merged.id).await.unwrap();
    let mut sources: Vec<(&str, FeatureChange)> = history
        .iter()
        .filter(|v| v.valid_to.is_some())
        .map(|v| (v.value.as_str(), v.changed_by()))
        .collect();
    sources.sort_by_key(|s| s.0);
    assert_eq!(
        sources,
        [
            ("Emma", FeatureChange::Extraction),
            ("fig", FeatureChange::Extraction),
            ("tea", FeatureChange::Extraction),
        ],
        "{history:#?}"
    );
    let current = history.last().unwrap();
    assert_eq!(current.value, merged.value);
    assert_eq!(current.changed_by(), FeatureChange::Consolidation);
    assert!(current.valid_to.is_none());
    // Before the merge, the sources as they were.
    let last_source = history
        .iter()
        .filter(|v| v.valid_to.is_some())
        .filter_map(|v| v.valid_from)
        .max_by_key(|t| (t.seconds, t.nanos));
    let mut then = c.list("", "", last_source).await;
    then.sort();
    assert_eq!(then, ["Emma", "fig", "tea"]);
}

/// The REST gateway's history route and `as_of` on its search and list bodies.
#[test]
fn the_rest_gateway_reads_history_and_as_of() {
    use reqwest::blocking::Client as Http;
    use serde_json::{Value, json};
    let data = tempfile::tempdir().unwrap();
    let server =
        crate::common::ServerProcess::start(data.path(), &["--rest-listen", "127.0.0.1:0"]);
    let base = format!("{}/api/v2", server.rest_url());
    let http = Http::new();
    let post = |path: &str, body: Value| -> (u16, Value) {
        let response = http
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    };
    let at = json!({"org_id": "acme", "project_id": "p"});
    let with = |extra: Value| {
        let mut body = at.clone();
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    assert_eq!(post("/projects", at.clone()).0, 201);
    let (_, set) = post("/memories/semantic/set_id/get", at.clone());
    let (status, added) = post(
        "/memories/semantic/feature",
        with(json!({"set_id": set["set_id"], "category_name": "profile",
                    "tag": "preferences", "feature": "food", "value": "pizza"})),
    );
    assert_eq!(status, 201, "{added}");
    let id = added["feature_id"].clone();
    let (status, _) = post(
        "/memories/semantic/feature/update",
        with(json!({"feature_id": id, "value": "sushi"})),
    );
    assert!(status < 300);
    let (status, history) = post(
        "/memories/semantic/feature/history",
        with(json!({"feature_id": id})),
    );
    assert_eq!(status, 200, "{history}");
    let versions = history["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{history}");
    assert_eq!(versions[0]["value"], "pizza");
    assert_eq!(versions[0]["changed_by"], "manual");
    assert_eq!(versions[0]["valid_to"], versions[1]["valid_from"]);
    assert!(versions[1].get("valid_to").is_none());
    let then = versions[0]["valid_from"].clone();

    let (status, found) = post(
        "/memories/search",
        with(json!({"query": "food", "types": ["semantic"], "as_of": then})),
    );
    assert_eq!(status, 200, "{found}");
    assert_eq!(
        found["content"]["semantic_memory"][0]["value"], "pizza",
        "{found}"
    );
    let (status, listed) = post(
        "/memories/list",
        with(json!({"type": "semantic", "as_of": then})),
    );
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["content"]["semantic_memory"][0]["value"], "pizza",
        "{listed}"
    );
    let (_, now) = post("/memories/list", with(json!({"type": "semantic"})));
    assert_eq!(
        now["content"]["semantic_memory"][0]["value"], "sushi",
        "{now}"
    );

    let other = json!({"org_id": "other", "project_id": "p", "feature_id": id});
    assert_eq!(
        post("/projects", json!({"org_id": "other", "project_id": "p"})).0,
        201
    );
    assert_eq!(post("/memories/semantic/feature/history", other).0, 404);
    let (status, _) = post(
        "/memories/search",
        with(json!({"query": "food", "as_of": "yesterday-ish"})),
    );
    assert_eq!(status, 422);
}
