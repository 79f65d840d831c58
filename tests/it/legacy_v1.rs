//! The deprecated legacy v1 API (`memmachine.v1`) end to end over real gRPC: sessions
//! as memory instances, episodes with every v1 field, sessions and groups kept and
//! listed, the same memories seen through v1 and v2 both ways, validation and auth.
#![allow(deprecated)] // the v1 client stubs are deprecated, as the protos say

use std::process::Command;

use crate::common;
use crate::common::InProcess;
use crate::common::calls::with_key;
use crate::common::child::Run;
use crate::common::paging::try_collect_pages;
use memmachine_domain::legacy::RESERVED_ORG;
use memmachine_proto::v1;
use memmachine_proto::v1::group_service_client::GroupServiceClient;
use memmachine_proto::v1::memory_service_client::MemoryServiceClient;
use memmachine_proto::v1::session_service_client::SessionServiceClient;
use memmachine_proto::v2 as pb;
use prost_types::value::Kind;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

struct Clients {
    memory: MemoryServiceClient<Channel>,
    sessions: SessionServiceClient<Channel>,
    groups: GroupServiceClient<Channel>,
    v2_memory: pb::memory_service_client::MemoryServiceClient<Channel>,
    v2_projects: pb::project_service_client::ProjectServiceClient<Channel>,
}

