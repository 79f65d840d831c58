//! Semantic memory end to end: a real server over TCP, distilling messages with a
//! scripted OpenAI-compatible chat server (real HTTP, the real request and response
//! format, answers derived from the prompt).

use std::time::Duration;

use crate::common;
use crate::common::InProcess;
use crate::common::chat::{ChatCall, ChatServer, ScriptedReply, favourite_commands, favourites};
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType};
use tonic::Code;
use tonic::transport::Channel;

struct Client {
    projects: ProjectServiceClient<Channel>,
    memory: MemoryServiceClient<Channel>,
    semantic: SemanticServiceClient<Channel>,
}

async fn client(server: &InProcess) -> Client {
    let channel = server.channel().await;
    Client {
        projects: ProjectServiceClient::new(channel.clone()),
        memory: MemoryServiceClient::new(channel.clone()),
        semantic: SemanticServiceClient::new(channel),
    }
}

async fn server_with(
    chat: &ChatServer,
    configure: impl FnOnce(&mut memmachine::config::ServeConfig),
) -> InProcess {
    let url = chat.url.clone();
    InProcess::start_with(move |config| {
        config.llm.base_url = Some(memmachine_core::urls::SecretUrl::new(url));
        config.llm.model = Some("scripted".into());
        config.llm.max_calls_per_minute = None;
        config.ingest.trigger_messages = 1;
        config.ingest.trigger_age = Duration::ZERO;
        configure(config);
    })
    .await
}

