//! Every size, count and number a client controls, at its extremes, on every transport
//! that reads it: gRPC v2, the REST gateway, MCP over Streamable HTTP and legacy v1.
//! Against the real server (one `memmachine serve --rest-listen` process, a project
//! holding episodes and a semantic feature, so that both memory types rank), each value
//! outside its bounds must answer a clear INVALID_ARGUMENT (REST: 422; MCP: a tool error
//! that is not an internal one), each value inside them must be served, and after every
//! call the server must still answer its health check. A sweep sends every extreme to
//! every site; a property test then sends random values.
#![allow(deprecated)] // the v1 client stubs are deprecated, as the protos say

use std::time::Duration;

use crate::common::ServerProcess;
use crate::common::mcp_http::Session;
use memmachine_proto::v1;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;

const ORG: &str = "acme";
const PROJECT: &str = "notes";
const GROUP: &str = "g1";
const SESSION: &str = "s1";
/// The server's default bounds (`--max-page-size`, `MAX_EXPAND_CONTEXT`, `MAX_PAGE_NUM`).
const MAX_PAGE: i64 = 1000;
const MAX_EXPAND: i64 = 100;
const MAX_PAGE_NUM: i64 = 10_000;

/// A number a client sends, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumberSite {
    GrpcSearchTopK,
    GrpcSearchExpand,
    GrpcFeatureTopK,
    GrpcListPageSize,
    GrpcListFeaturesPageSize,
    GrpcProjectsPageSize,
    RestSearchTopK,
    RestSearchExpand,
    RestListPageSize,
    RestListPageNum,
    McpSearchTopK,
    McpListPageSize,
    McpProfilePageSize,
    V1SearchLimit,
    V1ListPageSize,
    V1SessionsPageSize,
}

const NUMBER_SITES: [NumberSite; 16] = [
    NumberSite::GrpcSearchTopK,
    NumberSite::GrpcSearchExpand,
    NumberSite::GrpcFeatureTopK,
    NumberSite::GrpcListPageSize,
    NumberSite::GrpcListFeaturesPageSize,
    NumberSite::GrpcProjectsPageSize,
    NumberSite::RestSearchTopK,
    NumberSite::RestSearchExpand,
    NumberSite::RestListPageSize,
    NumberSite::RestListPageNum,
    NumberSite::McpSearchTopK,
    NumberSite::McpListPageSize,
    NumberSite::McpProfilePageSize,
    NumberSite::V1SearchLimit,
    NumberSite::V1ListPageSize,
    NumberSite::V1SessionsPageSize,
];

impl NumberSite {
    /// The values the server accepts.
    fn bounds(self) -> (i64, i64) {
        match self {
            NumberSite::GrpcSearchExpand | NumberSite::RestSearchExpand => (0, MAX_EXPAND),
            NumberSite::RestListPageNum => (0, MAX_PAGE_NUM),
            _ => (1, MAX_PAGE),
        }
    }

    /// Sent as a protobuf `int32`: values beyond it cannot be.
    fn is_int32(self) -> bool {
        !matches!(
            self,
            NumberSite::RestSearchTopK
                | NumberSite::RestSearchExpand
                | NumberSite::RestListPageSize
                | NumberSite::RestListPageNum
                | NumberSite::McpSearchTopK
                | NumberSite::McpListPageSize
                | NumberSite::McpProfilePageSize
        )
    }
}

/// How many ids (or items) a client names, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CountSite {
    GrpcDeleteEpisodes,
    GrpcDeleteFeatures,
    GrpcCitations,
    GrpcAddMessages,
    RestDeleteEpisodes,
    RestGetEpisodes,
    McpDeleteIds,
    V1DeleteUuids,
    V1AddEpisodes,
}

const COUNT_SITES: [CountSite; 9] = [
    CountSite::GrpcDeleteEpisodes,
    CountSite::GrpcDeleteFeatures,
    CountSite::GrpcCitations,
    CountSite::GrpcAddMessages,
    CountSite::RestDeleteEpisodes,
    CountSite::RestGetEpisodes,
    CountSite::McpDeleteIds,
    CountSite::V1DeleteUuids,
    CountSite::V1AddEpisodes,
];

