//! The gRPC API end to end: a real server on a loopback port, the tonic client over TCP.

use crate::common::InProcess;
use crate::common::paging::collect_pages;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

struct Clients {
    projects: ProjectServiceClient<Channel>,
    memory: MemoryServiceClient<Channel>,
}

async fn clients(server: &InProcess) -> Clients {
    let channel = server.channel().await;
    Clients {
        projects: ProjectServiceClient::new(channel.clone()),
        memory: MemoryServiceClient::new(channel),
    }
}

fn message(content: &str, producer: &str, metadata: &[(&str, &str)]) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content: content.into(),
        producer: producer.into(),
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

impl Clients {
    async fn create(&mut self, org: &str, project: &str) -> pb::Project {
        self.projects
            .create_project(pb::CreateProjectRequest {
                org_id: org.into(),
                project_id: project.into(),
                description: format!("{org}/{project}"),
                config: None,
            })
            .await
            .expect("create project")
            .into_inner()
            .project
            .unwrap()
    }

    async fn add(
        &mut self,
        org: &str,
        project: &str,
        messages: Vec<pb::MemoryMessage>,
    ) -> Result<Vec<String>, Status> {
        Ok(self
            .memory
            .add_memories(pb::AddMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                types: vec![],
                messages,
            })
            .await?
            .into_inner()
            .results
            .into_iter()
            .map(|r| r.uid)
            .collect())
    }

    async fn search(
        &mut self,
        org: &str,
        project: &str,
        query: &str,
        filter: &str,
    ) -> Result<pb::EpisodicSearchResult, Status> {
        Ok(self
            .memory
            .search_memories(pb::SearchMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                query: query.into(),
                filter: filter.into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .episodic_memory
            .unwrap())
    }

    async fn list(
        &mut self,
        org: &str,
        project: &str,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListMemoriesResponse, Status> {
        Ok(self
            .memory
            .list_memories(pb::ListMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                page_size: Some(page_size),
                page_token: page_token.into(),
                ..Default::default()
            })
            .await?
            .into_inner())
    }

    async fn count(&mut self, org: &str, project: &str) -> Result<i64, Status> {
        Ok(self
            .projects
            .get_episode_count(pb::GetEpisodeCountRequest {
                org_id: org.into(),
                project_id: project.into(),
            })
            .await?
            .into_inner()
            .count)
    }
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

#[tokio::test]
async fn project_lifecycle() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    let created = c.create("acme", "support").await;
    assert_eq!(created.description, "acme/support");
    assert!(created.created_at.is_some());

    let dup = c
        .projects
        .create_project(pb::CreateProjectRequest {
            org_id: "acme".into(),
            project_id: "support".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists);

    let got = c
        .projects
        .get_project(pb::GetProjectRequest {
            org_id: "acme".into(),
            project_id: "support".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.project.unwrap(), created);

    let universal = c
        .projects
        .get_project(pb::GetProjectRequest::default())
        .await
        .unwrap()
        .into_inner()
        .project
        .unwrap();
    assert_eq!(
        (universal.org_id.as_str(), universal.project_id.as_str()),
        ("universal", "universal")
    );

    for name in ["a", "b", "c"] {
        c.create("paged", name).await;
    }
    let seen = collect_pages(async |token| {
        let page = c
            .projects
            .list_projects(pb::ListProjectsRequest {
                org_id: Some("paged".into()),
                page_size: Some(2),
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        let names = page.projects.into_iter().map(|p| p.project_id);
        (names, page.next_page_token)
    })
    .await;
    assert_eq!(seen, ["a", "b", "c"]);
    let all = c
        .projects
        .list_projects(pb::ListProjectsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.projects.len(), 5);

    let missing = c
        .projects
        .get_project(pb::GetProjectRequest {
            org_id: "acme".into(),
            project_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    let undeletable = c
        .projects
        .delete_project(pb::DeleteProjectRequest::default())
        .await
        .unwrap_err();
    assert_eq!(undeletable.code(), Code::FailedPrecondition);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn deleting_a_project_removes_its_memories_before_answering() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.create("o", "p").await;
    c.add("o", "p", vec![message("remember the blue door", "u", &[])])
        .await
        .unwrap();
    c.projects
        .delete_project(pb::DeleteProjectRequest {
            org_id: "o".into(),
            project_id: "p".into(),
        })
        .await
        .unwrap();
    for status in [
        c.search("o", "p", "blue door", "").await.unwrap_err(),
        c.add("o", "p", vec![message("x", "u", &[])])
            .await
            .unwrap_err(),
        c.list("o", "p", 10, "").await.unwrap_err(),
        c.count("o", "p").await.unwrap_err(),
    ] {
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
    }
    c.create("o", "p").await;
    assert_eq!(c.count("o", "p").await.unwrap(), 0);
    assert!(
        c.search("o", "p", "blue door", "")
            .await
            .unwrap()
            .long_term_memory
            .is_empty()
    );
}

#[tokio::test]
async fn add_list_search_and_delete_episodes() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.create("o", "p").await;
    let mut first = message(
        "I adopted a golden retriever named Max last week.",
        "Caroline",
        &[("dia_id", "D1:1")],
    );
    first.produced_for = "Melanie".into();
    first.role = "user".into();
    first.timestamp = Some(prost_types::Timestamp {
        seconds: 1_683_554_160,
        nanos: 0,
    });
    let uids = c
        .add(
            "o",
            "p",
            vec![
                first,
                message(
                    "Max loves playing fetch at the beach.",
                    "Caroline",
                    &[("dia_id", "D1:2")],
                ),
                message(
                    "That's lovely! I went hiking in Yosemite with my kids.",
                    "Melanie",
                    &[("dia_id", "D1:3")],
                ),
            ],
        )
        .await
        .unwrap();
    assert_eq!(uids.len(), 3);
    assert!(uids.iter().all(|u| uuid::Uuid::parse_str(u).is_ok()));

    let listed = c.list("o", "p", 100, "").await.unwrap();
    let listed_uids: Vec<_> = listed.episodes.iter().map(|e| e.uid.clone()).collect();
    assert_eq!(
        listed_uids, uids,
        "uids come back in input order and list in sequence order"
    );
    assert!(listed.next_page_token.is_empty());
    let e = &listed.episodes[0];
    assert_eq!(e.session_key, "o/p");
    assert_eq!(e.producer_id, "Caroline");
    assert_eq!(e.producer_role, "user");
    assert_eq!(e.produced_for_id, "Melanie");
    assert_eq!(e.created_at.unwrap().seconds, 1_683_554_160);
    assert_eq!(e.episode_type, pb::EpisodeType::Message as i32);
    assert_eq!(e.content_type, pb::ContentType::String as i32);
    assert_eq!(e.metadata["dia_id"], "D1:1");
    assert_eq!(listed.episodes[1].producer_role, "");
    let seqs: Vec<_> = listed.episodes.iter().map(|e| e.sequence_num).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));

    let found = c
        .search(
            "o",
            "p",
            "What is the name of Caroline's dog retriever?",
            "",
        )
        .await
        .unwrap();
    assert_eq!(
        found.long_term_memory[0].episode.as_ref().unwrap().uid,
        uids[0]
    );
    assert_eq!(
        found.short_term_memory.len(),
        3,
        "short-term memory holds the recent episodes"
    );
    assert_eq!(found.short_term_memory[2].uid, uids[2], "oldest first");

    let filtered = c
        .search("o", "p", "Max hiking beach", "producer_id = 'Melanie'")
        .await
        .unwrap();
    assert_eq!(filtered.long_term_memory.len(), 1);
    assert_eq!(
        filtered.long_term_memory[0].episode.as_ref().unwrap().uid,
        uids[2]
    );
    let by_meta = c
        .search("o", "p", "Max", "m.dia_id IN ('D1:2', 'D1:9')")
        .await
        .unwrap();
    assert_eq!(by_meta.long_term_memory.len(), 1);

    let deleted = c
        .memory
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            episode_ids: vec![uids[0].clone()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(deleted.deleted_count, 1);
    assert_eq!(c.count("o", "p").await.unwrap(), 2);
    let after = c
        .search("o", "p", "golden retriever adopted", "")
        .await
        .unwrap();
    assert!(
        after
            .long_term_memory
            .iter()
            .all(|h| h.episode.as_ref().unwrap().uid != uids[0])
    );
}

#[tokio::test]
async fn search_honours_top_k_threshold_and_episodic_config() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.create("o", "p").await;
    let messages = (0..30)
        .map(|i| {
            message(
                &format!("note {i} about the garden{}", " garden".repeat(i % 5)),
                "u",
                &[],
            )
        })
        .collect();
    c.add("o", "p", messages).await.unwrap();
    let top3 = c
        .memory
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            query: "garden".into(),
            top_k: Some(3),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodic_memory
        .unwrap();
    assert_eq!(top3.long_term_memory.len(), 3);
    assert_eq!(
        top3.short_term_memory.len(),
        20,
        "the default short-term window"
    );
    let default_k = c.search("o", "p", "garden", "").await.unwrap();
    assert_eq!(default_k.long_term_memory.len(), 10, "top_k defaults to 10");

    let cut = top3.long_term_memory[1].score;
    let above = c
        .memory
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            query: "garden".into(),
            top_k: Some(30),
            score_threshold: Some(cut),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .episodic_memory
        .unwrap();
    assert!(!above.long_term_memory.is_empty());
    assert!(above.long_term_memory.iter().all(|h| h.score >= cut));
    assert!(above.long_term_memory.len() < 30);

    let config = c
        .projects
        .update_episodic_memory_config(pb::UpdateEpisodicMemoryConfigRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            long_term_memory_enabled: Some(false),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert!(config.enabled && !config.long_term_memory_enabled && config.short_term_memory_enabled);
    let short_only = c.search("o", "p", "garden", "").await.unwrap();
    assert!(short_only.long_term_memory.is_empty());
    assert!(!short_only.short_term_memory.is_empty());

    c.projects
        .update_episodic_memory_config(pb::UpdateEpisodicMemoryConfigRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            enabled: Some(false),
            ..Default::default()
        })
        .await
        .unwrap();
    let got = c
        .projects
        .get_episodic_memory_config(pb::GetEpisodicMemoryConfigRequest {
            org_id: "o".into(),
            project_id: "p".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert!(!got.enabled && !got.long_term_memory_enabled);
    let refused = c
        .add("o", "p", vec![message("x", "u", &[])])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    let nothing = c.search("o", "p", "garden", "").await.unwrap();
    assert!(nothing.long_term_memory.is_empty() && nothing.short_term_memory.is_empty());
}

#[tokio::test]
async fn list_pages_through_every_episode_once() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.create("o", "p").await;
    let messages: Vec<_> = (0..25)
        .map(|i| {
            message(
                &format!("m{i}"),
                if i % 2 == 0 { "even" } else { "odd" },
                &[],
            )
        })
        .collect();
    let uids = c.add("o", "p", messages).await.unwrap();
    let mut pages = 0;
    let seen = collect_pages(async |token| {
        let page = c.list("o", "p", 10, &token).await.unwrap();
        pages += 1;
        (
            page.episodes.into_iter().map(|e| e.uid),
            page.next_page_token,
        )
    })
    .await;
    assert_eq!(pages, 3);
    assert_eq!(seen, uids);
    let odd = c
        .memory
        .list_memories(pb::ListMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            filter: "producer_id = 'odd'".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(odd.episodes.len(), 12);
}

#[tokio::test]
async fn nothing_crosses_a_project_boundary() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.create("org1", "p").await;
    c.create("org2", "p").await;
    let one = c
        .add(
            "org1",
            "p",
            vec![message("the vault code is 1234", "u", &[])],
        )
        .await
        .unwrap();
    c.add("org2", "p", vec![message("unrelated chatter", "u", &[])])
        .await
        .unwrap();
    let seen = c.search("org2", "p", "vault code", "").await.unwrap();
    assert!(seen.long_term_memory.is_empty());
    assert!(
        seen.short_term_memory
            .iter()
            .all(|e| !e.content.contains("vault"))
    );
    let listed = c.list("org2", "p", 100, "").await.unwrap();
    assert_eq!(listed.episodes.len(), 1);
    let cross = c
        .memory
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: "org2".into(),
            project_id: "p".into(),
            episode_ids: one.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(cross.code(), Code::NotFound);
    assert_eq!(
        c.count("org1", "p").await.unwrap(),
        1,
        "the other org's episode survives"
    );
}

#[tokio::test]
async fn bad_input_is_invalid_argument_naming_each_field() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.create("o", "p").await;

    let bad_ids = c
        .projects
        .create_project(pb::CreateProjectRequest {
            org_id: "bad org".into(),
            project_id: "x".repeat(129),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&bad_ids), ["org_id", "project_id"]);

    let empty = c.add("o", "p", vec![]).await.unwrap_err();
    assert_eq!(violated_fields(&empty), ["messages"]);
    let mut bad_time = message("ok", "u", &[]);
    bad_time.timestamp = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: -1,
    });
    let mixed = c
        .add(
            "o",
            "p",
            vec![message("fine", "u", &[]), message("", "u", &[]), bad_time],
        )
        .await
        .unwrap_err();
    assert_eq!(
        violated_fields(&mixed),
        ["messages[1].content", "messages[2].timestamp"]
    );
    assert_eq!(
        c.count("o", "p").await.unwrap(),
        0,
        "a rejected batch stores nothing"
    );

    let too_many = c
        .add(
            "o",
            "p",
            (0..1001)
                .map(|i| message(&i.to_string(), "u", &[]))
                .collect(),
        )
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&too_many), ["messages"]);
    let too_big = c
        .add(
            "o",
            "p",
            vec![message(&"x".repeat(256 * 1024 + 1), "u", &[])],
        )
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&too_big), ["messages[0].content"]);
    let max_ok = c
        .add("o", "p", vec![message(&"x".repeat(256 * 1024), "u", &[])])
        .await;
    assert!(max_ok.is_ok());

    let malformed = c.search("o", "p", "x", "producer_id = ").await.unwrap_err();
    assert_eq!(violated_fields(&malformed), ["filter"]);
    assert!(
        malformed.message().contains("position 15"),
        "{}",
        malformed.message()
    );
    let unknown_field = c
        .list_with_filter("o", "p", "colour = 'red'")
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&unknown_field), ["filter"]);

    for top_k in [0, -1, 1001] {
        let status = c
            .memory
            .search_memories(pb::SearchMemoriesRequest {
                org_id: "o".into(),
                project_id: "p".into(),
                query: "x".into(),
                top_k: Some(top_k),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(violated_fields(&status), ["top_k"]);
    }
    let page = c.list("o", "p", 0, "").await.unwrap_err();
    assert_eq!(violated_fields(&page), ["page_size"]);
    let token = c.list("o", "p", 10, "garbage").await.unwrap_err();
    assert_eq!(violated_fields(&token), ["page_token"]);
    let query = c.search("o", "p", "  ", "").await.unwrap_err();
    assert_eq!(violated_fields(&query), ["query"]);
    let bad_uuid = c
        .memory
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            episode_ids: vec!["not-a-uuid".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&bad_uuid), ["episode_ids[0]"]);
    let bad_type = c
        .memory
        .add_memories(pb::AddMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            types: vec![7],
            messages: vec![message("x", "u", &[])],
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&bad_type), ["types[0]"]);
}