fn message(content: &str, producer: &str) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content: content.into(),
        producer: producer.into(),
        role: "user".into(),
        ..Default::default()
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

    async fn add(
        &mut self,
        org: &str,
        project: &str,
        messages: Vec<pb::MemoryMessage>,
    ) -> Vec<String> {
        self.memory
            .add_memories(pb::AddMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                types: vec![],
                messages,
            })
            .await
            .unwrap()
            .into_inner()
            .results
            .into_iter()
            .map(|r| r.uid)
            .collect()
    }

    async fn features(&mut self, org: &str, project: &str) -> Vec<pb::SemanticFeature> {
        self.memory
            .list_memories(pb::ListMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                r#type: MemoryType::Semantic as i32,
                page_size: Some(1000),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .features
    }

    /// Waits until the project's features satisfy `done`, and returns them.
    async fn wait_features(
        &mut self,
        org: &str,
        project: &str,
        done: impl Fn(&[pb::SemanticFeature]) -> bool,
    ) -> Vec<pb::SemanticFeature> {
        for _ in 0..200 {
            let features = self.features(org, project).await;
            if done(&features) {
                return features;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let features = self.features(org, project).await;
        panic!("features never reached the expected state: {features:#?}");
    }
}

fn values(features: &[pb::SemanticFeature]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = features
        .iter()
        .map(|f| (f.feature_name.clone(), f.value.clone()))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn messages_build_the_users_profile_with_citations() {
    let chat = ChatServer::start(favourites);
    let server = server_with(&chat, |_| {}).await;
    let mut c = client(&server).await;
    let uids = c
        .add(
            "",
            "",
            vec![
                message("My favourite food is pizza.", "alice"),
                message("Hello there", "alice"),
                pb::MemoryMessage {
                    role: "assistant".into(),
                    ..message("My favourite colour is green.", "bot")
                },
            ],
        )
        .await;
    let features = c.wait_features("", "", |f| !f.is_empty()).await;
    // The assistant's message is context, not the subject: no set of its own.
    assert_eq!(
        values(&features),
        [("favourite food".into(), "pizza".into())]
    );
    let food = &features[0];
    assert_eq!(food.citations, [uids[0].clone()]);
    assert_eq!(food.category, "profile");
    assert_eq!(food.tag, "preferences");
    assert!(food.set_id.starts_with("mem_user_set_"), "{}", food.set_id);
    // The model saw the category's prompt and tags, and the batch verbatim.
    let calls = chat.calls();
    let first = &calls[0];
    assert_eq!(first.model, "scripted");
    assert!(first.system.contains("preferences"));
    assert!(
        first.user.contains("\nMy favourite food is pizza.\n"),
        "{}",
        first.user
    );
    assert!(first.response_format.is_some());

    // Said again (differently cased): one feature, two citations.
    let again = c
        .add(
            "",
            "",
            vec![message("My favourite food is PIZZA.", "alice")],
        )
        .await;
    let features = c
        .wait_features("", "", |f| f.len() == 1 && f[0].citations.len() == 2)
        .await;
    assert_eq!(features[0].citations, [uids[0].clone(), again[0].clone()]);

    // Updated and deleted by the model.
    c.add(
        "",
        "",
        vec![message("Actually my favourite food is sushi.", "alice")],
    )
    .await;
    c.wait_features("", "", |f| {
        values(f) == [("favourite food".into(), "sushi".into())]
    })
    .await;
    c.add("", "", vec![message("My favourite city is Oslo.", "alice")])
        .await;
    c.add(
        "",
        "",
        vec![message("I no longer have a favourite food.", "alice")],
    )
    .await;
    c.wait_features("", "", |f| {
        values(f) == [("favourite city".into(), "Oslo".into())]
    })
    .await;

    // Found by search, ranked, with a score, through both search methods.
    let found = c
        .semantic
        .search_features(pb::SearchFeaturesRequest {
            query: "which city does alice like".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .features;
    assert_eq!(found.len(), 1);
    assert!(found[0].score > 0.0);
    let memories = c
        .memory
        .search_memories(pb::SearchMemoriesRequest {
            query: "favourite city".into(),
            set_metadata: [("producer_id".to_string(), "alice".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(memories.semantic_memory.len(), 1);
    assert_eq!(memories.semantic_memory[0].value, "Oslo");
    let bob = c
        .memory
        .search_memories(pb::SearchMemoriesRequest {
            query: "favourite city".into(),
            set_metadata: [("producer_id".to_string(), "bob".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(bob.semantic_memory.is_empty(), "bob's sets hold nothing");
}

#[tokio::test]
async fn one_call_per_category_per_batch() {
    let chat = ChatServer::start(favourites);
    let server = server_with(&chat, |config| {
        config.ingest.trigger_messages = 10;
        config.ingest.max_batch = 10;
        config.ingest.trigger_age = Duration::from_secs(3600);
    })
    .await;
    let mut c = client(&server).await;
    let messages: Vec<_> = (0..10)
        .map(|i| message(&format!("My favourite number{i} is {i}."), "alice"))
        .collect();
    c.add("", "", messages).await;
    let features = c.wait_features("", "", |f| f.len() == 10).await;
    assert_eq!(features.len(), 10);
    assert_eq!(chat.call_count(), 1, "ten messages, one category: one call");
}

#[tokio::test]
async fn deleting_the_only_source_of_a_fact_deletes_the_fact() {
    let chat = ChatServer::start(favourites);
    let server = server_with(&chat, |_| {}).await;
    let mut c = client(&server).await;
    let uids = c
        .add("", "", vec![message("My favourite tea is green.", "alice")])
        .await;
    c.wait_features("", "", |f| f.len() == 1).await;
    c.memory
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            episode_ids: uids,
            ..Default::default()
        })
        .await
        .unwrap();
    // Its only source is gone, so the fact derived from it goes too (issue 29).
    let features = c.features("", "").await;
    assert!(features.is_empty(), "{features:?}");
}

#[tokio::test]
async fn consolidation_merges_a_tag_and_keeps_every_citation() {
    let chat = ChatServer::start(favourites);
    let server = server_with(&chat, |config| config.ingest.consolidation_threshold = 3).await;
    let mut c = client(&server).await;
    let uids = c
        .add(
            "",
            "",
            vec![
                message("My favourite fruit is fig.", "alice"),
                message("My favourite drink is tea.", "alice"),
                message("My favourite book is Emma.", "alice"),
            ],
        )
        .await;
    let features = c
        .wait_features("", "", |f| {
            f.len() == 1 && f[0].feature_name == "favourites"
        })
        .await;
    let merged = &features[0];
    assert!(
        merged.value.contains("fig") && merged.value.contains("Emma"),
        "{}",
        merged.value
    );
    let mut cited = merged.citations.clone();
    cited.sort();
    let mut expected = uids.clone();
    expected.sort();
    assert_eq!(cited, expected);
}

#[tokio::test]
async fn invalid_answers_are_retried_a_bounded_number_of_times() {
    let chat = ChatServer::start(|_| ScriptedReply::Content("the user likes pizza".into()));
    let metrics = common::free_port();
    let server = server_with(&chat, |config| config.metrics_listen = Some(metrics)).await;
    let mut c = client(&server).await;
    c.add(
        "",
        "",
        vec![message("My favourite food is pizza.", "alice")],
    )
    .await;
    // The first answer and two corrections, then the batch is marked failed: no more
    // calls for a while after the third.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while chat.call_count() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} calls",
            chat.call_count()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(chat.call_count(), 3);
    let corrections = chat.calls();
    assert!(
        corrections[1]
            .messages
            .iter()
            .any(|(_, m)| m.contains("invalid"))
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        chat.call_count(),
        3,
        "the worker never loops on a failed batch"
    );
    // Counted, by purpose and outcome.
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "memmachine_llm_calls_total{purpose=\"extraction\",outcome=\"ok\"} 3",
        "memmachine_semantic_events_total{event=\"batch_failed\"} 1",
        "memmachine_semantic_events_total{event=\"invalid_answers\"} 3",
        "memmachine_semantic_queue_failed 1",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    // Manual features still work.
    assert!(c.features("", "").await.is_empty());
}

#[tokio::test]
async fn a_model_that_is_down_leaves_messages_queued_until_it_is_back() {
    let chat = ChatServer::start(|_| ScriptedReply::Status(503, None));
    let server = server_with(&chat, |config| config.llm.timeout = Duration::from_secs(2)).await;
    let mut c = client(&server).await;
    c.add(
        "",
        "",
        vec![message("My favourite food is pizza.", "alice")],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let calls_while_down = chat.call_count();
    assert!(calls_while_down >= 1);
    // Searches and listing keep working meanwhile.
    let search = c
        .memory
        .search_memories(pb::SearchMemoriesRequest {
            query: "pizza".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(search.episodic_memory.unwrap().long_term_memory.len(), 1);
    chat.set_answer(favourites);
    // Backed off (2 s, then longer), not hammered, and then ingested.
    let features = c.wait_features("", "", |f| f.len() == 1).await;
    assert_eq!(features[0].value, "pizza");
    assert!(
        chat.call_count() <= calls_while_down + 8,
        "{} calls",
        chat.call_count()
    );
}

#[tokio::test]
async fn deleting_a_project_keeps_the_org_sets_other_projects_share() {
    let chat = ChatServer::start(favourites);
    let server = server_with(&chat, |_| {}).await;
    let mut c = client(&server).await;
    c.create("acme", "one").await;
    c.create("acme", "two").await;
    let set_id = c
        .semantic
        .get_set_id(pb::GetSetIdRequest {
            org_id: "acme".into(),
            project_id: "one".into(),
            is_org_level: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .set_id;
    c.semantic
        .add_category(pb::AddCategoryRequest {
            org_id: "acme".into(),
            project_id: "one".into(),
            set_id: set_id.clone(),
            category_name: "facts".into(),
            prompt: "facts about the org".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let one = c
        .add(
            "acme",
            "one",
            vec![message("My favourite lunch is soup.", "alice")],
        )
        .await;
    let two = c
        .add(
            "acme",
            "two",
            vec![message("My favourite lunch is soup.", "bob")],
        )
        .await;
    // The org set is shared: one feature citing both projects' episodes.
    let org_feature = |f: &[pb::SemanticFeature]| {
        f.iter()
            .find(|f| f.set_id == set_id)
            .map(|f| f.citations.len())
            == Some(2)
    };
    c.wait_features("acme", "two", org_feature).await;
    c.wait_features("acme", "one", |f| f.iter().any(|f| f.set_id != set_id))
        .await;
    let shared_type = c
        .semantic
        .create_set_type(pb::CreateSetTypeRequest {
            org_id: "acme".into(),
            project_id: "one".into(),
            is_org_level: true,
            metadata_tags: vec!["region".into()],
            name: "regions".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .set_type_id;
    c.projects
        .delete_project(pb::DeleteProjectRequest {
            org_id: "acme".into(),
            project_id: "one".into(),
        })
        .await
        .unwrap();
    // The org-level set type it made is the org's: it stays.
    let types = c
        .semantic
        .list_set_types(pb::ListSetTypesRequest {
            org_id: "acme".into(),
            project_id: "two".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .set_types;
    assert_eq!(
        types.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        [shared_type]
    );
    let left = c.features("acme", "two").await;
    let shared = left
        .iter()
        .find(|f| f.set_id == set_id)
        .expect("the org feature stays");
    assert_eq!(
        shared.citations, two,
        "only the deleted project's citations went"
    );
    assert!(!shared.citations.contains(&one[0]));
    // Bob's user set stays; alice's (project one) went with it.
    assert!(left.iter().all(|f| f.set_id == set_id || f.value == "soup"));
    assert_eq!(left.len(), 2, "{left:#?}");
}

#[tokio::test]
async fn summaries_fold_what_leaves_the_window_and_go_with_deleted_episodes() {
    let chat = ChatServer::start(favourites);
    let server = server_with(&chat, |config| config.limits.short_term_window = 2).await;
    let mut c = client(&server).await;
    let uids = c
        .add(
            "",
            "",
            (0..5)
                .map(|i| message(&format!("message number {i}"), "alice"))
                .collect(),
        )
        .await;
    let summary = |c: &mut Client| {
        let mut memory = c.memory.clone();
        async move {
            memory
                .search_memories(pb::SearchMemoriesRequest {
                    query: "message".into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .episodic_memory
                .unwrap()
                .episode_summary
        }
    };
    let mut found = Vec::new();
    for _ in 0..100 {
        found = summary(&mut c).await;
        if found == ["summary of 3 messages"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(found, ["summary of 3 messages"]);
    // Deleting an episode it covers drops it; it is rebuilt from what remains.
    c.memory
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            episode_ids: vec![uids[0].clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    let right_after = summary(&mut c).await;
    assert!(
        right_after.is_empty() || right_after == ["summary of 2 messages"],
        "{right_after:?}"
    );
    for _ in 0..100 {
        found = summary(&mut c).await;
        if found == ["summary of 2 messages"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(found, ["summary of 2 messages"]);
}

#[tokio::test]
async fn features_are_managed_by_hand_without_a_model() {
    let server = InProcess::start().await;
    let mut c = client(&server).await;
    let set_id = c
        .semantic
        .get_set_id(pb::GetSetIdRequest::default())
        .await
        .unwrap()
        .into_inner()
        .set_id;
    // A feature needs a category of its set.
    let missing = c
        .semantic
        .add_feature(pb::AddFeatureRequest {
            set_id: set_id.clone(),
            category_name: "notes".into(),
            tag: "t".into(),
            feature: "f".into(),
            value: "v".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let category_id = c
        .semantic
        .add_category(pb::AddCategoryRequest {
            set_id: set_id.clone(),
            category_name: "notes".into(),
            prompt: "notes".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .category_id;
    let uid = c
        .add("", "", vec![message("We ship on Fridays.", "alice")])
        .await;
    let id = c
        .semantic
        .add_feature(pb::AddFeatureRequest {
            set_id: set_id.clone(),
            category_name: "notes".into(),
            tag: "process".into(),
            feature: "release day".into(),
            value: "Friday".into(),
            citations: uid.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .feature_id;
    c.semantic
        .update_feature(pb::UpdateFeatureRequest {
            feature_id: id.clone(),
            value: Some("Thursday".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let got = c
        .semantic
        .get_feature(pb::GetFeatureRequest {
            feature_id: id.clone(),
            load_citations: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .feature
        .unwrap();
    assert_eq!(got.value, "Thursday");
    assert_eq!(got.citations, uid);
    assert_eq!(got.category_id, category_id);
    let found = c
        .semantic
        .search_features(pb::SearchFeaturesRequest {
            query: "when is the release".into(),
            filter: "category = 'notes' AND tag = 'process'".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .features;
    assert_eq!(found.len(), 1);
    let bad_filter = c
        .semantic
        .search_features(pb::SearchFeaturesRequest {
            query: "x".into(),
            filter: "producer_id = 'x'".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_filter.code(), Code::InvalidArgument);
    let deleted = c
        .memory
        .delete_semantic_memories(pb::DeleteSemanticMemoriesRequest {
            feature_ids: vec![id.clone()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .deleted_count;
    assert_eq!(deleted, 1);
    let gone = c
        .semantic
        .get_feature(pb::GetFeatureRequest {
            feature_id: id,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
}

/// A string-valued `google.protobuf.Struct`.
fn strings(pairs: &[(&str, &str)]) -> prost_types::Struct {
    let value = |s: &str| prost_types::Value {
        kind: Some(prost_types::value::Kind::StringValue(s.into())),
    };
    prost_types::Struct {
        fields: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), value(v)))
            .collect(),
    }
}

/// MemMachine's client files features in set ids it names itself
/// (`mem_project_set_<project>`), under the built-in `profile` category, and then
/// updates every field of one at once; `get_feature` shows them all.
#[tokio::test]
async fn every_field_of_a_feature_in_a_client_named_set_is_updated_together() {
    let server = InProcess::start().await;
    let mut c = client(&server).await;
    c.create("acme", "crm").await;
    let id = c
        .semantic
        .add_feature(pb::AddFeatureRequest {
            org_id: "acme".into(),
            project_id: "crm".into(),
            set_id: "mem_project_set_crm".into(),
            category_name: "profile".into(),
            tag: "hobby".into(),
            feature: "favourite_sport".into(),
            value: "running".into(),
            feature_metadata: Some(strings(&[("source", "chat")])),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .feature_id;
    let update = |category: &str| pb::UpdateFeatureRequest {
        org_id: "acme".into(),
        project_id: "crm".into(),
        feature_id: id.clone(),
        category_name: Some(category.into()),
        tag: Some("leisure".into()),
        feature: Some("favorite_activity".into()),
        value: Some("painting".into()),
        metadata: Some(strings(&[("updated", "true")])),
    };
    c.semantic.update_feature(update("profile")).await.unwrap();
    let got = c
        .semantic
        .get_feature(pb::GetFeatureRequest {
            org_id: "acme".into(),
            project_id: "crm".into(),
            feature_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .feature
        .unwrap();
    assert_eq!(
        (
            got.category.as_str(),
            got.tag.as_str(),
            got.feature_name.as_str()
        ),
        ("profile", "leisure", "favorite_activity")
    );
    assert_eq!(got.value, "painting");
    assert_eq!(got.metadata, Some(strings(&[("updated", "true")])));
    // A category that is neither the set's nor built in is named in the refusal, and the
    // feature is left as it was.
    let refused = c
        .semantic
        .update_feature(update("no such category"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    assert!(
        refused.message().contains("no such category"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_project_configures_its_users_profiles_through_the_user_set_type() {
    let chat = ChatServer::start(favourites);
    let server = server_with(&chat, |_| {}).await;
    let mut c = client(&server).await;
    let set_type = c
        .semantic
        .create_set_type(pb::CreateSetTypeRequest {
            metadata_tags: vec!["producer_id".into()],
            name: "users".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .set_type_id;
    for (name, prompt) in [
        ("profile", "Only remember the user's food preferences."),
        ("travel", "Remember where the user travels."),
    ] {
        c.semantic
            .add_category_template(pb::AddCategoryTemplateRequest {
                set_type_id: set_type.clone(),
                category_name: name.into(),
                prompt: prompt.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    c.add("", "", vec![message("My favourite food is soup.", "alice")])
        .await;
    c.wait_features("", "", |f| f.len() == 2).await;
    let prompts: Vec<String> = chat
        .calls()
        .iter()
        .map(|call| call.system.clone())
        .collect();
    assert_eq!(prompts.len(), 2, "one call per category: {prompts:#?}");
    assert!(
        prompts
            .iter()
            .any(|p| p.contains("Only remember the user's food"))
    );
    assert!(prompts.iter().any(|p| p.contains("where the user travels")));
    assert!(
        !prompts
            .iter()
            .any(|p| p.contains("how they like to be spoken to")),
        "the template replaces the default profile prompt"
    );
    // The user's set is of that type: its templates are inherited, and disabling is per set.
    let user_set = c
        .semantic
        .get_set_id(pb::GetSetIdRequest {
            metadata_tags: vec!["producer_id".into()],
            set_metadata: [("producer_id".to_string(), "alice".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .set_id;
    let sets = c
        .semantic
        .list_set_ids(pb::ListSetIdsRequest {
            set_metadata: [("producer_id".to_string(), "alice".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .sets;
    let alice = sets
        .iter()
        .find(|s| s.id == user_set)
        .expect("alice's set is listed");
    assert_eq!(alice.name, "users");
    assert_eq!(alice.metadata["producer_id"], "alice");
}

#[tokio::test]
async fn features_are_embedded_in_the_background_and_ranked_with_their_vectors() {
    let metrics = common::free_port();
    let server = InProcess::start_with(|config| {
        config.embedder.kind = Some(memmachine::config::EmbedderKind::Hash);
        config.metrics_listen = Some(metrics);
    })
    .await;
    let mut c = client(&server).await;
    let set_id = c
        .semantic
        .get_set_id(pb::GetSetIdRequest::default())
        .await
        .unwrap()
        .into_inner()
        .set_id;
    c.semantic
        .add_category(pb::AddCategoryRequest {
            set_id: set_id.clone(),
            category_name: "notes".into(),
            prompt: "notes".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for (feature, value) in [("release day", "Friday"), ("office", "Oslo harbour")] {
        c.semantic
            .add_feature(pb::AddFeatureRequest {
                set_id: set_id.clone(),
                category_name: "notes".into(),
                tag: "process".into(),
                feature: feature.into(),
                value: value.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // Nothing else was embedded yet: the two texts are the features'.
    let embedded = "memmachine_embedded_texts_total{embedder=\"hash:256\"} 2";
    let mut text = String::new();
    for _ in 0..100 {
        text = reqwest::get(format!("http://{metrics}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains(embedded) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(text.contains(embedded), "{text}");
    // Hybrid ranking: the feature sharing the query's words first, both scored.
    let found = c
        .semantic
        .search_features(pb::SearchFeaturesRequest {
            query: "which day is the release".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .features;
    // The other one shares no word and no meaning with the query: not returned, whatever
    // its standardised score.
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].feature_name, "release day");
    assert!(found[0].score > 0.0);
    // A query unrelated to every feature finds none (each scored 0 or less by
    // comparison with the others), through both search methods.
    let unrelated = c
        .semantic
        .search_features(pb::SearchFeaturesRequest {
            query: "weather forecast tomorrow".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .features;
    assert!(unrelated.is_empty(), "{unrelated:?}");
    let searched = c
        .memory
        .search_memories(pb::SearchMemoriesRequest {
            query: "weather forecast tomorrow".into(),
            types: vec![pb::MemoryType::Semantic as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(searched.semantic_memory.is_empty(), "{searched:?}");
}

#[tokio::test]
async fn the_model_sees_what_a_message_answers_as_context() {
    let chat = ChatServer::start(favourites);
    let server = server_with(&chat, |_| {}).await;
    let mut c = client(&server).await;
    c.add(
        "",
        "",
        vec![
            pb::MemoryMessage {
                role: "assistant".into(),
                ..message("My favourite assistant is me. What is yours?", "bot")
            },
            message("My favourite assistant is Ada.", "alice"),
        ],
    )
    .await;
    let features = c.wait_features("", "", |f| !f.is_empty()).await;
    // Only alice's message is distilled; the assistant's question is context.
    assert_eq!(
        values(&features),
        [("favourite assistant".into(), "Ada".into())]
    );
    let user = &chat.calls()[0].user;
    let (earlier, new) = user.split_once("## New messages").unwrap();
    assert!(
        earlier.contains("## Earlier messages")
            && earlier.contains("- bot (assistant): My favourite assistant is me."),
        "{user}"
    );
    assert!(!new.contains("What is yours?"), "{user}");
}

/// Wraps the scripted extraction answer as real models do, a different way per call:
/// reasoning first, a code fence in prose, trailing commas, and cut off after its first
/// command (with a second one begun).
fn as_real_models_answer(call: &ChatCall, n: usize) -> ScriptedReply {
    let commands = favourite_commands(call);
    let wrapped = match n % 4 {
        0 => format!("<think>The user states a preference {{maybe}}.</think>\n{commands}"),
        1 => format!(
            "Sure! Here is the JSON you asked for:\n```json\n{commands}\n```\nLet me know {{if}} you need more."
        ),
        2 => commands.replace("}]}", "},],}"),
        _ => format!(
            "{},{{\"command\":\"add\",\"tag\":\"preferences\",\"feat",
            commands.trim_end_matches("]}")
        ),
    };
    ScriptedReply::Content(wrapped)
}

#[tokio::test]
async fn answers_wrapped_as_real_models_give_them_are_read() {
    let n = std::sync::atomic::AtomicUsize::new(0);
    let chat = ChatServer::start(move |call| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        as_real_models_answer(call, i)
    });
    let server = server_with(&chat, |_| {}).await;
    let mut c = client(&server).await;
    let mut expected = Vec::new();
    for (thing, value) in [
        ("food", "pizza"),
        ("colour", "green"),
        ("city", "Oslo"),
        ("sport", "chess"),
    ] {
        let uid = c
            .add(
                "",
                "",
                vec![message(
                    &format!("My favourite {thing} is {value}."),
                    "alice",
                )],
            )
            .await;
        expected.push((format!("favourite {thing}"), value.to_string()));
        let want = expected.len();
        let features = c.wait_features("", "", |f| f.len() == want).await;
        let feature = features
            .iter()
            .find(|f| f.feature_name == format!("favourite {thing}"))
            .unwrap();
        assert_eq!(feature.citations, uid, "cited");
    }
    let features = c.features("", "").await;
    expected.sort();
    assert_eq!(values(&features), expected);
    // Each answer was read as it came: no correction was asked for.
    let corrections = chat
        .calls()
        .iter()
        .filter(|call| call.messages.iter().any(|(_, m)| m.contains("invalid")))
        .count();
    assert_eq!(corrections, 0, "{:#?}", chat.calls());
}

#[tokio::test]
async fn an_endpoint_that_refuses_every_call_is_reported_once_and_only_probed() {
    let chat = ChatServer::start(|_| {
        ScriptedReply::StatusMessage(404, "The model `scripted` does not exist".into())
    });
    let metrics = common::free_port();
    let rest = common::free_port();
    let server = server_with(&chat, |config| {
        config.metrics_listen = Some(metrics);
        config.rest_listen = Some(rest);
    })
    .await;
    let mut c = client(&server).await;
    for thing in ["food", "colour", "city", "sport"] {
        c.add(
            "",
            "",
            vec![message(
                &format!("My favourite {thing} is x."),
                &format!("user-{thing}"),
            )],
        )
        .await;
    }
    // Three calls in a row fail the same way: reported, and then only probed (the first
    // probe is 30 s away), so the count stays put. Up to four workers may have called
    // at once before the third failure was in.
    for _ in 0..100 {
        if chat.call_count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = chat.call_count();
    assert!((3..=4).contains(&calls), "{calls} calls");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(chat.call_count(), calls, "not retried while failing");
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("memmachine_llm_endpoint_failing 1"), "{text}");
    // Nothing was given up on: the messages wait for the endpoint.
    assert!(
        text.contains("memmachine_semantic_queue_failed 0"),
        "{text}"
    );
    let resources: serde_json::Value =
        reqwest::get(format!("http://{rest}/api/v2/config/resources"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    let model = &resources["language_models"][0];
    assert_eq!(model["status"], "failed", "{model}");
    let error = model["error"].as_str().unwrap();
    assert!(error.contains("fails every call the same way"), "{error}");
    assert!(error.contains("does not exist"), "{error}");

    // Fixed, and a retry asked for: probed at once, and everything is ingested.
    chat.set_answer(favourites);
    let retried = reqwest::Client::new()
        .post(format!(
            "http://{rest}/api/v2/config/resources/language_models/scripted/retry"
        ))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(retried.status(), 200);
    c.wait_features("", "", |f| f.len() == 4).await;
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("memmachine_llm_endpoint_failing 0"), "{text}");
}

#[tokio::test]
async fn a_request_the_endpoint_refuses_among_successes_is_given_up_after_a_few_attempts() {
    // Only the message that makes the prompt too long is refused.
    let chat = ChatServer::start(|call| {
        if call.user.contains("endless") {
            ScriptedReply::StatusMessage(400, "maximum context length exceeded".into())
        } else {
            favourites(call)
        }
    });
    let metrics = common::free_port();
    let server = server_with(&chat, |config| config.metrics_listen = Some(metrics)).await;
    let mut c = client(&server).await;
    // Bob's last: said first, it would be the context of Alice's messages.
    for thing in ["food", "colour", "city"] {
        c.add(
            "",
            "",
            vec![message(&format!("My favourite {thing} is x."), "alice")],
        )
        .await;
    }
    c.add("", "", vec![message("an endless story", "bob")])
        .await;
    c.wait_features("", "", |f| f.len() == 3).await;
    // Attempts back off 2 s, then 4 s: the third is the last.
    let mut text = String::new();
    for _ in 0..200 {
        text = reqwest::get(format!("http://{metrics}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if text.contains("memmachine_semantic_queue_failed 1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        text.contains("memmachine_semantic_queue_failed 1"),
        "{text}"
    );
    assert!(text.contains("memmachine_llm_endpoint_failing 0"), "{text}");
    let refused = chat
        .calls()
        .iter()
        .filter(|call| call.user.contains("endless"))
        .count();
    // Three attempts, each through the four response formats.
    assert_eq!(refused, 12);
}