impl CountSite {
    /// The counts the server accepts.
    fn bounds(self) -> (usize, usize) {
        match self {
            CountSite::GrpcCitations => (0, MAX_PAGE as usize),
            CountSite::RestGetEpisodes => (1, 100),
            _ => (1, MAX_PAGE as usize),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Probe {
    Number(NumberSite, i64),
    Count(CountSite, usize),
}

/// How the server answered, as the test judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Served,
    /// INVALID_ARGUMENT, 422, or an MCP tool error naming the input.
    Invalid,
    /// Any other clear refusal (NOT_FOUND for ids that are not there).
    Refused(String),
    /// A fault of the server: INTERNAL, UNKNOWN, 5xx, a broken connection.
    Fault(String),
}

fn grpc<T>(result: Result<T, tonic::Status>) -> Answer {
    match result {
        Ok(_) => Answer::Served,
        Err(status) => match status.code() {
            Code::InvalidArgument => Answer::Invalid,
            Code::NotFound | Code::FailedPrecondition => {
                Answer::Refused(format!("{:?}", status.code()))
            }
            code => Answer::Fault(format!("{code:?}: {}", status.message())),
        },
    }
}

struct Harness {
    channel: Channel,
    http: reqwest::Client,
    rest: String,
    mcp: tokio::sync::Mutex<Session>,
    feature_id: String,
}

fn uids(n: usize) -> Vec<String> {
    (0..n).map(|_| uuid::Uuid::new_v4().to_string()).collect()
}

fn v1_context() -> v1::MemoryContext {
    v1::MemoryContext {
        group_id: GROUP.into(),
        agent_id: vec!["bot".into()],
        user_id: vec!["alice".into()],
        session_id: SESSION.into(),
    }
}

impl Harness {
    async fn start(server: &ServerProcess) -> Harness {
        let channel = Channel::from_shared(server.url())
            .unwrap()
            .connect()
            .await
            .expect("connect");
        ProjectServiceClient::new(channel.clone())
            .create_project(pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                ..Default::default()
            })
            .await
            .expect("create project");
        let messages = [
            "I adopted a dog named Max",
            "We hiked in Yosemite",
            "Max likes parks",
        ]
        .iter()
        .map(|content| pb::MemoryMessage {
            content: content.to_string(),
            producer: "alice".into(),
            ..Default::default()
        })
        .collect();
        MemoryServiceClient::new(channel.clone())
            .add_memories(pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                messages,
                ..Default::default()
            })
            .await
            .expect("add");
        // A feature, so that a search of both memory types ranks features too.
        let mut semantic = SemanticServiceClient::new(channel.clone());
        let set_id = semantic
            .get_set_id(pb::GetSetIdRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                is_org_level: false,
                metadata_tags: vec!["producer_id".into()],
                set_metadata: [("producer_id".to_string(), "alice".to_string())].into(),
            })
            .await
            .expect("set id")
            .into_inner()
            .set_id;
        let feature_id = semantic
            .add_feature(pb::AddFeatureRequest {
                org_id: ORG.into(),
                project_id: PROJECT.into(),
                set_id,
                category_name: "profile".into(),
                tag: "pets".into(),
                feature: "dog".into(),
                value: "a dog named Max".into(),
                ..Default::default()
            })
            .await
            .expect("add feature")
            .into_inner()
            .feature_id;
        v1::session_service_client::SessionServiceClient::new(channel.clone())
            .open_session(v1::OpenSessionRequest {
                context: Some(v1_context()),
                ..Default::default()
            })
            .await
            .expect("open a v1 session");
        let rest = server.rest_url();
        let mcp = Session::open(
            &reqwest::Client::new(),
            &rest,
            (ORG, PROJECT, "alice"),
            None,
        )
        .await
        .expect("open an MCP session");
        Harness {
            channel,
            http: reqwest::Client::new(),
            rest,
            mcp: tokio::sync::Mutex::new(mcp),
            feature_id,
        }
    }

    async fn rest(&self, path: &str, body: Value) -> Answer {
        let sent = self
            .http
            .post(format!("{}/api/v2{path}", self.rest))
            .json(&body)
            .timeout(Duration::from_secs(60))
            .send()
            .await;
        match sent {
            Err(err) => Answer::Fault(format!("REST {path}: {err}")),
            Ok(response) => match response.status().as_u16() {
                200..=299 => Answer::Served,
                422 => Answer::Invalid,
                404 => Answer::Refused("404".into()),
                status => Answer::Fault(format!(
                    "REST {path}: {status} {}",
                    response.text().await.unwrap_or_default()
                )),
            },
        }
    }

    async fn mcp(&self, tool: &str, arguments: Value) -> Answer {
        let answer = self
            .mcp
            .lock()
            .await
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        let (is_error, text) = match answer {
            Ok(result) => (
                result["isError"].as_bool().unwrap_or(false),
                result["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ),
            // Arguments that do not decode are a JSON-RPC error the agent reads.
            Err(answer) => match answer.messages.iter().find_map(|m| m.get("error")) {
                Some(error) if answer.status.is_success() => (
                    true,
                    error["message"].as_str().unwrap_or_default().to_string(),
                ),
                _ => return Answer::Fault(format!("MCP {tool}: {answer:?}")),
            },
        };
        if !is_error {
            Answer::Served
        } else if text.contains("internal error") {
            Answer::Fault(format!("MCP {tool}: {text}"))
        } else if text.contains("invalid") || text.contains("deserialize") {
            Answer::Invalid
        } else {
            Answer::Refused(text)
        }
    }

    async fn send(&self, probe: Probe) -> Answer {
        let memory = || MemoryServiceClient::new(self.channel.clone());
        let semantic = || SemanticServiceClient::new(self.channel.clone());
        let v1_memory =
            || v1::memory_service_client::MemoryServiceClient::new(self.channel.clone());
        match probe {
            Probe::Number(site, value) => {
                let n32 = value.clamp(i32::MIN.into(), i32::MAX.into()) as i32;
                match site {
                    NumberSite::GrpcSearchTopK | NumberSite::GrpcSearchExpand => {
                        let (top_k, expand) = if site == NumberSite::GrpcSearchTopK {
                            (Some(n32), 0)
                        } else {
                            (None, n32)
                        };
                        grpc(
                            memory()
                                .search_memories(pb::SearchMemoriesRequest {
                                    org_id: ORG.into(),
                                    project_id: PROJECT.into(),
                                    query: "dog".into(),
                                    top_k,
                                    expand_context: expand,
                                    ..Default::default()
                                })
                                .await,
                        )
                    }
                    NumberSite::GrpcFeatureTopK => grpc(
                        semantic()
                            .search_features(pb::SearchFeaturesRequest {
                                org_id: ORG.into(),
                                project_id: PROJECT.into(),
                                query: "dog".into(),
                                top_k: Some(n32),
                                ..Default::default()
                            })
                            .await,
                    ),
                    NumberSite::GrpcListPageSize | NumberSite::GrpcListFeaturesPageSize => {
                        let kind = if site == NumberSite::GrpcListPageSize {
                            pb::MemoryType::Episodic
                        } else {
                            pb::MemoryType::Semantic
                        };
                        grpc(
                            memory()
                                .list_memories(pb::ListMemoriesRequest {
                                    org_id: ORG.into(),
                                    project_id: PROJECT.into(),
                                    r#type: kind as i32,
                                    page_size: Some(n32),
                                    ..Default::default()
                                })
                                .await,
                        )
                    }
                    NumberSite::GrpcProjectsPageSize => grpc(
                        ProjectServiceClient::new(self.channel.clone())
                            .list_projects(pb::ListProjectsRequest {
                                page_size: Some(n32),
                                ..Default::default()
                            })
                            .await,
                    ),
                    NumberSite::RestSearchTopK => {
                        self.rest(
                            "/memories/search",
                            json!({"org_id": ORG, "project_id": PROJECT, "query": "dog", "top_k": value}),
                        )
                        .await
                    }
                    NumberSite::RestSearchExpand => {
                        self.rest(
                            "/memories/search",
                            json!({"org_id": ORG, "project_id": PROJECT, "query": "dog",
                                   "expand_context": value}),
                        )
                        .await
                    }
                    NumberSite::RestListPageSize => {
                        self.rest(
                            "/memories/list",
                            json!({"org_id": ORG, "project_id": PROJECT, "page_size": value}),
                        )
                        .await
                    }
                    NumberSite::RestListPageNum => {
                        self.rest(
                            "/memories/list",
                            json!({"org_id": ORG, "project_id": PROJECT, "page_size": 1,
                                   "page_num": value}),
                        )
                        .await
                    }
                    NumberSite::McpSearchTopK => {
                        self.mcp("search_memory", json!({"query": "dog", "top_k": value}))
                            .await
                    }
                    NumberSite::McpListPageSize => {
                        self.mcp("list_memories", json!({"page_size": value})).await
                    }
                    NumberSite::McpProfilePageSize => {
                        self.mcp("get_user_profile", json!({"page_size": value}))
                            .await
                    }
                    NumberSite::V1SearchLimit => grpc(
                        v1_memory()
                            .search_episodes(v1::SearchEpisodesRequest {
                                context: Some(v1_context()),
                                query: "dog".into(),
                                limit: Some(n32),
                                ..Default::default()
                            })
                            .await,
                    ),
                    NumberSite::V1ListPageSize => grpc(
                        v1_memory()
                            .list_episodes(v1::ListEpisodesRequest {
                                context: Some(v1_context()),
                                page_size: Some(n32),
                                ..Default::default()
                            })
                            .await,
                    ),
                    NumberSite::V1SessionsPageSize => grpc(
                        v1::session_service_client::SessionServiceClient::new(
                            self.channel.clone(),
                        )
                        .list_sessions(v1::ListSessionsRequest {
                            page_size: Some(n32),
                            ..Default::default()
                        })
                        .await,
                    ),
                }
            }
            Probe::Count(site, n) => match site {
                CountSite::GrpcDeleteEpisodes => grpc(
                    memory()
                        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
                            org_id: ORG.into(),
                            project_id: PROJECT.into(),
                            episode_ids: uids(n),
                        })
                        .await,
                ),
                CountSite::GrpcDeleteFeatures => grpc(
                    memory()
                        .delete_semantic_memories(pb::DeleteSemanticMemoriesRequest {
                            org_id: ORG.into(),
                            project_id: PROJECT.into(),
                            feature_ids: uids(n),
                        })
                        .await,
                ),
                CountSite::GrpcCitations => {
                    // A citation-free feature is added and removed again.
                    let answer = grpc(
                        semantic()
                            .update_feature(pb::UpdateFeatureRequest {
                                org_id: ORG.into(),
                                project_id: PROJECT.into(),
                                feature_id: self.feature_id.clone(),
                                value: Some("a dog named Max".into()),
                                ..Default::default()
                            })
                            .await,
                    );
                    assert_eq!(answer, Answer::Served, "the feature is there");
                    let set_id = semantic()
                        .get_feature(pb::GetFeatureRequest {
                            org_id: ORG.into(),
                            project_id: PROJECT.into(),
                            feature_id: self.feature_id.clone(),
                            load_citations: false,
                        })
                        .await
                        .expect("get feature")
                        .into_inner()
                        .feature
                        .expect("a feature")
                        .set_id;
                    let added = semantic()
                        .add_feature(pb::AddFeatureRequest {
                            org_id: ORG.into(),
                            project_id: PROJECT.into(),
                            set_id,
                            category_name: "profile".into(),
                            tag: "pets".into(),
                            feature: "cat".into(),
                            value: "none".into(),
                            citations: uids(n),
                            ..Default::default()
                        })
                        .await;
                    if let Ok(added) = &added {
                        let id = added.get_ref().feature_id.clone();
                        memory()
                            .delete_semantic_memories(pb::DeleteSemanticMemoriesRequest {
                                org_id: ORG.into(),
                                project_id: PROJECT.into(),
                                feature_ids: vec![id],
                            })
                            .await
                            .expect("delete the probe's feature");
                    }
                    grpc(added)
                }
                CountSite::GrpcAddMessages => grpc(
                    memory()
                        .add_memories(pb::AddMemoriesRequest {
                            org_id: ORG.into(),
                            project_id: PROJECT.into(),
                            messages: (0..n)
                                .map(|i| pb::MemoryMessage {
                                    content: format!("m{i}"),
                                    ..Default::default()
                                })
                                .collect(),
                            ..Default::default()
                        })
                        .await,
                ),
                CountSite::RestDeleteEpisodes => {
                    self.rest(
                        "/memories/episodic/delete",
                        json!({"org_id": ORG, "project_id": PROJECT, "episodic_ids": uids(n)}),
                    )
                    .await
                }
                CountSite::RestGetEpisodes => {
                    self.rest(
                        "/memories/episodic/get",
                        json!({"org_id": ORG, "project_id": PROJECT, "episodic_ids": uids(n)}),
                    )
                    .await
                }
                CountSite::McpDeleteIds => self.mcp("delete_memory", json!({"ids": uids(n)})).await,
                CountSite::V1DeleteUuids => grpc(
                    v1_memory()
                        .delete_episodes(v1::DeleteEpisodesRequest {
                            context: Some(v1_context()),
                            uuids: uids(n),
                            whole_session: false,
                        })
                        .await,
                ),
                CountSite::V1AddEpisodes => grpc(
                    v1_memory()
                        .add_episodes(v1::AddEpisodesRequest {
                            context: Some(v1::MemoryContext {
                                session_id: "scratch".into(),
                                ..v1_context()
                            }),
                            episodes: (0..n)
                                .map(|i| v1::Episode {
                                    content: format!("e{i}"),
                                    ..Default::default()
                                })
                                .collect(),
                        })
                        .await,
                ),
            },
        }
    }

    /// Sends the probe and judges the answer; then the server must still be up.
    async fn check(&self, probe: Probe) -> Result<(), String> {
        let answer = self.send(probe).await;
        let in_bounds = match probe {
            Probe::Number(site, value) => {
                let (low, high) = site.bounds();
                let sent = if site.is_int32() {
                    value.clamp(i32::MIN.into(), i32::MAX.into())
                } else {
                    value
                };
                (low..=high).contains(&sent)
            }
            Probe::Count(site, n) => {
                let (low, high) = site.bounds();
                (low..=high).contains(&n)
            }
        };
        let judged = match (&answer, in_bounds) {
            (Answer::Fault(fault), _) => Err(format!("a server fault: {fault}")),
            (Answer::Invalid, false) => Ok(()),
            (other, false) => Err(format!("not refused as invalid: {other:?}")),
            // Ids that are not there may be refused, as long as it is for that.
            (Answer::Served | Answer::Refused(_), true) => Ok(()),
            (Answer::Invalid, true) => Err("a value within bounds was refused".into()),
        };
        judged.map_err(|err| format!("{probe:?}: {err}"))?;
        self.alive()
            .await
            .map_err(|err| format!("after {probe:?}: {err}"))
    }

    async fn alive(&self) -> Result<(), String> {
        let mut health = tonic_health::pb::health_client::HealthClient::new(self.channel.clone());
        let status = health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .map_err(|status| format!("the health check failed: {status}"))?
            .into_inner()
            .status;
        if status != tonic_health::pb::health_check_response::ServingStatus::Serving as i32 {
            return Err(format!("the server is not serving: {status}"));
        }
        Ok(())
    }
}