impl Clients {
    async fn list_with_filter(
        &mut self,
        org: &str,
        project: &str,
        filter: &str,
    ) -> Result<pb::ListMemoriesResponse, Status> {
        Ok(self
            .memory
            .list_memories(pb::ListMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                filter: filter.into(),
                ..Default::default()
            })
            .await?
            .into_inner())
    }
}

#[tokio::test]
async fn unknown_projects_are_not_found_and_never_created() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    assert_eq!(
        c.add("o", "ghost", vec![message("x", "u", &[])])
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        c.search("o", "ghost", "x", "").await.unwrap_err().code(),
        Code::NotFound
    );
    let get = c
        .projects
        .get_project(pb::GetProjectRequest {
            org_id: "o".into(),
            project_id: "ghost".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(get.code(), Code::NotFound);
}

#[tokio::test]
async fn without_a_model_semantic_ingestion_is_a_failed_precondition() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    let add = c
        .memory
        .add_memories(pb::AddMemoriesRequest {
            types: vec![MemoryType::Semantic as i32],
            messages: vec![message("x", "u", &[])],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(add.code(), Code::FailedPrecondition);
    assert!(
        add.message().contains("--llm-base-url"),
        "{}",
        add.message()
    );
    // Nothing was stored.
    let count = c
        .projects
        .get_episode_count(pb::GetEpisodeCountRequest::default())
        .await
        .unwrap()
        .into_inner()
        .count;
    assert_eq!(count, 0);
    // Empty types: episodic memory only.
    c.add("", "", vec![message("x", "u", &[])]).await.unwrap();
    let list = c
        .memory
        .list_memories(pb::ListMemoriesRequest {
            r#type: MemoryType::Semantic as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(list.features.is_empty() && list.episodes.is_empty());
    // Both types: searching needs no model.
    let both = c
        .memory
        .search_memories(pb::SearchMemoriesRequest {
            query: "x".into(),
            types: vec![MemoryType::Episodic as i32, MemoryType::Semantic as i32],
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(both.into_inner().semantic_memory.is_empty());
    // Semantic alone: validated as a feature search.
    for (request, field) in [
        (
            pb::SearchMemoriesRequest {
                query: " ".into(),
                types: vec![MemoryType::Semantic as i32],
                ..Default::default()
            },
            "query",
        ),
        (
            pb::SearchMemoriesRequest {
                query: "x".into(),
                top_k: Some(5000),
                types: vec![MemoryType::Semantic as i32],
                ..Default::default()
            },
            "top_k",
        ),
        (
            pb::SearchMemoriesRequest {
                query: "x".into(),
                filter: "producer_id = 'a'".into(),
                types: vec![MemoryType::Semantic as i32],
                ..Default::default()
            },
            "filter",
        ),
    ] {
        let err = c.memory.search_memories(request).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        let fields: Vec<String> = err
            .get_details_bad_request()
            .unwrap()
            .field_violations
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert_eq!(fields, [field]);
    }
}

#[tokio::test]
async fn health_and_reflection_are_served() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

    let server = InProcess::start().await;
    let channel = server.channel().await;
    let mut health = HealthClient::new(channel.clone());
    for service in [
        "",
        "memmachine.v2.ProjectService",
        "memmachine.v2.MemoryService",
    ] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }

    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut reflection = ServerReflectionClient::new(channel.clone());
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("expected a service list");
    };
    let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "memmachine.v2.ProjectService",
        "memmachine.v2.MemoryService",
        "grpc.health.v1.Health",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }

    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient as AlphaClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest as AlphaRequest;
    let mut alpha = AlphaClient::new(channel);
    let request = tonic_reflection::pb::v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(AlphaRequest::FileContainingSymbol(
            "memmachine.v2.MemoryService".into(),
        )),
    };
    let mut responses = alpha
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    assert!(response.message_response.is_some());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn shutdown_closes_calls_still_open_after_the_grace_period() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let server = InProcess::start_with(|config| {
        config.shutdown_grace = std::time::Duration::from_millis(200);
    })
    .await;
    let mut health = HealthClient::new(server.channel().await);
    // A Watch stream never ends by itself; shutdown must not wait for it forever.
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    watch.message().await.unwrap();
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), server.stop()).await;
    assert!(matches!(stopped, Ok(Ok(()))), "{stopped:?}");
}

