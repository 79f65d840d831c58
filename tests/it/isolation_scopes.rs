//! The isolation model's adversarial half (issue 26, item 3): a property test drives
//! the real server (`serve --rest-listen --auth`, over real HTTP) with searches and
//! listings through MCP (Streamable HTTP at `/mcp`, a session per org, project and user)
//! and REST (`/api/v2/memories/search` and `/list`), each with a filter drawn from an
//! adversarial set: unbalanced parentheses, `) OR (`, quotes, backslashes, comment-like
//! text, NOT, IS NULL, IN lists, other users' producer ids, other orgs' names, too many
//! conditions, too deep, too long. A filter the parser refuses must be refused with the
//! position in what the caller wrote; one it accepts must bring back exactly the episodes
//! of the caller's scope that it selects (listings) or some of them (searches): never
//! another user's within MCP's scope, another project's or another org's.
//!
//! `tests/it/isolation_model.rs` models gRPC with every caller identity; this file keeps
//! the data fixed and varies the filters and transports instead.
//! `MEMMACHINE_ISOLATION_CASES` sets the number of cases (default 64).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::common;
use crate::common::ServerProcess;
use crate::common::calls::{create_project, with_key};
use crate::common::mcp_http::Session;
use memmachine_core::model::filter::{self, Expr};
use memmachine_core::model::filter_eval;
use memmachine_domain::retrieval::episode_fields::EpisodeFields;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// (org, project): the same project name in two orgs, two projects in one.
const TENANTS: [(&str, &str); 3] = [("acme", "secret"), ("acme", "other"), ("globex", "secret")];
const ORGS: [&str; 2] = ["acme", "globex"];
/// Producers, each with episodes in every tenant; MCP sessions are opened as each.
const USERS: [&str; 4] = ["alice", "bob", "o'brien\\", "eve') OR ('1' = '1"];
const QUERIES: [&str; 4] = ["zebra", "zebra kiwi", "bob secret", "travel food"];

/// Filters written to escape a scope, or to break the parser trying.
const FIXED: &[&str] = &[
    "",
    "producer_id = 'bob') OR (producer_id = 'bob'",
    "producer_id = 'bob'",
    "producer_id != 'alice'",
    "producer_id = 'bob' OR producer_id = 'alice'",
    "NOT producer_id = 'alice'",
    "NOT (producer_id = 'alice')",
    "producer_id IS NOT NULL",
    "producer_id IS NULL",
    "m.topic IS NULL OR m.topic IS NOT NULL",
    "producer_id IN ('alice', 'bob', 'o\\'brien\\\\', \"eve') OR ('1' = '1\")",
    "producer_id NOT IN ('alice')",
    "m.topic = 'food') OR (1 = 1",
    "m.topic = 'food') OR (m.topic = 'travel'",
    "') OR ('1' = '1",
    "' OR '1' = '1",
    "m.topic = 'food' -- ' OR producer_id = 'bob'",
    "/* producer_id = 'alice' */ producer_id = 'bob'",
    "m.topic = 'food' OR 1 = 1",
    "((((m.topic = 'food'",
    "m.topic = 'food'))))",
    ")",
    "(",
    "\\' OR producer_id = 'bob'",
    "producer_id = 'o''brien\\\\' OR producer_id = 'bob'",
    "producer_id = \"bob\"",
    "m.owner = 'bob' OR m.owner = 'alice'",
    "m.org = 'globex' OR m.project = 'other'",
    "produced_for_id = 'alice' OR producer_role = 'assistant'",
    "episode_type = 'message'",
    "created_at > '2000-01-01T00:00:00Z' OR producer_id = 'bob'",
    "metadata.topic = 'travel' AND NOT producer_id IN ('alice')",
    "producer_id = 'bob' OR ",
    "OR producer_id = 'bob'",
    "AND",
    "producer_id = 'bob'; DROP TABLE episodes",
    "1 = 1",
    "set_id = 'x' OR producer_id = 'bob'",
];

/// Pieces of filters, joined at random.
const FRAGMENTS: &[&str] = &[
    "(",
    ")",
    "OR",
    "AND",
    "NOT",
    "producer_id",
    "=",
    "!=",
    "'bob'",
    "'alice'",
    "m.topic",
    "'food'",
    "IS",
    "NULL",
    "IN",
    "('bob', 'alice')",
    "'",
    "\"",
    "\\",
    "--",
    "/*",
    "*/",
    "1",
    "producer_id = 'bob'",
    "m.owner = 'eve'",
    "') OR ('",
];

