//! The wire contract from outside: stock clients that know nothing of this crate talk to
//! the real `memmachine` binary over TCP.
//!
//! - `python_grpcio_client`: Python grpcio with stubs generated from `proto/` at run time
//!   (`tests/external/python_client.py`).
//! - `memmachine_client_over_rest`: MemMachine's published Python client
//!   (`memmachine-client` 0.4.0, unpatched) against the REST gateway
//!   (`tests/external/rest_client.py`).
//! - `node_grpc_js_client`: Node.js `@grpc/grpc-js` with the protos loaded at run time by
//!   `@grpc/proto-loader` (`tests/external/node_client.js`).
//! - `buf_curl_via_reflection`: `buf curl`, which learns the schema from the server's
//!   reflection service alone, speaking JSON.
//! - `buf_curl_semantic_service`: the same, over `memmachine.v2.SemanticService` (manual
//!   features, no language model).
//!
//! The clients live under `.tools/` (install them with `scripts/setup-test-tools.sh`);
//! `MEMMACHINE_TEST_BUF`, `MEMMACHINE_TEST_PYTHON`, `MEMMACHINE_TEST_NODE` (the `node`
//! binary, else `node` from PATH) and `MEMMACHINE_TEST_NODE_MODULES` (a `node_modules`
//! directory) point elsewhere. A missing client fails the test: it never passes by
//! skipping.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::common;
use crate::common::ServerProcess;
use crate::common::child::{Run, Supervised};
use serde_json::{Value, json};

const SETUP_HINT: &str =
    "run `bash scripts/setup-test-tools.sh` to install the external test clients under .tools/";

pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The client named by `env_var`, else `default` under the repository root. Panics with
/// the setup hint when the default is missing.
pub(crate) fn tool(env_var: &str, default: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var).filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let path = repo_root().join(default);
    assert!(
        path.is_file(),
        "external test client missing: {} does not exist (or set {env_var}); {SETUP_HINT}",
        path.display()
    );
    path
}

fn run(command: &mut Command) -> Output {
    command.run()
}

fn describe(output: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn memmachine_client_over_rest() {
    let python = tool(
        "MEMMACHINE_TEST_CLIENT_PYTHON",
        ".tools/client-venv/bin/python",
    );
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        data.path(),
        &["--rest-listen", "127.0.0.1:0", "--embedder", "hash"],
    );
    let output = run(Command::new(&python)
        .arg(repo_root().join("tests/external/rest_client.py"))
        .args(["--base-url", &server.rest_url()])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(repo_root()));
    assert!(
        output.status.success(),
        "memmachine-client failed\n{}",
        describe(&output)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("OK: memmachine-client checks passed"),
        "memmachine-client exited 0 without its closing line\n{}",
        describe(&output)
    );
}

