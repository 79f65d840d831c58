//! What the fuzz targets do with one input, shared by `fuzz/fuzz_targets/*.rs` and the
//! regression tests (`tests/it/fuzz_regressions.rs` includes this file by `#[path]`).
//!
//! `requests` and `rest_json` drive the server's own handlers (the gRPC services and
//! the REST router, with its admission and body decoding) over a real SQLite store
//! whose writer is closed once the project `fuzz/fuzz` exists (besides `universal`): every request is decoded and
//! validated exactly as the server does, reads work, and the first write fails with
//! `Unavailable` (the store is closed), so that inputs never grow the store. A panic,
//! an `Internal` answer or a 500 is a finding.

#![allow(dead_code)]
#![allow(deprecated)]

use std::sync::{Arc, OnceLock};

use memmachine_core::model::filter::{self, Expr, Field, SystemField};
use memmachine_core::model::filter_eval::{self, Fields, Value};
use memmachine_domain::auth::Caller;

/// Parses `data` (UTF-8) as an episode filter and as a feature filter, evaluating what
/// parses; and checks that `quote` makes a literal the parser reads back.
pub fn filter(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for parsed in [filter::parse(text), filter::parse_features(text)] {
        match parsed {
            Ok(Some(expr)) => {
                let _ = filter_eval::matches(&expr, &Doc);
            }
            Ok(None) => {}
            Err(err) => {
                assert!(err.position >= 1, "positions are 1-based: {err:?}");
                let _ = err.into_error("filter").bounded();
            }
        }
    }
    let quoted = format!("m.k = {}", filter::quote(text));
    if quoted.len() <= filter::MAX_FILTER_BYTES {
        let parsed = filter::parse(&quoted);
        let expected = Expr::Cmp {
            field: Field::Metadata("k".into()),
            op: filter::CmpOp::Eq,
            value: filter::Literal::Str(text.into()),
        };
        assert_eq!(
            parsed,
            Ok(Some(expected)),
            "quote({text:?}) does not parse back"
        );
    }
}

/// A document with every field set, some metadata numeric.
struct Doc;

impl Fields for Doc {
    fn get(&self, field: &Field) -> Option<Value<'_>> {
        match field {
            Field::Metadata(key) => match key.as_str() {
                "n" => Some(Value::Text(" 10 ")),
                "topic" => Some(Value::Text("food")),
                _ => None,
            },
            Field::System(SystemField::CreatedAt | SystemField::UpdatedAt) => {
                Some(Value::Time(1_700_000_000_000_000))
            }
            Field::System(SystemField::ProducerRole) => None,
            Field::System(_) => Some(Value::Text("alice")),
        }
    }
}

/// The server: its gRPC services and REST router over one store.
struct Server {
    runtime: tokio::runtime::Runtime,
    memory: memmachine::grpc::MemoryGrpc,
    projects: memmachine::grpc::ProjectGrpc,
    semantic: memmachine::grpc::SemanticGrpc,
    memory_v1: memmachine::grpc::v1::MemoryGrpc,
    sessions_v1: memmachine::grpc::v1::SessionGrpc,
    groups_v1: memmachine::grpc::v1::GroupGrpc,
    router: axum::Router,
    _dir: tempfile::TempDir,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(start)
}

