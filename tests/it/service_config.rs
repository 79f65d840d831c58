//! The gRPC service config in `deploy/` (issue 43 item 5) as a mesh client uses it:
//! Python grpcio loads `deploy/grpc-service-config.json` and reads steadily from a
//! server restarted under it (SIGTERM: readiness NOT_SERVING, the drain delay, new calls
//! refused with UNAVAILABLE, exit; then a new server on the same port, UNAVAILABLE while
//! it starts). With the config no call fails; without it, the same sequence fails some.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::ServerProcess;
use crate::common::child::Supervised;
use crate::external_clients::{repo_root, tool};

/// What `retry_client.py` reported.
#[derive(Debug)]
struct Summary {
    calls: u64,
    failed: u64,
    line: String,
}

/// Starts `retry_client.py` against `addr` with `args` and `config` as its service config.
fn client(python: &Path, addr: &str, args: &[&str], config: Option<&Path>) -> Supervised {
    let mut command = Command::new(python);
    command
        .arg(repo_root().join("tests/external/retry_client.py"))
        .args(["--addr", addr])
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(config) = config {
        command.arg("--service-config").arg(config);
    }
    Supervised::spawn("the grpcio reader (retry_client.py)", &mut command, None)
}

/// Waits for the client to finish and reads its summary.
fn summary(mut client: Supervised) -> Summary {
    let status = client.wait_within(Duration::from_secs(60));
    let lines = client.stderr_lines();
    let lines = lines.lock().unwrap();
    assert!(status.success(), "the client failed: {}", lines.join("\n"));
    let line = lines
        .iter()
        .find_map(|line| line.strip_prefix("SUMMARY "))
        .unwrap_or_else(|| panic!("no summary from the client: {}", lines.join("\n")))
        .to_string();
    let summary: serde_json::Value = serde_json::from_str(&line).expect("a JSON summary");
    Summary {
        calls: summary["calls"].as_u64().expect("calls"),
        failed: summary["failed"].as_u64().expect("failed"),
        line,
    }
}

/// A grpcio client reading for a few seconds while the server it reads from is stopped
/// with SIGTERM and started again on the same port; `config`: its service config.
fn reads_through_a_restart(python: &Path, config: Option<&Path>) -> Summary {
    let data = tempfile::tempdir().expect("temp dir");
    let flags = ["--drain-delay", "1"];
    let mut server = ServerProcess::start(data.path(), &flags);
    let addr = server.addr.clone();
    let mut reader = client(python, &addr, &["--seconds", "7"], config);
    reader
        .wait_for_stderr("answer its first call", Duration::from_secs(30), |lines| {
            lines
                .iter()
                .any(|line| line.contains("first call answered"))
                .then_some(())
        })
        .unwrap_or_else(|report| panic!("{report}"));
    std::thread::sleep(Duration::from_millis(500));
    let status = server.terminate();
    assert!(status.success(), "the drained server exited with {status}");
    let _restarted = ServerProcess::start_on(&addr, data.path(), &flags, &[]);
    summary(reader)
}

#[test]
fn reads_ride_through_a_restart_with_the_deployed_service_config() {
    let python = tool("MEMMACHINE_TEST_PYTHON", ".tools/venv/bin/python");
    let config = repo_root().join("deploy/grpc-service-config.json");
    let with = reads_through_a_restart(&python, Some(&config));
    eprintln!("with the service config: {}", with.line);
    // Calls were made before, during and after the restart (one every 20 ms or so).
    assert!(with.calls >= 20, "{with:?}");
    assert_eq!(with.failed, 0, "{with:?}");

    // The same reads on a channel without it: the restart fails some.
    let without = reads_through_a_restart(&python, None);
    eprintln!("without it: {}", without.line);
    assert!(without.failed > 0, "{without:?}");
}

/// A rate-limited client retries as long as `grpc-retry-pushback-ms` says: with the
/// config, a burst of reads over the limit all succeed, slowed to the limit's pace;
/// without it, the reads over the burst fail with RESOURCE_EXHAUSTED. (Without the
/// pushback, the policy's own random backoff retries too early, and the failed attempts
/// exhaust its retry throttling: a server without the trailer failed 2 of these 6.)
#[test]
fn a_rate_limited_reader_waits_as_the_pushback_says() {
    let python = tool("MEMMACHINE_TEST_PYTHON", ".tools/venv/bin/python");
    let config = repo_root().join("deploy/grpc-service-config.json");
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &["--rate-limit", "1", "--rate-burst", "1"]);
    let burst = ["--calls", "6"];
    let with = summary(client(&python, &server.addr, &burst, Some(&config)));
    eprintln!("with the service config: {}", with.line);
    assert_eq!((with.calls, with.failed), (6, 0), "{with:?}");
    std::thread::sleep(Duration::from_secs(2));
    let without = summary(client(&python, &server.addr, &burst, None));
    eprintln!("without it: {}", without.line);
    assert!(
        without.failed > 0 && without.line.contains("RESOURCE_EXHAUSTED"),
        "{without:?}"
    );
}

/// Every method the service configs name is one the contract has, so a typo cannot
/// leave a method without its policy unnoticed.
#[test]
fn the_service_configs_name_methods_that_exist() {
    let protos: String = ["v1", "v2"]
        .iter()
        .flat_map(|version| {
            std::fs::read_dir(repo_root().join("proto/memmachine").join(version))
                .unwrap()
                .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        })
        .collect();
    for file in [
        "deploy/grpc-service-config.json",
        "deploy/grpc-service-config-keyed-adds.json",
    ] {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        let config: serde_json::Value = serde_json::from_str(&text).unwrap();
        for method_config in config["methodConfig"].as_array().unwrap() {
            for name in method_config["name"].as_array().unwrap() {
                let (service, method) = (
                    name["service"].as_str().unwrap(),
                    name["method"].as_str().unwrap(),
                );
                if service == "grpc.health.v1.Health" {
                    assert_eq!(method, "Check", "{file}");
                    continue;
                }
                let (package, short) = service.rsplit_once('.').unwrap();
                let declared = protos.split("package ").skip(1).any(|file| {
                    file.starts_with(&format!("{package};"))
                        && file
                            .split(&format!("service {short} {{"))
                            .nth(1)
                            .is_some_and(|body| {
                                body.split("\n}")
                                    .next()
                                    .is_some_and(|body| body.contains(&format!("rpc {method}(")))
                            })
                });
                assert!(declared, "{file}: {service}/{method} is not in proto/");
            }
        }
    }
}