/// The same request sequences MemMachine 0.4.0's own server answered (recorded in
/// `tests/compat/memmachine-0.4.0.json` by `tests/compat/differential.py record`) give the
/// same status codes and answer shapes here, but for the listed deliberate differences.
/// Both servers have semantic memory: their models are `tests/compat/fake_openai.py`.
#[test]
fn rest_gateway_answers_as_memmachine_does() {
    let python = tool(
        "MEMMACHINE_TEST_CLIENT_PYTHON",
        ".tools/client-venv/bin/python",
    );
    let port = common::free_port();
    let mut fake = Supervised::spawn(
        "the scripted model (fake_openai.py)",
        Command::new(&python)
            .arg(repo_root().join("tests/compat/fake_openai.py"))
            .arg(port.port().to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null()),
        None,
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(port).is_err() {
        fake.assert_running();
        assert!(
            std::time::Instant::now() < deadline,
            "fake_openai.py did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let models = format!("http://{port}/v1");
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        data.path(),
        &[
            "--rest-listen",
            "127.0.0.1:0",
            "--embedder",
            "openai",
            "--embedder-base-url",
            &models,
            "--embedder-model",
            "fake-embed",
            "--llm-base-url",
            &models,
            "--llm-model",
            "fake-chat",
        ],
    );
    let output = run(Command::new(&python)
        .arg(repo_root().join("tests/compat/differential.py"))
        .args(["compare", "--base", &server.rest_url()])
        .args(["--expect", "tests/compat/memmachine-0.4.0.json"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(repo_root()));
    fake.assert_running();
    assert!(
        output.status.success(),
        "the gateway differs from MemMachine\n{}",
        describe(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(" steps)"), "{}", describe(&output));
}

/// A child process killed when the test ends, passed or not.
#[test]
fn python_grpcio_client() {
    let python = tool("MEMMACHINE_TEST_PYTHON", ".tools/venv/bin/python");
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &[]);
    let output = run(Command::new(&python)
        .arg(repo_root().join("tests/external/python_client.py"))
        .args(["--addr", &server.addr])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(repo_root()));
    assert!(
        output.status.success(),
        "python grpcio client failed\n{}",
        describe(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("OK: python grpcio client checks passed"),
        "python client exited 0 without its closing line\n{}",
        describe(&output)
    );
}

#[test]
fn node_grpc_js_client() {
    let node = std::env::var_os("MEMMACHINE_TEST_NODE")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("node"), PathBuf::from);
    let modules = std::env::var_os("MEMMACHINE_TEST_NODE_MODULES")
        .filter(|p| !p.is_empty())
        .map_or_else(
            || repo_root().join(".tools/node/node_modules"),
            PathBuf::from,
        );
    for package in ["@grpc/grpc-js", "@grpc/proto-loader", "protobufjs"] {
        let manifest = modules.join(package).join("package.json");
        assert!(
            manifest.is_file(),
            "external test client missing: {} does not exist (or set \
             MEMMACHINE_TEST_NODE_MODULES); {SETUP_HINT}",
            manifest.display()
        );
    }
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &[]);
    let output = run(Command::new(&node)
        .arg(repo_root().join("tests/external/node_client.js"))
        .args(["--addr", &server.addr])
        .env("MEMMACHINE_TEST_NODE_MODULES", &modules)
        .current_dir(repo_root()));
    assert!(
        output.status.success(),
        "node grpc-js client failed\n{}",
        describe(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("OK: node grpc-js client checks passed"),
        "node client exited 0 without its closing line\n{}",
        describe(&output)
    );
}

/// `buf curl` against one server, over plain-text HTTP/2 with the gRPC protocol.
struct BufCurl {
    bin: PathBuf,
    base: String,
}

impl BufCurl {
    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .arg("curl")
            .args(["--protocol", "grpc", "--http2-prior-knowledge"])
            .args(["--timeout", "60s", "--log-format", "text"])
            .env(
                "BUF_CACHE_DIR",
                std::env::temp_dir().join("memmachine-buf-cache"),
            )
            .current_dir(std::env::temp_dir());
        command
    }

    fn invoke(&self, method: &str, body: &Value) -> Output {
        run(self
            .command()
            .args(["--data", &body.to_string()])
            .arg(format!("{}/{method}", self.base)))
    }

    /// Calls `method` with `body`, expects success and returns the response as JSON.
    fn call(&self, method: &str, body: Value) -> Value {
        let output = self.invoke(method, &body);
        assert!(
            output.status.success(),
            "buf curl {method} {body} failed\n{}",
            describe(&output)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "buf curl {method}: response is not JSON ({err})\n{}",
                describe(&output)
            )
        })
    }

    /// Calls `method` with `body`, expects the RPC to fail with `code` (buf curl exits
    /// with the gRPC code shifted left by three) and returns the error JSON it printed.
    fn call_err(&self, method: &str, body: Value, code: &str, numeric: i32) -> Value {
        let output = self.invoke(method, &body);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            !output.status.success(),
            "buf curl {method} {body} should have failed\n{}",
            describe(&output)
        );
        assert_eq!(
            output.status.code(),
            Some(numeric << 3),
            "buf curl {method} {body}: exit code is not {code} << 3\n{}",
            describe(&output)
        );
        assert!(
            text.contains(code),
            "buf curl {method} {body}: output does not mention {code}\n{}",
            describe(&output)
        );
        serde_json::from_slice(&output.stderr)
            .or_else(|_| serde_json::from_slice(&output.stdout))
            .unwrap_or_else(|err| {
                panic!(
                    "buf curl {method}: error is not JSON ({err})\n{}",
                    describe(&output)
                )
            })
    }

    /// The services that reflection lists, through one reflection protocol.
    fn list_services(&self, reflect_protocol: &str) -> Vec<String> {
        let output = run(self
            .command()
            .args(["--reflect-protocol", reflect_protocol, "--list-services"])
            .arg(&self.base));
        assert!(
            output.status.success(),
            "buf curl --list-services ({reflect_protocol}) failed\n{}",
            describe(&output)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| line.trim().to_string())
            .filter(|line| !line.is_empty())
            .collect()
    }
}

