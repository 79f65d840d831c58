//! Project affinity through a real proxy: 300 projects searched through HAProxy and
//! nginx over three replicas. Each replica loads only its share of the project indexes
//! (the same run without affinity is printed beside it), every answer is the one a
//! single server gives for the same data, and when a replica is killed its projects
//! move to the others and are still answered correctly.

use std::collections::HashMap;

use super::{Mesh, add, connect, create_project, search};
use crate::common::ServerProcess;
use crate::common::child::Run;
use crate::common::proxy::{Balance, Kind, Proxy};
use memmachine_proto::v2 as pb;
use tonic::transport::Channel;

const PROJECTS: usize = 300;
const EPISODES: usize = 12;
/// Searches of each project per pass: traffic repeats, so without affinity every
/// replica ends up loading most projects.
const PASSES: usize = 3;
/// What the issue allows a replica to hold (a third is ideal).
const MOST_SHARE: f64 = 0.45;

const WORDS: [&str; 12] = [
    "harbour", "violin", "lantern", "orchard", "glacier", "copper", "meadow", "falcon", "saffron",
    "quartz", "tundra", "willow",
];

fn project(p: usize) -> String {
    format!("p{p:03}")
}

/// The messages of project `p`: words repeated differently in each, so that searches
/// rank them.
fn messages(p: usize) -> Vec<pb::MemoryMessage> {
    (0..EPISODES)
        .map(|e| {
            let mut content = format!("project {p} note {e}:");
            for (w, word) in WORDS.iter().enumerate() {
                for _ in 0..=((p + e * w + w) % 3) {
                    content.push(' ');
                    content.push_str(word);
                }
            }
            pb::MemoryMessage {
                content,
                producer: "ada".into(),
                ..Default::default()
            }
        })
        .collect()
}

/// The projects in the order pass `pass` searches them: each pass starts one further
/// on, as traffic does not come in a fixed cycle (a round robin would otherwise send
/// each project to the same replica every time).
fn order(pass: usize) -> impl Iterator<Item = usize> {
    (0..PROJECTS).map(move |i| (i + pass) % PROJECTS)
}

fn query(p: usize, pass: usize) -> String {
    format!(
        "{} {}",
        WORDS[(p + pass) % WORDS.len()],
        WORDS[(p * 7 + pass) % WORDS.len()]
    )
}

async fn load(channel: &Channel) {
    for p in 0..PROJECTS {
        create_project(channel, &project(p)).await;
        add(channel, &project(p), messages(p))
            .await
            .unwrap_or_else(|s| panic!("add to {}: {s:?}", project(p)));
    }
}

/// Every search of every pass, as a single server answers them.
async fn expected() -> HashMap<(usize, usize), Vec<(String, i64)>> {
    let dir = tempfile::tempdir().unwrap();
    let single = tokio::task::block_in_place(|| ServerProcess::start(dir.path(), &[]));
    let channel = connect(&single.url()).await;
    load(&channel).await;
    let mut answers = HashMap::new();
    for pass in 0..PASSES {
        for p in order(pass) {
            let hits = search(&channel, &project(p), &query(p, pass))
                .await
                .unwrap();
            assert!(
                !hits.is_empty(),
                "the single server found nothing in {}",
                project(p)
            );
            answers.insert((p, pass), hits);
        }
    }
    answers
}

/// Searches every project `PASSES` times through `channel`; each answer must be the
/// single server's.
async fn search_all(
    channel: &Channel,
    expected: &HashMap<(usize, usize), Vec<(String, i64)>>,
    when: &str,
) {
    for pass in 0..PASSES {
        for p in order(pass) {
            let hits = search(channel, &project(p), &query(p, pass))
                .await
                .unwrap_or_else(|s| panic!("{when}: search of {} failed: {s:?}", project(p)));
            assert_eq!(
                hits,
                expected[&(p, pass)],
                "{when}: {} answered otherwise than a single server",
                project(p)
            );
        }
    }
}

