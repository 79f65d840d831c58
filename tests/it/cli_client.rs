//! The client subcommands (`memmachine projects|add|search|list|delete|features`) run
//! as the real binary against a real server over TCP: tables and `--json`, bulk add from
//! standard input in batches, paging, the one-line errors and their exit codes, API
//! keys and TLS.

use std::process::{Command, Output};

use crate::common;
use crate::common::ServerProcess;
use crate::common::child::{self, Run};
use serde_json::{Value, json};

/// One run of `memmachine ARGS` against `addr`, with `stdin` and the API key (or none).
fn run(addr: &str, args: &[&str], stdin: Option<&str>, key: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memmachine"));
    command
        .args(args)
        .args(["--addr", addr])
        .env_remove("MEMMACHINE_API_KEY")
        .env_remove("MEMMACHINE_ORG")
        .env_remove("MEMMACHINE_PROJECT")
        .env_remove("MEMMACHINE_ADDR")
        .env_remove("COLUMNS");
    if let Some(key) = key {
        command.env("MEMMACHINE_API_KEY", key);
    }
    child::run_with_input(&mut command, stdin.unwrap_or("").as_bytes().to_vec())
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The run succeeded; its stdout.
fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        stdout(&output),
        stderr(&output)
    );
    stdout(&output)
}

fn json(output: Output) -> Value {
    let text = ok(output);
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text}"))
}

/// The run failed with `code` and a single stderr line starting `memmachine: PREFIX`;
/// that line.
fn fails(output: Output, code: i32, prefix: &str) -> String {
    let err = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {err}",
        stdout(&output)
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(
        lines[0].starts_with(&format!("memmachine: {prefix}")),
        "{}",
        lines[0]
    );
    lines[0].to_string()
}

const P: [&str; 4] = ["--org", "acme", "--project", "demo"];

fn with_project<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend_from_slice(&P);
    all
}

