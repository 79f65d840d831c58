//! The REST gateway over real HTTP: MemMachine's v2 paths, shapes, status codes and
//! error body (`../shared/reference/memmachine-rest-v2-exchanges.md`), where this server
//! is deliberately stricter (unknown projects are 404), as lax as MemMachine where the
//! client relies on it (a repeated create answers the project), the OpenAPI
//! document against the routes served, and the same keys, limits, request ids and CORS
//! rule as gRPC.

use crate::common;
use crate::common::ServerProcess;
use crate::common::keys::create_key;
use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

struct Rest {
    base: String,
    http: Client,
    key: Option<String>,
}

impl Rest {
    fn new(server: &ServerProcess) -> Rest {
        Rest {
            base: format!("{}/api/v2", server.rest_url()),
            http: Client::new(),
            key: None,
        }
    }

    fn with_key(&self, key: &str) -> Rest {
        Rest {
            base: self.base.clone(),
            http: self.http.clone(),
            key: Some(key.to_string()),
        }
    }

    fn send(&self, request: reqwest::blocking::RequestBuilder) -> Response {
        let request = match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        request.send().expect("HTTP request")
    }

    fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self.send(self.http.post(format!("{}{path}", self.base)).json(&body));
        answer(response)
    }

    fn get(&self, path: &str) -> (StatusCode, Value) {
        answer(self.send(self.http.get(format!("{}{path}", self.base))))
    }
}

/// A response's status and JSON body (a string when not JSON, null when empty).
pub(crate) fn answer(response: Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().expect("body");
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, value)
}

fn start(extra: &[&str]) -> (tempfile::TempDir, ServerProcess) {
    let data = tempfile::tempdir().expect("temp dir");
    let mut args = vec!["--rest-listen", "127.0.0.1:0", "--embedder", "hash"];
    args.extend_from_slice(extra);
    let server = ServerProcess::start(data.path(), &args);
    (data, server)
}

