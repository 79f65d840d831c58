//! The operator commands, run as the real binary: `memmachine health` (the probe for
//! containers) against a real server over TCP, and `memmachine config print`.

mod common;

use std::process::Command;

use common::InProcess;

/// Runs `memmachine health` with `args`; returns whether it exited 0, and its stdout.
async fn health(args: Vec<String>) -> (bool, String) {
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_memmachine"))
            .arg("health")
            .args(args)
            .output()
            .expect("run memmachine health")
    })
    .await
    .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).trim().to_string(),
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
        .output()
        .expect("run memmachine config print");
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
        .output()
        .unwrap();
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