#[test]
fn projects_memories_and_features_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &["--embedder", "none"]);
    let addr = server.addr.as_str();
    let mm = |args: &[&str]| run(addr, &with_project(args), None, None);
    let mm_in = |args: &[&str], input: &str| run(addr, &with_project(args), Some(input), None);

    // Projects: create, refuse a second, list (table and JSON), get.
    let created = ok(mm(&[
        "projects",
        "create",
        "demo",
        "--description",
        "a demo",
    ]));
    assert_eq!(created.trim(), "created project acme/demo");
    fails(mm(&["projects", "create", "demo"]), 6, "ALREADY_EXISTS: ");
    let table = ok(run(addr, &["projects", "list"], None, None));
    assert!(table.lines().next().unwrap().starts_with("ORG"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("acme") && l.contains("demo") && l.contains("a demo")),
        "{table}"
    );
    let listed = json(run(addr, &["projects", "list", "--json"], None, None));
    let names: Vec<String> = listed["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{}/{}",
                p["org_id"].as_str().unwrap(),
                p["project_id"].as_str().unwrap()
            )
        })
        .collect();
    assert!(names.contains(&"acme/demo".to_string()), "{names:?}");
    assert!(
        names.contains(&"universal/universal".to_string()),
        "{names:?}"
    );
    let one_org = json(run(
        addr,
        &["projects", "list", "--org", "acme", "--json"],
        None,
        None,
    ));
    assert_eq!(one_org["projects"].as_array().unwrap().len(), 1);
    let got = json(mm(&["projects", "get", "--json"]));
    assert_eq!(got["description"], "a demo");
    assert!(ok(mm(&["projects", "get"])).contains("description: a demo"));

    // Add from the arguments: one uid per message, in order.
    let added = ok(mm(&[
        "add",
        "I adopted a golden retriever named Max last week.",
        "I went hiking in Yosemite with my kids.",
        "--producer",
        "alice",
        "--meta",
        "topic=pets",
    ]));
    let uids: Vec<&str> = added.lines().collect();
    assert_eq!(uids.len(), 2, "{added}");
    assert!(uuid::Uuid::parse_str(uids[0]).is_ok(), "{added}");

    // Bulk add of plain lines from stdin, streamed through ImportMemories in batches of
    // 100: every line stored, a progress line every 10 batches (stderr is not a
    // terminal) and a summary with the server's counts.
    let lines: String = (0..2500)
        .map(|i| format!("bulk message number {i}\n"))
        .collect();
    let bulk = mm_in(&["add", "--batch", "100", "--producer", "loader"], &lines);
    let err = stderr(&bulk);
    assert_eq!(ok(bulk), "");
    assert!(err.contains("sent 1,000 messages ("), "{err}");
    assert!(err.contains("sent 2,000 messages ("), "{err}");
    assert!(
        err.contains("added 2,500 messages to acme/demo in 25 batches, "),
        "{err}"
    );

    // JSON Lines (auto-detected, mixed with a plain line and a blank one), with --json.
    let jsonl = concat!(
        r#"{"content":"Bob's cat is called Whiskers.","producer":"bob","role":"user","timestamp":"2023-05-08T13:56:00Z","metadata":{"topic":"pets","n":3}}"#,
        "\n\n",
        "{not json, so this line is plain text}\n",
        r#"{"content":"Bob likes tea.","producer":"bob"}"#,
        "\n"
    );
    let answer = json(mm_in(&["add", "--json"], jsonl));
    assert_eq!(
        (
            &answer["messages"],
            &answer["batches"],
            &answer["duplicates"]
        ),
        (&json!(3), &json!(1), &json!(0)),
        "{answer}"
    );
    // --format jsonl refuses a line that is not a message, naming it; its batch is
    // not stored.
    let bad = mm_in(
        &["add", "--format", "jsonl"],
        "{\"content\":\"fine\"}\nplain text\n",
    );
    let line = fails(bad, 4, "line 2: not a JSON message");
    assert!(line.contains("line 2"), "{line}");
    // A batch the server refuses ends the import: one line naming the input line of
    // the bad message and what was stored before it (the first batch of 2).
    let mut input = String::from("kept one\nkept two\nrefused three\n");
    input.push_str(&format!("{}\n", "x".repeat(300 * 1024)));
    let refused = mm_in(&["add", "--batch", "2"], &input);
    assert_eq!(stdout(&refused), "");
    let line = fails(refused, 4, "INVALID_ARGUMENT: ");
    assert!(
        line.contains("messages[1].content")
            && line.contains("input lines 3-4 not stored, 2 messages before them added")
            && line.contains("messages[1] is line 4"),
        "{line}"
    );
    let count = ok(mm(&["projects", "count"]));
    // Labelled, as the README shows it; --json keeps the bare number.
    assert_eq!(count.trim(), "episodes: 2507");
    assert_eq!(
        json(mm(&["projects", "count", "demo", "--json"]))["count"],
        2507
    );

    // Search: a table, and JSON with the stored fields.
    let table = ok(mm(&["search", "golden", "retriever", "--top-k", "3"]));
    let mut rows = table.lines();
    assert!(rows.next().unwrap().starts_with("SCORE"), "{table}");
    let first = rows.next().unwrap();
    assert!(
        first.contains(uids[0]) && first.contains("alice"),
        "{table}"
    );
    let found = json(mm(&["search", "what is Bob's cat called", "--json"]));
    let hit = &found["episodic_memory"]["long_term_memory"][0];
    assert_eq!(
        hit["episode"]["content"], "Bob's cat is called Whiskers.",
        "{found}"
    );
    assert_eq!(hit["episode"]["producer_id"], "bob");
    assert_eq!(hit["episode"]["metadata"]["n"], "3");
    assert_eq!(hit["episode"]["created_at"], "2023-05-08T13:56:00Z");
    assert!(hit["score"].as_f64().unwrap() > 0.0);
    assert!(hit.get("score_parts").is_none(), "only when asked: {hit}");
    // Explained: each hit's score parts (lexical ranking: BM25, and the lift of a turn
    // by the participant the question names), and a column.
    let found = json(mm(&[
        "search",
        "what is Bob's cat called",
        "--explain",
        "--json",
    ]));
    let hit = &found["episodic_memory"]["long_term_memory"][0];
    let part = |name: &str| hit["score_parts"][name].as_f64().unwrap();
    assert!(
        part("lexical") > 0.0 && part("participant") > 0.0,
        "{found}"
    );
    assert!(
        (part("lexical") + part("participant") - hit["score"].as_f64().unwrap()).abs() < 1e-3,
        "{found}"
    );
    let table = ok(mm(&[
        "search",
        "golden",
        "retriever",
        "--top-k",
        "3",
        "--explain",
    ]));
    assert!(
        table.starts_with("SCORE") && table.contains("PARTS"),
        "{table}"
    );
    assert!(table.contains("lexical "), "{table}");
    // Ranked together: the same episodes in `ranked`, with their source; a table of them.
    let found = json(mm(&[
        "search",
        "what is Bob's cat called",
        "--rank-together",
        "--json",
    ]));
    let first = &found["ranked"][0];
    assert_eq!(
        first["episode"]["episode"]["content"], "Bob's cat is called Whiskers.",
        "{found}"
    );
    assert_eq!(first["source"], "episodic", "{found}");
    let table = ok(mm(&["search", "cat", "--rank-together"]));
    assert!(
        table.starts_with("SCORE") && table.contains("SOURCE"),
        "{table}"
    );
    assert!(table.contains("Whiskers"), "{table}");

    // List: one page says how to go on; --all follows every page, in sequence order.
    let page = mm(&["list", "--page-size", "1000"]);
    let more = stderr(&page);
    assert_eq!(ok(page).lines().count(), 1001, "header and 1,000 rows");
    assert!(more.contains("more: --page-token "), "{more}");
    let all = json(mm(&["list", "--all", "--page-size", "1000", "--json"]));
    let episodes = all["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 2507);
    assert_eq!(all["next_page_token"], "");
    let seqs: Vec<i64> = episodes
        .iter()
        .map(|e| e["sequence_num"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    let pets = json(mm(&[
        "list",
        "--all",
        "--filter",
        "m.topic = 'pets'",
        "--json",
    ]));
    assert_eq!(pets["episodes"].as_array().unwrap().len(), 3, "{pets}");

    // Errors: one line each, naming the field, with the documented exit codes.
    let line = fails(
        mm(&["list", "--filter", "m.topic = "]),
        4,
        "INVALID_ARGUMENT: ",
    );
    assert!(
        line.contains("filter") && line.contains("position"),
        "{line}"
    );
    let line = fails(
        mm(&["search", "x", "--top-k", "0"]),
        4,
        "INVALID_ARGUMENT: ",
    );
    assert!(line.contains("top_k"), "{line}");
    let line = fails(mm(&["add", ""]), 4, "INVALID_ARGUMENT: ");
    assert!(line.contains("messages[0].content"), "{line}");
    let unknown = run(
        addr,
        &["list", "--org", "acme", "--project", "nope"],
        None,
        None,
    );
    fails(unknown, 5, "NOT_FOUND: ");
    // A usage error is clap's (exit 2).
    assert_eq!(mm(&["add", "x", "--batch", "0"]).status.code(), Some(2));

    // Features by hand: in alice's profile, cited, fetched, updated, searched, listed
    // and deleted.
    let feature_id = ok(mm(&[
        "features",
        "add",
        "--user",
        "alice",
        "--tag",
        "pets",
        "--feature",
        "dog's name",
        "--value",
        "Max",
        "--cite",
        uids[0],
        "--meta",
        "source=cli",
    ]))
    .trim()
    .to_string();
    let feature = json(mm(&[
        "features",
        "get",
        &feature_id,
        "--citations",
        "--json",
    ]));
    assert_eq!(feature["value"], "Max");
    assert_eq!(feature["category"], "profile");
    assert_eq!(feature["metadata"]["source"], "cli");
    assert_eq!(feature["citations"][0], uids[0]);
    assert!(
        feature["set_id"]
            .as_str()
            .unwrap()
            .starts_with("mem_user_set_")
    );
    let updated = ok(mm(&[
        "features",
        "update",
        &feature_id,
        "--value",
        "Maximus",
    ]));
    assert_eq!(updated.trim(), format!("updated feature {feature_id}"));
    let feature = json(mm(&["features", "get", &feature_id, "--json"]));
    assert_eq!(feature["value"], "Maximus");
    // Its history: the first value kept, the current one last.
    let history = json(mm(&["features", "history", &feature_id, "--json"]));
    assert_eq!(history["versions"][0]["value"], "Max", "{history}");
    assert_eq!(history["versions"][0]["changed_by"], "manual");
    assert_eq!(history["versions"][0]["citations"][0], uids[0]);
    assert_eq!(history["versions"][1]["value"], "Maximus");
    assert!(history["versions"][1]["valid_to"].is_null());
    let table = ok(mm(&["features", "history", &feature_id]));
    assert!(
        table.contains("(current)") && table.contains("Max"),
        "{table}"
    );
    let found = json(mm(&[
        "features", "search", "dog", "--user", "alice", "--json",
    ]));
    assert_eq!(found["features"][0]["id"], feature_id.as_str(), "{found}");
    let table = ok(mm(&["features", "search", "dog"]));
    assert!(
        table.contains("Maximus") && table.contains("dog's name"),
        "{table}"
    );
    let listed = json(mm(&["features", "list", "--json"]));
    assert_eq!(listed["features"].as_array().unwrap().len(), 1);
    // A category the set lacks: NOT_FOUND, saying which.
    let line = fails(
        mm(&[
            "features",
            "add",
            "--user",
            "alice",
            "--category",
            "nope",
            "--tag",
            "t",
            "--feature",
            "f",
            "--value",
            "v",
        ]),
        5,
        "NOT_FOUND: ",
    );
    assert!(line.contains("nope"), "{line}");
    assert_eq!(
        ok(mm(&["features", "delete", &feature_id])).trim(),
        "deleted 1 feature"
    );
    fails(mm(&["features", "get", &feature_id]), 5, "NOT_FOUND: ");

    // Delete episodes.
    assert_eq!(
        ok(mm(&["delete", uids[0], uids[1]])).trim(),
        "deleted 2 episodes"
    );
    assert_eq!(ok(mm(&["projects", "count"])).trim(), "episodes: 2505");

    // Delete the project; it is gone.
    assert_eq!(
        ok(mm(&["projects", "delete", "demo"])).trim(),
        "deleted project acme/demo"
    );
    fails(mm(&["projects", "count"]), 5, "NOT_FOUND: ");

    // Nobody listening: exit 3, saying where.
    let nowhere = common::free_port().to_string();
    let line = fails(
        run(
            &nowhere,
            &["projects", "list", "--timeout-secs", "2"],
            None,
            None,
        ),
        3,
        "cannot reach server at ",
    );
    assert!(line.contains(&nowhere), "{line}");
}

/// `memmachine keys create ARGS` against the server's store: the token.
fn create_key(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["keys", "create"])
        .args(args)
        .args(common::store_args(dir))
        .run();
    ok(out).trim().to_string()
}

#[test]
fn the_key_comes_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &["--auth", "--embedder", "none"]);
    let addr = server.addr.as_str();
    let admin = create_key(dir.path(), &["--admin"]);
    let acme = create_key(dir.path(), &["--org", "acme"]);

    // No key, or a wrong one: UNAUTHENTICATED (exit 7).
    fails(
        run(addr, &["projects", "list"], None, None),
        7,
        "UNAUTHENTICATED: ",
    );
    fails(
        run(addr, &["projects", "list"], None, Some("mm_nope")),
        7,
        "UNAUTHENTICATED: ",
    );
    for org in ["acme", "globex"] {
        ok(run(
            addr,
            &["projects", "create", "notes", "--org", org],
            None,
            Some(&admin),
        ));
    }
    // An org key works in its org, from the arguments and from stdin...
    let notes = ["--org", "acme", "--project", "notes"];
    let mut add = vec!["add", "hello from acme"];
    add.extend_from_slice(&notes);
    assert_eq!(ok(run(addr, &add, None, Some(&acme))).lines().count(), 1);
    let mut bulk_json = vec!["add", "--json"];
    bulk_json.extend_from_slice(&notes);
    assert_eq!(
        json(run(addr, &bulk_json, Some("one\ntwo\n"), Some(&acme)))["messages"],
        2
    );
    let mut count = vec!["projects", "count"];
    count.extend_from_slice(&notes);
    assert_eq!(
        ok(run(addr, &count, None, Some(&acme))).trim(),
        "episodes: 3"
    );
    // ... lists only its own org ...
    let listed = json(run(
        addr,
        &["projects", "list", "--json"],
        None,
        Some(&acme),
    ));
    let orgs: Vec<&str> = listed["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["org_id"].as_str().unwrap())
        .collect();
    assert_eq!(orgs, ["acme"]);
    // ... and is refused on another org's project.
    let other = ["search", "hello", "--org", "globex", "--project", "notes"];
    fails(
        run(addr, &other, None, Some(&acme)),
        7,
        "PERMISSION_DENIED: ",
    );
    let other = ["add", "x", "--org", "globex", "--project", "notes"];
    fails(
        run(addr, &other, None, Some(&acme)),
        7,
        "PERMISSION_DENIED: ",
    );
}

