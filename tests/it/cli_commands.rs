//! The operator commands, run as the real binary: `memmachine health` (the probe for
//! containers) against a real server over TCP, and `memmachine config print`.

use std::process::Command;

use crate::common;
use crate::common::InProcess;
use crate::common::child::{Run, Supervised};

/// Runs `memmachine health` with `args`; returns whether it exited 0, and its stdout.
async fn health(args: Vec<String>) -> (bool, String) {
    let (ok, stdout, _) = health_stderr(args).await;
    (ok, stdout)
}

/// As `health`, with its stderr too.
async fn health_stderr(args: Vec<String>) -> (bool, String, String) {
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_memmachine"))
            .arg("health")
            .args(args)
            .run()
    })
    .await
    .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).trim().to_string(),
        String::from_utf8_lossy(&output.stderr).trim().to_string(),
    )
}

#[tokio::test]
async fn health_exits_zero_only_for_a_serving_server() {
    let server = InProcess::start().await;
    let addr = server.url.trim_start_matches("http://").to_string();
    assert_eq!(
        health(vec!["--addr".into(), addr.clone()]).await,
        (true, "SERVING".to_string())
    );
    let service = "memmachine.v2.MemoryService".to_string();
    assert_eq!(
        health(vec![
            "--addr".into(),
            server.url.clone(),
            "--service".into(),
            service
        ])
        .await,
        (true, "SERVING".to_string())
    );
    // A service the server does not have: NOT_FOUND, so not healthy.
    let unknown = vec![
        "--addr".into(),
        addr.clone(),
        "--service".into(),
        "nope".into(),
    ];
    assert!(!health(unknown).await.0);
    server.stop().await.unwrap();
    // Nothing listening any more.
    let args = vec!["--addr".into(), addr, "--timeout-secs".into(), "2".into()];
    assert_eq!(health(args).await, (false, String::new()));
}

/// A failed probe names why it could not connect, not a bare "transport error".
#[tokio::test]
async fn health_names_why_it_cannot_connect() {
    let server = InProcess::start().await;
    let addr = server.url.trim_start_matches("http://").to_string();
    // TLS asked of a plaintext server: the handshake fails.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, common::pki::ca("test CA").pem()).unwrap();
    let args = vec![
        "--addr".into(),
        addr.clone(),
        "--timeout-secs".into(),
        "3".into(),
        "--tls-ca".into(),
        ca.display().to_string(),
    ];
    let (ok, _, stderr) = health_stderr(args).await;
    assert!(!ok);
    assert!(stderr.contains("TLS handshake failed"), "{stderr}");
    server.stop().await.unwrap();
    let args = vec!["--addr".into(), addr, "--timeout-secs".into(), "2".into()];
    let (ok, _, stderr) = health_stderr(args).await;
    assert!(!ok);
    assert!(stderr.contains("connection refused"), "{stderr}");
    // A name that resolves nowhere (.invalid is reserved for that).
    let args = vec!["--addr".into(), "no-such-host.invalid:50051".into()];
    let (ok, _, stderr) = health_stderr(args).await;
    assert!(!ok);
    assert!(stderr.contains("DNS lookup failed"), "{stderr}");
}

#[test]
fn config_print_shows_the_effective_settings_with_the_key_masked() {
    let output = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args([
            "config",
            "print",
            "--embedder",
            "openai",
            "--data-dir",
            "/srv/mm",
        ])
        .env("MEMMACHINE_EMBEDDER_API_KEY", "sk-do-not-show")
        .env("MEMMACHINE_SHORT_TERM_WINDOW", "9")
        .env("MEMMACHINE_KEEPALIVE_INTERVAL", "0")
        .env("MEMMACHINE_KEEPALIVE_TIMEOUT", "2.5")
        .run();
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(printed.contains("data_dir = \"/srv/mm\""), "{printed}");
    assert!(printed.contains("short_term_window = 9"), "{printed}");
    assert!(printed.contains("embedder = \"openai\""), "{printed}");
    assert!(printed.contains("keepalive_interval = 0.0"), "{printed}");
    assert!(printed.contains("keepalive_timeout = 2.5"), "{printed}");
    assert!(printed.contains("embedder_api_key = \"***\""), "{printed}");
    assert!(!printed.contains("sk-do-not-show"), "{printed}");
}

/// Flags beat the environment, the environment the config file, the file the defaults;
/// a flag given at its default value still beats the file.
#[test]
fn config_precedence_flags_environment_file_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memmachine.toml");
    std::fs::write(
        &file,
        "short_term_window = 5\nrate_limit = 7\nmax_page_size = 9\ndrain_delay = 3\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args([
            "config",
            "print",
            "--rate-limit",
            "0",
            "--max-page-size",
            "11",
        ])
        .arg("--config")
        .arg(&file)
        .env_clear()
        .env("MEMMACHINE_SHORT_TERM_WINDOW", "6")
        .env("MEMMACHINE_MAX_PAGE_SIZE", "12")
        .run();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "short_term_window = 6",
        "rate_limit = 0",
        "max_page_size = 11",
        "drain_delay = 3.0",
        "max_messages_per_add = 1000",
    ] {
        assert!(printed.lines().any(|l| l == line), "{line} in {printed}");
    }
}

