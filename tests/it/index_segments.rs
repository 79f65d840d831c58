//! Persisted project indexes (issue 47 item 1) over the real binary on a SQLite file:
//! a restart reads the project's segment and replays the change feed from it, and
//! answers exactly as the index that wrote it; a segment killed mid-write, corrupt, or
//! of another project is never used; erasing episodes or a project leaves no segment
//! holding them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::ServerProcess;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::lifecycle_service_client::LifecycleServiceClient;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

const ORG: &str = "segs";
const LEXICAL: &str = "lex";
const HYBRID: &str = "hyb";
/// Past the server's threshold for writing a project's segment (5,000 episodes), even
/// once a third of them (one producer's) are forgotten.
const EPISODES: usize = 7_600;
const WORDS: &[&str] = &[
    "lake", "paint", "race", "soup", "adopt", "dog", "july", "march", "music", "guitar", "school",
    "friend", "trip", "mountain", "camp", "book", "piano", "cook", "twice", "year",
];
const QUESTIONS: &[&str] = &[
    "What did Caroline paint at the lake?",
    "guitar piano music",
    "adopt a dog in july",
    "mountain camp trip with a friend",
];

fn segments(dir: &Path) -> PathBuf {
    dir.join("segments")
}

fn start(dir: &Path, env: &[(&str, &str)]) -> ServerProcess {
    let segs = segments(dir);
    ServerProcess::start_env(
        dir,
        &[
            "--embedder",
            "hash",
            "--index-segments",
            segs.to_str().unwrap(),
        ],
        env,
    )
}

/// A server that rebuilds every index from rows.
fn start_without_segments(dir: &Path) -> ServerProcess {
    ServerProcess::start(dir, &["--embedder", "hash", "--index-segments", "off"])
}