/// MemMachine's error body, with the status in `detail.code`.
fn assert_error(answer: &(StatusCode, Value), status: u16, exception: &str) {
    assert_eq!(answer.0.as_u16(), status, "{}", answer.1);
    assert_eq!(answer.1["detail"]["code"], status, "{}", answer.1);
    assert_eq!(answer.1["detail"]["exception"], exception, "{}", answer.1);
    assert!(
        answer.1["detail"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{}",
        answer.1
    );
}

fn uids(search: &Value) -> Vec<String> {
    search["content"]["episodic_memory"]["long_term_memory"]["episodes"]
        .as_array()
        .expect("episodes")
        .iter()
        .map(|e| e["uid"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn projects_and_episodic_memory_speak_memmachine_v2() {
    let (_data, server) = start(&[]);
    let rest = Rest::new(&server);
    let project = json!({"org_id": "smoke_org", "project_id": "p1"});

    let created = rest.post(
        "/projects",
        json!({"org_id": "smoke_org", "project_id": "p1", "description": "smoke test",
               "config": {"reranker": "", "embedder": "", "vector_graph_store": "",
                          "vector_store": "", "segment_store": "", "properties_schema": {}}}),
    );
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.1);
    assert_eq!(created.1["description"], "smoke test");
    assert!(created.1["config"].is_object());
    // A repeated create answers the project as it is (MemMachine 0.4 does).
    let again = rest.post(
        "/projects",
        json!({"org_id": "smoke_org", "project_id": "p1", "description": "other"}),
    );
    assert_eq!(again.0, StatusCode::CREATED, "{}", again.1);
    assert_eq!(again.1["description"], "smoke test", "{}", again.1);
    let got = rest.post("/projects/get", project.clone());
    assert_eq!(got.0, StatusCode::OK);
    assert_eq!(got.1["project_id"], "p1");
    assert_error(
        &rest.post(
            "/projects/get",
            json!({"org_id": "smoke_org", "project_id": "nope"}),
        ),
        404,
        "NOT_FOUND",
    );
    let listed = rest.post("/projects/list", Value::Null);
    assert_eq!(listed.0, StatusCode::OK);
    assert!(
        listed.1.as_array().unwrap().contains(&project),
        "{}",
        listed.1
    );

    // Adds: RFC 3339, Unix seconds and no timestamp; results in input order.
    let added = rest.post(
        "/memories",
        json!({"org_id": "smoke_org", "project_id": "p1", "types": ["episodic"], "messages": [
            {"content": "I adopted a golden retriever named Max last week.", "producer": "Caroline",
             "produced_for": "Melanie", "timestamp": "2023-05-08T13:56:00Z", "role": "user",
             "metadata": {"dia_id": "D1:1"}},
            {"content": "That's lovely! I went hiking in Yosemite with my kids.", "producer": "Melanie",
             "role": "assistant", "timestamp": 1683554520, "metadata": {"dia_id": "D1:3"}},
            {"content": "I started painting sunsets again.", "producer": "Caroline"}]}),
    );
    assert_eq!(added.0, StatusCode::OK, "{}", added.1);
    let results = added.1["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let dog = results[0]["uid"].as_str().unwrap().to_string();
    let hike = results[1]["uid"].as_str().unwrap().to_string();
    let count = rest.post("/projects/episode_count/get", project.clone());
    assert_eq!(count.1, json!({"count": 3}));

    // Bad input is 422 naming the field; a top_k of 0 too.
    let empty = rest.post(
        "/memories",
        json!({"org_id": "smoke_org", "project_id": "p1", "messages": []}),
    );
    assert_error(&empty, 422, "INVALID_ARGUMENT");
    assert_eq!(
        empty.1["detail"]["field_violations"][0]["field"],
        "messages"
    );
    let wrong_type = rest.post(
        "/memories",
        json!({"org_id": "smoke_org", "project_id": "p1", "messages": [{"content": 5}]}),
    );
    assert_error(&wrong_type, 422, "INVALID_ARGUMENT");
    assert_eq!(
        wrong_type.1["detail"]["field_violations"][0]["field"],
        "messages[0].content"
    );
    let bad_time = rest.post(
        "/memories",
        json!({"org_id": "smoke_org", "project_id": "p1",
               "messages": [{"content": "x", "timestamp": "last tuesday"}]}),
    );
    assert_error(&bad_time, 422, "INVALID_ARGUMENT");
    assert_error(
        &rest.post(
            "/memories/search",
            json!({"org_id": "smoke_org", "project_id": "p1", "query": "x", "top_k": 0}),
        ),
        422,
        "INVALID_ARGUMENT",
    );
    assert_error(
        &rest.post(
            "/memories/search",
            json!({"org_id": "smoke_org", "project_id": "p1", "query": "x", "filter": "m.a ="}),
        ),
        422,
        "INVALID_ARGUMENT",
    );
    assert_error(
        &rest.post(
            "/memories/search",
            json!({"org_id": "bad org!", "query": "x"}),
        ),
        422,
        "INVALID_ARGUMENT",
    );

    // Search: MemMachine's nesting, scores, metadata, times as sent.
    let found = rest.post(
        "/memories/search",
        json!({"org_id": "smoke_org", "project_id": "p1", "query": "golden retriever dog",
               "top_k": 3, "types": ["episodic"]}),
    );
    assert_eq!(found.0, StatusCode::OK, "{}", found.1);
    assert_eq!(found.1["status"], 0);
    let first = &found.1["content"]["episodic_memory"]["long_term_memory"]["episodes"][0];
    assert_eq!(first["uid"], dog.as_str());
    assert_eq!(first["producer_id"], "Caroline");
    assert_eq!(first["metadata"]["dia_id"], "D1:1");
    assert_eq!(first["created_at"], "2023-05-08T13:56:00Z");
    assert!(first["score"].is_number());
    assert!(
        found.1["content"]["episodic_memory"]["short_term_memory"]["episode_summary"].is_array()
    );
    assert!(
        found.1["content"].get("semantic_memory").is_none(),
        "{}",
        found.1
    );
    let by_producer = rest.post(
        "/memories/search",
        json!({"org_id": "smoke_org", "project_id": "p1", "query": "what did they do",
               "types": ["episodic"], "filter": "producer_id='Melanie'"}),
    );
    assert_eq!(uids(&by_producer.1), vec![hike.clone()]);
    let by_metadata = rest.post(
        "/memories/search",
        json!({"org_id": "smoke_org", "project_id": "p1", "query": "dog",
               "types": ["episodic"], "filter": "metadata.dia_id='D1:1'"}),
    );
    assert_eq!(uids(&by_metadata.1), vec![dog.clone()]);

    // Unknown projects are 404 on every memory route; nothing is created implicitly.
    let ghost = json!({"org_id": "smoke_org", "project_id": "ghost", "query": "x",
                       "messages": [{"content": "x"}], "episodic_id": dog, "episodic_ids": [dog]});
    for path in [
        "/memories",
        "/memories/search",
        "/memories/list",
        "/memories/episodic/get",
        "/memories/episodic/delete",
        "/projects/episode_count/get",
        "/projects/delete",
    ] {
        assert_error(&rest.post(path, ghost.clone()), 404, "NOT_FOUND");
    }
    assert_error(
        &rest.post(
            "/projects/get",
            json!({"org_id": "smoke_org", "project_id": "ghost"}),
        ),
        404,
        "NOT_FOUND",
    );
    // Omitted ids are universal/universal, which always exists.
    let universal = rest.post(
        "/memories/search",
        json!({"query": "x", "types": ["episodic"]}),
    );
    assert_eq!(universal.0, StatusCode::OK, "{}", universal.1);

    // List: sequence order, page numbers, filters.
    let list = |page_num: u32| {
        rest.post(
            "/memories/list",
            json!({"org_id": "smoke_org", "project_id": "p1", "page_size": 2,
                   "page_num": page_num, "type": "episodic"}),
        )
    };
    let page0 = list(0).1["content"]["episodic_memory"].clone();
    let page1 = list(1).1["content"]["episodic_memory"].clone();
    let page2 = list(2).1["content"]["episodic_memory"].clone();
    assert_eq!(page0.as_array().unwrap().len(), 2);
    assert_eq!(page0[0]["uid"], dog.as_str());
    assert_eq!(page0[0]["session_key"], "smoke_org/p1");
    assert_eq!(page0[0]["content_type"], "string");
    assert_eq!(page1.as_array().unwrap().len(), 1);
    assert_eq!(page2, json!([]));
    let filtered = rest.post(
        "/memories/list",
        json!({"org_id": "smoke_org", "project_id": "p1", "filter": "producer_id='Melanie'"}),
    );
    assert_eq!(
        filtered.1["content"]["episodic_memory"][0]["uid"],
        hike.as_str()
    );

    // Delete: 204, then the count follows and search no longer finds it; no ids is 422.
    let deleted = rest.post(
        "/memories/episodic/delete",
        json!({"org_id": "smoke_org", "project_id": "p1", "episodic_id": dog, "episodic_ids": []}),
    );
    assert_eq!(deleted.0, StatusCode::NO_CONTENT, "{}", deleted.1);
    assert_eq!(
        rest.post("/projects/episode_count/get", project.clone()).1["count"],
        2
    );
    assert_error(
        &rest.post("/memories/episodic/delete", project.clone()),
        422,
        "INVALID_ARGUMENT",
    );
    let after = rest.post(
        "/memories/search",
        json!({"org_id": "smoke_org", "project_id": "p1", "query": "dog", "types": ["episodic"]}),
    );
    assert!(!uids(&after.1).contains(&dog));

    // Episodic switches of a project.
    let config = rest.post("/memory/episodic/config/get", project.clone());
    assert_eq!(config.1["enabled"], true);
    let off = rest.post(
        "/memory/episodic/short_term/config",
        json!({"org_id": "smoke_org", "project_id": "p1", "enabled": false}),
    );
    assert_eq!(off.0, StatusCode::NO_CONTENT, "{}", off.1);
    let short = rest.post("/memory/episodic/short_term/config/get", project.clone());
    assert_eq!(short.1, json!({"enabled": false}));
    assert_eq!(
        rest.post("/memory/episodic/config/get", project.clone()).1["short_term_memory_enabled"],
        false
    );

    // Project deletion completes before the answer; then the project is gone.
    assert_eq!(
        rest.post("/projects/delete", project.clone()).0,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &rest.post("/projects/get", project.clone()),
        404,
        "NOT_FOUND",
    );
    assert_error(&rest.post("/projects/delete", project), 404, "NOT_FOUND");
}

#[test]
fn semantic_routes_keep_features_per_project() {
    let (_data, server) = start(&[]);
    let rest = Rest::new(&server);
    for p in ["a", "b"] {
        let created = rest.post("/projects", json!({"org_id": "o", "project_id": p}));
        assert_eq!(created.0, StatusCode::CREATED);
    }
    let a = |extra: Value| {
        let mut body = json!({"org_id": "o", "project_id": "a"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let set = rest.post(
        "/memories/semantic/set_id/get",
        a(json!({"metadata_tags": ["producer_id"], "set_metadata": {"producer_id": "alice"}})),
    );
    assert_eq!(set.0, StatusCode::OK, "{}", set.1);
    let set_id = set.1["set_id"].as_str().unwrap().to_string();
    let added = rest.post(
        "/memories/semantic/feature",
        a(
            json!({"set_id": set_id, "category_name": "profile", "tag": "food",
                 "feature": "favourite food", "value": "sushi",
                 "feature_metadata": {"source": "test"}}),
        ),
    );
    assert_eq!(added.0, StatusCode::CREATED, "{}", added.1);
    let feature_id = added.1["feature_id"].as_str().unwrap().to_string();
    let got = rest.post(
        "/memories/semantic/feature/get",
        a(json!({"feature_id": feature_id})),
    );
    assert_eq!(got.0, StatusCode::OK, "{}", got.1);
    assert_eq!(got.1["value"], "sushi");
    assert_eq!(got.1["feature_name"], "favourite food");
    assert_eq!(got.1["metadata"]["id"], feature_id.as_str());
    assert_eq!(got.1["metadata"]["other"]["source"], "test");
    let updated = rest.post(
        "/memories/semantic/feature/update",
        a(json!({"feature_id": feature_id, "value": "ramen"})),
    );
    assert_eq!(updated.0, StatusCode::NO_CONTENT, "{}", updated.1);
    let found = rest.post(
        "/memories/search",
        a(json!({"query": "favourite food", "types": ["semantic"]})),
    );
    assert_eq!(found.0, StatusCode::OK, "{}", found.1);
    assert_eq!(found.1["content"]["semantic_memory"][0]["value"], "ramen");
    assert!(found.1["content"].get("episodic_memory").is_none());
    let listed = rest.post("/memories/list", a(json!({"type": "semantic"})));
    assert_eq!(
        listed.1["content"]["semantic_memory"][0]["metadata"]["id"],
        feature_id.as_str()
    );

    // Another project of the org cannot reach the feature by its id.
    let b = json!({"org_id": "o", "project_id": "b", "feature_id": feature_id,
                   "semantic_id": feature_id});
    assert_error(
        &rest.post("/memories/semantic/feature/get", b.clone()),
        404,
        "NOT_FOUND",
    );
    // Deleting it from there succeeds as for any id not there, and leaves it be.
    let foreign = rest.post("/memories/semantic/delete", b);
    assert_eq!(foreign.0, StatusCode::NO_CONTENT, "{}", foreign.1);
    let kept = rest.post(
        "/memories/semantic/feature/get",
        a(json!({"feature_id": feature_id})),
    );
    assert_eq!(kept.0, StatusCode::OK, "{}", kept.1);

    // Set types, categories, templates and tags.
    let set_type = rest.post(
        "/memories/semantic/set_type",
        a(json!({"metadata_tags": ["team"], "name": "teams", "description": "per team"})),
    );
    assert_eq!(set_type.0, StatusCode::CREATED, "{}", set_type.1);
    let set_type_id = set_type.1["set_type_id"].as_str().unwrap().to_string();
    let types = rest.post("/memories/semantic/set_type/list", a(json!({})));
    assert_eq!(types.1["set_types"][0]["name"], "teams");
    let template = rest.post(
        "/memories/semantic/category/template",
        a(json!({"set_type_id": set_type_id, "category_name": "goals", "prompt": "the team's goals"})),
    );
    assert_eq!(template.0, StatusCode::CREATED, "{}", template.1);
    let templates = rest.post(
        "/memories/semantic/category/template/list",
        a(json!({"set_type_id": set_type_id})),
    );
    assert_eq!(templates.1["categories"][0]["name"], "goals");
    let category = rest.post(
        "/memories/semantic/category",
        a(json!({"set_id": set_id, "category_name": "travel", "prompt": "places"})),
    );
    assert_eq!(category.0, StatusCode::CREATED, "{}", category.1);
    let category_id = category.1["category_id"].as_str().unwrap().to_string();
    let tag = rest.post(
        "/memories/semantic/category/tag",
        a(json!({"category_id": category_id, "tag_name": "cities", "tag_description": "visited"})),
    );
    assert_eq!(tag.0, StatusCode::CREATED, "{}", tag.1);
    let got = rest.post(
        "/memories/semantic/category/get",
        a(json!({"category_id": category_id})),
    );
    assert_eq!(got.1["name"], "travel");
    assert_eq!(got.1["tags"][0]["name"], "cities");
    let set_ids = rest.post(
        "/memories/semantic/category/set_ids/get",
        a(json!({"category_id": category_id})),
    );
    assert_eq!(set_ids.1["set_ids"], json!([set_id]));
    let tag_id = tag.1["tag_id"].as_str().unwrap().to_string();
    assert_eq!(
        rest.post(
            "/memories/semantic/category/tag/delete",
            a(json!({"tag_id": tag_id}))
        )
        .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        rest.post(
            "/memories/semantic/category/disable",
            a(json!({"set_id": set_id, "category_name": "profile"}))
        )
        .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        rest.post(
            "/memories/semantic/category/delete",
            a(json!({"category_id": category_id}))
        )
        .0,
        StatusCode::NO_CONTENT
    );
    let sets = rest.post("/memories/semantic/set_id/list", a(json!({})));
    assert!(
        sets.1["sets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == set_id.as_str())
    );
    assert_eq!(
        rest.post(
            "/memories/semantic/set_type/delete",
            a(json!({"set_type_id": set_type_id}))
        )
        .0,
        StatusCode::NO_CONTENT
    );

    // Deleting the feature: 204, then 404.
    let deleted = rest.post(
        "/memories/semantic/delete",
        a(json!({"semantic_id": feature_id})),
    );
    assert_eq!(deleted.0, StatusCode::NO_CONTENT, "{}", deleted.1);
    assert_error(
        &rest.post(
            "/memories/semantic/feature/get",
            a(json!({"feature_id": feature_id})),
        ),
        404,
        "NOT_FOUND",
    );
    // Without a language model, adding to semantic memory says why it cannot.
    let semantic_add = rest.post(
        "/memories",
        a(json!({"types": ["semantic"], "messages": [{"content": "x"}]})),
    );
    assert_error(&semantic_add, 412, "FAILED_PRECONDITION");
}

#[test]
fn keys_limits_request_ids_and_cors_are_those_of_grpc() {
    let data = tempfile::tempdir().expect("temp dir");
    let acme = create_key(data.path(), &["--org", "acme"]);
    let other = create_key(data.path(), &["--org", "other"]);
    let admin = create_key(data.path(), &["--admin"]);
    let server = ServerProcess::start(
        data.path(),
        &[
            "--rest-listen",
            "127.0.0.1:0",
            "--auth",
            "--max-request-bytes",
            "4096",
        ],
    );
    let anonymous = Rest::new(&server);
    let rest = anonymous.with_key(&acme);

    // Health and the OpenAPI document need no key; everything else does.
    assert_eq!(anonymous.get("/health").1["status"], "healthy");
    assert_eq!(anonymous.get("/openapi.json").0, StatusCode::OK);
    assert_error(
        &anonymous.post("/projects/list", json!({})),
        401,
        "UNAUTHENTICATED",
    );
    assert_error(&anonymous.get("/metrics"), 401, "UNAUTHENTICATED");
    assert_error(
        &anonymous
            .with_key("mm_not_a_key")
            .post("/projects/list", json!({})),
        401,
        "UNAUTHENTICATED",
    );

    // An org key reaches its org only.
    let created = rest.post("/projects", json!({"org_id": "acme", "project_id": "crm"}));
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.1);
    assert_error(
        &rest.post("/projects", json!({"org_id": "other", "project_id": "crm"})),
        403,
        "PERMISSION_DENIED",
    );
    let theirs = anonymous.with_key(&other);
    assert_error(
        &theirs.post(
            "/memories/search",
            json!({"org_id": "acme", "project_id": "crm", "query": "x"}),
        ),
        403,
        "PERMISSION_DENIED",
    );
    let listed = rest.post("/projects/list", json!({}));
    assert_eq!(listed.1, json!([{"org_id": "acme", "project_id": "crm"}]));
    assert_eq!(theirs.post("/projects/list", json!({})).1, json!([]));

    // A body over --max-request-bytes is refused as too large.
    let big = "x".repeat(8192);
    let refused = rest.post(
        "/memories",
        json!({"org_id": "acme", "project_id": "crm", "messages": [{"content": big}]}),
    );
    assert_error(&refused, 413, "RESOURCE_EXHAUSTED");

    // The client's request id comes back; without one, the server makes one.
    let response = rest.send(
        rest.http
            .post(format!("{}/projects/list", rest.base))
            .header("x-request-id", "req-abc-123")
            .json(&json!({})),
    );
    assert_eq!(response.headers()["x-request-id"], "req-abc-123");
    let response = rest.send(
        rest.http
            .post(format!("{}/projects/list", rest.base))
            .json(&json!({})),
    );
    assert_eq!(response.headers()["x-request-id"].len(), 32);

    // With --auth any origin may call with a key (it is a bearer token, not a cookie).
    let preflight = rest.send(
        rest.http
            .request(
                reqwest::Method::OPTIONS,
                format!("{}/memories/search", rest.base),
            )
            .header("origin", "https://app.example")
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            ),
    );
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "https://app.example"
    );

    // Calls are counted by route in the metrics, never by made-up paths (the traffic
    // of every org: an admin key's view).
    rest.post("/no/such/route", json!({}));
    let operator = anonymous.with_key(&admin);
    let metrics = operator.send(rest.http.get(format!("{}/metrics", rest.base)));
    let text = metrics.text().unwrap();
    assert!(
        text.contains("method=\"REST POST /api/v2/projects/list\""),
        "{text}"
    );
    assert!(!text.contains("no/such/route"), "{text}");
}

#[test]
fn episodes_are_read_by_id_and_paged_by_token_within_the_callers_project_only() {
    let data = tempfile::tempdir().expect("temp dir");
    let acme = create_key(data.path(), &["--org", "acme"]);
    let other = create_key(data.path(), &["--org", "other"]);
    let server = ServerProcess::start(data.path(), &["--rest-listen", "127.0.0.1:0", "--auth"]);
    let rest = Rest::new(&server).with_key(&acme);
    for project in ["crm", "notes"] {
        let created = rest.post(
            "/projects",
            json!({"org_id": "acme", "project_id": project}),
        );
        assert_eq!(created.0, StatusCode::CREATED, "{}", created.1);
    }
    let add = |project: &str, content: &str| -> String {
        let added = rest.post(
            "/memories",
            json!({"org_id": "acme", "project_id": project, "types": ["episodic"],
                   "messages": [{"content": content}]}),
        );
        assert_eq!(added.0, StatusCode::OK, "{}", added.1);
        added.1["results"][0]["uid"].as_str().unwrap().to_string()
    };
    let first = add("crm", "the first message");
    let second = add("crm", "the second message");
    let elsewhere = add("notes", "a note");
    let absent = "00000000-0000-4000-8000-000000000000";
    let get = |ids: Vec<&str>| {
        rest.post(
            "/memories/episodic/get",
            json!({"org_id": "acme", "project_id": "crm", "episodic_ids": ids}),
        )
    };

    // In the order asked; an id of another project, or of nothing, is missing.
    let (status, got) = get(vec![&second, absent, &first, &elsewhere]);
    assert_eq!(status, StatusCode::OK, "{got}");
    let contents: Vec<&str> = got["content"]["episodic_memory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["the second message", "the first message"]);
    assert_eq!(got["content"]["missing"], json!([absent, elsewhere]));

    // Paged by token on request (one read a page); MemMachine's callers never see one.
    let page = |token: Option<&str>| {
        let mut body = json!({"org_id": "acme", "project_id": "crm", "page_size": 1});
        if let Some(token) = token {
            body["page_token"] = json!(token);
        }
        let (status, listed) = rest.post("/memories/list", body);
        assert_eq!(status, StatusCode::OK, "{listed}");
        listed["content"].clone()
    };
    assert!(page(None).get("next_page_token").is_none());
    let one = page(Some(""));
    assert_eq!(one["episodic_memory"][0]["uid"], json!(first));
    let two = page(Some(one["next_page_token"].as_str().unwrap()));
    assert_eq!(two["episodic_memory"][0]["uid"], json!(second));
    assert_eq!(two["next_page_token"], "", "the last page");

    // Deleted episodes are missing too.
    let deleted = rest.post(
        "/memories/episodic/delete",
        json!({"org_id": "acme", "project_id": "crm", "episodic_id": first}),
    );
    assert_eq!(deleted.0, StatusCode::NO_CONTENT, "{}", deleted.1);
    assert_eq!(get(vec![&first]).1["content"]["missing"], json!([first]));

    // Bad ids, none or too many are the caller's mistake; so is another org.
    let bad = get(vec![&second, "not-a-uid"]);
    assert_error(&bad, 422, "INVALID_ARGUMENT");
    assert!(bad.1.to_string().contains("episodic_ids[1]"), "{}", bad.1);
    assert_error(&get(vec![]), 422, "INVALID_ARGUMENT");
    assert_error(&get(vec![absent; 101]), 422, "INVALID_ARGUMENT");
    assert_error(
        &rest.post(
            "/memories/episodic/get",
            json!({"org_id": "acme", "project_id": "nope", "episodic_ids": [second]}),
        ),
        404,
        "NOT_FOUND",
    );
    assert_error(
        &Rest::new(&server).with_key(&other).post(
            "/memories/episodic/get",
            json!({"org_id": "acme", "project_id": "crm", "episodic_ids": [second]}),
        ),
        403,
        "PERMISSION_DENIED",
    );
}

#[test]
fn the_console_is_served_without_a_key_and_may_only_talk_to_its_own_origin() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &["--rest-listen", "127.0.0.1:0", "--auth"]);
    let base = server.rest_url();
    let http = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let moved = http.get(format!("{base}/ui")).send().unwrap();
    assert_eq!(moved.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(moved.headers()["location"], "/ui/");
    for (path, kind) in [
        ("/ui/", "text/html"),
        ("/ui/console.js", "text/javascript"),
        ("/ui/console.css", "text/css"),
    ] {
        let response = http.get(format!("{base}{path}")).send().unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers().clone();
        assert!(
            headers["content-type"].to_str().unwrap().starts_with(kind),
            "{path}: {headers:?}"
        );
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("connect-src 'self'"), "{policy}");
        assert!(policy.contains("script-src 'self'"), "{policy}");
        assert!(!response.text().unwrap().is_empty(), "{path}");
    }
    assert_eq!(
        http.get(format!("{base}/ui/nothing.js"))
            .send()
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    // The page needs no key; the memory it shows does.
    let listed = http
        .post(format!("{base}/api/v2/projects/list"))
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(listed.status(), StatusCode::UNAUTHORIZED);
}

#[test]
fn without_auth_no_other_origin_may_call() {
    let (_data, server) = start(&[]);
    let rest = Rest::new(&server);
    let preflight = rest.send(
        rest.http
            .request(
                reqwest::Method::OPTIONS,
                format!("{}/memories/search", rest.base),
            )
            .header("origin", "https://evil.example")
            .header("access-control-request-method", "POST"),
    );
    assert!(
        preflight
            .headers()
            .get("access-control-allow-origin")
            .is_none(),
        "{:?}",
        preflight.headers()
    );
}

/// What a browser can send without a preflight, and names it was rebound to: refused
/// before anything is read or done (the project stays).
#[test]
fn simple_requests_rebound_hosts_and_foreign_origins_are_refused() {
    let (_data, server) = start(&[
        "--allowed-host",
        "memory.internal",
        "--allowed-origin",
        "https://app.example",
    ]);
    let rest = Rest::new(&server);
    let project = json!({"org_id": "acme", "project_id": "victim"});
    assert_eq!(
        rest.post("/projects", project.clone()).0,
        StatusCode::CREATED
    );
    let body = project.to_string();
    let raw = |content_type: Option<&str>| {
        let request = rest
            .http
            .post(format!("{}/projects/delete", rest.base))
            .body(body.clone());
        let request = match content_type {
            Some(t) => request.header("content-type", t),
            None => request,
        };
        answer(rest.send(request))
    };
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let refused = raw(content_type);
        assert_error(&refused, 415, "INVALID_ARGUMENT");
    }
    // A POST that is not JSON is refused even without a body (a form sends one so).
    let empty = answer(rest.send(rest.http.post(format!("{}/projects/list", rest.base))));
    assert_eq!(empty.0.as_u16(), 415, "{}", empty.1);
    let header = |name: &'static str, value: &'static str| {
        answer(
            rest.send(
                rest.http
                    .post(format!("{}/projects/get", rest.base))
                    .header(name, value)
                    .json(&project),
            ),
        )
    };
    assert_error(&header("host", "evil.example"), 403, "PERMISSION_DENIED");
    assert_error(
        &header("host", "127.0.0.1.nip.io:80"),
        403,
        "PERMISSION_DENIED",
    );
    assert_eq!(header("host", "memory.internal:8080").0, StatusCode::OK);
    assert_eq!(header("host", "localhost").0, StatusCode::OK);
    assert_error(
        &header("origin", "https://evil.example"),
        403,
        "PERMISSION_DENIED",
    );
    assert_error(&header("origin", "null"), 403, "PERMISSION_DENIED");
    assert_eq!(header("origin", "https://app.example").0, StatusCode::OK);
    // The page's own origin (as the console's requests carry it).
    let own = server.rest_url();
    let same = answer(
        rest.send(
            rest.http
                .post(format!("{}/projects/get", rest.base))
                .header("origin", own)
                .json(&project),
        ),
    );
    assert_eq!(same.0, StatusCode::OK, "{}", same.1);
    // A listed origin's preflight is granted; another's is not.
    let preflight = |origin: &'static str| {
        rest.send(
            rest.http
                .request(
                    reqwest::Method::OPTIONS,
                    format!("{}/projects/get", rest.base),
                )
                .header("origin", origin)
                .header("access-control-request-method", "POST")
                .header("access-control-request-headers", "content-type"),
        )
        .headers()
        .get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap().to_string())
    };
    assert_eq!(
        preflight("https://app.example").as_deref(),
        Some("https://app.example")
    );
    assert_eq!(preflight("https://evil.example"), None);
    assert_eq!(
        rest.post("/projects/get", project).0,
        StatusCode::OK,
        "still there"
    );
}

#[test]
fn the_openapi_document_describes_exactly_the_routes_served() {
    let (_data, server) = start(&[]);
    let rest = Rest::new(&server);
    let (status, document) = rest.get("/openapi.json");
    assert_eq!(status, StatusCode::OK);
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    let paths = document["paths"].as_object().expect("paths");
    // Every MemMachine 0.4 v2 route its client calls, and the configuration API.
    let expected = [
        "/health",
        "/metrics",
        "/projects",
        "/projects/get",
        "/projects/list",
        "/projects/delete",
        "/projects/episode_count/get",
        "/memories",
        "/memories/search",
        "/memories/list",
        "/memories/episodic/get",
        "/memories/episodic/delete",
        "/memories/semantic/delete",
        "/memories/semantic/feature",
        "/memories/semantic/feature/get",
        "/memories/semantic/feature/update",
        "/memories/semantic/feature/history",
        "/memories/semantic/set_type",
        "/memories/semantic/set_type/list",
        "/memories/semantic/set_type/delete",
        "/memories/semantic/set_id/get",
        "/memories/semantic/set_id/list",
        "/memories/semantic/set/configure",
        "/memories/semantic/category/get",
        "/memories/semantic/category",
        "/memories/semantic/category/template",
        "/memories/semantic/category/template/list",
        "/memories/semantic/category/disable",
        "/memories/semantic/category/set_ids/get",
        "/memories/semantic/category/delete",
        "/memories/semantic/category/tag",
        "/memories/semantic/category/tag/delete",
        "/memory/episodic/config/get",
        "/memory/episodic/config",
        "/memory/episodic/short_term/config/get",
        "/memory/episodic/short_term/config",
        "/memory/episodic/long_term/config/get",
        "/memory/episodic/long_term/config",
        "/config",
        "/config/resources",
        "/config/memory",
        "/config/memory/episodic",
        "/config/memory/episodic/long_term",
        "/config/memory/episodic/short_term",
        "/config/memory/semantic",
        "/config/resources/embedders",
        "/config/resources/language_models",
        "/config/resources/embedders/{name}",
        "/config/resources/language_models/{name}",
        "/config/resources/embedders/{name}/retry",
        "/config/resources/language_models/{name}/retry",
        "/config/resources/rerankers/{name}/retry",
    ];
    for path in expected {
        assert!(paths.contains_key(path), "the document lacks {path}");
    }
    // Each documented operation is served: the router answers it (a domain answer, with
    // JSON), never its own 404 or 405 for a path or method it does not have.
    let mut operations = 0;
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            operations += 1;
            let mut url = format!("{}{}", rest.base, path.replace("{name}", "nothing"));
            if path.ends_with("/memories/changes") {
                // An event stream of a project that exists would never end: ask for one
                // that does not.
                url.push_str("?org_id=openapi-probe&project_id=nothing");
            }
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let response = rest.send(rest.http.request(method.clone(), &url).json(&json!({})));
            let status = response.status();
            let body = response.text().unwrap();
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            if status == StatusCode::NOT_FOUND {
                assert!(
                    body.contains("\"detail\""),
                    "{method} {path} is not routed: {body}"
                );
            }
            assert!(
                status.as_u16() < 500 || status == StatusCode::NOT_IMPLEMENTED,
                "{method} {path}: {status} {body}"
            );
        }
    }
    assert!(operations >= expected.len(), "{operations} operations");
    // And what is not documented is not served.
    let (status, body) = rest.post("/memories/teleport", json!({}));
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.is_null(), "{body}");
    // The configuration API reads, and refuses run-time changes with the flag to use.
    let config = rest.get("/config");
    assert_eq!(config.0, StatusCode::OK, "{}", config.1);
    assert_eq!(config.1["episodic_memory"]["enabled"], true);
    assert_eq!(config.1["resources"]["embedders"][0]["name"], "hash:256");
    let put = rest.send(
        rest.http
            .put(format!("{}/config/memory/semantic", rest.base))
            .json(&json!({"llm_model": "gpt"})),
    );
    let put = answer(put);
    assert_error(&put, 412, "FAILED_PRECONDITION");
    assert!(
        put.1["detail"]["message"]
            .as_str()
            .unwrap()
            .contains("--llm-model")
    );
}