fn start() -> Server {
    use memmachine::config::ServeArgs;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let flags = [
        "--embedder".as_ref(),
        "hash".as_ref(),
        "--data-dir".as_ref(),
        dir.path().as_os_str(),
    ];
    let config = ServeArgs::from_flags(flags)
        .and_then(ServeArgs::resolve)
        .expect("a configuration");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (domain, router, imports) = runtime.block_on(async {
        let store = memmachine::store::open(&config.store, true)
            .await
            .expect("a store");
        let metrics = Arc::new(memmachine_domain::metrics::Metrics::new());
        let domain = memmachine::domain::start(&config, store.clone(), metrics.clone())
            .await
            .expect("the domain");
        // Seeds name `fuzz`; empty ids name `universal`, which the server creates.
        let fuzz = memmachine_domain::auth::Access::unrouted(Caller::Anyone)
            .project("fuzz", "fuzz")
            .expect("a valid project");
        domain
            .projects
            .create(&fuzz, "", Default::default())
            .await
            .expect("a project");
        store.close().await.expect("the store closes");
        let (health, _) = tonic_health::server::health_reporter();
        let lifecycle = Arc::new(memmachine::admission::lifecycle::Lifecycle::new(health).await);
        lifecycle.serving().await;
        let imports = memmachine::grpc::ImportSettings {
            lifecycle: lifecycle.clone(),
            idle: config.request_timeout,
            max_request_bytes: config.max_request_bytes,
        };
        let admission = Arc::new(memmachine::admission::Admission {
            auth: memmachine_domain::auth::Authenticator::new(store.clone(), false),
            limiter: memmachine::admission::limits::Limiter::new(config.caller_limits),
            lifecycle,
            metrics,
            request_timeout: config.request_timeout,
            max_request_bytes: config.max_request_bytes,
            methods: memmachine::grpc::methods(),
            watchers: memmachine::admission::watch::Watchers::new(
                config.max_watch_streams_per_peer,
            ),
            change_streams: memmachine::admission::watch::Watchers::new(
                config.changes.max_streams_per_key,
            ),
            closing: tokio::sync::watch::channel(false).1,
            browsers: Default::default(),
        });
        let gateway = memmachine::rest::Gateway::new(admission, store, &config);
        gateway.set(domain.clone());
        (domain, gateway.router(), imports)
    });
    Server {
        runtime,
        memory: memmachine::grpc::MemoryGrpc::new(domain.memories.clone(), imports),
        projects: memmachine::grpc::ProjectGrpc::new(domain.projects.clone()),
        semantic: memmachine::grpc::SemanticGrpc::new(
            domain.projects.clone(),
            domain.semantic.clone(),
        ),
        memory_v1: memmachine::grpc::v1::MemoryGrpc::new(domain.legacy.clone()),
        sessions_v1: memmachine::grpc::v1::SessionGrpc::new(domain.legacy.clone()),
        groups_v1: memmachine::grpc::v1::GroupGrpc::new(domain.legacy.clone()),
        router,
        _dir: dir,
    }
}

/// The message as the admission layer hands it on (authentication off).
fn request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.extensions_mut().insert(Caller::Anyone);
    request
}

/// Checks an answer: a fault of the server is a finding; a success must encode.
fn answer<T: prost::Message>(method: &str, result: Result<tonic::Response<T>, tonic::Status>) {
    match result {
        Ok(response) => {
            let _ = response.get_ref().encode_to_vec();
        }
        Err(status) => assert!(
            !matches!(status.code(), tonic::Code::Internal | tonic::Code::Unknown),
            "{method} answered {status:?}"
        ),
    }
}

/// How many request messages `requests` tells apart by the first byte.
pub const REQUEST_KINDS: u8 = 45;

/// Decodes `data[1..]` as the request message `data[0]` selects (modulo
/// `REQUEST_KINDS`, in the order of the proto files) and calls its handler.
pub fn requests(data: &[u8]) {
    use memmachine_proto::v1::group_service_server::GroupService as _;
    use memmachine_proto::v1::memory_service_server::MemoryService as _;
    use memmachine_proto::v1::session_service_server::SessionService as _;
    use memmachine_proto::v2::memory_service_server::MemoryService as _;
    use memmachine_proto::v2::project_service_server::ProjectService as _;
    use memmachine_proto::v2::semantic_service_server::SemanticService as _;

    let Some((&kind, bytes)) = data.split_first() else {
        return;
    };
    let s = server();
    macro_rules! call {
        ($service:ident . $method:ident) => {
            if let Ok(message) = prost::Message::decode(bytes) {
                answer(
                    stringify!($method),
                    s.runtime.block_on(s.$service.$method(request(message))),
                );
            }
        };
    }
    match kind % REQUEST_KINDS {
        0 => call!(memory.add_memories),
        1 => call!(memory.search_memories),
        2 => call!(memory.list_memories),
        3 => call!(memory.delete_episodic_memories),
        4 => call!(memory.delete_semantic_memories),
        5 => call!(projects.create_project),
        6 => call!(projects.get_project),
        7 => call!(projects.list_projects),
        8 => call!(projects.delete_project),
        9 => call!(projects.get_episode_count),
        10 => call!(projects.get_episodic_memory_config),
        11 => call!(projects.update_episodic_memory_config),
        12 => call!(semantic.add_feature),
        13 => call!(semantic.get_feature),
        14 => call!(semantic.update_feature),
        15 => call!(semantic.create_set_type),
        16 => call!(semantic.list_set_types),
        17 => call!(semantic.delete_set_type),
        18 => call!(semantic.get_set_id),
        19 => call!(semantic.list_set_ids),
        20 => call!(semantic.configure_set),
        21 => call!(semantic.add_category),
        22 => call!(semantic.get_category),
        23 => call!(semantic.add_category_template),
        24 => call!(semantic.list_category_templates),
        25 => call!(semantic.disable_category),
        26 => call!(semantic.get_category_set_ids),
        27 => call!(semantic.delete_category),
        28 => call!(semantic.add_tag),
        29 => call!(semantic.delete_tag),
        30 => call!(semantic.search_features),
        31 => call!(groups_v1.create_group),
        32 => call!(groups_v1.update_group),
        33 => call!(groups_v1.get_group),
        34 => call!(groups_v1.list_groups),
        35 => call!(groups_v1.delete_group),
        36 => call!(memory_v1.add_episode),
        37 => call!(memory_v1.add_episodes),
        38 => call!(memory_v1.search_episodes),
        39 => call!(memory_v1.list_episodes),
        40 => call!(memory_v1.delete_episodes),
        41 => call!(sessions_v1.open_session),
        42 => call!(sessions_v1.get_session),
        43 => call!(sessions_v1.list_sessions),
        _ => call!(sessions_v1.delete_session),
    }
}

