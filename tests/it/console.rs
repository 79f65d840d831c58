//! The memory console (`/ui`) in a real browser: `tests/ui/console.mjs` drives Debian's
//! Chromium (`/usr/bin/chromium`, headless) with Playwright (npm `playwright-core` under
//! `.tools/playwright`, from `scripts/setup-test-tools.sh`) against the real binary with
//! `--auth` and a scripted language model that distils features citing messages.
//!
//! Without the browser or Playwright the test skips, saying why; under `CI=true` it
//! fails. `MEMMACHINE_CONSOLE_SCREENSHOTS=DIR` keeps the screenshots in DIR (the README's
//! are `docs/console/`); otherwise they go to a temporary directory.
//!
//! sqlite-only: its subject is the browser console, not the store.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::ServerProcess;
use crate::common::chat::{ChatCall, ChatServer, ScriptedReply};
use crate::common::child::Run;
use crate::common::keys::create_key;
use serde_json::json;

const CHROMIUM: &str = "/usr/bin/chromium";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The npm prefix holding playwright-core, once the browser and it are both there.
fn browser_tools() -> Option<PathBuf> {
    let prefix = std::env::var_os("MEMMACHINE_TEST_PLAYWRIGHT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools/playwright"));
    let missing = if !Path::new(CHROMIUM).exists() {
        format!("{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)")
    } else if !prefix
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        format!(
            "playwright-core is not installed under {} (run bash scripts/setup-test-tools.sh)",
            prefix.display()
        )
    } else {
        return Some(prefix);
    };
    crate::common::cannot_run("the console's browser test", &missing);
    None
}

