//! The MCP server from outside: a stock MCP client (the `mcp` package from PyPI,
//! `tests/external/mcp_client.py`) against the real binary, over stdio (`memmachine mcp`
//! spawned by the client) and over Streamable HTTP (`/mcp` on `serve --rest-listen`):
//! it lists the tools, calls each, and is refused outside its scope (another project's
//! episode, another org's URL with an org key). The projects are made over gRPC first:
//! `memmachine mcp` creates nothing.
//!
//! The client's Python is `.tools/mcp-venv/bin/python` (`scripts/setup-test-tools.sh`),
//! or `MEMMACHINE_TEST_MCP_PYTHON`. Without it the tests fail with the setup hint.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::common;
use crate::common::ServerProcess;
use crate::common::calls::{create_project, with_key};
use crate::common::child::Run;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use tonic::transport::Channel;

const SETUP_HINT: &str = "run `bash scripts/setup-test-tools.sh` to install the MCP client (the \
     `mcp` package from PyPI) under .tools/mcp-venv, or set MEMMACHINE_TEST_MCP_PYTHON to a \
     Python that has it";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    let path = std::env::var_os("MEMMACHINE_TEST_MCP_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools/mcp-venv/bin/python"));
    assert!(
        path.is_file(),
        "MCP test client missing: {} does not exist; {SETUP_HINT}",
        path.display()
    );
    path
}

/// Runs the client script with `args`; panics with its output unless it passed.
fn client(args: &[String]) -> Output {
    let output = Command::new(python())
        .arg(repo_root().join("tests/external/mcp_client.py"))
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(repo_root())
        .run();
    let text = format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "MCP client failed\n{text}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("OK: mcp client checks passed"),
        "MCP client exited 0 without its closing line\n{text}"
    );
    output
}

async fn channel(server: &ServerProcess) -> Channel {
    Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .expect("connect to the server")
}

async fn projects(channel: &Channel, key: Option<&str>, org: &str) {
    for project in ["notes", "other"] {
        create_project(channel, key, org, project)
            .await
            .expect("create project");
    }
}

/// The episodes of `org/project`, over gRPC.
async fn contents(channel: &Channel, key: Option<&str>, org: &str, project: &str) -> Vec<String> {
    MemoryServiceClient::new(channel.clone())
        .list_memories(with_key(
            pb::ListMemoriesRequest {
                org_id: org.into(),
                project_id: project.into(),
                ..Default::default()
            },
            key,
        ))
        .await
        .expect("list memories")
        .into_inner()
        .episodes
        .into_iter()
        .map(|e| e.content)
        .collect()
}

fn create_key(data_dir: &std::path::Path, org: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_memmachine"))
        .args(["keys", "create", "--org", org])
        .args(common::store_args(data_dir))
        .run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn a_stock_client_over_stdio() {
    let data = tempfile::tempdir().expect("temp dir");
    // The server and `memmachine mcp` share the store, as a host's would.
    let server = ServerProcess::start(data.path(), &["--embedder", "hash"]);
    let channel = channel(&server).await;
    projects(&channel, None, "acme").await;

    let mut args = vec![
        "--transport".to_string(),
        "stdio".into(),
        "--command".into(),
        env!("CARGO_BIN_EXE_memmachine").into(),
    ];
    for flag in common::store_args(data.path())
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .chain(["--embedder".to_string(), "hash".to_string()])
    {
        // `=`: argparse would take a value starting with `--` for an option.
        args.push(format!("--command-arg={flag}"));
    }
    client(&args);
    // The refused delete left the other project's episode in place.
    assert_eq!(
        contents(&channel, None, "acme", "other").await,
        vec!["bob's secret plan".to_string()]
    );
    assert!(contents(&channel, None, "acme", "notes").await.is_empty());
}

#[tokio::test]
async fn a_stock_client_over_streamable_http() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        data.path(),
        &["--embedder", "hash", "--rest-listen", "127.0.0.1:0"],
    );
    let channel = channel(&server).await;
    projects(&channel, None, "acme").await;
    client(&[
        "--transport".into(),
        "http".into(),
        "--url".into(),
        server.rest_url(),
    ]);
    assert_eq!(
        contents(&channel, None, "acme", "other").await,
        vec!["bob's secret plan".to_string()]
    );
}

#[tokio::test]
async fn an_org_key_reaches_its_own_org_only() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(
        data.path(),
        &[
            "--embedder",
            "hash",
            "--rest-listen",
            "127.0.0.1:0",
            "--auth",
        ],
    );
    let key = create_key(data.path(), "acme");
    let channel = channel(&server).await;
    projects(&channel, Some(&key), "acme").await;
    client(&[
        "--transport".into(),
        "http".into(),
        "--url".into(),
        server.rest_url(),
        "--key".into(),
        key.clone(),
        "--other-org".into(),
        "globex".into(),
    ]);
    assert_eq!(
        contents(&channel, Some(&key), "acme", "other").await,
        vec!["bob's secret plan".to_string()]
    );
}