/// The gateway's routes that read a JSON body, under `/api/v2`.
pub const REST_ROUTES: &[(&str, &str)] = &[
    ("POST", "/memories"),
    ("POST", "/memories/search"),
    ("POST", "/memories/list"),
    ("POST", "/memories/episodic/delete"),
    ("POST", "/memories/semantic/delete"),
    ("POST", "/projects"),
    ("POST", "/projects/get"),
    ("POST", "/projects/list"),
    ("POST", "/projects/delete"),
    ("POST", "/projects/episode_count/get"),
    ("POST", "/memory/episodic/config"),
    ("POST", "/memory/episodic/config/get"),
    ("POST", "/memory/episodic/long_term/config"),
    ("POST", "/memory/episodic/long_term/config/get"),
    ("POST", "/memory/episodic/short_term/config"),
    ("POST", "/memory/episodic/short_term/config/get"),
    ("POST", "/memories/semantic/feature"),
    ("POST", "/memories/semantic/feature/get"),
    ("POST", "/memories/semantic/feature/update"),
    ("POST", "/memories/semantic/set_type"),
    ("POST", "/memories/semantic/set_type/list"),
    ("POST", "/memories/semantic/set_type/delete"),
    ("POST", "/memories/semantic/set_id/get"),
    ("POST", "/memories/semantic/set_id/list"),
    ("POST", "/memories/semantic/set/configure"),
    ("POST", "/memories/semantic/category"),
    ("POST", "/memories/semantic/category/get"),
    ("POST", "/memories/semantic/category/template"),
    ("POST", "/memories/semantic/category/template/list"),
    ("POST", "/memories/semantic/category/disable"),
    ("POST", "/memories/semantic/category/set_ids/get"),
    ("POST", "/memories/semantic/category/delete"),
    ("POST", "/memories/semantic/category/tag"),
    ("POST", "/memories/semantic/category/tag/delete"),
    ("PUT", "/config/memory"),
    ("PUT", "/config/memory/episodic"),
    ("PUT", "/config/memory/episodic/long_term"),
    ("PUT", "/config/memory/episodic/short_term"),
    ("PUT", "/config/memory/semantic"),
    ("POST", "/config/resources/embedders"),
    ("POST", "/config/resources/language_models"),
    ("POST", "/config/resources/embedders/hash/retry"),
    ("POST", "/config/resources/language_models/none/retry"),
    ("POST", "/config/resources/rerankers/none/retry"),
    ("DELETE", "/config/resources/embedders/hash"),
    ("DELETE", "/config/resources/language_models/none"),
];

/// Sends `data[1..]` as the body of the route `data[0]` selects (modulo the number of
/// routes) through the gateway's router; it must not answer 500, and an error must be
/// the gateway's JSON error body.
pub fn rest_json(data: &[u8]) {
    use tower::ServiceExt as _;
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let (method, path) = REST_ROUTES[usize::from(kind) % REST_ROUTES.len()];
    let s = server();
    let request = http::Request::builder()
        .method(method)
        .uri(format!("/api/v2{path}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_vec()))
        .expect("a request");
    let (status, bytes) = s.runtime.block_on(async {
        let response = s.router.clone().oneshot(request).await.expect("infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("the response body");
        (status, bytes)
    });
    let text = String::from_utf8_lossy(&bytes);
    assert_ne!(
        status,
        http::StatusCode::INTERNAL_SERVER_ERROR,
        "{method} {path} answered 500: {text}"
    );
    if !status.is_success() {
        let json: serde_json::Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|err| panic!("{method} {path} answered {status} {text:?}: {err}"));
        assert!(
            json.get("detail").is_some(),
            "{method} {path} answered {status} without detail: {text}"
        );
    }
}