/// Each replica's share of the projects and its RSS, printed (BENCHMARKS.md quotes
/// them).
async fn shares(mesh: &Mesh, label: &str) -> Vec<f64> {
    let mut shares = Vec::new();
    for i in 0..3 {
        if mesh.replicas[i].server.is_none() {
            continue;
        }
        let held = mesh.indexes_held(i).await;
        let share = held as f64 / PROJECTS as f64;
        eprintln!(
            "{label}: replica {} holds {held} of {PROJECTS} project indexes ({:.1} %, \
             {:.0} KiB), RSS {:.1} MiB",
            i + 1,
            share * 100.0,
            mesh.index_bytes(i).await as f64 / 1024.0,
            mesh.rss_mib(i)
        );
        shares.push(share);
    }
    shares
}

async fn affinity_through(kind: Kind) {
    let Some(mut mesh) = Mesh::start().await else {
        return;
    };
    let listen = crate::common::free_port();
    let Some(mut proxy) = Proxy::start(kind, Balance::Affinity, listen, &mesh.upstreams()) else {
        return;
    };
    let channel = connect(&proxy.url()).await;
    load(&channel).await;
    let expected = expected().await;
    search_all(&channel, &expected, "through the proxy").await;
    let label = format!("{kind:?} with affinity");
    let held = shares(&mesh, &label).await;
    for (i, share) in held.iter().enumerate() {
        assert!(
            *share <= MOST_SHARE,
            "{label}: replica {} holds {:.1} % of the projects (at most {:.0} %)",
            i + 1,
            share * 100.0,
            MOST_SHARE * 100.0
        );
    }
    // Every project is held somewhere, and only once.
    let total: f64 = held.iter().sum();
    assert!((total - 1.0).abs() < 1e-9, "{label}: shares sum to {total}");

    // The CLI routes its calls too: its searches load nothing anywhere else.
    for p in 0..10 {
        let output = tokio::task::block_in_place(|| {
            std::process::Command::new(env!("CARGO_BIN_EXE_memmachine"))
                .args(["search", "--addr", &proxy.url(), "--org", super::ORG])
                .args(["--project", &project(p), &query(p, 0)])
                .run()
        });
        assert!(output.status.success(), "memmachine search: {output:?}");
        assert!(
            String::from_utf8_lossy(&output.stdout).contains(&format!("project {p} note")),
            "memmachine search found nothing in {}: {output:?}",
            project(p)
        );
    }
    let mut held_after_cli = 0;
    for i in 0..3 {
        held_after_cli += mesh.indexes_held(i).await;
    }
    assert_eq!(
        held_after_cli, PROJECTS as u64,
        "{label}: the CLI's searches went to replicas not holding their projects"
    );

    // A replica dies: its projects move to the other two, and answers stay right.
    let before = [mesh.indexes_held(1).await, mesh.indexes_held(2).await];
    mesh.kill_replica(0);
    search_all(&channel, &expected, "replica 1 killed").await;
    proxy.assert_running();
    let after = [mesh.indexes_held(1).await, mesh.indexes_held(2).await];
    shares(&mesh, &format!("{label}, replica 1 killed")).await;
    // At least every project: calls sent while the proxy had not yet seen the death
    // were redispatched to either, so a few are loaded on both.
    assert!(
        after.iter().sum::<u64>() >= PROJECTS as u64,
        "{label}: the two left hold every project between them ({after:?})"
    );
    assert!(
        after[0] > before[0] && after[1] > before[1],
        "{label}: the killed replica's projects moved to both others ({before:?} -> {after:?})"
    );
    drop(proxy);
}

/// The same traffic spread round robin: printed beside the affinity figures, and each
/// replica then holds far more than its share.
async fn without_affinity(kind: Kind) {
    let Some(mesh) = Mesh::start().await else {
        return;
    };
    let listen = crate::common::free_port();
    let Some(proxy) = Proxy::start(kind, Balance::RoundRobin, listen, &mesh.upstreams()) else {
        return;
    };
    let channel = connect(&proxy.url()).await;
    load(&channel).await;
    for pass in 0..PASSES {
        for p in order(pass) {
            search(&channel, &project(p), &query(p, pass))
                .await
                .unwrap();
        }
    }
    let held = shares(&mesh, &format!("{kind:?} round robin")).await;
    assert!(
        held.iter().all(|share| *share > MOST_SHARE),
        "round robin spreads each project over several replicas: {held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_routes_each_project_to_one_replica() {
    affinity_through(Kind::HAProxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_routes_each_project_to_one_replica() {
    affinity_through(Kind::Nginx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_without_affinity_loads_projects_everywhere() {
    without_affinity(Kind::HAProxy).await;
}
