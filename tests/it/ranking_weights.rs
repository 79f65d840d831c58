//! Per-project ranking weights (set and read through gRPC and REST, checked, kept within
//! the org) and the parts of each episode's score a search explains on request.

use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::{Value, json};
use tonic::Code;

use crate::common::calls::with_key;
use crate::common::keys::create_key;
use crate::common::{InProcess, ServerProcess};

fn weights(dense: Option<f32>, participant: Option<f32>, time: Option<f32>) -> pb::RankingWeights {
    pb::RankingWeights {
        dense,
        participant,
        time,
        ..Default::default()
    }
}

fn all(dense: f32, own: f32, participant: f32, time: f32) -> pb::RankingWeights {
    pb::RankingWeights {
        dense: Some(dense),
        own_similarity: Some(own),
        participant: Some(participant),
        context: Some(1.0),
        session: Some(0.0),
        time: Some(time),
        when: Some(1.0),
    }
}

#[tokio::test]
async fn grpc_ranking_weights_are_set_partially_checked_and_kept_within_the_org() {
    let server = InProcess::start_with(|config| config.auth = true).await;
    let dir = server.data_dir.path().to_path_buf();
    let acme = create_key(&dir, &["--org", "acme"]);
    let globex = create_key(&dir, &["--org", "globex"]);
    let channel = server.channel().await;
    let mut projects = ProjectServiceClient::new(channel.clone());
    let key = Some(acme.as_str());
    projects
        .create_project(with_key(
            pb::CreateProjectRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
                ..Default::default()
            },
            key,
        ))
        .await
        .unwrap();
    let get = |key: Option<&str>| {
        let mut projects = projects.clone();
        let request = with_key(
            pb::GetEpisodicMemoryConfigRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
            },
            key,
        );
        async move {
            projects
                .get_episodic_memory_config(request)
                .await
                .map(|r| r.into_inner().config.unwrap())
        }
    };
    let update = |key: Option<&str>, w: Option<pb::RankingWeights>, aware: Option<bool>| {
        let mut projects = projects.clone();
        let request = with_key(
            pb::UpdateEpisodicMemoryConfigRequest {
                org_id: "acme".into(),
                project_id: "notes".into(),
                participant_aware: aware,
                ranking_weights: w,
                ..Default::default()
            },
            key,
        );
        async move {
            projects
                .update_episodic_memory_config(request)
                .await
                .map(|r| r.into_inner().config.unwrap())
        }
    };

    // The defaults, every field set.
    let fresh = get(key).await.unwrap();
    assert_eq!(fresh.ranking_weights, Some(all(1.0, 4.0, 3.0, 3.0)));
    // A partial update changes the fields set and keeps the others.
    let set = update(key, Some(weights(Some(2.5), None, Some(0.5))), None)
        .await
        .unwrap();
    assert_eq!(set.ranking_weights, Some(all(2.5, 4.0, 3.0, 0.5)));
    let set = update(key, Some(weights(None, Some(0.0), None)), None)
        .await
        .unwrap();
    assert_eq!(set.ranking_weights, Some(all(2.5, 4.0, 0.0, 0.5)));
    // Another setting's update keeps them.
    let set = update(key, None, Some(false)).await.unwrap();
    assert!(!set.participant_aware);
    assert_eq!(set.ranking_weights, Some(all(2.5, 4.0, 0.0, 0.5)));
    assert_eq!(get(key).await.unwrap(), set);

    // Out of range: INVALID_ARGUMENT naming the field, and nothing changes.
    let bad = [
        (weights(Some(-1.0), None, None), "ranking_weights.dense"),
        (
            weights(None, Some(1e9), None),
            "ranking_weights.participant",
        ),
        (weights(None, None, Some(f32::NAN)), "ranking_weights.time"),
        (
            pb::RankingWeights {
                own_similarity: Some(0.0),
                ..Default::default()
            },
            "ranking_weights.own_similarity",
        ),
    ];
    for (w, field) in bad {
        let err = update(key, Some(w), None).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
        assert!(err.message().contains(field), "{field}: {err:?}");
    }
    assert_eq!(get(key).await.unwrap(), set);

    // Another org neither reads nor sets them.
    let other = Some(globex.as_str());
    assert_eq!(get(other).await.unwrap_err().code(), Code::PermissionDenied);
    let err = update(other, Some(weights(Some(9.0), None, None)), None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert_eq!(get(key).await.unwrap(), set);
}

