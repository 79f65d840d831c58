//! No log line, at any level, carries a secret the operator configured: a password or
//! secret query value in any URL flag (store, embedder, language model, reranker,
//! OTLP endpoint) or an API key. The server runs at `RUST_LOG=trace`, talks to each
//! endpoint (or fails to), serves a few calls and stops; its whole output is searched.
//!
//! sqlite-only: chooses its stores itself (PostgreSQL when it runs).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{self, child::Supervised, embeddings};

/// Each secret is distinct, so a hit names the flag that leaked it.
const SECRETS: &[&str] = &[
    "StorePw-9f1c",
    "SslPw-4d2a",
    "StoreQueryPw-7b3e",
    "EmbedPw-2c8d",
    "EmbedTok-5a1f",
    "LlmPw-8e4b",
    "LlmKeyQ-3f9c",
    "RerankPw-6d7a",
    "RerankTok-1b5e",
    "OtlpPw-9c2d",
    "OtlpTok-4e8f",
    "EmbedEnvKey-7a3b",
    "LlmEnvKey-2d6c",
    "RerankEnvKey-5f1a",
];

/// `http://user:PW@ADDR/PATH?QUERY` from `http://ADDR/PATH`.
fn with_secrets(url: &str, password: &str, query: &str) -> String {
    let rest = url.strip_prefix("http://").expect("an http URL");
    format!("http://user:{password}@{rest}?{query}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_carries_a_configured_secret() {
    let dir = tempfile::tempdir().unwrap();
    let (embedder, _) =
        embeddings::scripted_embeddings(embeddings::Script::Slow(Duration::from_millis(1))).await;
    // Nothing listens on these: every call to them fails (and is logged).
    let nowhere = format!("http://{}", common::free_port());
    let collector = common::free_port();
    let store = match common::postgres::fresh_database().await {
        // The test server trusts local connections: the password is not checked.
        Some(url) => {
            let (scheme, rest) = url.split_once("://").unwrap();
            let (userinfo, host) = rest.split_once('@').unwrap_or(("postgres", rest));
            let user = userinfo.split(':').next().unwrap();
            let sep = if host.contains('?') { '&' } else { '?' };
            format!(
                "{scheme}://{user}:StorePw-9f1c@{host}{sep}sslmode=disable\
                 &sslpassword=SslPw-4d2a&password=StoreQueryPw-7b3e"
            )
        }
        None => {
            eprintln!("the store URL's secrets are checked on PostgreSQL only");
            String::new()
        }
    };
    let urls = [
        (
            "--embedder-base-url",
            with_secrets(&embedder, "EmbedPw-2c8d", "api_key=EmbedTok-5a1f"),
        ),
        (
            "--llm-base-url",
            with_secrets(&format!("{nowhere}/v1"), "LlmPw-8e4b", "key=LlmKeyQ-3f9c"),
        ),
        (
            "--reranker-base-url",
            with_secrets(&nowhere, "RerankPw-6d7a", "token=RerankTok-1b5e"),
        ),
        (
            "--otlp-endpoint",
            with_secrets(
                &format!("http://{collector}"),
                "OtlpPw-9c2d",
                "token=OtlpTok-4e8f",
            ),
        ),
    ];
    let stdout = tempfile::NamedTempFile::new().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_memmachine"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--embedder", "openai", "--embedder-model", "scripted"])
        .args(["--llm-model", "scripted", "--reranker-model", "scripted"])
        .args(["--semantic-trigger-messages", "1"])
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1")
        .env("MEMMACHINE_EMBEDDER_API_KEY", "EmbedEnvKey-7a3b")
        .env("MEMMACHINE_LLM_API_KEY", "LlmEnvKey-2d6c")
        .env("MEMMACHINE_RERANKER_API_KEY", "RerankEnvKey-5f1a")
        .stdin(Stdio::null())
        .stdout(stdout.reopen().unwrap());
    for (flag, url) in &urls {
        command.arg(flag).arg(url);
    }
    if !store.is_empty() {
        command.arg("--store").arg(&store);
    }
    let mut server = Supervised::spawn("memmachine serve", &mut command, None);
    let addr = server
        .wait_for_stderr("become ready", Duration::from_secs(120), |lines| {
            let ready = lines.iter().any(|l| l.contains(common::READY));
            let addr = lines.iter().find_map(|l| {
                let at = l.find("gRPC server listening")?;
                let rest = &l[at..];
                let addr = &rest[rest.find("addr=")? + 5..];
                Some(addr.split_whitespace().next()?.to_string())
            });
            addr.filter(|_| ready)
        })
        .unwrap_or_else(|report| panic!("{report}"));
    // Some work: a project, a memory (embedded, then given to the language model) and
    // a search (the embedder again).
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    common::calls::create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    common::calls::add(&channel, None, "acme").await.unwrap();
    let _ = common::calls::search(&channel, None, "acme").await;
    // The embedder and the language model are called in the background.
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(channel);
    let pid = i32::try_from(server.id()).unwrap();
    // SAFETY: a plain kill(2) of our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let stderr = tokio::task::spawn_blocking(move || {
        server.wait_within(Duration::from_secs(60));
        server.stderr_lines()
    })
    .await
    .unwrap();
    let stderr = stderr.lock().unwrap().join("\n");
    let stdout = std::fs::read_to_string(stdout.path()).unwrap();
    assert!(
        stderr.lines().count() > 50,
        "trace logging was not on: {stderr}"
    );
    // What the masking caught (the secrets were there to be caught): shown, for the
    // record.
    for line in stderr.lines().filter(|l| l.contains("***")).take(10) {
        eprintln!("masked: {line}");
    }
    // The exporter's HTTP client tried the collector (at shutdown, with the spans of
    // the calls) and said so, masked.
    let tried = format!("user:***@{collector}");
    assert!(
        stderr.contains(&tried),
        "the OTLP exporter never logged its connection to {collector}"
    );
    let on_store = |secret: &str| secret.starts_with("Store") || secret.starts_with("Ssl");
    for secret in SECRETS {
        if store.is_empty() && on_store(secret) {
            continue;
        }
        for (name, text) in [("stderr", &stderr), ("stdout", &stdout)] {
            if let Some(line) = text.lines().find(|l| l.contains(secret)) {
                panic!("{secret} was logged on {name}: {line}");
            }
        }
    }
}