/// The config file the Kubernetes manifests mount (`deploy/kubernetes/configmap.yaml`)
/// is one this server accepts, with the settings it says.
#[test]
fn the_deployed_config_file_is_valid() {
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/configmap.yaml"),
    )
    .unwrap();
    let toml: String = manifest
        .lines()
        .skip_while(|line| !line.contains("memmachine.toml: |"))
        .skip(1)
        .take_while(|line| line.starts_with("    ") || line.is_empty())
        .map(|line| format!("{}\n", line.trim_start()))
        .collect();
    assert!(toml.contains("auth = true"), "{toml}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memmachine.toml");
    std::fs::write(&file, &toml).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["config", "print", "--config"])
        .arg(&file)
        .env_clear()
        .run();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "listen = \"0.0.0.0:50051\"",
        "auth = true",
        "metrics_listen = \"0.0.0.0:9090\"",
        "rate_limit = 200",
        "drain_delay = 5.0",
    ] {
        assert!(printed.contains(line), "{line} in {printed}");
    }
}

/// `memmachine mcp --help` lists the flags stdio MCP uses, not serve's listeners.
#[test]
fn mcp_help_lists_only_the_flags_mcp_uses() {
    let output = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["mcp", "--help"])
        .run();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    // The flags listed: the first word of each option line.
    let flags: Vec<&str> = help
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("--"))
        .filter_map(|rest| rest.split([' ', '=']).next())
        .collect();
    for used in ["org", "project", "user", "data-dir", "llm-base-url"] {
        assert!(flags.contains(&used), "--{used} missing from {help}");
    }
    for unused in [
        "listen",
        "rest-listen",
        "metrics-listen",
        "tls-cert",
        "rate-limit",
        "drain-delay",
        "max-connections",
        "auth",
    ] {
        assert!(!flags.contains(&unused), "--{unused} in {help}");
    }
    // Still accepted (one config file or environment serves both commands).
    let output = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args([
            "mcp",
            "--rest-listen",
            "127.0.0.1:1",
            "--project",
            "bad id!",
        ])
        .run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("unexpected argument"), "{stderr}");
}

/// `memmachine serve` under `script`'s pseudo-terminal, with no embedder named and no
/// model: what it printed until it was ready (at most a minute). `answer` is typed at
/// its prompt; `None` types nothing and keeps the terminal open.
fn serve_at_a_terminal(answer: Option<&[u8]>) -> String {
    use std::io::{BufRead, BufReader, Write};
    let data = tempfile::tempdir().expect("temp dir");
    let models = tempfile::tempdir().expect("temp dir");
    let command = format!(
        "{} serve --data-dir {} --listen 127.0.0.1:0 --model-dir {}",
        env!("CARGO_BIN_EXE_memmachine"),
        data.path().display(),
        models.path().display()
    );
    let mut child = Supervised::spawn(
        "script (util-linux) running memmachine serve",
        Command::new("script")
            .args(["-qefc", &command, "/dev/null"])
            .env_remove("MEMMACHINE_EMBEDDER")
            .env_remove("MEMMACHINE_MODEL_DIR")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped()),
        None,
    );
    let mut stdin = child.stdin.take().unwrap();
    if let Some(answer) = answer {
        stdin.write_all(answer).unwrap();
    }
    let (lines, seen) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut output = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !output.contains("ready: serving calls") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match seen.recv_timeout(left) {
            Ok(line) => output.push_str(&(line + "\n")),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    drop(stdin);
    output
}

/// At a terminal, `serve` with no embedder named and no model offers to fetch one;
/// declined, it starts searching by words, as it does unasked wherever stdin is no
/// terminal (every other test).
#[test]
fn serve_at_a_terminal_offers_the_model_and_starts_without_it_when_declined() {
    let output = serve_at_a_terminal(Some(b"n\n"));
    assert!(
        output.contains("Fetch all-MiniLM-L6-v2") && output.contains("[y/N]"),
        "{output}"
    );
    assert!(output.contains("starting without it"), "{output}");
    assert!(output.contains("ready: serving calls"), "{output}");
    assert!(output.contains("no embedder in use"), "{output}");
}

/// Nobody answers the offer (a terminal left open): `serve` starts without the model
/// all the same, so its start never waits on a person.
#[test]
fn serve_at_a_terminal_starts_when_the_offer_goes_unanswered() {
    let output = serve_at_a_terminal(None);
    assert!(output.contains("[y/N]"), "{output}");
    assert!(output.contains("starting without it"), "{output}");
    assert!(output.contains("ready: serving calls"), "{output}");
}
