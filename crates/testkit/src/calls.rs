//! One-line gRPC calls for tests, each with an optional API key.

use memmachine_proto::v2 as pb;
use memmachine_proto::v2::memory_service_client::MemoryServiceClient;
use memmachine_proto::v2::project_service_client::ProjectServiceClient;
use tonic::Request;
use tonic::transport::Channel;

pub fn with_key<T>(message: T, key: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(key) = key {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    request
}

pub async fn get_project(
    channel: &Channel,
    key: Option<&str>,
    org: &str,
    project: &str,
) -> Result<pb::Project, tonic::Status> {
    ProjectServiceClient::new(channel.clone())
        .get_project(with_key(
            pb::GetProjectRequest {
                org_id: org.into(),
                project_id: project.into(),
            },
            key,
        ))
        .await
        .map(|r| r.into_inner().project.unwrap())
}

pub async fn create_project(
    channel: &Channel,
    key: Option<&str>,
    org: &str,
    project: &str,
) -> Result<(), tonic::Status> {
    ProjectServiceClient::new(channel.clone())
        .create_project(with_key(
            pb::CreateProjectRequest {
                org_id: org.into(),
                project_id: project.into(),
                ..Default::default()
            },
            key,
        ))
        .await
        .map(drop)
}

pub async fn list_orgs(
    channel: &Channel,
    key: Option<&str>,
    org: Option<&str>,
) -> Result<Vec<String>, tonic::Status> {
    let response = ProjectServiceClient::new(channel.clone())
        .list_projects(with_key(
            pb::ListProjectsRequest {
                org_id: org.map(str::to_string),
                ..Default::default()
            },
            key,
        ))
        .await?;
    Ok(response
        .into_inner()
        .projects
        .into_iter()
        .map(|p| p.org_id)
        .collect())
}

pub async fn add(channel: &Channel, key: Option<&str>, org: &str) -> Result<(), tonic::Status> {
    MemoryServiceClient::new(channel.clone())
        .add_memories(with_key(
            pb::AddMemoriesRequest {
                org_id: org.into(),
                project_id: "notes".into(),
                messages: vec![pb::MemoryMessage {
                    content: "the launch code is 0000".into(),
                    producer: "user".into(),
                    ..Default::default()
                }],
                ..Default::default()
            },
            key,
        ))
        .await
        .map(drop)
}

pub async fn search(
    channel: &Channel,
    key: Option<&str>,
    org: &str,
) -> Result<usize, tonic::Status> {
    let response = MemoryServiceClient::new(channel.clone())
        .search_memories(with_key(
            pb::SearchMemoriesRequest {
                org_id: org.into(),
                project_id: "notes".into(),
                query: "launch code".into(),
                ..Default::default()
            },
            key,
        ))
        .await?
        .into_inner();
    Ok(response
        .episodic_memory
        .map_or(0, |e| e.long_term_memory.len()))
}

pub async fn count(channel: &Channel, key: Option<&str>, org: &str) -> Result<i64, tonic::Status> {
    Ok(ProjectServiceClient::new(channel.clone())
        .get_episode_count(with_key(
            pb::GetEpisodeCountRequest {
                org_id: org.into(),
                project_id: "notes".into(),
            },
            key,
        ))
        .await?
        .into_inner()
        .count)
}

/// Holds SQLite's write lock on the server's database (as a long write by another
/// process would), so that the server's next write waits until it is dropped.
pub struct WriteLock(rusqlite::Connection);

impl WriteLock {
    pub fn take(data_dir: &std::path::Path) -> WriteLock {
        let conn = rusqlite::Connection::open(data_dir.join("memmachine.db")).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        WriteLock(conn)
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        let _ = self.0.execute_batch("ROLLBACK");
    }
}

/// One length-prefixed gRPC (and gRPC-Web) data frame holding `message`, for calls made
/// by hand.
pub fn frame(message: &impl prost::Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut out = vec![0u8];
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}