#[tokio::test]
async fn grpc_search_explains_each_hit_only_when_asked() {
    let server = InProcess::start().await;
    let channel = server.channel().await;
    let mut projects = ProjectServiceClient::new(channel.clone());
    let mut memory = MemoryServiceClient::new(channel);
    projects
        .create_project(pb::CreateProjectRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            config: Some(pb::ProjectConfig {
                reranker: "lexical".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let messages = (0..12)
        .map(|i| pb::MemoryMessage {
            content: format!("note {i} about the garden{}", " garden".repeat(i % 4)),
            producer: "u".into(),
            ..Default::default()
        })
        .collect();
    memory
        .add_memories(pb::AddMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            messages,
            ..Default::default()
        })
        .await
        .unwrap();
    let search = |explain: bool| {
        let request = pb::SearchMemoriesRequest {
            org_id: "o".into(),
            project_id: "p".into(),
            query: "garden".into(),
            top_k: Some(5),
            explain,
            ..Default::default()
        };
        let mut memory = memory.clone();
        async move {
            memory
                .search_memories(request)
                .await
                .unwrap()
                .into_inner()
                .episodic_memory
                .unwrap()
                .long_term_memory
        }
    };
    let explained = search(true).await;
    assert_eq!(explained.len(), 5);
    for hit in &explained {
        let parts = hit.score_parts.expect("every hit explained");
        // Lexical ranking: the score is all lexical.
        assert_eq!(f64::from(parts.lexical), hit.score, "{hit:?}");
        assert_eq!(
            (
                parts.dense,
                parts.context,
                parts.session,
                parts.time,
                parts.participant
            ),
            (0.0, 0.0, 0.0, 0.0, 0.0)
        );
    }
    let plain = search(false).await;
    assert_eq!(plain.len(), 5);
    assert!(
        plain.iter().all(|hit| hit.score_parts.is_none()),
        "{plain:?}"
    );
}

struct Rest {
    base: String,
    http: Client,
    key: String,
}

impl Rest {
    fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .expect("HTTP request");
        crate::rest_api::answer(response)
    }
}

#[test]
fn rest_ranking_weights_and_score_parts() {
    let data = tempfile::tempdir().expect("temp dir");
    let acme = create_key(data.path(), &["--org", "acme"]);
    let other = create_key(data.path(), &["--org", "other"]);
    let server = ServerProcess::start(
        data.path(),
        &[
            "--rest-listen",
            "127.0.0.1:0",
            "--auth",
            "--embedder",
            "hash",
        ],
    );
    let rest = |key: &str| Rest {
        base: format!("{}/api/v2", server.rest_url()),
        http: Client::new(),
        key: key.to_string(),
    };
    let (rest, intruder) = (rest(&acme), rest(&other));
    let project = json!({"org_id": "acme", "project_id": "notes"});
    let created = rest.post(
        "/projects",
        json!({"org_id": "acme", "project_id": "notes", "config": {"reranker": "lexical"}}),
    );
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.1);
    let get = |rest: &Rest| rest.post("/memory/episodic/config/get", project.clone());
    let (status, config) = get(&rest);
    assert_eq!(status, StatusCode::OK, "{config}");
    assert_eq!(
        config["ranking_weights"],
        json!({"dense": 1.0, "own_similarity": 4.0, "participant": 3.0,
               "context": 1.0, "session": 0.0, "time": 3.0, "when": 1.0})
    );
    let set = |rest: &Rest, weights: Value| {
        rest.post(
            "/memory/episodic/config",
            json!({"org_id": "acme", "project_id": "notes", "ranking_weights": weights}),
        )
    };
    let (status, body) = set(&rest, json!({"dense": 2.5, "session": 0.25}));
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = set(&rest, json!({"participant": 0}));
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let expected = json!({"dense": 2.5, "own_similarity": 4.0, "participant": 0.0,
                          "context": 1.0, "session": 0.25, "time": 3.0, "when": 1.0});
    assert_eq!(get(&rest).1["ranking_weights"], expected);
    // Another setting's update keeps them.
    let (status, _) = rest.post(
        "/memory/episodic/config",
        json!({"org_id": "acme", "project_id": "notes", "participant_aware": false}),
    );
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(get(&rest).1["ranking_weights"], expected);

    // Out of range: refused as invalid input, naming the field; nothing changes.
    for (weights, field) in [
        (json!({"dense": -1}), "ranking_weights.dense"),
        (json!({"time": 1e9}), "ranking_weights.time"),
        (
            json!({"own_similarity": 0}),
            "ranking_weights.own_similarity",
        ),
    ] {
        let (status, body) = set(&rest, weights);
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(body["detail"]["exception"], "INVALID_ARGUMENT", "{body}");
        assert_eq!(
            body["detail"]["field_violations"][0]["field"], field,
            "{body}"
        );
    }
    assert_eq!(get(&rest).1["ranking_weights"], expected);

    // Another org neither reads nor sets them.
    assert_eq!(get(&intruder).0, StatusCode::FORBIDDEN);
    assert_eq!(set(&intruder, json!({"dense": 9})).0, StatusCode::FORBIDDEN);
    assert_eq!(get(&rest).1["ranking_weights"], expected);

    // Score parts: on every long-term hit when asked (lexical: the score), else none.
    let messages: Vec<Value> = (0..8)
        .map(
            |i| json!({"content": format!("note {i} about the garden{}", " garden".repeat(i % 3))}),
        )
        .collect();
    let (status, body) = rest.post(
        "/memories",
        json!({"org_id": "acme", "project_id": "notes", "types": ["episodic"],
               "messages": messages}),
    );
    assert_eq!(status, StatusCode::OK, "{body}");
    let search = |explain: Option<bool>| {
        let mut body = json!({"org_id": "acme", "project_id": "notes", "query": "garden",
                              "top_k": 4, "types": ["episodic"]});
        if let Some(explain) = explain {
            body["explain"] = json!(explain);
        }
        let (status, found) = rest.post("/memories/search", body);
        assert_eq!(status, StatusCode::OK, "{found}");
        found["content"]["episodic_memory"]["long_term_memory"]["episodes"]
            .as_array()
            .expect("episodes")
            .clone()
    };
    let explained = search(Some(true));
    assert_eq!(explained.len(), 4);
    for hit in &explained {
        let parts = &hit["score_parts"];
        let score = hit["score"].as_f64().unwrap();
        assert_eq!(
            parts["lexical"].as_f64().unwrap() as f32,
            score as f32,
            "{hit}"
        );
        for other in ["dense", "context", "session", "time", "participant"] {
            assert_eq!(parts[other], json!(0.0), "{hit}");
        }
    }
    for plain in [search(None), search(Some(false))] {
        assert_eq!(plain.len(), 4);
        assert!(
            plain.iter().all(|hit| hit.get("score_parts").is_none()),
            "{plain:?}"
        );
    }
}

