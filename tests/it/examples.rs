//! The client examples in `examples/`, run as their users run them, against a real server.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::calls::create_project;
use crate::common::child::Supervised;
use crate::common::{ServerProcess, free_port};
use crate::external_clients::{repo_root, tool};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

/// `examples/python/follow_changes.py`, its output lines collected as they come.
struct Follower {
    child: Mutex<Supervised>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Follower {
    fn start(addr: &str, cursor_file: &Path) -> Follower {
        let python = tool("MEMMACHINE_TEST_PYTHON", ".tools/venv/bin/python");
        let mut child = Supervised::spawn(
            "the python follower (follow_changes.py)",
            Command::new(python)
                .arg(repo_root().join("examples/python/follow_changes.py"))
                .args(["--addr", addr, "--org", "acme", "--project", "notes"])
                .arg("--cursor-file")
                .arg(cursor_file)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("PYTHONUNBUFFERED", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::piped()),
            None,
        );
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().unwrap();
        let collected = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                collected.lock().unwrap().push(line);
            }
        });
        Follower {
            child: Mutex::new(child),
            lines,
        }
    }

    /// Waits (up to 60 s) until `done` holds for the lines printed so far; fails at once
    /// (after a moment for its last lines) if the follower exits first.
    async fn wait(&self, what: &str, done: impl Fn(&[String]) -> bool) {
        let start = Instant::now();
        let mut exited: Option<(String, Instant)> = None;
        loop {
            // A copy: `done` may read the lines through `self` too.
            let lines = self.lines.lock().unwrap().clone();
            if done(&lines) {
                return;
            }
            if exited.is_none() {
                let report = self.child.lock().unwrap().check().err();
                exited = report.map(|report| (report, Instant::now()));
            }
            if let Some((report, when)) = &exited
                && when.elapsed() > Duration::from_secs(1)
            {
                panic!(
                    "the follower ended before it printed {what}: {report}\nits stdout:\n{}",
                    lines.join("\n")
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the follower did not print {what}; it printed:\n{}",
                lines.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `(cursor, kind, id, text)` of each CHANGE line, in order.
    fn changes(&self) -> Vec<(String, String, String, String)> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| {
                let mut parts = line.strip_prefix("CHANGE ")?.splitn(4, ' ');
                let mut next = || parts.next().unwrap_or_default().to_string();
                Some((next(), next(), next(), next()))
            })
            .collect()
    }

    /// The uids of the EPISODE_ADDED lines, in order.
    fn added(&self) -> Vec<String> {
        let changes = self.changes();
        let added = changes.iter().filter(|c| c.1 == "EPISODE_ADDED");
        added.map(|c| c.2.clone()).collect()
    }

    /// Waits until it has saved the cursor of the last change it printed, then kills it.
    async fn stop(mut self, cursor_file: &Path) {
        let last = self.changes().last().map(|c| c.0.clone()).unwrap();
        let start = Instant::now();
        while std::fs::read_to_string(cursor_file).unwrap_or_default() != last {
            self.child.get_mut().unwrap().assert_running();
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "cursor not saved"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let child = self.child.get_mut().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

async fn connect(server: &ServerProcess) -> Channel {
    Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn add(channel: &Channel, contents: &[&str]) -> Vec<String> {
    let messages = contents
        .iter()
        .map(|content| pb::MemoryMessage {
            content: content.to_string(),
            producer: "ada".into(),
            ..Default::default()
        })
        .collect();
    let response = MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            messages,
            ..Default::default()
        })
        .await
        .unwrap();
    let results = response.into_inner().results;
    results.into_iter().map(|r| r.uid).collect()
}

/// The follower prints every change once, in order, across a restart of both sides (the
/// changes committed while it was down come first) and a restart of the server under it,
/// and exits when the project is deleted.
#[tokio::test(flavor = "multi_thread")]
async fn python_follower_resumes_after_restarts() {
    let data = tempfile::tempdir().unwrap();
    let client_dir = tempfile::tempdir().unwrap();
    let cursor_file = client_dir.path().join("notes.cursor");
    let listen = free_port().to_string();
    let mut server = ServerProcess::start_on(&listen, data.path(), &[], &[]);
    let channel = connect(&server).await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();

    let follower = Follower::start(&listen, &cursor_file);
    follower
        .wait("that it follows from the head", |lines| {
            lines
                .iter()
                .any(|l| l == "following acme/notes from the head")
        })
        .await;
    let first = add(&channel, &["one", "two", "three"]).await;
    follower
        .wait("three additions", |_| follower.added().len() == 3)
        .await;
    assert_eq!(follower.added(), first);
    follower.stop(&cursor_file).await;

    // Both sides go down; changes commit while the follower is away.
    server.kill();
    let mut server = ServerProcess::start_on(&listen, data.path(), &[], &[]);
    let channel = connect(&server).await;
    let second = add(&channel, &["four", "five"]).await;
    let follower = Follower::start(&listen, &cursor_file);
    follower
        .wait("the two additions made while it was down", |_| {
            follower.added().len() == 2
        })
        .await;
    assert_eq!(
        follower.added(),
        second,
        "resumed after its cursor, no more"
    );

    // The server restarts under the running follower, which reconnects.
    server.kill();
    let server = ServerProcess::start_on(&listen, data.path(), &[], &[]);
    let channel = connect(&server).await;
    let third = add(&channel, &["six"]).await;
    follower
        .wait("the addition after the server restarted", |_| {
            follower.added().len() == 3
        })
        .await;
    assert_eq!(follower.added()[2], third[0]);
    assert!(
        follower
            .lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("reconnecting")),
        "it noticed the server going away"
    );

    MemoryServiceClient::new(channel.clone())
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
            episode_ids: vec![second[0].clone()],
        })
        .await
        .unwrap();
    follower
        .wait("the deletion", |_| {
            follower
                .changes()
                .iter()
                .any(|c| c.1 == "EPISODE_DELETED" && c.2 == second[0])
        })
        .await;
    ProjectServiceClient::new(channel.clone())
        .delete_project(pb::DeleteProjectRequest {
            org_id: "acme".into(),
            project_id: "notes".into(),
        })
        .await
        .unwrap();
    follower
        .wait("that the project was deleted", |lines| {
            lines.iter().any(|l| l == "project deleted")
        })
        .await;
    let mut follower = follower;
    let status = follower.child.get_mut().unwrap().wait().unwrap();
    assert!(status.success(), "it exits 0 after the project is deleted");
    let all: Vec<String> = follower.changes().into_iter().map(|c| c.0).collect();
    let unique: std::collections::HashSet<&String> = all.iter().collect();
    assert_eq!(all.len(), unique.len(), "no change printed twice: {all:?}");
}

