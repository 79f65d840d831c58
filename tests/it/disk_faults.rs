//! Full and read-only disks, for real: the data directory is on a small filesystem the
//! test mounts (a size-limited tmpfs; an ext4 image on a loop device that the kernel
//! turns read-only on an error, as it does a failing disk). Mounting needs root; where
//! it is refused the tests say so and skip (under CI, fail). SQLite's only: PostgreSQL
//! keeps its own disk.
//!
//! sqlite-only: the faults are of SQLite's disk; PostgreSQL keeps its own.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;
use crate::common::ServerProcess;
use crate::common::child::Run;
use crate::common::paging::collect_pages;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::Code;
use tonic::transport::Channel;

/// A filesystem mounted for one test, unmounted (lazily: the server may still hold its
/// files) when dropped.
struct Mount {
    point: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mount {
    /// `mount ARGS... POINT` on a fresh directory, or why it could not be done.
    fn new(args: &[&str]) -> Result<Mount, String> {
        if common::postgres::servers_on_postgres() {
            return Err("the server runs on PostgreSQL, whose disk is not ours".into());
        }
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().join("mnt");
        std::fs::create_dir(&point).unwrap();
        let out = Command::new("mount")
            .args(args)
            .arg(&point)
            .try_run()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Mount { point, _dir: dir })
    }

    fn data_dir(&self) -> PathBuf {
        self.point.join("data")
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.point).try_run();
    }
}

fn skip(why: &str) {
    crate::common::cannot_run(
        "a disk fault test",
        &format!("cannot mount a test filesystem ({why}); this test needs root"),
    );
}

async fn connect(server: &ServerProcess) -> Channel {
    tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

async fn create(channel: &Channel) {
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: "disk".into(),
            project_id: "p".into(),
            ..Default::default()
        })
        .await
        .expect("create project");
}

/// Adds `n` messages of about `bytes` bytes each; the uids, once acknowledged.
async fn add(
    channel: &Channel,
    tag: &str,
    n: usize,
    bytes: usize,
) -> Result<Vec<String>, tonic::Status> {
    let messages = (0..n)
        .map(|i| pb::MemoryMessage {
            content: format!("{tag}m{i} {}", "filler words ".repeat(bytes / 13)),
            ..Default::default()
        })
        .collect();
    let response = MemoryServiceClient::new(channel.clone())
        .add_memories(pb::AddMemoriesRequest {
            org_id: "disk".into(),
            project_id: "p".into(),
            messages,
            ..Default::default()
        })
        .await?;
    Ok(response
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.uid)
        .collect())
}

/// Every uid the project holds, read page by page.
async fn stored(channel: &Channel) -> HashSet<String> {
    let mut client = MemoryServiceClient::new(channel.clone());
    collect_pages(async |token| {
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                org_id: "disk".into(),
                project_id: "p".into(),
                page_size: Some(1000),
                page_token: token,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        (
            page.episodes.into_iter().map(|e| e.uid),
            page.next_page_token,
        )
    })
    .await
    .into_iter()
    .collect()
}

/// How many of the hits of a search for `word` hold it.
async fn found(channel: &Channel, word: &str) -> usize {
    let response = MemoryServiceClient::new(channel.clone())
        .search_memories(pb::SearchMemoriesRequest {
            org_id: "disk".into(),
            project_id: "p".into(),
            query: word.into(),
            ..Default::default()
        })
        .await
        .expect("search")
        .into_inner();
    let hits = response
        .episodic_memory
        .map_or(vec![], |e| e.long_term_memory);
    hits.iter()
        .filter(|h| {
            h.episode
                .as_ref()
                .is_some_and(|e| e.content.split(' ').any(|w| w == word))
        })
        .count()
}

fn assert_all_kept(acked: &[String], stored: &HashSet<String>, when: &str) {
    let lost: Vec<_> = acked.iter().filter(|u| !stored.contains(*u)).collect();
    assert!(
        lost.is_empty(),
        "{when}: {} acknowledged episodes lost",
        lost.len()
    );
}

