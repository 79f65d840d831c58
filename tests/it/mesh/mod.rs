//! Three replicas over one PostgreSQL database behind a real proxy (HAProxy and nginx,
//! from `deploy/`), as a mesh runs them: project affinity by the routing header, a
//! replica killed, and a rolling restart under load.
//!
//! sqlite-only: on PostgreSQL already (a database of its own).

mod affinity;
mod rolling_restart;

use std::time::Duration;

use crate::common::proxy::Upstream;
use crate::common::{self, ServerProcess};
use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::transport::Channel;

/// The org of every project here.
const ORG: &str = "mesh";

/// One replica: its process (while it runs) and the ports it keeps across restarts.
pub struct Replica {
    pub server: Option<ServerProcess>,
    pub upstream: Upstream,
    dir: tempfile::TempDir,
}

/// Three replicas sharing a new PostgreSQL database.
pub struct Mesh {
    store: String,
    pub replicas: Vec<Replica>,
}

impl Mesh {
    /// `None` (skipped, saying so) without the test PostgreSQL server.
    pub async fn start() -> Option<Mesh> {
        let Some(store) = common::postgres::fresh_database().await else {
            // `fresh_database` has said why (and failed the test under CI).
            return None;
        };
        let mut mesh = Mesh {
            store,
            replicas: Vec::new(),
        };
        for _ in 0..3 {
            mesh.replicas.push(Replica {
                server: None,
                upstream: Upstream {
                    grpc: common::free_port(),
                    rest: common::free_port(),
                },
                dir: tempfile::tempdir().unwrap(),
            });
        }
        for i in 0..3 {
            mesh.start_replica(i);
        }
        Some(mesh)
    }

    pub fn upstreams(&self) -> Vec<Upstream> {
        self.replicas.iter().map(|r| r.upstream).collect()
    }

    /// Starts replica `i` on its ports and waits until it serves.
    pub fn start_replica(&mut self, i: usize) {
        let replica = &mut self.replicas[i];
        let (grpc, rest) = (
            replica.upstream.grpc.to_string(),
            replica.upstream.rest.to_string(),
        );
        let args = [
            "--store",
            self.store.as_str(),
            "--rest-listen",
            rest.as_str(),
            // Behind affinity each replica loads only the projects it is sent.
            "--warm-indexes",
            "false",
            // Longer than the proxy's two failed checks 500 ms apart.
            "--drain-delay",
            "3",
        ];
        let server = tokio::task::block_in_place(|| {
            ServerProcess::start_on(&grpc, replica.dir.path(), &args, &[])
        });
        replica.server = Some(server);
    }

    /// SIGTERM to replica `i`; its exit status once it has drained.
    pub async fn stop_replica(&mut self, i: usize) -> std::process::ExitStatus {
        let server = self.replicas[i].server.take().expect("replica running");
        server.terminate_async().await
    }

    /// SIGKILL to replica `i`.
    pub fn kill_replica(&mut self, i: usize) {
        let mut server = self.replicas[i].server.take().expect("replica running");
        server.kill();
    }

    /// A channel straight to replica `i` (not through the proxy).
    pub async fn direct(&self, i: usize) -> Channel {
        connect(&format!("http://{}", self.replicas[i].upstream.grpc)).await
    }

    /// Projects whose index replica `i` holds, from its metrics.
    pub async fn indexes_held(&self, i: usize) -> u64 {
        self.metric(i, "memmachine_index_projects_loaded").await
    }

    /// Bytes of the indexes replica `i` holds, from its metrics.
    pub async fn index_bytes(&self, i: usize) -> u64 {
        self.metric(i, "memmachine_index_bytes").await
    }

    async fn metric(&self, i: usize, name: &str) -> u64 {
        let url = format!("http://{}/api/v2/metrics", self.replicas[i].upstream.rest);
        let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in the metrics of replica {i}:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// Resident memory of replica `i`, in MiB.
    pub fn rss_mib(&self, i: usize) -> f64 {
        let server = self.replicas[i].server.as_ref().expect("replica running");
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kib / 1024.0
    }
}

pub async fn connect(url: &str) -> Channel {
    Channel::from_shared(url.to_string())
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connect to {url}: {err}"))
}

/// `message` routed to `project` of the mesh's org (the header a proxy hashes on).
pub fn routed<T>(project: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "x-memmachine-project",
        format!("{ORG}/{project}").parse().unwrap(),
    );
    request
}

pub async fn create_project(channel: &Channel, project: &str) {
    ProjectServiceClient::new(channel.clone())
        .create_project(routed(
            project,
            pb::CreateProjectRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_or_else(|s| panic!("create {project}: {s:?}"));
}

pub async fn add(
    channel: &Channel,
    project: &str,
    messages: Vec<pb::MemoryMessage>,
) -> Result<Vec<pb::AddMemoryResult>, tonic::Status> {
    let answer = MemoryServiceClient::new(channel.clone())
        .add_memories(routed(
            project,
            pb::AddMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                messages,
                ..Default::default()
            },
        ))
        .await?;
    Ok(answer.into_inner().results)
}

/// The long-term hits of a search, as (content, score to 4 places), ordered by score
/// then content (stores may order equal scores differently).
pub async fn search(
    channel: &Channel,
    project: &str,
    query: &str,
) -> Result<Vec<(String, i64)>, tonic::Status> {
    let answer = MemoryServiceClient::new(channel.clone())
        .search_memories(routed(
            project,
            pb::SearchMemoriesRequest {
                org_id: ORG.into(),
                project_id: project.into(),
                query: query.into(),
                top_k: Some(50),
                ..Default::default()
            },
        ))
        .await?
        .into_inner();
    let mut hits: Vec<(String, i64)> = answer
        .episodic_memory
        .unwrap_or_default()
        .long_term_memory
        .into_iter()
        .filter_map(|hit| {
            let score = (hit.score * 1e4).round() as i64;
            hit.episode.map(|e| (e.content, score))
        })
        .collect();
    hits.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(hits)
}

/// Every episode's content in `project`, read from `channel`.
pub async fn contents(channel: &Channel, project: &str) -> Vec<String> {
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = MemoryServiceClient::new(channel.clone())
            .list_memories(routed(
                project,
                pb::ListMemoriesRequest {
                    org_id: ORG.into(),
                    project_id: project.into(),
                    page_size: Some(1000),
                    page_token,
                    ..Default::default()
                },
            ))
            .await
            .unwrap_or_else(|s| panic!("list {project}: {s:?}"))
            .into_inner();
        all.extend(page.episodes.into_iter().map(|e| e.content));
        if page.next_page_token.is_empty() {
            return all;
        }
        page_token = page.next_page_token;
    }
}