/// `value[name]` under its proto JSON name (lowerCamelCase) or its original name.
fn field<'a>(value: &'a Value, name: &str) -> &'a Value {
    let mut camel = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            camel.extend(c.to_uppercase());
            upper = false;
        } else {
            camel.push(c);
        }
    }
    match value.get(&camel).or_else(|| value.get(name)) {
        Some(v) => v,
        None => &Value::Null,
    }
}

fn string(value: &Value, name: &str) -> String {
    field(value, name).as_str().unwrap_or_default().to_string()
}

/// An int64 field: proto JSON writes it as a string, and omits it when zero.
fn int64(value: &Value, name: &str) -> i64 {
    match field(value, name) {
        Value::Null => 0,
        Value::String(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not an int64: {s:?}")),
        v => v
            .as_i64()
            .unwrap_or_else(|| panic!("{name} is not an int64: {v}")),
    }
}

fn array<'a>(value: &'a Value, name: &str) -> &'a [Value] {
    match field(value, name) {
        Value::Null => &[],
        v => v
            .as_array()
            .unwrap_or_else(|| panic!("{name} is not an array: {v}")),
    }
}

#[test]
fn buf_curl_via_reflection() {
    let buf = tool("MEMMACHINE_TEST_BUF", ".tools/npm/node_modules/.bin/buf");
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &[]);
    let curl = BufCurl {
        bin: buf,
        base: server.url(),
    };

    // Health, overall and per service.
    let health = curl.call("grpc.health.v1.Health/Check", json!({}));
    assert_eq!(string(&health, "status"), "SERVING", "{health}");
    let health = curl.call(
        "grpc.health.v1.Health/Check",
        json!({"service": "memmachine.v2.MemoryService"}),
    );
    assert_eq!(string(&health, "status"), "SERVING", "{health}");

    // Both reflection protocols list the services.
    for protocol in ["grpc-v1", "grpc-v1alpha"] {
        let services = curl.list_services(protocol);
        for want in [
            "memmachine.v2.ProjectService",
            "memmachine.v2.MemoryService",
            "memmachine.v2.SemanticService",
            "grpc.health.v1.Health",
        ] {
            assert!(
                services.iter().any(|s| s == want),
                "{protocol} reflection does not list {want}: {services:?}"
            );
        }
    }

    let (org, project) = ("curl-org", "curl-project");
    let key = json!({"org_id": org, "project_id": project});

    // CreateProject.
    let created = curl.call(
        "memmachine.v2.ProjectService/CreateProject",
        json!({"org_id": org, "project_id": project, "description": "via buf curl"}),
    );
    let p = field(&created, "project");
    assert_eq!(string(p, "org_id"), org, "{created}");
    assert_eq!(string(p, "project_id"), project, "{created}");
    assert_eq!(string(p, "description"), "via buf curl", "{created}");

    // AddMemories: uids in input order.
    let contents = [
        "The lighthouse keeper painted the tower red and white",
        "Penguins huddle together to survive the antarctic winter",
        "Our sourdough starter needs feeding twice a day",
    ];
    let added = curl.call(
        "memmachine.v2.MemoryService/AddMemories",
        json!({
            "org_id": org,
            "project_id": project,
            "types": ["MEMORY_TYPE_EPISODIC"],
            "messages": [
                {"content": contents[0], "producer": "alice", "role": "user",
                 "produced_for": "agent", "metadata": {"topic": "sea"},
                 "timestamp": "2026-01-02T03:04:05Z"},
                {"content": contents[1], "producer": "bob", "role": "assistant",
                 "metadata": {"topic": "animals"}},
                {"content": contents[2], "producer": "alice", "role": "user",
                 "metadata": {"topic": "baking"}},
            ],
        }),
    );
    let uids: Vec<String> = array(&added, "results")
        .iter()
        .map(|r| string(r, "uid"))
        .collect();
    assert_eq!(uids.len(), 3, "{added}");
    assert!(uids.iter().all(|u| !u.is_empty()), "{added}");

    // SearchMemories: the relevant message ranks first.
    let found = curl.call(
        "memmachine.v2.MemoryService/SearchMemories",
        json!({"org_id": org, "project_id": project, "query": "penguins antarctic", "top_k": 3}),
    );
    let ltm = array(field(&found, "episodic_memory"), "long_term_memory");
    assert!(!ltm.is_empty(), "no long-term hits: {found}");
    let top = field(&ltm[0], "episode");
    assert_eq!(string(top, "uid"), uids[1], "{found}");
    assert_eq!(string(top, "content"), contents[1], "{found}");
    assert_eq!(string(top, "producer_id"), "bob", "{found}");
    assert_eq!(
        string(top, "session_key"),
        format!("{org}/{project}"),
        "{found}"
    );
    assert_eq!(
        field(top, "metadata"),
        &json!({"topic": "animals"}),
        "{found}"
    );
    assert!(
        field(&ltm[0], "score").as_f64().unwrap_or(0.0) > 0.0,
        "{found}"
    );

    // A filtered search keeps only the matching producer.
    let filtered = curl.call(
        "memmachine.v2.MemoryService/SearchMemories",
        json!({"org_id": org, "project_id": project,
               "query": "lighthouse penguins sourdough",
               "filter": "producer_id = 'alice' AND m.topic IN ('sea', 'baking')"}),
    );
    let hits: Vec<String> = array(field(&filtered, "episodic_memory"), "long_term_memory")
        .iter()
        .map(|s| string(field(s, "episode"), "uid"))
        .collect();
    assert!(!hits.is_empty(), "{filtered}");
    assert!(
        hits.iter().all(|u| *u == uids[0] || *u == uids[2]),
        "{filtered}"
    );

    // ListMemories: sequence_num order, every field through JSON.
    let listed = curl.call("memmachine.v2.MemoryService/ListMemories", key.clone());
    let episodes = array(&listed, "episodes");
    let listed_uids: Vec<String> = episodes.iter().map(|e| string(e, "uid")).collect();
    assert_eq!(listed_uids, uids, "{listed}");
    let seqs: Vec<i64> = episodes.iter().map(|e| int64(e, "sequence_num")).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{listed}");
    assert_eq!(string(&episodes[0], "produced_for_id"), "agent", "{listed}");
    assert_eq!(string(&episodes[0], "producer_role"), "user", "{listed}");
    assert_eq!(
        string(&episodes[0], "created_at"),
        "2026-01-02T03:04:05Z",
        "{listed}"
    );
    assert_eq!(string(&listed, "next_page_token"), "", "{listed}");

    // DeleteEpisodicMemories, then the count.
    let deleted = curl.call(
        "memmachine.v2.MemoryService/DeleteEpisodicMemories",
        json!({"org_id": org, "project_id": project, "episode_ids": [uids[0]]}),
    );
    assert_eq!(int64(&deleted, "deleted_count"), 1, "{deleted}");
    let count = curl.call("memmachine.v2.ProjectService/GetEpisodeCount", key.clone());
    assert_eq!(int64(&count, "count"), 2, "{count}");

    // Rejected: a malformed id and a malformed filter answer INVALID_ARGUMENT.
    let err = curl.call_err(
        "memmachine.v2.ProjectService/CreateProject",
        json!({"org_id": org, "project_id": "bad id!"}),
        "invalid_argument",
        3,
    );
    assert_eq!(string(&err, "code"), "invalid_argument", "{err}");
    let details = array(&err, "details");
    assert!(
        details
            .iter()
            .any(|d| string(d, "type") == "google.rpc.BadRequest"),
        "no google.rpc.BadRequest detail: {err}"
    );
    let err = curl.call_err(
        "memmachine.v2.MemoryService/SearchMemories",
        json!({"org_id": org, "project_id": project, "query": "x", "filter": "producer_id = "}),
        "invalid_argument",
        3,
    );
    assert_eq!(string(&err, "code"), "invalid_argument", "{err}");

    // An unknown project answers NOT_FOUND.
    let err = curl.call_err(
        "memmachine.v2.MemoryService/ListMemories",
        json!({"org_id": org, "project_id": "no-such-project"}),
        "not_found",
        5,
    );
    assert_eq!(string(&err, "code"), "not_found", "{err}");

    // DeleteProject; afterwards it is gone.
    curl.call("memmachine.v2.ProjectService/DeleteProject", key.clone());
    curl.call_err(
        "memmachine.v2.ProjectService/GetProject",
        key,
        "not_found",
        5,
    );
}