/// What a newcomer meets on a fresh server (no embedder, no language model): the log
/// names every surface and what is off, `/config` says the ranking search uses, errors
/// name a field, one instant is read in each form, gRPC's field names are read too, and
/// a search carries no blank summary.
#[test]
fn a_fresh_server_says_what_it_serves_and_reads_what_newcomers_send() {
    let data = tempfile::tempdir().expect("temp dir");
    let metrics = common::free_port().to_string();
    let server = ServerProcess::start(
        data.path(),
        &[
            "--rest-listen",
            "127.0.0.1:0",
            "--embedder",
            "none",
            "--metrics-listen",
            &metrics,
        ],
    );
    let rest = Rest::new(&server);
    let log = server.log.lock().unwrap().join("\n");
    for said in [
        "/api/v2",
        "/ui",
        "/mcp",
        "/metrics",
        "gRPC server listening",
        "no embedder in use",
        "memmachine model fetch",
        "no language model configured",
    ] {
        assert!(log.contains(said), "{said:?} not in the log:\n{log}");
    }

    // The ranking a project naming none gets, as search decides it; what is missing.
    let (status, config) = rest.get("/config");
    assert_eq!(status, StatusCode::OK, "{config}");
    assert_eq!(
        config["episodic_memory"]["long_term_memory"]["reranker"], "lexical",
        "{config}"
    );
    let (_, resources) = rest.get("/config/resources");
    let notes = resources["notes"].to_string();
    assert!(notes.contains("memmachine model fetch"), "{resources}");
    assert!(notes.contains("--llm-base-url"), "{resources}");

    // A rejected body names the field at fault, never an empty one.
    for body in [json!({"org_id": "universal"}), json!("hello")] {
        let refused = rest.post("/memories", body);
        assert_error(&refused, 422, "INVALID_ARGUMENT");
        let message = refused.1["detail"]["message"].as_str().unwrap();
        assert!(!message.contains(": :"), "{message}");
        let field = refused.1["detail"]["field_violations"][0]["field"]
            .as_str()
            .unwrap();
        assert!(
            field == "messages" || field == "the request body",
            "{}",
            refused.1
        );
    }

    // One instant, as RFC 3339, Unix seconds and Unix seconds in a string.
    let added = rest.post(
        "/memories",
        json!({"messages": [
            {"content": "I adopted a golden retriever named Max.", "timestamp": "2023-05-08T13:56:00Z"},
            {"content": "Max chewed my shoes.", "timestamp": 1683554160},
            {"content": "Max learned to sit.", "timestamp": "1683554160"}]}),
    );
    assert_eq!(added.0, StatusCode::OK, "{}", added.1);
    let uids: Vec<String> = added.1["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uid"].as_str().unwrap().to_string())
        .collect();
    for filter in [
        "created_at = '2023-05-08T13:56:00Z'",
        "created_at = 1683554160",
        "created_at = '1683554160'",
    ] {
        let listed = rest.post("/memories/list", json!({"filter": filter}));
        assert_eq!(listed.0, StatusCode::OK, "{filter}: {}", listed.1);
        let episodes = listed.1["content"]["episodic_memory"].as_array().unwrap();
        assert_eq!(episodes.len(), 3, "{filter}: {}", listed.1);
        assert!(
            episodes
                .iter()
                .all(|e| e["created_at"] == "2023-05-08T13:56:00Z"),
            "{}",
            listed.1
        );
    }

    // No blank summary in a search answer.
    let found = rest.post("/memories/search", json!({"query": "Max"}));
    assert_eq!(found.0, StatusCode::OK, "{}", found.1);
    assert_eq!(
        found.1["content"]["episodic_memory"]["short_term_memory"]["episode_summary"],
        json!([]),
        "{}",
        found.1
    );

    // gRPC's names for the same ids are read too.
    let got = rest.post("/memories/episodic/get", json!({"episode_ids": [uids[0]]}));
    assert_eq!(got.0, StatusCode::OK, "{}", got.1);
    assert_eq!(
        got.1["content"]["episodic_memory"][0]["uid"],
        uids[0].as_str()
    );
    let deleted = rest.post(
        "/memories/episodic/delete",
        json!({"episode_ids": [uids[0]]}),
    );
    assert_eq!(deleted.0, StatusCode::NO_CONTENT, "{}", deleted.1);
    let count = rest.post(
        "/projects/episode_count/get",
        json!({"org_id": "universal", "project_id": "universal"}),
    );
    assert_eq!(count.1["count"], 2, "{}", count.1);
}

