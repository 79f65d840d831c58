//! A rolling restart through HAProxy under steady mixed load: adds with idempotency
//! keys, searches and a change-feed consumer, while the three replicas are stopped
//! with SIGTERM and started again one after another, as Kubernetes rolls a
//! Deployment. The unary clients retry nothing: no call may fail, every acknowledged
//! add must be stored once, and the consumer, resuming from its cursor when its stream
//! ends, must see every add once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Mesh, ORG, add, connect, contents, create_project, routed, search};
use crate::common::proxy::{Balance, Kind, Proxy};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::change_service_client::ChangeServiceClient;
use tokio::sync::Mutex;
use tonic::transport::Channel;

const PROJECTS: usize = 6;
/// The project the change-feed consumer follows.
const WATCHED: &str = "r0";

fn project(p: usize) -> String {
    format!("r{p}")
}

/// One unary call: when it started (since the load began), how long it took, and its
/// failure if it failed.
struct Call {
    at: Duration,
    took: Duration,
    failed: Option<String>,
}

#[derive(Default)]
struct Record {
    calls: Vec<Call>,
    /// Acknowledged adds: (project, content) -> uid.
    acknowledged: HashMap<(String, String), String>,
}

/// Adds one message at a time, each with its own idempotency key, round the projects.
async fn adder(
    channel: Channel,
    id: usize,
    record: Arc<Mutex<Record>>,
    stop: Arc<AtomicBool>,
    start: Instant,
) {
    let mut n = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let project = project(n % PROJECTS);
        let content = format!("adder {id} message {n}");
        let message = pb::MemoryMessage {
            content: content.clone(),
            producer: "ada".into(),
            idempotency_key: format!("adder-{id}-{n}"),
            ..Default::default()
        };
        let began = Instant::now();
        let result = add(&channel, &project, vec![message]).await;
        let mut record = record.lock().await;
        record.calls.push(Call {
            at: began - start,
            took: began.elapsed(),
            failed: result.as_ref().err().map(|s| format!("add: {s:?}")),
        });
        if let Ok(results) = result {
            record
                .acknowledged
                .insert((project, content), results[0].uid.clone());
        }
        n += 1;
    }
}

async fn searcher(
    channel: Channel,
    id: usize,
    record: Arc<Mutex<Record>>,
    stop: Arc<AtomicBool>,
    start: Instant,
) {
    let mut n = id;
    while !stop.load(Ordering::SeqCst) {
        let began = Instant::now();
        let result = search(&channel, &project(n % PROJECTS), "message").await;
        record.lock().await.calls.push(Call {
            at: began - start,
            took: began.elapsed(),
            failed: result.err().map(|s| format!("search: {s:?}")),
        });
        n += 1;
    }
}

/// What the change-feed consumer saw: episode uids added, in order, and how often its
/// stream ended and it resumed.
#[derive(Default)]
struct Feed {
    added: Vec<String>,
    cursor: String,
    resumed: usize,
    ends: Vec<String>,
}