/// `buf curl` over `memmachine.v2.SemanticService`, on a server without a language model:
/// a project set, a category on it, a manual feature citing an episode, found by
/// `SearchFeatures` under its proto JSON (camelCase) names; and every id of that project
/// is NOT_FOUND from another project.
#[test]
fn buf_curl_semantic_service() {
    let buf = tool("MEMMACHINE_TEST_BUF", ".tools/npm/node_modules/.bin/buf");
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &[]);
    let curl = BufCurl {
        bin: buf,
        base: server.url(),
    };

    let services = curl.list_services("grpc-v1");
    assert!(
        services
            .iter()
            .any(|s| s == "memmachine.v2.SemanticService"),
        "reflection does not list memmachine.v2.SemanticService: {services:?}"
    );

    let org = "curl-sem-org";
    let (project, other) = ("curl-sem", "curl-sem-other");
    for p in [project, other] {
        curl.call(
            "memmachine.v2.ProjectService/CreateProject",
            json!({"org_id": org, "project_id": p}),
        );
    }
    let added = curl.call(
        "memmachine.v2.MemoryService/AddMemories",
        json!({"org_id": org, "project_id": project,
               "messages": [{"content": "I could eat spicy ramen every day",
                             "producer": "alice", "role": "user"}]}),
    );
    let results = array(&added, "results");
    assert_eq!(results.len(), 1, "{added}");
    let episode = string(&results[0], "uid");
    assert!(!episode.is_empty(), "{added}");

    // GetSetId with no tags: the project's set.
    let got = curl.call(
        "memmachine.v2.SemanticService/GetSetId",
        json!({"org_id": org, "project_id": project}),
    );
    let set_id = string(&got, "set_id");
    assert!(set_id.starts_with("mem_project_set_"), "{got}");
    let again = curl.call(
        "memmachine.v2.SemanticService/GetSetId",
        json!({"org_id": org, "project_id": project}),
    );
    assert_eq!(
        string(&again, "set_id"),
        set_id,
        "GetSetId is not stable: {again}"
    );

    // AddCategory on it, then a manual feature in that category.
    let category = curl.call(
        "memmachine.v2.SemanticService/AddCategory",
        json!({"org_id": org, "project_id": project, "set_id": set_id,
               "category_name": "tastes", "prompt": "What the user likes to eat",
               "description": "food preferences"}),
    );
    let category_id = string(&category, "category_id");
    assert!(!category_id.is_empty(), "{category}");
    let feature = curl.call(
        "memmachine.v2.SemanticService/AddFeature",
        json!({"org_id": org, "project_id": project, "set_id": set_id,
               "category_name": "tastes", "tag": "food", "feature": "favourite dish",
               "value": "spicy ramen", "feature_metadata": {"source": "curl"},
               "citations": [episode]}),
    );
    let feature_id = string(&feature, "feature_id");
    assert!(!feature_id.is_empty(), "{feature}");

    // SearchFeatures finds it, under the proto JSON (lowerCamelCase) names.
    let found = curl.call(
        "memmachine.v2.SemanticService/SearchFeatures",
        json!({"org_id": org, "project_id": project, "query": "favourite dish ramen"}),
    );
    let features = array(&found, "features");
    let hit = features
        .iter()
        .find(|f| f["id"] == json!(feature_id))
        .unwrap_or_else(|| panic!("SearchFeatures does not find {feature_id}: {found}"));
    assert_eq!(hit["featureName"], json!("favourite dish"), "{found}");
    assert_eq!(hit["setId"], json!(set_id), "{found}");
    assert_eq!(hit["categoryId"], json!(category_id), "{found}");
    assert_eq!(hit["citations"], json!([episode]), "{found}");
    assert_eq!(hit["category"], json!("tastes"), "{found}");
    assert_eq!(hit["tag"], json!("food"), "{found}");
    assert_eq!(hit["value"], json!("spicy ramen"), "{found}");
    assert_eq!(hit["metadata"], json!({"source": "curl"}), "{found}");
    assert!(hit["score"].as_f64().unwrap_or(0.0) > 0.0, "{found}");
    for snake in ["feature_name", "set_id", "category_id"] {
        assert!(
            hit.get(snake).is_none(),
            "{snake} is not camelCase: {found}"
        );
    }

    // The other project sees none of it: each id answers NOT_FOUND.
    let other_key = |extra: Value| {
        let mut body = json!({"org_id": org, "project_id": other});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    for (method, body) in [
        (
            "GetFeature",
            other_key(json!({"feature_id": feature_id, "load_citations": true})),
        ),
        (
            "AddCategory",
            other_key(json!({"set_id": set_id, "category_name": "x", "prompt": "x"})),
        ),
        (
            "AddFeature",
            other_key(
                json!({"set_id": set_id, "category_name": "tastes", "tag": "food",
                             "feature": "favourite dish", "value": "miso"}),
            ),
        ),
        (
            "GetCategory",
            other_key(json!({"category_id": category_id})),
        ),
    ] {
        let err = curl.call_err(
            &format!("memmachine.v2.SemanticService/{method}"),
            body,
            "not_found",
            5,
        );
        assert_eq!(string(&err, "code"), "not_found", "{method}: {err}");
    }
    let elsewhere = curl.call(
        "memmachine.v2.SemanticService/SearchFeatures",
        other_key(json!({"query": "favourite dish ramen"})),
    );
    assert!(
        array(&elsewhere, "features")
            .iter()
            .all(|f| f["id"] != json!(feature_id)),
        "another project's search finds {feature_id}: {elsewhere}"
    );
}

