//! `SearchMemories` with `rank_together` over the real gRPC API and the REST gateway
//! (SQLite): episodes and hand-made features ranked together; an episode a matching
//! feature cites is lifted into the answer though the episodic search missed it, but
//! never one of another project, one the filter excludes, or an expired one.

use std::time::{Duration, SystemTime};

use crate::common::InProcess;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use memmachine_proto::v2::ranked_memory::Item;
use memmachine_proto::v2::semantic_service_client::SemanticServiceClient;
use memmachine_proto::v2::{self as pb, RankedSource};
use tonic::Code;
use tonic::transport::Channel;

const ORG: &str = "acme";

struct Client {
    memory: MemoryServiceClient<Channel>,
    semantic: SemanticServiceClient<Channel>,
}

impl Client {
    async fn add(&mut self, project: &str, messages: Vec<pb::MemoryMessage>) -> Vec<String> {
        self.memory
            .add_memories(pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                types: vec![pb::MemoryType::Episodic as i32],
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

    /// A feature of the org's set (which every project of the org sees), filed from
    /// `project` and citing `citations` (episodes of that project).
    async fn feature(
        &mut self,
        project: &str,
        tag: &str,
        feature: &str,
        value: &str,
        citations: &[&String],
    ) -> String {
        let set_id = self
            .semantic
            .get_set_id(pb::GetSetIdRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                is_org_level: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .set_id;
        self.semantic
            .add_feature(pb::AddFeatureRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                set_id,
                category_name: "profile".into(),
                tag: tag.into(),
                feature: feature.into(),
                value: value.into(),
                citations: citations.iter().map(|c| c.to_string()).collect(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .feature_id
    }

    async fn search(
        &mut self,
        query: &str,
        filter: &str,
        together: bool,
    ) -> pb::SearchMemoriesResponse {
        self.memory
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: "a".into(),
                query: query.into(),
                filter: filter.into(),
                rank_together: together,
                semantic_weight: Some(1.0),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }
}

fn said(producer: &str, content: &str) -> pb::MemoryMessage {
    pb::MemoryMessage {
        content: content.into(),
        producer: producer.into(),
        role: "user".into(),
        ..Default::default()
    }
}

fn in_a_second(mut message: pb::MemoryMessage) -> pb::MemoryMessage {
    let at = SystemTime::now() + Duration::from_secs(1);
    message.expires_at = Some(at.into());
    message
}

/// The ranked episodes' uids, with their item.
fn ranked_episodes(answer: &pb::SearchMemoriesResponse) -> Vec<(String, &pb::RankedMemory)> {
    answer
        .ranked
        .iter()
        .filter_map(|r| match &r.item {
            Some(Item::Episode(hit)) => Some((hit.episode.as_ref()?.uid.clone(), r)),
            _ => None,
        })
        .collect()
}

fn long_term(answer: &pb::SearchMemoriesResponse) -> Vec<String> {
    let episodic = answer.episodic_memory.as_ref().unwrap();
    episodic
        .long_term_memory
        .iter()
        .map(|s| s.episode.as_ref().unwrap().uid.clone())
        .collect()
}

#[tokio::test]
async fn features_lift_the_episodes_they_cite_within_the_searchs_rules() {
    // Ranked by words alone, so that the episodic search misses what shares none.
    let server = InProcess::start_with(|config| {
        config.embedder.kind = Some(memmachine_domain::embed::EmbedderKind::None);
    })
    .await;
    let channel = server.channel().await;
    let mut projects = ProjectServiceClient::new(channel.clone());
    for project in ["a", "b"] {
        projects
            .create_project(pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let mut c = Client {
        memory: MemoryServiceClient::new(channel.clone()),
        semantic: SemanticServiceClient::new(channel),
    };
    // More episodes naming a city than top_k, so the ranking has no room for the rest.
    let mut messages: Vec<pb::MemoryMessage> = (0..12)
        .map(|i| said("alice", &format!("City walk number {i} downtown")))
        .collect();
    messages.extend([
        said("alice", "I moved to Oslo last spring"),
        said("bob", "I grew up in Paris"),
        in_a_second(said("alice", "For a while I stayed in Lisbon")),
    ]);
    let a = c.add("a", messages).await;
    let (moved, paris, lisbon) = (&a[12], &a[13], &a[14]);
    let b = c.add("b", vec![said("carol", "I settled in Bergen")]).await;
    let oslo = c.feature("a", "home", "city", "Oslo", &[moved]).await;
    let previous = c
        .feature("a", "home", "previous city", "Paris", &[paris])
        .await;
    c.feature("a", "home", "earlier city", "Lisbon", &[lisbon])
        .await;
    // Another project's episode, cited by a feature of the org's set project a sees.
    let bergen = c
        .feature("b", "home", "city of carol", "Bergen", &[&b[0]])
        .await;

    let query = "which city is home";
    let apart = c.search(query, "", false).await;
    assert!(apart.ranked.is_empty(), "asked for apart: {apart:?}");
    let missed = long_term(&apart);
    assert!(
        !missed.contains(moved),
        "the episodic search finds it: {missed:?}"
    );

    let together = c.search(query, "", true).await;
    // The separate lists are filled as without the option.
    assert_eq!(long_term(&together), missed);
    let features: Vec<&str> = together
        .semantic_memory
        .iter()
        .map(|f| f.id.as_str())
        .collect();
    assert!(
        features.contains(&oslo.as_str()) && features.contains(&bergen.as_str()),
        "{features:?}"
    );
    let episodes = ranked_episodes(&together);
    let uids: Vec<&String> = episodes.iter().map(|(uid, _)| uid).collect();
    // Both lists: top_k episodes, the best episodic hit first, and the episode the
    // Oslo feature cites, lifted.
    assert_eq!(uids.len(), 10, "{together:?}");
    assert_eq!(uids[0], &missed[0]);
    let (_, lifted) = episodes
        .iter()
        .find(|(uid, _)| uid == moved)
        .expect("lifted");
    assert_eq!(lifted.source, RankedSource::Semantic as i32);
    assert_eq!(lifted.episodic, 0.0);
    assert!(
        lifted.semantic > 0.0 && lifted.score == lifted.semantic,
        "{lifted:?}"
    );
    assert_eq!(lifted.citing_feature_ids, std::slice::from_ref(&oslo));
    // A specific feature is listed right after the episode it cites.
    let at = together
        .ranked
        .iter()
        .position(|r| std::ptr::eq(r, *lifted))
        .unwrap();
    match &together.ranked[at + 1].item {
        Some(Item::Feature(f)) => assert!(f.citations == [moved.clone()], "{f:?}"),
        other => panic!("not the feature after its episode: {other:?}"),
    }
    // An episodic hit carries its episodic part.
    let (_, hit) = episodes.iter().find(|(uid, _)| *uid == missed[0]).unwrap();
    assert!(hit.episodic > 0.0, "{hit:?}");
    // Not the other project's episode, though a feature project a sees cites it.
    assert!(
        !uids.contains(&&b[0]),
        "another project's episode: {together:?}"
    );
    // Bob's episode is lifted without a filter; with one on alice it is not.
    assert!(uids.contains(&paris), "{together:?}");
    let filtered = c.search(query, "producer_id = 'alice'", true).await;
    let filtered_uids: Vec<String> = ranked_episodes(&filtered)
        .into_iter()
        .map(|(u, _)| u)
        .collect();
    assert!(filtered_uids.contains(moved), "{filtered:?}");
    assert!(
        !filtered_uids.contains(paris),
        "the filter let bob's through: {filtered:?}"
    );
    assert!(
        filtered
            .ranked
            .iter()
            .all(|r| !matches!(&r.item, Some(Item::Feature(f)) if f.id == previous)),
        "a feature listed after an episode the filter excludes"
    );
    // Once expired, the Lisbon episode is never answered.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = c.search(query, "", true).await;
    let later_uids: Vec<String> = ranked_episodes(&later)
        .into_iter()
        .map(|(u, _)| u)
        .collect();
    assert!(later_uids.contains(moved), "{later:?}");
    assert!(
        !later_uids.contains(lisbon),
        "an expired episode: {later:?}"
    );

    let refused = c
        .memory
        .search_memories(pb::SearchMemoriesRequest {
            org_id: ORG.into(),
            project_id: "a".into(),
            query: query.into(),
            rank_together: true,
            semantic_weight: Some(11.0),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
}

/// The REST gateway's `rank_together` field and `ranked` answer.
#[test]
fn the_rest_gateway_ranks_together() {
    use reqwest::blocking::Client as Http;
    use serde_json::{Value, json};
    let data = tempfile::tempdir().unwrap();
    let server = crate::common::ServerProcess::start(
        data.path(),
        &["--rest-listen", "127.0.0.1:0", "--embedder", "none"],
    );
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
    let mut messages: Vec<Value> = (0..11)
        .map(|i| json!({"content": format!("City walk number {i} downtown"), "producer": "alice"}))
        .collect();
    messages.push(json!({"content": "I moved to Oslo last spring", "producer": "alice"}));
    let (status, added) = post("/memories", with(json!({ "messages": messages })));
    assert!(status < 300, "{added}");
    let moved = added["results"][11]["uid"].as_str().unwrap().to_string();
    let (_, set) = post("/memories/semantic/set_id/get", at.clone());
    let (status, feature) = post(
        "/memories/semantic/feature",
        with(
            json!({"set_id": set["set_id"], "category_name": "profile", "tag": "home",
                    "feature": "city", "value": "Oslo", "citations": [moved]}),
        ),
    );
    assert_eq!(status, 201, "{feature}");

    let (status, apart) = post(
        "/memories/search",
        with(json!({"query": "which city is home"})),
    );
    assert_eq!(status, 200, "{apart}");
    assert!(apart["content"].get("ranked").is_none(), "{apart}");
    let (status, found) = post(
        "/memories/search",
        with(json!({"query": "which city is home", "rank_together": true, "semantic_weight": 1.0})),
    );
    assert_eq!(status, 200, "{found}");
    let ranked = found["content"]["ranked"].as_array().expect("ranked");
    let lifted = ranked
        .iter()
        .find(|r| r["episode"]["uid"] == moved.as_str())
        .unwrap_or_else(|| panic!("not lifted: {found}"));
    assert_eq!(lifted["source"], "semantic");
    assert_eq!(lifted["citing_feature_ids"][0], feature["feature_id"]);
    assert!(ranked.iter().any(|r| r["source"] == "episodic"), "{found}");
    assert!(ranked.iter().any(|r| r.get("feature").is_some()), "{found}");
    assert!(found["content"]["episodic_memory"]["long_term_memory"]["episodes"].is_array());
    let (status, refused) = post(
        "/memories/search",
        with(json!({"query": "city", "rank_together": true, "semantic_weight": -1})),
    );
    assert_eq!(status, 422, "{refused}");
}