/// When the server's feed no longer reaches back to the saved cursor, the follower
/// re-reads the project (a snapshot with what it missed) and follows on from the
/// oldest change kept.
#[tokio::test(flavor = "multi_thread")]
async fn python_follower_rereads_a_pruned_feed() {
    let data = tempfile::tempdir().unwrap();
    let client_dir = tempfile::tempdir().unwrap();
    let cursor_file = client_dir.path().join("notes.cursor");
    let listen = free_port().to_string();
    let args = ["--change-feed-retention", "0.5"];
    let server = ServerProcess::start_on(&listen, data.path(), &args, &[]);
    let channel = connect(&server).await;
    create_project(&channel, None, "acme", "notes")
        .await
        .unwrap();
    let follower = Follower::start(&listen, &cursor_file);
    follower
        .wait("that it follows from the head", |lines| {
            lines.iter().any(|l| l.starts_with("following"))
        })
        .await;
    add(&channel, &["one"]).await;
    follower
        .wait("the first addition", |_| follower.added().len() == 1)
        .await;
    follower.stop(&cursor_file).await;

    let missed = add(&channel, &["two", "three"]).await;
    // The pruner runs every retention: past several of them (slack for a busy
    // machine), the entries after the saved cursor are gone (but the newest).
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let follower = Follower::start(&listen, &cursor_file);
    follower
        .wait("a snapshot with what it missed", |lines| {
            missed.iter().all(|uid| {
                lines
                    .iter()
                    .any(|l| l.starts_with(&format!("SNAPSHOT {uid} ")))
            })
        })
        .await;
    let later = add(&channel, &["four"]).await;
    follower
        .wait("the addition after the snapshot", |_| {
            follower.added().contains(&later[0])
        })
        .await;
}