/// The model: "My favourite X is Y." becomes the feature "favourite X" = Y citing that
/// message; a summary counts the messages folded into it.
fn scripted(call: &ChatCall) -> ScriptedReply {
    if call.system.contains("running summary") {
        let folded = call.user.lines().filter(|l| l.starts_with('[')).count();
        return ScriptedReply::Content(format!(
            "The conversation so far: {folded} earlier messages about travel plans and food."
        ));
    }
    let messages = call.user.split("## New messages\n").nth(1).unwrap_or("");
    let mut commands = Vec::new();
    let mut number = 0;
    for line in messages.lines() {
        if let Some(rest) = line.strip_prefix('[') {
            number = rest
                .split(']')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        } else if let Some((feature, value)) = line
            .trim_end_matches('.')
            .strip_prefix("My favourite ")
            .and_then(|rest| rest.split_once(" is "))
        {
            commands.push(json!({
                "command": "add", "tag": "preferences", "feature": format!("favourite {feature}"),
                "value": value, "messages": [number]
            }));
        }
    }
    ScriptedReply::Content(json!({ "commands": commands }).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_browser() {
    let Some(playwright) = browser_tools() else {
        return;
    };
    let chat = ChatServer::start(scripted);
    let data = tempfile::tempdir().expect("temp dir");
    let args = [
        "--auth",
        "--rest-listen",
        "127.0.0.1:0",
        "--embedder",
        "hash",
        "--llm-base-url",
        &chat.url,
        "--llm-model",
        "scripted",
        "--llm-max-calls-per-minute",
        "0",
        "--semantic-trigger-messages",
        "1",
        "--semantic-trigger-age",
        "0",
        // Small, so that the six messages overflow it and a summary is made.
        "--short-term-window",
        "4",
        // Small, so that a page of the long project's episodes is cut by bytes.
        "--max-page-bytes",
        "65536",
    ];
    let server = ServerProcess::start(data.path(), &args);
    let rest = server.rest_url();
    let acme = create_key(data.path(), &["--org", "acme", "--label", "console test"]);
    let rival = create_key(data.path(), &["--org", "rival"]);
    let admin = create_key(data.path(), &["--admin"]);

    // The other org's project, made with its own key.
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{rest}/api/v2/projects"))
        .bearer_auth(&rival)
        .json(&json!({"org_id": "rival", "project_id": "secret-plans"}))
        .send()
        .await
        .expect("create the rival project");
    assert_eq!(created.status(), 201, "{:?}", created.text().await);

    let kept = std::env::var_os("MEMMACHINE_CONSOLE_SCREENSHOTS").map(PathBuf::from);
    let scratch = tempfile::tempdir().expect("temp dir");
    let shots = kept.clone().unwrap_or_else(|| scratch.path().to_path_buf());
    let started = Instant::now();
    let mut run = std::process::Command::new("node");
    run.arg(repo_root().join("tests/ui/console.mjs"))
        .env("CONSOLE_URL", format!("{rest}/ui/"))
        .env("ACME_KEY", &acme)
        .env("ADMIN_KEY", &admin)
        .env("RIVAL_ORG", "rival")
        .env("RIVAL_PROJECT", "secret-plans")
        .env("SCREENSHOT_DIR", &shots)
        .env("PLAYWRIGHT_PREFIX", &playwright)
        .env("CHROMIUM", CHROMIUM);
    // Each wait in the script is at most 30 s; this bounds the whole run.
    // Off the runtime: the server under test answers on it meanwhile.
    let output = tokio::task::spawn_blocking(move || run.run_within(Duration::from_secs(300)))
        .await
        .expect("the browser run");
    println!("{}", String::from_utf8_lossy(&output.stdout));
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    println!(
        "browser run: {:.1} s, screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );
    let failed = !output.status.success();
    if failed && kept.is_none() {
        // Keep the failure's screenshot for a look.
        let _ = scratch.keep();
    }
    assert!(
        !failed,
        "the console's browser test failed ({}); see its output above",
        output.status
    );
    assert!(
        chat.call_count() > 0,
        "the model distilled the messages the page showed"
    );
    drop(server);
}

/// Serves one static page on a loopback port of its own: another origin than the server.
fn attacker_page() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let page = "<!doctype html><title>attacker</title><body></body>";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    format!("http://localhost:{port}/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_origins_and_rebound_names_cannot_act() {
    let Some(playwright) = browser_tools() else {
        return;
    };
    let data = tempfile::tempdir().expect("temp dir");
    // No keys: what a browser could reach is all there is to guard.
    let server = ServerProcess::start(data.path(), &["--rest-listen", "127.0.0.1:0"]);
    let rest = server.rest_url();
    let http = reqwest::Client::new();
    let project = json!({"org_id": "acme", "project_id": "victim"});
    let created = http
        .post(format!("{rest}/api/v2/projects"))
        .json(&project)
        .send()
        .await
        .expect("create the project");
    assert_eq!(created.status(), 201);
    let count = || async {
        let answer: serde_json::Value = http
            .post(format!("{rest}/api/v2/projects/episode_count/get"))
            .json(&project)
            .send()
            .await
            .expect("count")
            .json()
            .await
            .expect("a JSON count");
        answer["count"].as_i64().expect("a count")
    };
    assert_eq!(count().await, 0);

    let mut run = std::process::Command::new("node");
    run.arg(repo_root().join("tests/ui/cross_site.mjs"))
        .env("REST_URL", &rest)
        .env("ATTACKER_URL", attacker_page())
        .env("ORG", "acme")
        .env("PROJECT", "victim")
        .env("PLAYWRIGHT_PREFIX", &playwright)
        .env("CHROMIUM", CHROMIUM);
    // Off the runtime: the server under test answers on it meanwhile.
    let output = tokio::task::spawn_blocking(move || run.run_within(Duration::from_secs(180)))
        .await
        .expect("the browser run");
    println!("{}", String::from_utf8_lossy(&output.stdout));
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the cross-site browser test failed ({}); see its output above",
        output.status
    );
    // From outside: the project is still there, and nothing was planted in it.
    let got = http
        .post(format!("{rest}/api/v2/projects/get"))
        .json(&project)
        .send()
        .await
        .expect("get the project");
    assert_eq!(got.status(), 200, "the project survived the foreign pages");
    assert_eq!(count().await, 0, "no episode was planted");
    drop(server);
}