const NUMBERS: [i64; 9] = [
    i64::MIN,
    i32::MIN as i64,
    -1,
    0,
    1,
    MAX_PAGE,
    MAX_PAGE + 1,
    i32::MAX as i64,
    i64::MAX,
];

const COUNTS: [usize; 6] = [0, 1, 100, 1000, 1001, 100_000];

fn serve() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &["--rest-listen", "127.0.0.1:0"]);
    (dir, server)
}

#[test]
fn every_extreme_value_on_every_transport_is_refused_clearly_and_the_server_lives() {
    let (_dir, mut server) = serve();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let harness = runtime.block_on(Harness::start(&server));
    let mut failures = Vec::new();
    let probes = NUMBER_SITES
        .iter()
        .flat_map(|site| NUMBERS.iter().map(|n| Probe::Number(*site, *n)))
        .chain(
            COUNT_SITES
                .iter()
                .flat_map(|site| COUNTS.iter().map(|n| Probe::Count(*site, *n))),
        )
        .collect::<Vec<_>>();
    for probe in &probes {
        if let Err(failure) = runtime.block_on(harness.check(*probe)) {
            failures.push(failure);
            if server.child.try_wait().unwrap().is_some() {
                failures.push("the server process exited".into());
                break;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} probes failed:\n{}",
        failures.len(),
        probes.len(),
        failures.join("\n")
    );
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server lives"
    );
}

fn probe() -> impl Strategy<Value = Probe> {
    let number = prop_oneof![
        any::<i64>(),
        any::<i32>().prop_map(i64::from),
        -5i64..1200,
        9_990i64..10_010,
    ];
    let count = prop_oneof![0usize..4, 995usize..1005, 1usize..5000];
    prop_oneof![
        (0..NUMBER_SITES.len(), number).prop_map(|(i, n)| Probe::Number(NUMBER_SITES[i], n)),
        (0..COUNT_SITES.len(), count).prop_map(|(i, n)| Probe::Count(COUNT_SITES[i], n)),
    ]
}

#[test]
fn random_values_on_every_transport_are_judged_by_their_bounds() {
    let (_dir, mut server) = serve();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let harness = runtime.block_on(Harness::start(&server));
    let mut runner = TestRunner::new(Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&probe(), |probe| {
        runtime
            .block_on(harness.check(probe))
            .map_err(TestCaseError::fail)
    });
    if let Err(err) = result {
        panic!("{err}");
    }
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server lives"
    );
}