#[tokio::test]
async fn shutdown_reports_not_serving_and_finishes() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

    let server = InProcess::start().await;
    let mut health = HealthClient::new(server.channel().await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    let mut c = clients(&server).await;
    let stopping = tokio::spawn(server.stop());
    let next = watch.message().await.unwrap().unwrap();
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    drop(watch);
    stopping.await.unwrap().unwrap();
    assert!(
        c.count("", "").await.is_err(),
        "no calls are served after shutdown"
    );
}

async fn create_ranked(c: &mut Clients, project: &str, reranker: &str) -> Result<(), Status> {
    create_configured(c, project, "", reranker).await
}

async fn create_configured(
    c: &mut Clients,
    project: &str,
    embedder: &str,
    reranker: &str,
) -> Result<(), Status> {
    c.projects
        .create_project(pb::CreateProjectRequest {
            org_id: "o".into(),
            project_id: project.into(),
            description: String::new(),
            config: Some(pb::ProjectConfig {
                embedder: embedder.into(),
                reranker: reranker.into(),
            }),
        })
        .await
        .map(|_| ())
}

#[tokio::test]
async fn a_project_can_name_its_embedder() {
    // No default embedder: projects are lexical unless they name one.
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    let bad = create_configured(&mut c, "bad", "openai", "")
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&bad), ["config.embedder"]);
    assert!(bad.message().contains("hash, none"), "{}", bad.message());
    create_configured(&mut c, "hashed", "hash", "dense")
        .await
        .unwrap();
    let turns = vec![
        message("my golden retriever loves the beach", "u", &[]),
        message("quarterly revenue grew strongly", "u", &[]),
    ];
    c.add("o", "hashed", turns).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let found = loop {
        let found = c
            .search("o", "hashed", "golden retriever", "")
            .await
            .unwrap();
        if found.long_term_memory.len() == 2 || std::time::Instant::now() > deadline {
            break found.long_term_memory;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        found.len(),
        2,
        "both embedded by the project's own embedder"
    );
    let top = &found[0].episode.as_ref().unwrap().content;
    assert_eq!(top, "my golden retriever loves the beach");
    let project = c
        .projects
        .get_project(pb::GetProjectRequest {
            org_id: "o".into(),
            project_id: "hashed".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .project
        .unwrap();
    assert_eq!(project.config.unwrap().embedder, "hash");
}

#[tokio::test]
async fn dense_and_hybrid_ranking_with_an_embedder() {
    let server = InProcess::start_with(|config| {
        config.embedder.kind = Some(memmachine::config::EmbedderKind::Hash);
    })
    .await;
    let mut c = clients(&server).await;
    let bad = create_ranked(&mut c, "bad", "bogus").await.unwrap_err();
    assert_eq!(violated_fields(&bad), ["config.reranker"]);
    let messages = || {
        vec![
            message("my golden retriever loves the beach", "u", &[]),
            message("quarterly revenue grew strongly", "u", &[]),
            message("we adopted a retriever puppy", "u", &[]),
        ]
    };
    for (project, mode) in [("dense", "dense"), ("hybrid", "hybrid"), ("default", "")] {
        create_ranked(&mut c, project, mode).await.unwrap();
        c.add("o", project, messages()).await.unwrap();
    }
    // Vectors arrive shortly after the add is acknowledged.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let dense = loop {
        let found = c
            .search("o", "dense", "golden retriever", "")
            .await
            .unwrap();
        if found.long_term_memory.len() == 3 || std::time::Instant::now() > deadline {
            break found.long_term_memory;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        dense.len(),
        3,
        "every episode is embedded and ranked by similarity"
    );
    let top = &dense[0].episode.as_ref().unwrap().content;
    assert_eq!(top, "my golden retriever loves the beach");
    for project in ["hybrid", "default"] {
        let found = c
            .search("o", project, "golden retriever", "")
            .await
            .unwrap();
        let hits = found.long_term_memory;
        assert_eq!(
            hits[0].episode.as_ref().unwrap().content,
            "my golden retriever loves the beach"
        );
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
        // Fused scores are sums of z-scores: the best is above the average (0), and
        // an episode sharing no word with the query is still a candidate.
        assert!(hits[0].score > 0.0, "{}", hits[0].score);
        assert_eq!(hits.len(), 3);
    }
    let filtered = c
        .search("o", "dense", "golden retriever", "producer_id = 'nobody'")
        .await
        .unwrap();
    assert!(filtered.long_term_memory.is_empty());
}

#[tokio::test]
async fn expand_context_adds_neighbours_within_top_k() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    c.create("o", "p").await;
    let turns = [
        "we should plan the weekend",
        "I adopted a golden retriever named Max last week.",
        "Max loves playing fetch at the beach.",
        "That's lovely! I went hiking in Yosemite with my kids.",
        "the weather was fine",
        "tell me about the quarterly report",
        "it grew strongly this year",
    ];
    let messages = turns.iter().map(|t| message(t, "u", &[])).collect();
    c.add("o", "p", messages).await.unwrap();
    let search = |expand_context: i32, top_k: i32| pb::SearchMemoriesRequest {
        org_id: "o".into(),
        project_id: "p".into(),
        query: "retriever".into(),
        top_k: Some(top_k),
        expand_context,
        ..Default::default()
    };
    let contents = |result: pb::EpisodicSearchResult| -> Vec<String> {
        result
            .long_term_memory
            .iter()
            .map(|h| h.episode.as_ref().unwrap().content.clone())
            .collect()
    };
    let mut run = async |expand_context, top_k| {
        let found = c
            .memory
            .search_memories(search(expand_context, top_k))
            .await
            .unwrap()
            .into_inner()
            .episodic_memory
            .unwrap();
        let scores: Vec<f64> = found.long_term_memory.iter().map(|h| h.score).collect();
        (contents(found), scores)
    };
    // As MemMachine's reference exchange: top_k 3, expand_context 2 gives the hit and
    // the two turns after it (a third before: none), in order, all with the hit's score.
    let (found, scores) = run(2, 3).await;
    assert_eq!(found, turns[1..4]);
    assert!(scores.iter().all(|s| *s == scores[0]), "{scores:?}");
    // expand_context 3: one before, two after.
    let (found, _) = run(3, 10).await;
    assert_eq!(found[..4], turns[0..4]);
    // top_k still bounds the answer.
    let (found, _) = run(6, 2).await;
    assert_eq!(found.len(), 2);
    assert!(found.contains(&turns[1].to_string()));
    let (plain, _) = run(0, 10).await;
    assert_eq!(plain[0], turns[1]);
}

#[tokio::test]
async fn dense_ranking_without_an_embedder_is_a_failed_precondition() {
    let server = InProcess::start().await;
    let mut c = clients(&server).await;
    create_ranked(&mut c, "dense", "dense").await.unwrap();
    c.add("o", "dense", vec![message("hello", "u", &[])])
        .await
        .unwrap();
    let err = c.search("o", "dense", "hello", "").await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("embedder"), "{}", err.message());
    create_ranked(&mut c, "lexical", "lexical").await.unwrap();
    c.add("o", "lexical", vec![message("hello", "u", &[])])
        .await
        .unwrap();
    assert_eq!(
        c.search("o", "lexical", "hello", "")
            .await
            .unwrap()
            .long_term_memory
            .len(),
        1
    );
}