/// Follows `WATCHED` from `after`, resuming from its last cursor whenever the stream
/// ends (a draining replica ends it), until `stop` and nothing is left to read.
async fn consumer(channel: Channel, feed: Arc<Mutex<Feed>>, stop: Arc<AtomicBool>) {
    loop {
        let after = feed.lock().await.cursor.clone();
        let stream = ChangeServiceClient::new(channel.clone())
            .watch_changes(routed(
                WATCHED,
                pb::WatchChangesRequest {
                    org_id: ORG.into(),
                    project_id: WATCHED.into(),
                    after,
                },
            ))
            .await;
        let mut stream = match stream {
            Ok(stream) => stream.into_inner(),
            Err(status) => {
                let mut feed = feed.lock().await;
                feed.ends
                    .push(format!("{:?}: {}", status.code(), status.message()));
                feed.resumed += 1;
                drop(feed);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        loop {
            let next = tokio::time::timeout(Duration::from_millis(500), stream.message()).await;
            match next {
                Ok(Ok(Some(change))) => {
                    let mut feed = feed.lock().await;
                    if change.kind == pb::ChangeKind::EpisodeAdded as i32 {
                        feed.added.push(change.episode_uid.clone());
                    }
                    feed.cursor = change.cursor;
                }
                Ok(Ok(None)) => break,
                Ok(Err(status)) => {
                    let mut feed = feed.lock().await;
                    feed.ends
                        .push(format!("{:?}: {}", status.code(), status.message()));
                    feed.resumed += 1;
                    break;
                }
                // Quiet: done once the load has stopped and everything was read.
                Err(_) if stop.load(Ordering::SeqCst) => return,
                Err(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn p99(calls: &[&Call]) -> Duration {
    let mut took: Vec<Duration> = calls.iter().map(|c| c.took).collect();
    took.sort();
    took.get((took.len() * 99 / 100).min(took.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_through_haproxy_fails_and_loses_nothing() {
    let Some(mut mesh) = Mesh::start().await else {
        return;
    };
    let listen = crate::common::free_port();
    let Some(mut proxy) = Proxy::start(Kind::HAProxy, Balance::Affinity, listen, &mesh.upstreams())
    else {
        return;
    };
    let channel = connect(&proxy.url()).await;
    for p in 0..PROJECTS {
        create_project(&channel, &project(p)).await;
    }
    // The consumer starts from the cursor of a first add, so that it misses nothing.
    let feed = Arc::new(Mutex::new(Feed::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let watching = tokio::spawn(consumer(channel.clone(), feed.clone(), stop.clone()));
    let seed = loop {
        let seed = add(
            &channel,
            WATCHED,
            vec![pb::MemoryMessage {
                content: "seed".into(),
                producer: "ada".into(),
                ..Default::default()
            }],
        )
        .await
        .unwrap()[0]
            .uid
            .clone();
        tokio::time::sleep(Duration::from_millis(300)).await;
        if feed.lock().await.added.contains(&seed) {
            break seed;
        }
    };

    let record = Arc::new(Mutex::new(Record::default()));
    let start = Instant::now();
    let mut load = Vec::new();
    for id in 0..2 {
        load.push(tokio::spawn(adder(
            channel.clone(),
            id,
            record.clone(),
            stop.clone(),
            start,
        )));
        load.push(tokio::spawn(searcher(
            channel.clone(),
            id,
            record.clone(),
            stop.clone(),
            start,
        )));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restart_began = start.elapsed();
    for i in 0..3 {
        let status = mesh.stop_replica(i).await;
        assert!(
            status.success(),
            "replica {} exited {status:?} on SIGTERM",
            i + 1
        );
        mesh.start_replica(i);
        // Two passing checks 500 ms apart put it back behind the proxy.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let restart_ended = start.elapsed();
    proxy.assert_running();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.unwrap();
    }

    let record = record.lock().await;
    let failed: Vec<&String> = record
        .calls
        .iter()
        .filter_map(|c| c.failed.as_ref())
        .collect();
    let before: Vec<&Call> = record
        .calls
        .iter()
        .filter(|c| c.at < restart_began)
        .collect();
    let during: Vec<&Call> = record
        .calls
        .iter()
        .filter(|c| c.at >= restart_began && c.at < restart_ended)
        .collect();
    eprintln!(
        "rolling restart through HAProxy: {} calls ({} during the restart, {:.1} s), {} failed; \
         p99 before {:.1} ms, during {:.1} ms; {} adds acknowledged",
        record.calls.len(),
        during.len(),
        (restart_ended - restart_began).as_secs_f64(),
        failed.len(),
        p99(&before).as_secs_f64() * 1e3,
        p99(&during).as_secs_f64() * 1e3,
        record.acknowledged.len()
    );
    assert!(
        failed.is_empty(),
        "{} calls failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
    assert!(!during.is_empty(), "no calls were made during the restart");

    // Every acknowledged add is stored once (read straight from a replica).
    let direct = mesh.direct(0).await;
    for p in 0..PROJECTS {
        let stored = contents(&direct, &project(p)).await;
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for content in &stored {
            *counts.entry(content.as_str()).or_default() += 1;
        }
        for ((proj, content), _) in record
            .acknowledged
            .iter()
            .filter(|((proj, _), _)| *proj == project(p))
        {
            assert_eq!(
                counts.get(content.as_str()).copied().unwrap_or(0),
                1,
                "{proj}: acknowledged add {content:?} is stored other than once"
            );
        }
        let acknowledged = record
            .acknowledged
            .keys()
            .filter(|(proj, _)| *proj == project(p))
            .count();
        let seeded = usize::from(project(p) == WATCHED);
        assert_eq!(
            stored.len(),
            acknowledged + seeded,
            "{}: stored beyond what was acknowledged",
            project(p)
        );
    }

    // The consumer saw every add to its project once, resuming without a gap.
    let wanted: HashSet<String> = record
        .acknowledged
        .iter()
        .filter(|((proj, _), _)| proj == WATCHED)
        .map(|(_, uid)| uid.clone())
        .chain([seed])
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let feed = feed.lock().await;
        let seen: HashSet<&String> = feed.added.iter().collect();
        if wanted.iter().all(|uid| seen.contains(uid)) || Instant::now() > deadline {
            break;
        }
        drop(feed);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    watching.await.unwrap();
    let feed = feed.lock().await;
    let seen: HashSet<&String> = feed.added.iter().collect();
    let missed: Vec<&String> = wanted.iter().filter(|uid| !seen.contains(uid)).collect();
    eprintln!(
        "the change-feed consumer resumed {} times ({:?}); saw {} adds",
        feed.resumed,
        feed.ends.iter().take(5).collect::<Vec<_>>(),
        feed.added.len()
    );
    assert!(
        missed.is_empty(),
        "the consumer missed {} adds: {missed:?}",
        missed.len()
    );
    assert_eq!(
        seen.len(),
        feed.added.len(),
        "the consumer saw an add twice"
    );
    assert_eq!(
        seen.len(),
        wanted.len(),
        "the consumer saw adds that were not acknowledged"
    );
    drop(proxy);
}
