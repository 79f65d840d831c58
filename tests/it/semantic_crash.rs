//! SIGKILL of the real binary in the middle of semantic ingestion: a batch whose model
//! answer was not committed runs again after the restart, and no batch is ever applied
//! twice (each model answer carries a value unique to its call, so a second application
//! would show as a second feature).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use crate::common::ServerProcess;
use crate::common::chat::{ChatCall, ChatServer, ScriptedReply};
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::{self as pb, MemoryType};

fn flags(chat: &ChatServer) -> Vec<String> {
    [
        "--llm-base-url",
        &chat.url,
        "--llm-model",
        "scripted",
        "--llm-max-calls-per-minute",
        "0",
        "--semantic-trigger-messages",
        "1",
        "--semantic-trigger-age",
        "0",
        "--semantic-lease",
        "1",
        "--embedder",
        "none",
    ]
    .map(str::to_string)
    .to_vec()
}

/// An answer adding one feature per message, named by its text, valued by the call.
fn answer(call: &ChatCall, n: usize) -> String {
    let messages = call.user.split("## New messages\n").nth(1).unwrap_or("");
    let mut commands = Vec::new();
    let mut number = 0;
    for line in messages.lines().filter(|l| !l.is_empty()) {
        match line.strip_prefix('[') {
            Some(rest) => number = rest[..rest.find(']').unwrap()].parse::<u64>().unwrap(),
            None => commands.push(serde_json::json!({
                "command": "add", "tag": "preferences", "feature": line,
                "value": format!("call {n}"), "messages": [number]
            })),
        }
    }
    serde_json::json!({ "commands": commands }).to_string()
}

async fn add(addr: &str, content: &str) {
    let mut client = MemoryServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client
        .add_memories(pb::AddMemoriesRequest {
            messages: vec![pb::MemoryMessage {
                content: content.into(),
                producer: "alice".into(),
                role: "user".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap();
}

async fn features(addr: &str) -> Vec<pb::SemanticFeature> {
    let mut client = MemoryServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client
        .list_memories(pb::ListMemoriesRequest {
            r#type: MemoryType::Semantic as i32,
            page_size: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .features
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_ingestion_reruns_the_batch_and_never_applies_one_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = mpsc::channel::<usize>();
    let tx = Arc::new(Mutex::new(tx));
    let calls = Arc::new(AtomicUsize::new(0));
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let chat = {
        let (tx, calls, hang) = (tx.clone(), calls.clone(), hang.clone());
        ChatServer::start(move |call| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            let _ = tx.lock().unwrap().send(n);
            if hang.load(Ordering::SeqCst) {
                ScriptedReply::Hang
            } else {
                ScriptedReply::Content(answer(call, n))
            }
        })
    };
    let args = flags(&chat);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let rounds = 4;
    for round in 0..rounds {
        // Round 0 is killed while the model has not answered; the others just as the
        // answer arrives (before or after the commit, whichever the race gives).
        hang.store(round == 0, Ordering::SeqCst);
        let mut server = ServerProcess::start(dir.path(), &args);
        add(&server.addr, &format!("fact of round {round}")).await;
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the model was called");
        server.kill();
        while rx.try_recv().is_ok() {}
    }
    hang.store(false, Ordering::SeqCst);
    let server = ServerProcess::start(dir.path(), &args);
    for _ in 0..200 {
        if features(&server.addr).await.len() >= rounds {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Settle: a batch applied twice would add another feature now.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let found = features(&server.addr).await;
    let mut names: Vec<String> = found.iter().map(|f| f.feature_name.clone()).collect();
    names.sort();
    let expected: Vec<String> = (0..rounds).map(|r| format!("fact of round {r}")).collect();
    assert_eq!(
        names, expected,
        "each message's batch applied exactly once: {found:#?}"
    );
    assert!(found.iter().all(|f| f.citations.len() == 1), "{found:#?}");
}
