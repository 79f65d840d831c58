//! Durability: the real binary is SIGKILLed while concurrent AddMemories calls stream in;
//! after each restart every acknowledged uid is still there and the database is intact.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use crate::common::ServerProcess;
use crate::common::paging::collect_pages;
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;

const WRITERS: usize = 4;
const BATCH: usize = 20;
const KILLS: usize = 4;

async fn connect(url: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

/// Adds batches until the server dies, recording the uids of acknowledged batches.
async fn write_until_error(
    url: String,
    writer: usize,
    round: usize,
    acked: Arc<Mutex<Vec<String>>>,
) {
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(url) else {
        return;
    };
    let Ok(channel) = endpoint.connect().await else {
        return;
    };
    let mut client = MemoryServiceClient::new(channel);
    for batch in 0.. {
        let messages = (0..BATCH)
            .map(|i| pb::MemoryMessage {
                content: format!("message {} of a batch", marker(round, writer, batch, i)),
                ..Default::default()
            })
            .collect();
        let request = pb::AddMemoriesRequest {
            org_id: "durable".into(),
            project_id: "p".into(),
            types: vec![],
            messages,
        };
        match client.add_memories(request).await {
            Ok(response) => {
                let uids = response.into_inner().results.into_iter().map(|r| r.uid);
                acked.lock().unwrap().extend(uids);
            }
            Err(_) => return,
        }
    }
}

/// A word found in one message only.
fn marker(round: usize, writer: usize, batch: usize, i: usize) -> String {
    format!("r{round}w{writer}b{batch}m{i}")
}

async fn stored_uids(url: &str) -> Vec<(String, i64)> {
    let mut client = MemoryServiceClient::new(connect(url).await);
    collect_pages(async |token| {
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                org_id: "durable".into(),
                project_id: "p".into(),
                page_size: Some(1000),
                page_token: token,
                ..Default::default()
            })
            .await
            .expect("list after restart")
            .into_inner();
        let uids = page.episodes.into_iter().map(|e| (e.uid, e.sequence_num));
        (uids, page.next_page_token)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut server = ServerProcess::start(dir.path(), &[]);
    ProjectServiceClient::new(connect(&server.url()).await)
        .create_project(pb::CreateProjectRequest {
            org_id: "durable".into(),
            project_id: "p".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    for round in 0..KILLS {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| tokio::spawn(write_until_error(server.url(), w, round, acked.clone())))
            .collect();
        // Let writes stream for a while, then kill mid-stream.
        tokio::time::sleep(Duration::from_millis(300 + 200 * round as u64)).await;
        let before_kill = acked.lock().unwrap().len();
        server.kill();
        for writer in writers {
            writer.await.unwrap();
        }
        assert!(
            before_kill > 0,
            "round {round}: no write was acknowledged before the kill"
        );

        server = ServerProcess::start(dir.path(), &[]);
        let stored = stored_uids(&server.url()).await;
        let stored_set: HashSet<&str> = stored.iter().map(|(uid, _)| uid.as_str()).collect();
        assert_eq!(stored_set.len(), stored.len(), "no episode is stored twice");
        assert!(
            stored.windows(2).all(|w| w[0].1 < w[1].1),
            "sequence numbers stay ordered"
        );
        let acked = acked.lock().unwrap();
        let lost: Vec<_> = acked
            .iter()
            .filter(|uid| !stored_set.contains(uid.as_str()))
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} acknowledged uids lost, e.g. {:?}",
            lost.len(),
            lost.first()
        );
        assert_eq!(
            stored.len() % BATCH,
            0,
            "batches are stored whole or not at all"
        );
        eprintln!(
            "round {round}: {} acknowledged, {} stored",
            acked.len(),
            stored.len()
        );
    }

    let status = server.terminate();
    assert!(
        status.success(),
        "graceful shutdown exits 0, got {status:?}"
    );
    if common::postgres::servers_on_postgres() {
        return; // The file checks below are SQLite's.
    }
    let conn = rusqlite::Connection::open(dir.path().join("memmachine.db")).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let rows: i64 = conn
        .query_row("SELECT COUNT(*) FROM episodes", [], |r| r.get(0))
        .unwrap();
    assert!(rows as usize >= acked.lock().unwrap().len());
}