#[tokio::test]
async fn mcp_search_explains_each_episode_only_when_asked() {
    use crate::common::mcp_http::Session;
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        data.path(),
        &["--embedder", "none", "--rest-listen", "127.0.0.1:0"],
    );
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{}/api/v2/projects", server.rest_url()))
        .json(&json!({"org_id": "acme", "project_id": "notes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let mut mcp = Session::open(&http, &server.rest_url(), ("acme", "notes", "alice"), None)
        .await
        .expect("open a session");
    for i in 0..4 {
        let content = format!("note {i} about the garden{}", " garden".repeat(i));
        let added = mcp
            .call_tool(
                "add_memory",
                json!({"content": content, "types": ["episodic"]}),
            )
            .await;
        assert!(!added.is_error, "{}", added.text);
    }
    let search = |explain: Option<bool>| {
        let mut arguments = json!({"query": "garden", "top_k": 3, "types": ["episodic"]});
        if let Some(explain) = explain {
            arguments["explain"] = json!(explain);
        }
        arguments
    };
    let found = mcp.call_tool("search_memory", search(Some(true))).await;
    assert!(!found.is_error, "{}", found.text);
    let found: Value = serde_json::from_str(&found.text).unwrap();
    let episodes = found["episodes"].as_array().expect("episodes");
    assert_eq!(episodes.len(), 3, "{found}");
    for hit in episodes {
        let score = hit["score"].as_f64().unwrap() as f32;
        assert_eq!(
            hit["score_parts"]["lexical"].as_f64().unwrap() as f32,
            score,
            "{hit}"
        );
    }
    let plain = mcp.call_tool("search_memory", search(None)).await;
    let plain: Value = serde_json::from_str(&plain.text).unwrap();
    let episodes = plain["episodes"].as_array().expect("episodes");
    assert_eq!(episodes.len(), 3, "{plain}");
    assert!(
        episodes.iter().all(|hit| hit.get("score_parts").is_none()),
        "{plain}"
    );
}