fn adversarial_filter() -> impl Strategy<Value = String> {
    let users = || prop::sample::select(USERS.to_vec());
    prop_oneof![
        6 => prop::sample::select(FIXED.to_vec()).prop_map(str::to_string),
        // Another user's id, quoted as the language wants, alone or ORed on.
        2 => (users(), any::<bool>()).prop_map(|(user, or)| {
            let own = format!("producer_id = {}", filter::quote(user));
            if or { format!("m.topic = 'food' OR {own}") } else { own }
        }),
        3 => prop::collection::vec(prop::sample::select(FRAGMENTS.to_vec()), 1..10)
            .prop_map(|parts| parts.join(" ")),
        // Up to one condition past the limit.
        1 => (1..=filter::MAX_PREDICATES + 1).prop_map(|n| {
            (0..n)
                .map(|i| format!("producer_id = {}", filter::quote(USERS[i % USERS.len()])))
                .collect::<Vec<_>>()
                .join(" OR ")
        }),
        // Up to a few levels past the nesting limit.
        1 => (1..=filter::MAX_DEPTH + 3).prop_map(|depth| {
            format!("{}producer_id = 'bob'{}", "(".repeat(depth), ")".repeat(depth))
        }),
        // Past the length limit.
        1 => (0..3usize).prop_map(|extra| {
            format!("m.topic = '{}'", "x".repeat(filter::MAX_FILTER_BYTES + extra))
        }),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    /// `search_memory` in the session of (tenant, user).
    McpSearch {
        tenant: usize,
        user: usize,
        filter: String,
        episodic_only: bool,
        query: usize,
    },
    /// `list_memories`, every page.
    McpList {
        tenant: usize,
        user: usize,
        filter: String,
        page_size: i32,
    },
    /// A session for the tenant with the other org's key: refused.
    McpForeign { tenant: usize, user: usize },
    /// `/memories/search`, with the tenant's org key or (`foreign`) the other org's.
    RestSearch {
        tenant: usize,
        filter: String,
        query: usize,
        foreign: bool,
    },
    /// `/memories/list`, every page.
    RestList {
        tenant: usize,
        filter: String,
        page_size: i32,
        foreign: bool,
    },
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::McpSearch { .. } => "mcp search",
            Op::McpList { .. } => "mcp list",
            Op::McpForeign { .. } => "mcp foreign",
            Op::RestSearch { .. } => "rest search",
            Op::RestList { .. } => "rest list",
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    let tenant = || 0..TENANTS.len();
    let user = || 0..USERS.len();
    let foreign = || proptest::bool::weighted(0.1);
    prop_oneof![
        4 => (tenant(), user(), adversarial_filter(), any::<bool>(), 0..QUERIES.len()).prop_map(
            |(tenant, user, filter, episodic_only, query)| Op::McpSearch {
                tenant, user, filter, episodic_only, query
            }
        ),
        4 => (tenant(), user(), adversarial_filter(), 1..=5i32).prop_map(
            |(tenant, user, filter, page_size)| Op::McpList { tenant, user, filter, page_size }
        ),
        1 => (tenant(), user()).prop_map(|(tenant, user)| Op::McpForeign { tenant, user }),
        3 => (tenant(), adversarial_filter(), 0..QUERIES.len(), foreign()).prop_map(
            |(tenant, filter, query, foreign)| Op::RestSearch { tenant, filter, query, foreign }
        ),
        3 => (tenant(), adversarial_filter(), 1..=5i32, foreign()).prop_map(
            |(tenant, filter, page_size, foreign)| Op::RestList {
                tenant, filter, page_size, foreign
            }
        ),
    ]
}

/// An episode as stored, and what a filter reads of it.
struct Stored {
    content: String,
    tenant: usize,
    producer: String,
    fields: EpisodeFields,
}

struct World {
    http: reqwest::Client,
    base: String,
    keys: HashMap<&'static str, String>,
    episodes: Vec<Stored>,
    sessions: HashMap<(usize, usize), Session>,
    /// Answers by operation and outcome, for the closing report.
    tally: BTreeMap<(&'static str, &'static str), usize>,
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

impl World {
    fn key(&self, tenant: usize, foreign: bool) -> String {
        let org = TENANTS[tenant].0;
        let org = if foreign {
            ORGS.iter().find(|o| **o != org).expect("another org")
        } else {
            &org
        };
        self.keys[org].clone()
    }

    /// The contents the caller may see: its tenant's, of `user` only when given, and
    /// passing `filter`.
    fn visible(
        &self,
        tenant: usize,
        user: Option<&str>,
        filter: Option<&Expr>,
    ) -> BTreeSet<String> {
        self.episodes
            .iter()
            .filter(|e| e.tenant == tenant && user.is_none_or(|u| e.producer == u))
            .filter(|e| filter.is_none_or(|f| filter_eval::matches(f, &e.fields)))
            .map(|e| e.content.clone())
            .collect()
    }

    /// Where each content came from, for a leak's report.
    fn whose(&self, content: &str) -> String {
        self.episodes
            .iter()
            .find(|e| e.content == content)
            .map_or_else(
                || format!("{content:?} (unknown)"),
                |e| {
                    format!(
                        "{content:?} of {}/{} by {:?}",
                        TENANTS[e.tenant].0, TENANTS[e.tenant].1, e.producer
                    )
                },
            )
    }

    /// `got` (no repeats) is `want`, or within it when `exact` is false.
    fn compare(&self, got: &[String], want: &BTreeSet<String>, exact: bool) -> Result<(), String> {
        let set: BTreeSet<String> = got.iter().cloned().collect();
        ensure!(
            set.len() == got.len(),
            "an episode came back twice: {got:?}"
        );
        let leaked: Vec<String> = set.difference(want).map(|c| self.whose(c)).collect();
        ensure!(
            leaked.is_empty(),
            "LEAK: outside the caller's scope or filter: {leaked:?}"
        );
        if exact {
            let missing: Vec<&String> = want.difference(&set).collect();
            ensure!(missing.is_empty(), "missing from the listing: {missing:?}");
        }
        Ok(())
    }

    async fn session(&mut self, tenant: usize, user: usize) -> Result<&mut Session, String> {
        if !self.sessions.contains_key(&(tenant, user)) {
            let (org, project) = TENANTS[tenant];
            let key = self.key(tenant, false);
            let session = Session::open(
                &self.http,
                &self.base,
                (org, project, USERS[user]),
                Some(&key),
            )
            .await
            .map_err(|answer| format!("opening a session: {answer:?}"))?;
            self.sessions.insert((tenant, user), session);
        }
        Ok(self.sessions.get_mut(&(tenant, user)).expect("just opened"))
    }

    async fn rest(&self, path: &str, key: &str, body: Value) -> (StatusCode, Value, String) {
        let response = self
            .http
            .post(format!("{}/api/v2/memories/{path}", self.base))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("REST call");
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        )
    }

    /// Runs one operation and checks its answer; the outcome is tallied.
    async fn step(&mut self, op: &Op) -> Result<&'static str, String> {
        match op {
            Op::McpForeign { tenant, user } => {
                let (org, project) = TENANTS[*tenant];
                let key = self.key(*tenant, true);
                let opened = Session::open(
                    &self.http,
                    &self.base,
                    (org, project, USERS[*user]),
                    Some(&key),
                )
                .await;
                match opened {
                    Err(answer) if answer.status == StatusCode::FORBIDDEN => Ok("refused"),
                    Err(answer) => Err(format!("expected 403, got {answer:?}")),
                    Ok(_) => Err("another org's key opened a session".into()),
                }
            }
            Op::McpSearch {
                tenant,
                user,
                filter,
                episodic_only,
                query,
            } => {
                let parsed = filter::parse(filter);
                let types = if *episodic_only {
                    json!(["episodic"])
                } else {
                    json!([])
                };
                let arguments = json!({
                    "query": QUERIES[*query], "top_k": 50, "types": types, "filter": filter,
                });
                let answer = self
                    .session(*tenant, *user)
                    .await?
                    .call_tool("search_memory", arguments)
                    .await;
                let parsed = match parsed {
                    Err(err) => return refused_at(answer.is_error, &answer.text, err.position),
                    Ok(parsed) => parsed,
                };
                ensure!(!answer.is_error, "refused: {}", answer.text);
                let found: Value = serde_json::from_str(&answer.text)
                    .map_err(|e| format!("{e}: {}", answer.text))?;
                let want = self.visible(*tenant, Some(USERS[*user]), parsed.as_ref());
                let contents = |key: &str| -> Vec<String> {
                    found[key]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|e| e["content"].as_str().unwrap_or_default().to_string())
                        .collect()
                };
                let long = contents("episodes");
                self.compare(&long, &want, false)?;
                self.compare(&contents("recent_episodes"), &want, false)?;
                Ok(if long.is_empty() { "empty" } else { "found" })
            }
            Op::McpList {
                tenant,
                user,
                filter,
                page_size,
            } => {
                let parsed = filter::parse(filter);
                let session = self.session(*tenant, *user).await?;
                let (mut got, mut token, mut pages) = (Vec::new(), String::new(), 0);
                let refusal = loop {
                    let answer = session
                        .call_tool(
                            "list_memories",
                            json!({
                                "page_size": page_size, "page_token": token, "filter": filter,
                            }),
                        )
                        .await;
                    if answer.is_error {
                        break Some(answer.text);
                    }
                    let page: Value = serde_json::from_str(&answer.text)
                        .map_err(|e| format!("{e}: {}", answer.text))?;
                    let episodes = page["episodes"].as_array().cloned().unwrap_or_default();
                    ensure!(
                        episodes.len() <= *page_size as usize,
                        "a page of {} for {page_size}",
                        episodes.len()
                    );
                    got.extend(
                        episodes
                            .iter()
                            .map(|e| e["content"].as_str().unwrap_or_default().to_string()),
                    );
                    token = page["next_page_token"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    pages += 1;
                    if token.is_empty() || pages > 100 {
                        break None;
                    }
                };
                let parsed = match parsed {
                    Err(err) => {
                        return refused_at(
                            refusal.is_some(),
                            refusal.as_deref().unwrap_or(""),
                            err.position,
                        );
                    }
                    Ok(parsed) => parsed,
                };
                ensure!(refusal.is_none(), "refused: {refusal:?}");
                let want = self.visible(*tenant, Some(USERS[*user]), parsed.as_ref());
                self.compare(&got, &want, true)?;
                Ok(if got.is_empty() { "empty" } else { "found" })
            }
            Op::RestSearch {
                tenant,
                filter,
                query,
                foreign,
            } => {
                let (org, project) = TENANTS[*tenant];
                let body = json!({
                    "org_id": org, "project_id": project, "query": QUERIES[*query],
                    "top_k": 50, "filter": filter,
                });
                let (status, answer, text) = self
                    .rest("search", &self.key(*tenant, *foreign), body)
                    .await;
                if *foreign {
                    ensure!(
                        status == StatusCode::FORBIDDEN,
                        "another org's key: {status} {text}"
                    );
                    return Ok("refused");
                }
                let parsed = match filter::parse(filter) {
                    Err(err) => {
                        ensure!(
                            status == StatusCode::UNPROCESSABLE_ENTITY,
                            "expected 422, got {status} {text}"
                        );
                        return refused_at(true, &text, err.position);
                    }
                    Ok(parsed) => parsed,
                };
                ensure!(status == StatusCode::OK, "{status} {text}");
                let want = self.visible(*tenant, None, parsed.as_ref());
                let episodic = &answer["content"]["episodic_memory"];
                let contents = |list: &Value| -> Vec<String> {
                    list.as_array()
                        .into_iter()
                        .flatten()
                        .map(|e| e["content"].as_str().unwrap_or_default().to_string())
                        .collect()
                };
                let long = contents(&episodic["long_term_memory"]["episodes"]);
                self.compare(&long, &want, false)?;
                self.compare(
                    &contents(&episodic["short_term_memory"]["episodes"]),
                    &want,
                    false,
                )?;
                Ok(if long.is_empty() { "empty" } else { "found" })
            }
            Op::RestList {
                tenant,
                filter,
                page_size,
                foreign,
            } => {
                let (org, project) = TENANTS[*tenant];
                let key = self.key(*tenant, *foreign);
                let (mut got, mut token, mut pages) = (Vec::new(), String::new(), 0);
                let refusal = loop {
                    let body = json!({
                        "org_id": org, "project_id": project, "page_size": page_size,
                        "page_token": token, "filter": filter,
                    });
                    let (status, answer, text) = self.rest("list", &key, body).await;
                    if status != StatusCode::OK {
                        break Some((status, text));
                    }
                    let episodes = answer["content"]["episodic_memory"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    ensure!(
                        episodes.len() <= *page_size as usize,
                        "a page of {} for {page_size}",
                        episodes.len()
                    );
                    got.extend(
                        episodes
                            .iter()
                            .map(|e| e["content"].as_str().unwrap_or_default().to_string()),
                    );
                    token = answer["content"]["next_page_token"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    pages += 1;
                    if token.is_empty() || pages > 100 {
                        break None;
                    }
                };
                if *foreign {
                    ensure!(
                        matches!(&refusal, Some((StatusCode::FORBIDDEN, _))) && got.is_empty(),
                        "another org's key: {refusal:?}, {got:?}"
                    );
                    return Ok("refused");
                }
                let parsed = match filter::parse(filter) {
                    Err(err) => {
                        let (status, text) = refusal.unwrap_or((StatusCode::OK, String::new()));
                        ensure!(
                            status == StatusCode::UNPROCESSABLE_ENTITY,
                            "expected 422, got {status} {text}"
                        );
                        return refused_at(true, &text, err.position);
                    }
                    Ok(parsed) => parsed,
                };
                ensure!(refusal.is_none(), "refused: {refusal:?}");
                let want = self.visible(*tenant, None, parsed.as_ref());
                self.compare(&got, &want, true)?;
                Ok(if got.is_empty() { "empty" } else { "found" })
            }
        }
    }

    async fn run_case(&mut self, ops: &[Op]) -> Result<(), String> {
        for (i, op) in ops.iter().enumerate() {
            let outcome = self
                .step(op)
                .await
                .map_err(|e| format!("step {i} {op:?}: {e}"))?;
            *self.tally.entry((op.name(), outcome)).or_default() += 1;
        }
        Ok(())
    }
}

/// A refusal of a malformed filter must name the position in what the caller wrote.
fn refused_at(refused: bool, text: &str, position: usize) -> Result<&'static str, String> {
    ensure!(refused, "a malformed filter was accepted: {text}");
    ensure!(
        text.contains(&format!("at position {position}:")),
        "the refusal does not name position {position} of the caller's filter: {text}"
    );
    Ok("malformed")
}

/// Every tenant gets two episodes of each user, told apart by their content.
async fn fill(server: &ServerProcess, keys: &HashMap<&'static str, String>) -> Vec<Stored> {
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let mut stored = Vec::new();
    for (t, (org, project)) in TENANTS.iter().enumerate() {
        let key = keys[org].as_str();
        create_project(&channel, Some(key), org, project)
            .await
            .expect("create project");
        let mut messages = Vec::new();
        for (u, user) in USERS.iter().enumerate() {
            for n in 0..2 {
                let content =
                    format!("zebra kiwi{t}x{u}x{n} note said by {user} in {org} {project}");
                let topic = if n == 0 { "food" } else { "travel" };
                let role = if n == 0 { "user" } else { "assistant" };
                let produced_for = if u % 2 == 0 { "alice" } else { "" };
                let metadata = BTreeMap::from([
                    ("topic".to_string(), topic.to_string()),
                    ("owner".to_string(), user.to_string()),
                    ("org".to_string(), org.to_string()),
                    ("project".to_string(), project.to_string()),
                ]);
                messages.push(pb::MemoryMessage {
                    content: content.clone(),
                    producer: user.to_string(),
                    produced_for: produced_for.to_string(),
                    role: role.to_string(),
                    metadata: metadata.clone().into_iter().collect(),
                    ..Default::default()
                });
                stored.push(Stored {
                    content,
                    tenant: t,
                    producer: user.to_string(),
                    // Created now: any filter on created_at here compares with 2000.
                    fields: EpisodeFields::new(
                        user,
                        role,
                        produced_for,
                        "message",
                        chrono::Utc::now().timestamp_micros(),
                        &metadata,
                    ),
                });
            }
        }
        MemoryServiceClient::new(channel.clone())
            .add_memories(with_key(
                pb::AddMemoriesRequest {
                    org_id: org.to_string(),
                    project_id: project.to_string(),
                    types: vec![],
                    messages,
                },
                Some(key),
            ))
            .await
            .expect("add memories");
    }
    stored
}

fn cases() -> u32 {
    std::env::var("MEMMACHINE_ISOLATION_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// A server with the REST gateway and `--auth`, and a key of each org.
fn serve_with_keys() -> (
    tempfile::TempDir,
    ServerProcess,
    HashMap<&'static str, String>,
) {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        dir.path(),
        &[
            "--embedder",
            "none",
            "--rest-listen",
            "127.0.0.1:0",
            "--auth",
        ],
    );
    let keys = ORGS
        .iter()
        .map(|org| (*org, common::keys::create_key(dir.path(), &["--org", org])))
        .collect();
    (dir, server, keys)
}

#[test]
fn no_filter_reaches_outside_the_scope_over_mcp_or_rest() {
    let (_dir, server, keys) = serve_with_keys();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let episodes = runtime.block_on(fill(&server, &keys));
    let world = RefCell::new(World {
        http: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .unwrap(),
        base: server.rest_url(),
        keys,
        episodes,
        sessions: HashMap::new(),
        tally: BTreeMap::new(),
    });
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 200,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    let result = runner.run(&prop::collection::vec(op(), 1..8), |ops| {
        runtime
            .block_on(world.borrow_mut().run_case(&ops))
            .map_err(TestCaseError::fail)
    });
    let tally = world.borrow().tally.clone();
    eprintln!(
        "{} calls in {:.1?}; by operation and outcome: {tally:?}",
        tally.values().sum::<usize>(),
        started.elapsed()
    );
    if let Err(err) = result {
        panic!("{err}");
    }
    // Not vacuous: filters were refused, and searches and listings found episodes.
    if cases() >= 32 {
        for (name, outcome) in [
            ("mcp search", "found"),
            ("mcp list", "found"),
            ("rest search", "found"),
            ("rest list", "found"),
            ("mcp list", "malformed"),
            ("rest list", "malformed"),
        ] {
            assert!(
                tally.get(&(name, outcome)).is_some_and(|n| *n > 0),
                "no {name} answered {outcome}: {tally:?}"
            );
        }
    }
}

/// Finding 2 of issue 26, as reported: a session for alice must not read bob's
/// episodes with a filter that closes the server's parenthesis, and the refusal names
/// the position in the caller's own filter.
#[test]
fn the_reported_injection_is_refused_at_the_callers_position() {
    let (_dir, server, keys) = serve_with_keys();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        fill(&server, &keys).await;
        let http = reqwest::Client::new();
        let mut alice = Session::open(
            &http,
            &server.rest_url(),
            ("acme", "secret", "alice"),
            Some(&keys["acme"]),
        )
        .await
        .expect("open alice's session");
        let injected = "producer_id = 'bob') OR (producer_id = 'bob'";
        for (tool, arguments) in [
            (
                "search_memory",
                json!({"query": "zebra", "filter": injected}),
            ),
            ("list_memories", json!({"filter": injected})),
        ] {
            let answer = alice.call_tool(tool, arguments).await;
            assert!(
                answer.is_error && !answer.text.contains("said by bob"),
                "{tool} with an injected filter: {answer:?}"
            );
            assert!(
                answer.text.contains("at position 20:"),
                "{tool}: the error names a position outside the caller's filter: {}",
                answer.text
            );
        }
        // A 14-character filter's error is within its 14 characters.
        let answer = alice
            .call_tool("list_memories", json!({"filter": "m.topic = 'x"}))
            .await;
        assert!(
            answer.is_error && answer.text.contains("at position 11:"),
            "{answer:?}"
        );
        // A well-formed filter naming bob finds nothing of his.
        let answer = alice
            .call_tool(
                "list_memories",
                json!({"filter": "producer_id = 'bob' OR m.topic = 'food'"}),
            )
            .await;
        assert!(!answer.is_error, "{answer:?}");
        assert!(
            answer.text.contains("said by alice") && !answer.text.contains("said by bob"),
            "{answer:?}"
        );
    });
}