async fn clients(server: &InProcess) -> Clients {
    let channel = server.channel().await;
    Clients {
        memory: MemoryServiceClient::new(channel.clone()),
        sessions: SessionServiceClient::new(channel.clone()),
        groups: GroupServiceClient::new(channel.clone()),
        v2_memory: pb::memory_service_client::MemoryServiceClient::new(channel.clone()),
        v2_projects: pb::project_service_client::ProjectServiceClient::new(channel),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn context(group: &str, session: &str, agents: &[&str], users: &[&str]) -> v1::MemoryContext {
    v1::MemoryContext {
        group_id: group.into(),
        agent_id: strings(agents),
        user_id: strings(users),
        session_id: session.into(),
    }
}

fn text(content: &str) -> v1::Episode {
    v1::Episode {
        content: content.into(),
        ..Default::default()
    }
}

/// A JSON value as a protobuf `Value`.
fn value(json: serde_json::Value) -> prost_types::Value {
    let kind = match json {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap()),
        serde_json::Value::String(s) => Kind::StringValue(s),
        serde_json::Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.into_iter().map(value).collect(),
        }),
        serde_json::Value::Object(o) => Kind::StructValue(prost_types::Struct {
            fields: o.into_iter().map(|(k, v)| (k, value(v))).collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// The fields named by the status's BadRequest detail.
fn violated_fields(status: &Status) -> Vec<String> {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    status
        .get_details_bad_request()
        .expect("a BadRequest detail")
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect()
}

impl Clients {
    async fn open(&mut self, ctx: v1::MemoryContext) -> Result<v1::SessionInfo, Status> {
        Ok(self
            .sessions
            .open_session(v1::OpenSessionRequest {
                context: Some(ctx),
                configuration: None,
            })
            .await?
            .into_inner()
            .session
            .unwrap())
    }

    async fn add(
        &mut self,
        ctx: v1::MemoryContext,
        episodes: Vec<v1::Episode>,
    ) -> Result<Vec<String>, Status> {
        Ok(self
            .memory
            .add_episodes(v1::AddEpisodesRequest {
                context: Some(ctx),
                episodes,
            })
            .await?
            .into_inner()
            .uuids)
    }

    async fn list(&mut self, group: &str, session: &str) -> Result<Vec<v1::Episode>, Status> {
        Ok(self
            .memory
            .list_episodes(v1::ListEpisodesRequest {
                context: Some(context(group, session, &[], &[])),
                ..Default::default()
            })
            .await?
            .into_inner()
            .episodes)
    }

    async fn search(
        &mut self,
        group: &str,
        session: &str,
        query: &str,
        filter: &str,
    ) -> Result<Vec<v1::ScoredEpisode>, Status> {
        Ok(self
            .memory
            .search_episodes(v1::SearchEpisodesRequest {
                context: Some(context(group, session, &[], &[])),
                query: query.into(),
                limit: None,
                filter: filter.into(),
            })
            .await?
            .into_inner()
            .episodes)
    }

    async fn delete(
        &mut self,
        group: &str,
        session: &str,
        uuids: &[&str],
        whole_session: bool,
    ) -> Result<i64, Status> {
        Ok(self
            .memory
            .delete_episodes(v1::DeleteEpisodesRequest {
                context: Some(context(group, session, &[], &[])),
                uuids: strings(uuids),
                whole_session,
            })
            .await?
            .into_inner()
            .deleted_count)
    }

    async fn sessions(
        &mut self,
        group: &str,
        user: &str,
        agent: &str,
    ) -> Result<Vec<(String, String)>, Status> {
        try_collect_pages(async |token| {
            let page = self
                .sessions
                .list_sessions(v1::ListSessionsRequest {
                    group_id: group.into(),
                    user_id: user.into(),
                    agent_id: agent.into(),
                    page_size: Some(1),
                    page_token: token,
                })
                .await?
                .into_inner();
            assert!(page.sessions.len() <= 1);
            let sessions = page.sessions.into_iter();
            let sessions = sessions.map(|s| (s.group_id, s.session_id));
            Ok((sessions, page.next_page_token))
        })
        .await
    }

    async fn groups(&mut self, user: &str, agent: &str) -> Result<Vec<String>, Status> {
        Ok(self
            .groups
            .list_groups(v1::ListGroupsRequest {
                user_id: user.into(),
                agent_id: agent.into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .groups
            .into_iter()
            .map(|g| g.group_id)
            .collect())
    }

    async fn group(&mut self, group: &str) -> Result<v1::GroupConfiguration, Status> {
        Ok(self
            .groups
            .get_group(v1::GetGroupRequest {
                group_id: group.into(),
            })
            .await?
            .into_inner()
            .group
            .unwrap())
    }

    async fn v2_list(&mut self, group: &str) -> Vec<pb::Episode> {
        self.v2_list_in(RESERVED_ORG, group).await
    }

    async fn v2_list_in(&mut self, org: &str, project: &str) -> Vec<pb::Episode> {
        self.v2_memory
            .list_memories(pb::ListMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                ..Default::default()
            })
            .await
            .expect("v2 list")
            .into_inner()
            .episodes
    }
}

#[tokio::test]
async fn a_session_is_one_memory_instance_per_group_and_session_id() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    let first = c
        .open(context("team", "chat", &["bot"], &["ann"]))
        .await
        .unwrap();
    assert_eq!(
        (first.agent_ids.clone(), first.user_ids.clone()),
        (strings(&["bot"]), strings(&["ann"]))
    );
    // Other sets, same group and session: the same instance, sets merged.
    let again = c
        .open(context("team", "chat", &["helper", "bot"], &["bob"]))
        .await
        .unwrap();
    assert_eq!(again.group_id, "team");
    assert_eq!(again.session_id, "chat");
    assert_eq!(again.agent_ids, strings(&["bot", "helper"]));
    assert_eq!(again.user_ids, strings(&["ann", "bob"]));
    assert_eq!(again.created_at, first.created_at, "the same session");
    let got = c
        .sessions
        .get_session(v1::GetSessionRequest {
            group_id: "team".into(),
            session_id: "chat".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(got, again);
    // Episodes added under either context land in one memory.
    c.add(
        context("team", "chat", &["bot"], &[]),
        vec![text("first words")],
    )
    .await
    .unwrap();
    c.add(
        context("team", "chat", &[], &["carl"]),
        vec![text("second words")],
    )
    .await
    .unwrap();
    let contents: Vec<String> = c
        .list("team", "chat")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.content)
        .collect();
    assert_eq!(contents, ["first words", "second words"]);

    // A configuration given replaces; one not given is kept.
    let configured = c
        .sessions
        .open_session(v1::OpenSessionRequest {
            context: Some(context("team", "chat", &[], &[])),
            configuration: Some(prost_types::Struct {
                fields: [("tone".to_string(), value(serde_json::json!("formal")))].into(),
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(configured.user_ids, strings(&["ann", "bob", "carl"]));
    let kept = c.open(context("team", "chat", &[], &[])).await.unwrap();
    assert_eq!(kept.configuration, configured.configuration);
    assert!(kept.configuration.unwrap().fields.contains_key("tone"));

    // More sessions, and sessions listed by group, user and agent (one per page).
    c.open(context("team", "standup", &["scribe"], &["ann"]))
        .await
        .unwrap();
    c.open(context("other", "chat", &["bot"], &["dora"]))
        .await
        .unwrap();
    let pair = |g: &str, s: &str| (g.to_string(), s.to_string());
    assert_eq!(
        c.sessions("team", "", "").await.unwrap(),
        [pair("team", "chat"), pair("team", "standup")]
    );
    assert_eq!(
        c.sessions("", "ann", "").await.unwrap(),
        [pair("team", "chat"), pair("team", "standup")]
    );
    assert_eq!(
        c.sessions("", "", "bot").await.unwrap(),
        [pair("other", "chat"), pair("team", "chat")]
    );
    assert_eq!(
        c.sessions("team", "", "scribe").await.unwrap(),
        [pair("team", "standup")]
    );
    assert_eq!(c.sessions("", "nobody", "").await.unwrap(), []);

    // The groups opened implicitly keep their members too.
    let team = c.group("team").await.unwrap();
    assert_eq!(team.agent_list, strings(&["bot", "helper", "scribe"]));
    assert_eq!(team.user_list, strings(&["ann", "bob", "carl"]));
    assert_eq!(c.groups("dora", "").await.unwrap(), ["other"]);
    assert_eq!(c.groups("", "bot").await.unwrap(), ["other", "team"]);

    // Groups created explicitly, kept, updated, listed.
    let config = prost_types::Struct {
        fields: [(
            "model".to_string(),
            value(serde_json::json!({"name": "x", "layers": [1, 2]})),
        )]
        .into(),
    };
    let created = c
        .groups
        .create_group(v1::CreateGroupRequest {
            group: Some(v1::GroupConfiguration {
                group_id: "lab".into(),
                agent_list: strings(&["robot"]),
                user_list: strings(&["zed", "eve", "zed"]),
                configuration: Some(config.clone()),
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .group
        .unwrap();
    assert_eq!(created.user_list, strings(&["eve", "zed"]));
    assert_eq!(c.group("lab").await.unwrap(), created);
    let dup = c
        .groups
        .create_group(v1::CreateGroupRequest {
            group: Some(v1::GroupConfiguration {
                group_id: "team".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists);
    c.groups
        .update_group(v1::UpdateGroupRequest {
            group: Some(v1::GroupConfiguration {
                group_id: "lab".into(),
                agent_list: strings(&["robot"]),
                user_list: strings(&["ann"]),
                configuration: Some(config),
            }),
        })
        .await
        .unwrap();
    assert_eq!(c.groups("ann", "").await.unwrap(), ["lab", "team"]);
    assert_eq!(c.groups("eve", "").await.unwrap(), Vec::<String>::new());
    assert_eq!(c.groups("", "").await.unwrap(), ["lab", "other", "team"]);
    let missing = c
        .groups
        .update_group(v1::UpdateGroupRequest {
            group: Some(v1::GroupConfiguration {
                group_id: "nowhere".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    // Deleting a session deletes its episodes; deleting a group, everything of it.
    let deleted = c
        .sessions
        .delete_session(v1::DeleteSessionRequest {
            group_id: "team".into(),
            session_id: "chat".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .deleted_count;
    assert_eq!(deleted, 2);
    assert!(c.list("team", "").await.unwrap().is_empty());
    assert_eq!(
        c.sessions("team", "", "").await.unwrap(),
        [pair("team", "standup")]
    );
    c.groups
        .delete_group(v1::DeleteGroupRequest {
            group_id: "other".into(),
        })
        .await
        .unwrap();
    assert_eq!(c.group("other").await.unwrap_err().code(), Code::NotFound);
    assert_eq!(c.sessions("", "", "bot").await.unwrap(), []);
    let gone = c
        .sessions
        .get_session(v1::GetSessionRequest {
            group_id: "other".into(),
            session_id: "chat".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
}

#[tokio::test]
async fn episodes_keep_every_v1_field_and_stay_in_their_session() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    let ctx = context("kitchen", "dinner", &["chef"], &["ann"]);
    let uuid = uuid::Uuid::new_v4().to_string();
    let metadata = serde_json::json!({
        "topic": "food",
        "rating": 5,
        "nested": {"tags": ["a", "b"], "deep": {"none": null, "yes": true}},
    });
    let full = v1::Episode {
        uuid: uuid.clone(),
        episode_type: "preference".into(),
        content_type: "string".into(),
        content: "Ann loves pizza with olives".into(),
        timestamp: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 123_456_000,
        }),
        group_id: "kitchen".into(),
        session_id: "dinner".into(),
        producer_id: "ann".into(),
        produced_for_id: "chef".into(),
        user_metadata: Some(value(metadata)),
        idempotency_key: String::new(),
    };
    let uuids = c
        .add(ctx.clone(), vec![full.clone(), text("the oven is hot")])
        .await
        .unwrap();
    assert_eq!(uuids[0], uuid, "a given uuid is kept");
    assert!(uuid::Uuid::parse_str(&uuids[1]).is_ok());
    // Another session of the group, with a matching word.
    let other = c
        .add(
            context("kitchen", "lunch", &[], &["bob"]),
            vec![text("Bob wants pizza too")],
        )
        .await
        .unwrap();

    let listed = c.list("kitchen", "dinner").await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0], full, "every field round-trips");
    assert_eq!(listed[1].episode_type, "message");
    assert_eq!(listed[1].content_type, "string");
    assert_eq!(listed[1].producer_id, "user");
    assert_eq!(listed[1].session_id, "dinner");
    assert_eq!(listed[1].user_metadata, None);
    assert_eq!(
        c.list("kitchen", "").await.unwrap().len(),
        3,
        "the whole group"
    );
    // Any session id selects its session (quoted into the filter safely).
    let odd = r"it's a\ 'session' OR 1=1";
    c.add(context("kitchen", odd, &[], &[]), vec![text("odd one")])
        .await
        .unwrap();
    let listed_odd = c.list("kitchen", odd).await.unwrap();
    assert_eq!(listed_odd.len(), 1);
    assert_eq!(listed_odd[0].session_id, odd);
    assert_eq!(c.delete("kitchen", odd, &[], true).await.unwrap(), 1);

    // Only this session's episodes, best first (an embedder may rank every one).
    let hits = c.search("kitchen", "dinner", "pizza", "").await.unwrap();
    assert_eq!(hits[0].episode.as_ref().unwrap(), &full);
    assert!(hits[0].score > 0.0);
    let uuids_of = |hits: &[v1::ScoredEpisode]| -> Vec<String> {
        hits.iter()
            .map(|h| h.episode.as_ref().unwrap().uuid.clone())
            .collect()
    };
    assert!(!uuids_of(&hits).contains(&other[0]), "{hits:?}");
    let group_hits = c.search("kitchen", "", "pizza", "").await.unwrap();
    assert!(uuids_of(&group_hits).contains(&other[0]), "{group_hits:?}");
    // Filters name the v2 fields and the user metadata's top-level scalars.
    assert_eq!(
        uuids_of(
            &c.search("kitchen", "", "pizza", "m.topic = 'food' AND m.rating >= 5")
                .await
                .unwrap()
        ),
        [uuid.as_str()]
    );
    assert!(
        c.search("kitchen", "", "pizza", "producer_id = 'nobody'")
            .await
            .unwrap()
            .is_empty()
    );

    // A uuid of another session is not in this one: NOT_FOUND, nothing deleted.
    let err = c
        .delete("kitchen", "dinner", &[&other[0], &uuids[1]], false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert_eq!(c.list("kitchen", "").await.unwrap().len(), 3);
    assert_eq!(
        c.delete("kitchen", "dinner", &[&uuids[1]], false)
            .await
            .unwrap(),
        1
    );
    assert_eq!(c.delete("kitchen", "lunch", &[], true).await.unwrap(), 1);
    let left = c.list("kitchen", "").await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].uuid, uuid);
    // A uuid given again is taken.
    let again = c.add(ctx, vec![full]).await.unwrap_err();
    assert_eq!(again.code(), Code::AlreadyExists, "{again:?}");
}

#[tokio::test]
async fn v1_and_v2_calls_see_the_same_memories() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    let ctx = context("shared", "s1", &["bot"], &["ann"]);
    // Numbers are doubles in protobuf's Value.
    let meta = serde_json::json!({"topic": "travel", "trip": {"days": 3.5}});
    let v1_uuid = c
        .add(
            ctx.clone(),
            vec![v1::Episode {
                content: "Ann is flying to Lisbon".into(),
                producer_id: "ann".into(),
                produced_for_id: "bot".into(),
                episode_type: "note".into(),
                user_metadata: Some(value(meta.clone())),
                ..Default::default()
            }],
        )
        .await
        .unwrap()
        .remove(0);

    // v1 → v2: the group is a project of the reserved org.
    let project = c
        .v2_projects
        .get_project(pb::GetProjectRequest {
            org_id: RESERVED_ORG.into(),
            project_id: "shared".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .project
        .unwrap();
    assert_eq!(project.project_id, "shared");
    let seen = c.v2_list("shared").await;
    assert_eq!(seen.len(), 1);
    let e = &seen[0];
    assert_eq!(e.uid, v1_uuid);
    assert_eq!(e.session_key, format!("{RESERVED_ORG}/shared"));
    assert_eq!(
        (e.producer_id.as_str(), e.produced_for_id.as_str()),
        ("ann", "bot")
    );
    assert_eq!(e.metadata["v1.session_id"], "s1");
    assert_eq!(e.metadata["v1.episode_type"], "note");
    assert_eq!(e.metadata["topic"], "travel");
    let json: serde_json::Value = serde_json::from_str(&e.metadata["v1.user_metadata"]).unwrap();
    assert_eq!(json, meta);
    let found = c
        .v2_memory
        .search_memories(pb::SearchMemoriesRequest {
            org_id: RESERVED_ORG.into(),
            project_id: "shared".into(),
            query: "Lisbon".into(),
            filter: "m.v1.session_id = 's1'".into(),
            types: vec![pb::MemoryType::Episodic as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodic_memory
        .unwrap();
    assert_eq!(found.long_term_memory.len(), 1);
    assert_eq!(
        found.long_term_memory[0].episode.as_ref().unwrap().uid,
        v1_uuid
    );

    // v2 → v1: an episode naming the session in its metadata is the session's; one
    // naming none is the group's.
    let added = c
        .v2_memory
        .add_memories(pb::AddMemoriesRequest {
            org_id: RESERVED_ORG.into(),
            project_id: "shared".into(),
            types: vec![pb::MemoryType::Episodic as i32],
            messages: vec![
                pb::MemoryMessage {
                    content: "Lisbon hotel booked by the agent".into(),
                    producer: "bot".into(),
                    metadata: [
                        ("v1.session_id".to_string(), "s1".to_string()),
                        ("source".to_string(), "v2".to_string()),
                    ]
                    .into(),
                    ..Default::default()
                },
                pb::MemoryMessage {
                    content: "a group-wide note about Lisbon".into(),
                    ..Default::default()
                },
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .results;
    let session = c.list("shared", "s1").await.unwrap();
    assert_eq!(session.len(), 2);
    assert_eq!(session[1].uuid, added[0].uid);
    assert_eq!(session[1].session_id, "s1");
    assert_eq!(session[1].group_id, "shared");
    assert_eq!(session[1].producer_id, "bot");
    assert_eq!(session[1].episode_type, "message");
    assert_eq!(
        session[1].user_metadata,
        Some(value(serde_json::json!({"source": "v2"})))
    );
    let hits = c.search("shared", "s1", "hotel", "").await.unwrap();
    assert_eq!(hits[0].episode.as_ref().unwrap().uuid, added[0].uid);
    assert!(
        hits.iter()
            .all(|h| h.episode.as_ref().unwrap().uuid != added[1].uid),
        "the group's note is in no session"
    );
    let group = c.list("shared", "").await.unwrap();
    assert_eq!(group.len(), 3);
    assert_eq!(group[2].uuid, added[1].uid);
    assert_eq!(group[2].session_id, "");

    // Deleting through one API is seen through the other.
    c.delete("shared", "s1", &[&added[0].uid], false)
        .await
        .unwrap();
    assert_eq!(c.v2_list("shared").await.len(), 2);
    c.v2_memory
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: RESERVED_ORG.into(),
            project_id: "shared".into(),
            episode_ids: vec![v1_uuid],
        })
        .await
        .unwrap();
    assert!(c.list("shared", "s1").await.unwrap().is_empty());

    // Deleting the v2 project deletes the group's sessions and configuration: a group
    // of the same name made again starts empty.
    c.v2_projects
        .delete_project(pb::DeleteProjectRequest {
            org_id: RESERVED_ORG.into(),
            project_id: "shared".into(),
        })
        .await
        .unwrap();
    assert_eq!(c.group("shared").await.unwrap_err().code(), Code::NotFound);
    assert_eq!(c.sessions("", "ann", "").await.unwrap(), []);
    c.v2_projects
        .create_project(pb::CreateProjectRequest {
            org_id: RESERVED_ORG.into(),
            project_id: "shared".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let fresh = c.group("shared").await.unwrap();
    assert!(fresh.agent_list.is_empty() && fresh.user_list.is_empty());
    assert_eq!(c.sessions("shared", "", "").await.unwrap(), []);
    assert!(c.list("shared", "").await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_input_names_its_fields_and_groups_do_not_mix() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    let err = c
        .add(
            context("bad group", "", &[""], &[]),
            vec![
                text(""),
                v1::Episode {
                    uuid: "not-a-uuid".into(),
                    group_id: "elsewhere".into(),
                    ..text("fine")
                },
            ],
        )
        .await
        .unwrap_err();
    let fields = violated_fields(&err);
    for field in [
        "context.group_id",
        "context.session_id",
        "context.agent_id[0]",
        "episodes[1].uuid",
        "episodes[1].group_id",
    ] {
        assert!(fields.contains(&field.to_string()), "{field} in {fields:?}");
    }
    // The v2 checks speak v1's names.
    let err = c
        .add(
            context("g", "s", &[], &[]),
            vec![
                text(" "),
                v1::Episode {
                    producer_id: "p".repeat(600),
                    ..text("x")
                },
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(
        violated_fields(&err),
        ["episodes[0].content", "episodes[1].producer_id"]
    );
    let err = c
        .add(context("g", "s", &[], &[]), vec![])
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["episodes"]);
    let err = c.search("g", "s", "x", "m.topic = ").await.unwrap_err();
    assert_eq!(violated_fields(&err), ["filter"]);
    assert!(err.message().contains("position"), "{}", err.message());
    let err = c
        .memory
        .search_episodes(v1::SearchEpisodesRequest {
            context: Some(context("g", "s", &[], &[])),
            query: "x".into(),
            limit: Some(0),
            filter: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["limit"]);
    let err = c.delete("g", "s", &["nope"], false).await.unwrap_err();
    assert_eq!(violated_fields(&err), ["uuids[0]"]);
    let err = c.delete("g", "s", &[], false).await.unwrap_err();
    assert_eq!(violated_fields(&err), ["uuids"]);
    let err = c
        .sessions
        .list_sessions(v1::ListSessionsRequest {
            page_token: "garbage".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["page_token"]);
    // Reading a group that was never opened: NOT_FOUND, and it is not created.
    let err = c.list("never", "s").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(c.group("never").await.unwrap_err().code(), Code::NotFound);

    // Another group's episode uuid is NOT_FOUND here, and stays where it is.
    let theirs = c
        .add(context("theirs", "s", &[], &[]), vec![text("their secret")])
        .await
        .unwrap();
    c.open(context("ours", "s", &[], &[])).await.unwrap();
    for session in ["s", ""] {
        let err = c
            .delete("ours", session, &[&theirs[0]], false)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{err:?}");
    }
    assert!(c.search("ours", "", "secret", "").await.unwrap().is_empty());
    assert_eq!(c.list("theirs", "s").await.unwrap().len(), 1);
}

/// `memmachine keys create ...` against the server's store: the token it prints.
fn create_key(data_dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["keys", "create"])
        .args(args)
        .args(common::store_args(data_dir))
        .run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn with_auth_v1_reaches_only_keys_of_the_reserved_org() {
    let server = InProcess::start_with(|config| config.auth = true).await;
    let dir = server.data_dir.path().to_path_buf();
    let acme = create_key(&dir, &["--org", "acme"]);
    let legacy = create_key(&dir, &["--org", RESERVED_ORG]);
    let admin = create_key(&dir, &["--admin"]);
    let mut sessions = SessionServiceClient::new(server.channel().await);
    let open = |key: &str| {
        with_key(
            v1::OpenSessionRequest {
                context: Some(context("g", "s", &[], &["ann"])),
                configuration: None,
            },
            Some(key),
        )
    };
    let err = sessions.open_session(open(&acme)).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = sessions
        .list_sessions(with_key(v1::ListSessionsRequest::default(), Some(&acme)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    sessions.open_session(open(&legacy)).await.unwrap();
    sessions.open_session(open(&admin)).await.unwrap();
    let listed = sessions
        .list_sessions(with_key(v1::ListSessionsRequest::default(), Some(&legacy)))
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(listed.len(), 1);
    let err = sessions
        .list_sessions(v1::ListSessionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
}

/// `buf curl` (a client that knows the API only from reflection) at `url`.
fn buf_curl(url: &str, args: &[&str]) -> serde_json::Value {
    let buf = std::env::var_os("MEMMACHINE_TEST_BUF")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(".tools/npm/node_modules/.bin/buf")
        });
    assert!(
        buf.is_file(),
        "{} is missing: run `bash scripts/setup-test-tools.sh`",
        buf.display()
    );
    let out = Command::new(&buf)
        .args(["curl", "--protocol", "grpc", "--http2-prior-knowledge"])
        .args(args)
        .env(
            "BUF_CACHE_DIR",
            std::env::temp_dir().join("memmachine-buf-cache"),
        )
        .current_dir(std::env::temp_dir())
        .run();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "buf curl {args:?} {url}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if args.contains(&"--list-services") {
        return stdout.lines().map(serde_json::Value::from).collect();
    }
    serde_json::from_str(&stdout).expect("buf curl printed JSON")
}

#[tokio::test]
async fn reflection_serves_the_v1_services_to_buf_curl() {
    let server = InProcess::start().await;
    let url = server.url.clone();
    tokio::task::spawn_blocking(move || {
        let services = buf_curl(&url, &["--list-services", &url]);
        for service in [
            "memmachine.v1.MemoryService",
            "memmachine.v1.SessionService",
            "memmachine.v1.GroupService",
        ] {
            assert!(
                services.as_array().unwrap().iter().any(|s| s == service),
                "{service} not in {services}"
            );
        }
        // The example of the README's "Legacy v1 API" section.
        let body = serde_json::json!({
            "context": {"group_id": "support", "session_id": "ticket-42", "user_id": ["ann"]},
            "episode": {
                "content": "My printer jams on page two",
                "producer_id": "ann",
                "user_metadata": {"priority": "high", "device": {"model": "X200"}},
            },
        });
        let method = format!("{url}/memmachine.v1.MemoryService/AddEpisode");
        let added = buf_curl(&url, &["-d", &body.to_string(), &method]);
        assert!(added["uuid"].as_str().is_some(), "{added}");
        let body = serde_json::json!({
            "context": {"group_id": "support", "session_id": "ticket-42"},
            "query": "printer",
        });
        let method = format!("{url}/memmachine.v1.MemoryService/SearchEpisodes");
        let found = buf_curl(&url, &["-d", &body.to_string(), &method]);
        let episode = &found["episodes"][0]["episode"];
        assert_eq!(episode["uuid"], added["uuid"], "{found}");
        assert_eq!(episode["userMetadata"]["device"]["model"], "X200");
    })
    .await
    .unwrap();
}

/// A session narrows what its calls see as a value ANDed onto the caller's parsed
/// filter (issue 26, item 3): no filter text reaches another session's episodes, and a
/// malformed one is refused at its own position.
#[tokio::test]
async fn no_filter_reaches_outside_the_session() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.add(context("g", "s1", &[], &[]), vec![text("pizza in one")])
        .await
        .unwrap();
    c.add(context("g", "s2", &[], &[]), vec![text("pizza in two")])
        .await
        .unwrap();
    for filter in [
        "m.v1.session_id = 's2'",
        "m.v1.session_id = 's2' OR m.v1.session_id = 's1'",
        "NOT m.v1.session_id = 's1'",
        "m.v1.session_id IS NOT NULL",
        "producer_id = 'user' OR producer_id != 'user'",
    ] {
        let hits = c.search("g", "s1", "pizza", filter).await.unwrap();
        let listed = c
            .memory
            .list_episodes(v1::ListEpisodesRequest {
                context: Some(context("g", "s1", &[], &[])),
                filter: filter.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .episodes;
        let contents: Vec<&str> = hits
            .iter()
            .map(|h| h.episode.as_ref().unwrap().content.as_str())
            .chain(listed.iter().map(|e| e.content.as_str()))
            .collect();
        assert!(
            contents.iter().all(|c| *c == "pizza in one"),
            "{filter}: {contents:?}"
        );
    }
    let err = c
        .search(
            "g",
            "s1",
            "pizza",
            "m.v1.session_id = 's2') OR (m.v1.session_id = 's2'",
        )
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["filter"]);
    assert!(
        err.message().contains("at position 23:"),
        "{}",
        err.message()
    );
    // Deleting a session takes its episodes only.
    assert_eq!(c.delete("g", "s2", &[], true).await.unwrap(), 1);
    assert_eq!(c.list("g", "").await.unwrap().len(), 1);
}

/// v1 lets a client choose an episode's uuid. One that another org's project holds
/// must answer exactly as an unknown one does (stored, under that uuid, in the group),
/// or a caller could learn which ids exist elsewhere; the other org's episode is left
/// as it was.
#[tokio::test]
async fn a_uuid_taken_in_another_org_answers_as_an_unknown_one() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.v2_projects
        .create_project(pb::CreateProjectRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let theirs = c
        .v2_memory
        .add_memories(pb::AddMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            messages: vec![pb::MemoryMessage {
                content: "acme's secret plan".into(),
                producer: "ann".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .results
        .remove(0)
        .uid;
    let unknown = uuid::Uuid::new_v4().to_string();
    let ctx = context("g", "s", &[], &["bob"]);
    for uuid in [unknown, theirs.clone()] {
        let answer = c
            .memory
            .add_episode(v1::AddEpisodeRequest {
                context: Some(ctx.clone()),
                episode: Some(v1::Episode {
                    uuid: uuid.clone(),
                    content: format!("bob's note {uuid}"),
                    ..Default::default()
                }),
            })
            .await
            .map(|r| r.into_inner().uuid);
        match answer {
            Ok(stored) => assert_eq!(stored, uuid),
            Err(status) => panic!("{uuid}: {status:?}"),
        }
    }
    let listed = c.list("g", "s").await.unwrap();
    assert!(
        listed
            .iter()
            .any(|e| e.uuid == theirs && e.content.starts_with("bob's note")),
        "{listed:?}"
    );
    let acme = c.v2_list_in("acme", "notes").await;
    assert_eq!(acme.len(), 1);
    assert_eq!(acme[0].content, "acme's secret plan");
}
