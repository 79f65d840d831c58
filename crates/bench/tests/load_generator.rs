//! The load generator (`memmachine-bench load`) run as a user runs it, against a server of its
//! own with the hash embedder, on the LoCoMo slice of `tests/fixtures`: what its JSON
//! report says must add up. Nothing here is timed: the figures depend on the machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memmachine_testkit::child::Run;
use memmachine_testkit::server::server_bin;

use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/locomo-conv-26.json")
}

/// Runs `memmachine-bench load` with `args` (plus the fixture and the server executable,
/// the `memmachine` Cargo built beside this test: `cargo test` at the workspace root).
fn load(args: &[&str]) -> Output {
    let server = server_bin();
    assert!(
        server.is_file(),
        "no server at {}: build it (cargo build --bin memmachine)",
        server.display()
    );
    Command::new(env!("CARGO_BIN_EXE_memmachine-bench"))
        .arg("load")
        .arg("--locomo")
        .arg(fixture())
        .arg("--server")
        .arg(server)
        .args(args)
        .run()
}

/// Runs it with `--json` and returns the report, failing with its output if it failed.
fn load_json(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    let mut all = args.to_vec();
    let path_text = path.to_str().unwrap();
    all.extend(["--json", path_text]);
    let out = load(&all);
    assert!(
        out.status.success(),
        "memmachine-bench load failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).expect("the JSON report is written");
    serde_json::from_str(&text).expect("the report is JSON")
}

fn count(v: &Value) -> u64 {
    v["count"].as_u64().expect("a count")
}

#[test]
fn a_mix_of_every_kind_runs_without_errors_and_adds_up() {
    let report = load_json(&[
        "--server-args",
        "--embedder hash",
        "--mix",
        "add=2,lexical=4,hybrid=2,dense=1,list=1,delete=2",
        "--clients",
        "4",
        "--connections",
        "2",
        "--preload",
        "200",
        "--projects",
        "2",
        "--duration",
        "3",
        "--warmup",
        "0.5",
        "--sample-secs",
        "1",
    ]);
    let kinds = report["kinds"].as_object().expect("kinds");
    let mut names: Vec<&str> = kinds.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["add", "delete", "dense", "hybrid", "lexical", "list"],
        "one entry per kind of the mix"
    );
    let mut sum = 0;
    for (kind, stats) in kinds {
        assert!(count(stats) > 0, "{kind} was never called: {stats}");
        assert_eq!(
            stats["errors"].as_object().map(|e| e.len()),
            Some(0),
            "{kind} had errors: {stats}"
        );
        assert_eq!(stats["ok"], stats["count"], "{kind}: {stats}");
        assert!(
            stats["latency_ms"]["p50"].as_f64().is_some(),
            "{kind}: {stats}"
        );
        sum += count(stats);
    }
    assert_eq!(sum, count(&report["total"]), "kinds add up to the total");
    assert_eq!(
        report["total"]["errors"].as_object().map(|e| e.len()),
        Some(0)
    );

    // Every delete removed exactly the episodes it named, and each project holds what
    // the preload, the adds and the deletes leave, as the server counts it.
    let deletes = &report["deletes"];
    assert!(
        deletes["episodes_requested"].as_u64() > Some(0),
        "{deletes}"
    );
    assert_eq!(deletes["episodes_deleted"], deletes["episodes_requested"]);
    assert_eq!(deletes["count_mismatches"], 0);
    let projects = report["projects"].as_array().expect("projects");
    assert_eq!(projects.len(), 6, "2 projects for each of 3 ranking modes");
    let mut deleted = 0;
    for project in projects {
        assert_eq!(project["counted"], project["expected"], "{project}");
        assert_eq!(project["preloaded"], 100, "the preload is split: {project}");
        deleted += project["deleted"].as_u64().unwrap();
    }
    assert_eq!(Some(deleted), deletes["episodes_deleted"].as_u64());
    assert_eq!(report["counts_match"], true);

    // The server process is sampled at the start, after the warm-up, periodically and
    // at the end.
    let samples = report["samples"].as_array().expect("samples");
    let labels: Vec<&str> = samples.iter().filter_map(|s| s["label"].as_str()).collect();
    assert_eq!(labels.first(), Some(&"start"));
    assert_eq!(labels.get(1), Some(&"measure"));
    assert_eq!(labels.last(), Some(&"end"));
    assert!(labels.contains(&"sample"), "{labels:?}");
    if cfg!(target_os = "linux") {
        for sample in samples {
            assert!(sample["rss_bytes"].as_u64() > Some(0), "{sample}");
            assert!(sample["open_fds"].as_u64() > Some(0), "{sample}");
            assert!(sample["threads"].as_u64() > Some(0), "{sample}");
        }
        assert!(report["server"]["cpu_seconds"].as_f64().is_some());
    }
}

#[test]
fn max_ops_bounds_the_run() {
    for rate in ["0", "200"] {
        let report = load_json(&[
            "--server-args",
            "--embedder none",
            "--mix",
            "lexical=3,add=1,list=1",
            "--preload",
            "50",
            "--max-ops",
            "60",
            "--warmup",
            "0",
            "--rate",
            rate,
        ]);
        assert_eq!(
            count(&report["total"]),
            60,
            "rate {rate}: {}",
            report["total"]
        );
        assert_eq!(report["schedule"]["unsent"], 0, "rate {rate}");
        assert_eq!(report["counts_match"], true, "rate {rate}");
    }
}

#[test]
fn a_bad_mix_is_refused_with_a_clear_message() {
    let out = load(&["--mix", "lexical=1,fulltext=2", "--duration", "1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown call kind \"fulltext\"")
            && stderr.contains("add, lexical, hybrid, dense, list, delete"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn an_unbounded_run_is_refused() {
    let out = load(&["--mix", "lexical=1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refusing an unbounded run"), "{stderr}");
}