/// `buf curl` against a server with `--auth`: API keys as `-H authorization: Bearer`
/// (reflection included), and gRPC-Web (`--protocol grpcweb`, HTTP/1.1).
#[test]
fn buf_curl_with_api_keys_and_grpc_web() {
    let buf = tool("MEMMACHINE_TEST_BUF", ".tools/npm/node_modules/.bin/buf");
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &["--auth"]);
    let created = run(Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["keys", "create", "--org", "acme"])
        .args(common::store_args(data.path())));
    assert!(created.status.success(), "{}", describe(&created));
    let key = String::from_utf8_lossy(&created.stdout).trim().to_string();
    let curl = |protocol: &str, key: Option<&str>, method: &str, body: Value| {
        let mut command = Command::new(&buf);
        command
            .arg("curl")
            .args(["--protocol", protocol, "--timeout", "60s"])
            .env(
                "BUF_CACHE_DIR",
                std::env::temp_dir().join("memmachine-buf-cache"),
            )
            .current_dir(std::env::temp_dir());
        if protocol == "grpc" {
            command.arg("--http2-prior-knowledge");
        }
        if let Some(key) = key {
            command.args(["-H", &format!("authorization: Bearer {key}")]);
        }
        run(command
            .args(["--data", &body.to_string()])
            .arg(format!("{}/{method}", server.url())))
    };
    let project = json!({"org_id": "acme", "project_id": "web"});

    let refused = curl(
        "grpc",
        None,
        "memmachine.v2.ProjectService/CreateProject",
        project.clone(),
    );
    assert!(!refused.status.success());
    let text = describe(&refused).to_lowercase();
    assert!(text.contains("unauthenticated"), "{text}");

    let created = curl(
        "grpc",
        Some(&key),
        "memmachine.v2.ProjectService/CreateProject",
        project.clone(),
    );
    assert!(created.status.success(), "{}", describe(&created));
    let other_org = curl(
        "grpc",
        Some(&key),
        "memmachine.v2.ProjectService/GetProject",
        json!({"org_id": "globex", "project_id": "web"}),
    );
    assert!(
        describe(&other_org)
            .to_lowercase()
            .contains("permission_denied"),
        "{}",
        describe(&other_org)
    );

    // gRPC-Web, as a browser would speak it.
    let fetched = curl(
        "grpcweb",
        Some(&key),
        "memmachine.v2.ProjectService/GetProject",
        project,
    );
    assert!(fetched.status.success(), "{}", describe(&fetched));
    let fetched: Value = serde_json::from_slice(&fetched.stdout).unwrap();
    assert_eq!(string(field(&fetched, "project"), "project_id"), "web");
}
