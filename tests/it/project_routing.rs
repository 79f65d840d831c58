//! The routing key `x-memmachine-project: ORG/PROJECT`, which a proxy with project
//! affinity hashes on: accepted when it names the request's own project, refused with
//! INVALID_ARGUMENT (422 over REST and MCP) when it names another or is malformed, on
//! every transport, so that a key can never carry a call to another project's replica
//! unnoticed. A caller's rights are checked first: a key for another org is refused as
//! such whatever the header says.

use crate::common::ServerProcess;
use crate::common::keys::create_key;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::change_service_client::ChangeServiceClient;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use serde_json::json;
use tonic::Code;
use tonic::transport::Channel;

const HEADER: &str = "x-memmachine-project";

fn routed<T>(message: T, route: Option<&str>, key: Option<&str>) -> tonic::Request<T> {
    let mut request = crate::common::calls::with_key(message, key);
    if let Some(route) = route {
        request
            .metadata_mut()
            .insert(HEADER, route.parse().unwrap());
    }
    request
}

fn add_request(org: &str, project: &str) -> pb::AddMemoriesRequest {
    pb::AddMemoriesRequest {
        org_id: org.into(),
        project_id: project.into(),
        messages: vec![pb::MemoryMessage {
            content: "routed".into(),
            producer: "ada".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Refused with INVALID_ARGUMENT whose field violation names the header.
fn assert_refused<T: std::fmt::Debug>(result: Result<T, tonic::Status>, what: &str) {
    let status = result.expect_err(what);
    assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    assert!(status.message().contains(HEADER), "{what}: {status:?}");
}

async fn start(extra: &[&str]) -> (ServerProcess, Channel) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--rest-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = tokio::task::block_in_place(|| ServerProcess::start(dir.keep().as_path(), &args));
    let channel = Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    for project in ["web", "mobile"] {
        crate::common::calls::create_project(&channel, None, "acme", project)
            .await
            .unwrap();
    }
    (server, channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_agree_with_their_routing_key() {
    let (_server, channel) = start(&[]).await;
    let memory = MemoryServiceClient::new(channel.clone());
    // Its own project, spelled either way: served.
    for route in ["acme/web", "%61cme/web"] {
        memory
            .clone()
            .add_memories(routed(add_request("acme", "web"), Some(route), None))
            .await
            .unwrap_or_else(|s| panic!("{route}: {s:?}"));
    }
    // Universal: empty ids in the body, empty or spelled out in the key.
    for route in ["/", "universal/universal"] {
        memory
            .clone()
            .search_memories(routed(
                pb::SearchMemoriesRequest {
                    query: "x".into(),
                    ..Default::default()
                },
                Some(route),
                None,
            ))
            .await
            .map(drop)
            .or_else(|s| (s.code() == Code::NotFound).then_some(()).ok_or(s))
            .unwrap_or_else(|s| panic!("{route}: {s:?}"));
    }
    // Another project, another org, or no valid key at all: refused, nothing stored.
    for route in [
        "acme/mobile",
        "globex/web",
        "acme",
        "acme/web/x",
        "acme/w%FFb",
        "acme/a b",
    ] {
        assert_refused(
            memory
                .clone()
                .add_memories(routed(add_request("acme", "web"), Some(route), None))
                .await,
            route,
        );
    }
    let count = ProjectServiceClient::new(channel.clone())
        .get_episode_count(pb::GetEpisodeCountRequest {
            org_id: "acme".into(),
            project_id: "web".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .count;
    assert_eq!(
        count, 2,
        "only the two routed to their own project were stored"
    );
    // Org-level calls hold the key's org to theirs.
    let projects = ProjectServiceClient::new(channel.clone());
    projects
        .clone()
        .list_projects(routed(
            pb::ListProjectsRequest {
                org_id: Some("acme".into()),
                ..Default::default()
            },
            Some("acme/anything"),
            None,
        ))
        .await
        .unwrap();
    assert_refused(
        projects
            .clone()
            .list_projects(routed(
                pb::ListProjectsRequest {
                    org_id: Some("acme".into()),
                    ..Default::default()
                },
                Some("globex/web"),
                None,
            ))
            .await,
        "ListProjects of acme routed to globex",
    );
    // Streams: the change feed and imports.
    assert_refused(
        ChangeServiceClient::new(channel.clone())
            .watch_changes(routed(
                pb::WatchChangesRequest {
                    org_id: "acme".into(),
                    project_id: "web".into(),
                    after: String::new(),
                },
                Some("acme/mobile"),
                None,
            ))
            .await,
        "WatchChanges",
    );
    let batches = vec![pb::ImportMemoriesRequest {
        org_id: "acme".into(),
        project_id: "web".into(),
        messages: add_request("acme", "web").messages,
        ..Default::default()
    }];
    assert_refused(
        memory
            .clone()
            .import_memories(routed(
                futures::stream::iter(batches),
                Some("acme/mobile"),
                None,
            ))
            .await,
        "ImportMemories",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_rights_are_checked_before_its_routing_key() {
    let dir = tempfile::tempdir().unwrap();
    let admin = create_key(dir.path(), &["--admin"]);
    let acme = create_key(dir.path(), &["--org", "acme"]);
    let server = tokio::task::block_in_place(|| ServerProcess::start(dir.path(), &["--auth"]));
    let channel = Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    crate::common::calls::create_project(&channel, Some(&admin), "acme", "web")
        .await
        .unwrap();
    let memory = MemoryServiceClient::new(channel);
    // Another org's project, whatever the key says: PERMISSION_DENIED.
    for route in [None, Some("globex/web"), Some("acme/web")] {
        let status = memory
            .clone()
            .add_memories(routed(add_request("globex", "web"), route, Some(&acme)))
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            Code::PermissionDenied,
            "{route:?}: {status:?}"
        );
    }
    // Its own org's project routed elsewhere: INVALID_ARGUMENT.
    assert_refused(
        memory
            .clone()
            .add_memories(routed(
                add_request("acme", "web"),
                Some("globex/web"),
                Some(&acme),
            ))
            .await,
        "acme's key, acme's project, routed to globex",
    );
    memory
        .clone()
        .add_memories(routed(
            add_request("acme", "web"),
            Some("acme/web"),
            Some(&acme),
        ))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_and_mcp_calls_agree_with_their_routing_key() {
    let (server, _channel) = start(&[]).await;
    let base = server.rest_url();
    let http = reqwest::Client::new();
    let search = |route: &'static str| {
        http.post(format!("{base}/api/v2/memories/search"))
            .header(HEADER, route)
            .json(&json!({"org_id": "acme", "project_id": "web", "query": "x"}))
            .send()
    };
    assert_eq!(search("acme/web").await.unwrap().status(), 200);
    for route in ["acme/mobile", "globex/web", "nonsense"] {
        let response = search(route).await.unwrap();
        assert_eq!(response.status(), 422, "{route}");
        let body = response.text().await.unwrap();
        assert!(body.contains(HEADER), "{route}: {body}");
    }
    // The OpenAPI document names the header on the memory routes.
    let document: serde_json::Value = http
        .get(format!("{base}/api/v2/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let parameters = &document["paths"]["/memories/search"]["post"]["parameters"];
    assert!(
        parameters
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == HEADER && p["in"] == "header")),
        "{parameters}"
    );
    // MCP: the session's scope is the request's project.
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": crate::common::mcp_http::PROTOCOL, "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}},
    });
    let mcp = |route: &'static str| {
        http.post(format!("{base}/mcp?org=acme&project=web&user=ada"))
            .header(HEADER, route)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
    };
    assert!(mcp("acme/web").await.unwrap().status().is_success());
    let refused = mcp("acme/mobile").await.unwrap();
    assert_eq!(refused.status(), 422);
    assert!(refused.text().await.unwrap().contains(HEADER));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)] // the v1 API is deprecated; its routing is still checked
async fn v1_calls_agree_with_their_routing_key() {
    use memmachine_proto::v1;
    use memmachine_proto::v1::group_service_client::GroupServiceClient;
    use memmachine_proto::v1::memory_service_client::MemoryServiceClient as V1Memory;
    let (_server, channel) = start(&[]).await;
    // v1 groups are projects of the reserved org.
    let own = "memmachine:v1/team";
    GroupServiceClient::new(channel.clone())
        .create_group(routed(
            v1::CreateGroupRequest {
                group: Some(v1::GroupConfiguration {
                    group_id: "team".into(),
                    ..Default::default()
                }),
            },
            Some(own),
            None,
        ))
        .await
        .unwrap();
    let add = async |route: &'static str| {
        V1Memory::new(channel.clone())
            .add_episodes(routed(
                v1::AddEpisodesRequest {
                    context: Some(v1::MemoryContext {
                        group_id: "team".into(),
                        session_id: "s".into(),
                        ..Default::default()
                    }),
                    episodes: vec![v1::Episode {
                        content: "routed".into(),
                        ..Default::default()
                    }],
                },
                Some(route),
                None,
            ))
            .await
    };
    add(own).await.unwrap();
    assert_refused(
        add("memmachine:v1/other").await,
        "v1 routed to another group",
    );
    assert_refused(add("acme/team").await, "v1 routed to another org");
    // Listing groups names no group: only the org is held to the key's.
    GroupServiceClient::new(channel.clone())
        .list_groups(routed(v1::ListGroupsRequest::default(), Some(own), None))
        .await
        .unwrap();
}
