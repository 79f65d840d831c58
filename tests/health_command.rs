//! `memmachine health`, the probe for containers: the real binary against a real
//! server over TCP.

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