fn integrity(data_dir: &Path) -> String {
    let conn = rusqlite::Connection::open(data_dir.join("memmachine.db")).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// Writes `path` until the filesystem refuses another byte.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![7u8; 64 * 1024];
    while file.write_all(&chunk).and_then(|_| file.sync_all()).is_ok() {}
    // The last partial chunk: byte by byte would take long; small writes suffice.
    while file
        .write_all(&chunk[..512])
        .and_then(|_| file.sync_all())
        .is_ok()
    {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_serves_reads_and_recovers_without_a_restart() {
    let mount = match Mount::new(&["-t", "tmpfs", "-o", "size=24m", "tmpfs"]) {
        Ok(mount) => mount,
        Err(why) => return skip(&why),
    };
    let data_dir = mount.data_dir();
    let mut server = ServerProcess::start(&data_dir, &["--embedder", "hash"]);
    let channel = connect(&server).await;
    create(&channel).await;
    let mut acked = Vec::new();
    for batch in 0..10 {
        acked.extend(
            add(&channel, &format!("before{batch}"), 10, 512)
                .await
                .unwrap(),
        );
    }

    let filler = mount.point.join("filler");
    fill(&filler);
    // SQLite may still have room in pages it holds; adds go on until one is refused.
    let mut refusal = None;
    for batch in 0..500 {
        match add(&channel, &format!("full{batch}"), 10, 4096).await {
            Ok(uids) => acked.extend(uids),
            Err(status) => {
                refusal = Some(status);
                break;
            }
        }
    }
    let refusal = refusal.expect("a write to a full disk was refused");
    assert!(
        matches!(refusal.code(), Code::ResourceExhausted | Code::Unavailable),
        "a full disk is RESOURCE_EXHAUSTED or UNAVAILABLE, got {refusal:?}"
    );
    assert!(
        refusal.message().contains("disk is full"),
        "the refusal names the cause: {:?}",
        refusal.message()
    );

    // Reads go on while the disk is full.
    let held = stored(&channel).await;
    assert_all_kept(&acked, &held, "while full");
    assert_eq!(
        found(&channel, "before3m7").await,
        1,
        "search works while full"
    );
    assert!(
        server
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("disk is full")),
        "the log says the disk is full"
    );

    // Space freed: the next write succeeds, no restart needed.
    std::fs::remove_file(&filler).unwrap();
    acked.extend(
        add(&channel, "after", 10, 512)
            .await
            .expect("a write once space is freed"),
    );
    assert_eq!(found(&channel, "afterm3").await, 1);

    let status = server.terminate();
    assert!(status.success(), "graceful shutdown, got {status:?}");
    assert_eq!(integrity(&data_dir), "ok");
    let server = ServerProcess::start(&data_dir, &["--embedder", "hash"]);
    let channel = connect(&server).await;
    assert_all_kept(&acked, &stored(&channel).await, "after a restart");
}

/// The ext4 image's loop device, as `/sys/fs/ext4/` names it.
fn ext4_device(point: &Path) -> String {
    let out = Command::new("findmnt")
        .args(["-no", "SOURCE"])
        .arg(point)
        .run();
    let source = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Path::new(&source)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_turned_read_only_refuses_writes_and_serves_reads() {
    let images = tempfile::tempdir().unwrap();
    let image = images.path().join("disk.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    // No journal: the kernel then turns the filesystem read-only on an error without
    // aborting a journal, as a disk that fails does.
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "^has_journal"])
        .arg(&image)
        .try_run();
    if !made.is_ok_and(|o| o.status.success()) {
        return skip("mkfs.ext4 failed");
    }
    let image_arg = image.to_string_lossy().into_owned();
    let mount = match Mount::new(&["-o", "loop,errors=remount-ro", &image_arg]) {
        Ok(mount) => mount,
        Err(why) => return skip(&why),
    };
    let data_dir = mount.data_dir();
    let mut server = ServerProcess::start(&data_dir, &["--embedder", "hash"]);
    let channel = connect(&server).await;
    create(&channel).await;
    let mut acked = Vec::new();
    for batch in 0..10 {
        acked.extend(
            add(&channel, &format!("before{batch}"), 10, 512)
                .await
                .unwrap(),
        );
    }

    let trigger = format!(
        "/sys/fs/ext4/{}/trigger_fs_error",
        ext4_device(&mount.point)
    );
    std::fs::write(&trigger, "memmachine test\n").expect("trigger an ext4 error");
    let refusal = add(&channel, "readonly", 10, 512)
        .await
        .expect_err("a write to a read-only disk is refused");
    assert_eq!(refusal.code(), Code::Unavailable, "{refusal:?}");
    assert!(
        refusal.message().contains("read-only"),
        "the refusal names the cause: {:?}",
        refusal.message()
    );
    let held = stored(&channel).await;
    assert_all_kept(&acked, &held, "while read-only");
    assert_eq!(
        found(&channel, "before3m7").await,
        1,
        "search works while read-only"
    );

    // The operator repairs and remounts the disk; the files are then new ones to the
    // server, so it is restarted on them.
    server.kill();
    drop(channel);
    let _ = Command::new("umount").arg(&mount.point).try_run();
    let checked = Command::new("fsck.ext4")
        .args(["-f", "-y"])
        .arg(&image)
        .run();
    assert!(
        checked.status.code().is_some_and(|c| c <= 1),
        "fsck: {checked:?}"
    );
    let remount = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&image)
        .arg(&mount.point)
        .run();
    assert!(remount.status.success(), "{remount:?}");
    assert_eq!(integrity(&data_dir), "ok");
    let server = ServerProcess::start(&data_dir, &["--embedder", "hash"]);
    let channel = connect(&server).await;
    assert_all_kept(&acked, &stored(&channel).await, "after the repair");
    add(&channel, "repaired", 1, 64)
        .await
        .expect("writes once writable again");
}