#[test]
fn tls_flags_are_those_of_health() {
    let dir = tempfile::tempdir().unwrap();
    let authority = common::pki::ca("test CA");
    let (cert, key) = common::pki::leaf(&["localhost"], &authority);
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::write(path("ca.pem"), authority.pem()).unwrap();
    std::fs::write(path("server.pem"), cert).unwrap();
    std::fs::write(path("server.key"), key).unwrap();
    let data = dir.path().join("data");
    let server = ServerProcess::start(
        &data,
        &[
            "--embedder",
            "none",
            "--tls-cert",
            &path("server.pem"),
            "--tls-key",
            &path("server.key"),
        ],
    );
    let addr = server.addr.as_str();
    let ca = path("ca.pem");
    let tls = ["--tls-ca", ca.as_str(), "--tls-domain", "localhost"];
    let mut list = vec!["projects", "list"];
    list.extend_from_slice(&tls);
    let table = ok(run(addr, &list, None, None));
    assert!(table.contains("universal"), "{table}");
    // Plaintext to a TLS port gets nowhere.
    let plain = run(
        addr,
        &["projects", "list", "--timeout-secs", "3"],
        None,
        None,
    );
    assert!(!plain.status.success());
}

#[test]
fn a_bulk_add_slows_to_the_rate_limit_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        dir.path(),
        &[
            "--embedder",
            "none",
            "--rate-limit",
            "4",
            "--rate-burst",
            "1",
        ],
    );
    let addr = server.addr.as_str();
    let input: String = (0..8).map(|i| format!("message {i}\n")).collect();
    // One import call however many batches: the limiter counts it once.
    let added = run(addr, &["add", "--batch", "1"], Some(&input), None);
    assert!(
        stderr(&added).contains("in 8 batches"),
        "{}",
        stderr(&added)
    );
    ok(added);
    // The limiter itself refuses other calls made at once: wait for a token.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        ok(run(addr, &["projects", "count"], None, None)).trim(),
        "episodes: 8"
    );
    // Without waiting, a plain call that the limiter refuses says so: exit 8. Four at
    // once, so that some meet an empty bucket however slowly processes start.
    let mut refused = None;
    for _ in 0..10 {
        let outs: Vec<Output> = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| run(addr, &["projects", "count"], None, None)))
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        refused = outs.into_iter().find(|out| !out.status.success());
        if refused.is_some() {
            break;
        }
    }
    let line = fails(
        refused.expect("no call was refused"),
        8,
        "RESOURCE_EXHAUSTED: ",
    );
    assert!(line.contains("retry after"), "{line}");
}