impl Rest {
    fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        answer(self.send(self.http.put(format!("{}{path}", self.base)).json(&body)))
    }

    /// The contents of the short-term episodes a search of acme/notes returns.
    fn short_term(&self) -> Vec<String> {
        let found = self.post(
            "/memories/search",
            json!({"org_id": "acme", "project_id": "notes", "query": "note",
                   "types": ["episodic"]}),
        );
        assert_eq!(found.0, StatusCode::OK, "{}", found.1);
        found.1["content"]["episodic_memory"]["short_term_memory"]["episodes"]
            .as_array()
            .expect("short-term episodes")
            .iter()
            .map(|e| e["content"].as_str().unwrap().to_string())
            .collect()
    }
}

/// The message of a refusal names the field and why.
fn refused(answer: &(StatusCode, Value), status: u16, exception: &str, words: &[&str]) {
    assert_error(answer, status, exception);
    let message = answer.1["detail"]["message"].as_str().unwrap();
    for word in words {
        assert!(message.contains(word), "{word:?} not in {message}");
    }
}

#[test]
fn runtime_configuration_takes_effect_at_once_and_survives_a_restart() {
    let data = tempfile::tempdir().expect("temp dir");
    let admin = create_key(data.path(), &["--admin"]);
    let acme = create_key(data.path(), &["--org", "acme"]);
    let args = [
        "--rest-listen",
        "127.0.0.1:0",
        "--embedder",
        "hash",
        "--auth",
    ];
    let server = ServerProcess::start(data.path(), &args);
    let rest = Rest::new(&server).with_key(&admin);
    let created = rest.post(
        "/projects",
        json!({"org_id": "acme", "project_id": "notes"}),
    );
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.1);
    let messages: Vec<Value> = (1..=5)
        .map(|i| json!({"content": format!("note {i}")}))
        .collect();
    let added = rest.post(
        "/memories",
        json!({"org_id": "acme", "project_id": "notes", "messages": messages}),
    );
    assert_eq!(added.0, StatusCode::OK, "{}", added.1);
    assert_eq!(rest.short_term().len(), 5, "the flag's window of 20");

    // What GET shows is accepted back unchanged (MemMachine's client re-sends it).
    for path in ["/config/memory/episodic", "/config/memory/semantic"] {
        let (status, shown) = rest.get(path);
        assert_eq!(status, StatusCode::OK, "{shown}");
        let put = rest.put(path, shown.clone());
        assert_eq!(put.0, StatusCode::OK, "{path}: {}", put.1);
        assert_eq!(put.1["success"], true);
        assert_eq!(rest.get(path).1, shown, "{path} unchanged");
    }

    // Under --auth only an admin key changes what applies to every org.
    let org = rest.with_key(&acme);
    refused(
        &org.put(
            "/config/memory/episodic/short_term",
            json!({"message_capacity": 12}),
        ),
        403,
        "PERMISSION_DENIED",
        &["admin key"],
    );
    assert_eq!(rest.short_term().len(), 5, "the org key changed nothing");

    // The next request follows a change; unknown fields are ignored, as MemMachine does.
    let put = rest.put(
        "/config/memory/episodic/short_term",
        json!({"message_capacity": 12, "a_later_knob": true}),
    );
    assert_eq!(put.0, StatusCode::OK, "{}", put.1);
    assert_eq!(rest.short_term(), ["note 4", "note 5"]);
    let put = rest.put(
        "/config/memory/episodic/long_term",
        json!({"reranker": "lexical"}),
    );
    assert_eq!(put.0, StatusCode::OK, "{}", put.1);
    let put = rest.put(
        "/config/memory/episodic",
        json!({"short_term_memory_enabled": false}),
    );
    assert_eq!(put.0, StatusCode::OK, "{}", put.1);
    assert!(rest.short_term().is_empty(), "switched off server-wide");
    let put = rest.put(
        "/config/memory",
        json!({"episodic_memory": {"short_term_memory": {"enabled": true}},
               "semantic_memory": {"ingestion_trigger_messages": 7}}),
    );
    assert_eq!(put.0, StatusCode::OK, "{}", put.1);
    assert_eq!(rest.short_term().len(), 2);

    // What cannot change at run time is refused, naming the field and why.
    refused(
        &rest.put(
            "/config/memory/semantic",
            json!({"database": "postgres://elsewhere/db"}),
        ),
        412,
        "FAILED_PRECONDITION",
        &["semantic_memory.database", "--store"],
    );
    refused(
        &rest.put(
            "/config/memory/episodic/long_term",
            json!({"embedder": "openai:text-embedding-3-small", "backend": "declarative"}),
        ),
        412,
        "FAILED_PRECONDITION",
        &[
            "long_term_memory.embedder",
            "--embedder",
            "long_term_memory.backend",
        ],
    );
    refused(
        &rest.put("/config/memory/semantic", json!({"enabled": true})),
        412,
        "FAILED_PRECONDITION",
        &["semantic_memory.enabled", "--llm-model"],
    );
    refused(
        &rest.put(
            "/config/memory/semantic",
            json!({"vector_dimensions": 1536}),
        ),
        412,
        "FAILED_PRECONDITION",
        &["vector_dimensions", "256"],
    );
    refused(
        &rest.put(
            "/config/memory/episodic/long_term",
            json!({"reranker": "oracle"}),
        ),
        422,
        "INVALID_ARGUMENT",
        &["reranker", "lexical"],
    );
    refused(
        &rest.put(
            "/config/memory/episodic/short_term",
            json!({"message_capacity": 0}),
        ),
        422,
        "INVALID_ARGUMENT",
        &["message_capacity"],
    );

    // A restart over the same data keeps what was changed.
    drop(server);
    let server = ServerProcess::start(data.path(), &args);
    let rest = Rest::new(&server).with_key(&admin);
    let (status, episodic) = rest.get("/config/memory/episodic");
    assert_eq!(status, StatusCode::OK, "{episodic}");
    assert_eq!(episodic["short_term_memory"]["message_capacity"], 12);
    assert_eq!(episodic["short_term_memory"]["enabled"], true);
    assert_eq!(episodic["long_term_memory"]["reranker"], "lexical");
    assert_eq!(
        rest.get("/config/memory/semantic").1["ingestion_trigger_messages"],
        7
    );
    assert_eq!(rest.short_term(), ["note 4", "note 5"]);
}