async fn channel(server: &ServerProcess) -> Channel {
    Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn create(channel: &Channel, project: &str, embedder: &str, reranker: &str) {
    ProjectServiceClient::new(channel.clone())
        .create_project(pb::CreateProjectRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            config: Some(pb::ProjectConfig {
                embedder: embedder.into(),
                reranker: reranker.into(),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Adds `n` episodes numbered from `first` (deterministic words and producers); returns
/// their uids.
async fn add(channel: &Channel, project: &str, first: usize, n: usize) -> Vec<String> {
    let mut uids = Vec::new();
    let messages: Vec<pb::MemoryMessage> = (first..first + n)
        .map(|i| {
            let words: Vec<&str> = (0..1 + i % 13)
                .map(|j| WORDS[(i * 7 + j * 3 + i / 5) % WORDS.len()])
                .collect();
            pb::MemoryMessage {
                content: format!("{} number {i}", words.join(" ")),
                producer: ["Caroline", "Melanie", "bob"][i % 3].into(),
                ..Default::default()
            }
        })
        .collect();
    for batch in messages.chunks(1000) {
        let added = MemoryServiceClient::new(channel.clone())
            .add_memories(pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                types: vec![pb::MemoryType::Episodic as i32],
                messages: batch.to_vec(),
            })
            .await
            .unwrap()
            .into_inner();
        uids.extend(added.results.into_iter().map(|r| r.uid));
    }
    uids
}

async fn delete(channel: &Channel, project: &str, uids: &[String]) {
    MemoryServiceClient::new(channel.clone())
        .delete_episodic_memories(pb::DeleteEpisodicMemoriesRequest {
            org_id: ORG.into(),
            project_id: project.into(),
            episode_ids: uids.to_vec(),
        })
        .await
        .unwrap();
}

/// The long-term hits of every question: uid and score.
async fn answers(channel: &Channel, project: &str) -> Vec<Vec<(String, f64)>> {
    let mut all = Vec::new();
    for question in QUESTIONS {
        let found = MemoryServiceClient::new(channel.clone())
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                query: question.to_string(),
                top_k: Some(20),
                types: vec![pb::MemoryType::Episodic as i32],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let hits = found
            .episodic_memory
            .map(|e| e.long_term_memory)
            .unwrap_or_default();
        assert!(!hits.is_empty(), "{question}: no hits");
        all.push(
            hits.into_iter()
                .map(|h| (h.episode.unwrap().uid, h.score))
                .collect(),
        );
    }
    all
}

/// Waits until every episode has its vector (the hash embedder works in the
/// background); SQLite only (the tests' file is read directly).
async fn embedded(dir: &Path) {
    let db = rusqlite::Connection::open(dir.join("memmachine.db")).unwrap();
    for _ in 0..1200 {
        let queued: i64 = db
            .query_row("SELECT COUNT(*) FROM embedding_queue", [], |r| r.get(0))
            .unwrap();
        if queued == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("episodes still queued for embedding");
}

/// The finished segment files.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(segments(dir)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(".seg"))
        .collect();
    files.sort();
    files
}

/// The segment of `project`, found by its key in the header.
fn segment_of(dir: &Path, project: &str) -> Option<PathBuf> {
    let needle = format!("{ORG}/{project}");
    files(dir).into_iter().find(|f| {
        let bytes = std::fs::read(f).unwrap();
        contains(&bytes[..bytes.len().min(4096)], needle.as_bytes())
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Searches until every project named has a segment (a search after the load or the
/// changes starts the write; it is written in the background).
async fn wait_for_segments(dir: &Path, channel: &Channel, projects: &[&str], previous: &[PathBuf]) {
    for _ in 0..600 {
        for project in projects {
            answers(channel, project).await;
        }
        let now = files(dir);
        if projects
            .iter()
            .all(|p| segment_of(dir, p).is_some_and(|f| !previous.contains(&f)))
            && now.len() >= projects.len()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no segment written: {:?}", files(dir));
}

/// The server's log lines about indexes (for failure messages).
fn index_log(server: &ServerProcess) -> String {
    let log = server.log.lock().unwrap();
    let lines: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("segment") || l.contains("index loaded"))
        .collect();
    format!("{lines:#?}")
}

fn logged(server: &ServerProcess, what: &str) -> Vec<String> {
    let log = server.log.lock().unwrap();
    log.iter().filter(|l| l.contains(what)).cloned().collect()
}

/// Two projects (lexical, hybrid) of `EPISODES` each, embedded, with their segments.
async fn loaded(dir: &Path) -> (ServerProcess, Channel, Vec<String>) {
    let server = start(dir, &[]);
    let channel = channel(&server).await;
    create(&channel, LEXICAL, "", "lexical").await;
    create(&channel, HYBRID, "hash", "hybrid").await;
    let uids = add(&channel, LEXICAL, 0, EPISODES).await;
    add(&channel, HYBRID, 0, EPISODES).await;
    embedded(dir).await;
    wait_for_segments(dir, &channel, &[LEXICAL, HYBRID], &[]).await;
    (server, channel, uids)
}

#[tokio::test]
async fn a_restart_reads_the_segment_replays_the_changes_since_and_answers_the_same() {
    if crate::common::postgres::servers_on_postgres() {
        return; // the embedding queue is read from the SQLite file
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut server, channel, uids) = loaded(dir.path()).await;
    // A delete erases the project's segment at once (it holds the deleted text); the
    // next read writes it again.
    let old = segment_of(dir.path(), LEXICAL).unwrap();
    delete(&channel, LEXICAL, &uids[10..60]).await;
    assert!(segment_of(dir.path(), LEXICAL).is_none());
    wait_for_segments(dir.path(), &channel, &[LEXICAL], &[old]).await;
    // Changes after the segments: adds, and their vectors (set later by the embedder).
    add(&channel, HYBRID, EPISODES, 300).await;
    add(&channel, LEXICAL, EPISODES, 300).await;
    embedded(dir.path()).await;
    let before = (
        answers(&channel, LEXICAL).await,
        answers(&channel, HYBRID).await,
    );
    let rss_before = rss(server.child.id());
    // Killed: nothing saved at shutdown, so the restart must replay.
    server.kill();

    let server = start(dir.path(), &[]);
    let channel = self::channel(&server).await;
    let after = (
        answers(&channel, LEXICAL).await,
        answers(&channel, HYBRID).await,
    );
    assert!(before == after, "{}", index_log(&server));
    let read = logged(&server, "project index loaded from its segment");
    assert_eq!(read.len(), 2, "{read:?}");
    assert!(read.iter().all(|l| !l.contains("replayed=0")), "{read:?}");
    assert!(logged(&server, "index segment ignored").is_empty());
    let rss_after = rss(server.child.id());
    eprintln!("RSS before {rss_before:?} after {rss_after:?}");
}

/// A process's resident set, in bytes (Linux).
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[tokio::test]
async fn a_corrupt_segment_or_one_of_another_project_is_ignored_and_the_index_rebuilt() {
    if crate::common::postgres::servers_on_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (server, _, _) = loaded(dir.path()).await;
    server.terminate_async().await;
    let lexical = segment_of(dir.path(), LEXICAL).unwrap();
    let hybrid = segment_of(dir.path(), HYBRID).unwrap();
    // A flipped byte in the lexical project's body; the hybrid project's file holds
    // the lexical project's segment.
    let mut bytes = std::fs::read(&lexical).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&lexical, &bytes).unwrap();
    std::fs::copy(&lexical, &hybrid).unwrap();
    let mut flipped = std::fs::read(&hybrid).unwrap();
    flipped[middle] ^= 0x40;
    std::fs::write(&hybrid, &flipped).unwrap();

    let server = start(dir.path(), &[]);
    let channel = channel(&server).await;
    let read = (
        answers(&channel, LEXICAL).await,
        answers(&channel, HYBRID).await,
    );
    let ignored = logged(&server, "index segment ignored");
    assert_eq!(ignored.len(), 2, "{}", index_log(&server));
    assert!(
        ignored.iter().any(|l| l.contains("checksum")),
        "{ignored:?}"
    );
    assert!(
        ignored.iter().any(|l| l.contains("another project")),
        "{ignored:?}"
    );
    assert!(logged(&server, "loaded from its segment").is_empty());
    // Ignored segments are deleted (a rebuilt index at the same position may take the
    // same name again).
    assert_ne!(std::fs::read(&lexical).ok(), Some(bytes));
    assert_ne!(std::fs::read(&hybrid).ok(), Some(flipped));
    // And written afresh from the rebuilt indexes.
    wait_for_segments(dir.path(), &channel, &[LEXICAL, HYBRID], &[]).await;
    server.terminate_async().await;

    let rebuilt = start_without_segments(dir.path());
    let channel = self::channel(&rebuilt).await;
    let fresh = (
        answers(&channel, LEXICAL).await,
        answers(&channel, HYBRID).await,
    );
    assert_eq!(read, fresh);
    rebuilt.terminate_async().await;
    // The rewritten segments answer as the rebuild too.
    let server = start(dir.path(), &[]);
    let channel = self::channel(&server).await;
    let again = (
        answers(&channel, LEXICAL).await,
        answers(&channel, HYBRID).await,
    );
    assert_eq!(again, fresh);
    assert_eq!(logged(&server, "loaded from its segment").len(), 2);
}

#[tokio::test]
async fn a_crash_in_the_middle_of_a_segment_write_leaves_the_previous_one_in_use() {
    if crate::common::postgres::servers_on_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (server, _, _) = loaded(dir.path()).await;
    server.terminate_async().await;
    let first = segment_of(dir.path(), LEXICAL).unwrap();
    // Enough change for a new segment, which the hook kills mid-write.
    let mut server = start(dir.path(), &[("MEMMACHINE_TEST_ABORT_MID_SEGMENT", "1")]);
    let channel = channel(&server).await;
    add(&channel, LEXICAL, EPISODES, 5_000).await;
    for _ in 0..600 {
        if MemoryServiceClient::new(channel.clone())
            .search_memories(pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: LEXICAL.into(),
                query: "lake".into(),
                ..Default::default()
            })
            .await
            .is_err()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = server.child.wait().unwrap();
    assert!(!status.success(), "the hook aborts the server");
    assert!(!logged(&server, "MEMMACHINE_TEST_ABORT_MID_SEGMENT").is_empty());
    let left: Vec<_> = std::fs::read_dir(segments(dir.path()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        left.iter().any(|p| p.to_str().unwrap().ends_with(".tmp")),
        "{left:?}"
    );
    assert!(first.exists());

    let server = start(dir.path(), &[]);
    let channel = self::channel(&server).await;
    let read = answers(&channel, LEXICAL).await;
    answers(&channel, HYBRID).await;
    assert_eq!(
        logged(&server, "loaded from its segment").len(),
        2,
        "{}",
        index_log(&server)
    );
    assert!(logged(&server, "index segment ignored").is_empty());
    let left: Vec<_> = std::fs::read_dir(segments(dir.path()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        !left.iter().any(|p| p.to_str().unwrap().ends_with(".tmp")),
        "temp files cleaned"
    );
    server.terminate_async().await;
    let rebuilt = start_without_segments(dir.path());
    let fresh = answers(&self::channel(&rebuilt).await, LEXICAL).await;
    assert_eq!(read, fresh);
}

#[tokio::test]
async fn forgetting_a_subject_or_deleting_a_project_leaves_no_segment_holding_them() {
    if crate::common::postgres::servers_on_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (server, channel, _) = loaded(dir.path()).await;
    let holds = |what: &str| {
        files(dir.path())
            .iter()
            .any(|f| contains(&std::fs::read(f).unwrap(), what.as_bytes()))
    };
    assert!(holds("Melanie"), "the producer ids are in the segments");
    let forgot = LifecycleServiceClient::new(channel.clone())
        .forget_subject(pb::ForgetSubjectRequest {
            org_id: ORG.into(),
            subject: "Melanie".into(),
            project_ids: vec![LEXICAL.into(), HYBRID.into()],
            dry_run: false,
        })
        .await;
    forgot.unwrap();
    assert!(!holds("Melanie"), "{:?}", files(dir.path()));
    // Segments written afterwards do not hold the subject either.
    wait_for_segments(dir.path(), &channel, &[LEXICAL], &[]).await;
    assert!(!holds("Melanie"));
    assert!(holds("Caroline"));

    ProjectServiceClient::new(channel.clone())
        .delete_project(pb::DeleteProjectRequest {
            org_id: ORG.into(),
            project_id: LEXICAL.into(),
        })
        .await
        .unwrap();
    assert!(
        segment_of(dir.path(), LEXICAL).is_none(),
        "{:?}",
        files(dir.path())
    );
    server.terminate_async().await;
}
