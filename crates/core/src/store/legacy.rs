//! `LegacyStore`: the rows of the v1 API that v2 has no place for, sessions and group
//! configurations, keyed by the group's project (they go when it goes).

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::ProjectKey;

/// A v1 session of project `key`.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub key: ProjectKey,
    pub session_id: String,
    /// Sorted, without repeats.
    pub agent_ids: Vec<String>,
    /// Sorted, without repeats.
    pub user_ids: Vec<String>,
    /// A JSON object.
    pub configuration: serde_json::Value,
    pub created_at_micros: i64,
}

/// The v1 group configuration of project `key` (empty lists and `{}` when none was
/// ever stored).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRow {
    pub key: ProjectKey,
    /// Sorted, without repeats.
    pub agent_list: Vec<String>,
    /// Sorted, without repeats.
    pub user_list: Vec<String>,
    /// A JSON object.
    pub configuration: serde_json::Value,
}

/// Which sessions of one org to list, after `(project_id, session_id)` `after`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionQuery {
    pub project_id: Option<String>,
    pub user_id: Option<String>,
    pub agent_id: Option<String>,
    pub after: Option<(String, String)>,
}

/// Which groups (projects) of one org to list, after project `after`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupQuery {
    pub user_id: Option<String>,
    pub agent_id: Option<String>,
    pub after: Option<String>,
}

#[async_trait]
pub trait LegacyStore: Send + Sync {
    /// Creates session `session_id` of project `key`, or adds these agents and users to
    /// it (set union), and adds them to the project's group lists too, in one
    /// transaction. `configuration` replaces the session's when given. `NotFound` when
    /// the project does not exist.
    async fn open_legacy_session(
        &self,
        key: &ProjectAccess,
        session_id: &str,
        agents: &[String],
        users: &[String],
        configuration: Option<&serde_json::Value>,
    ) -> Result<SessionRow>;

    async fn get_legacy_session(
        &self,
        key: &ProjectAccess,
        session_id: &str,
    ) -> Result<Option<SessionRow>>;

    /// Sessions of org `org_id` matching `query`, ordered bytewise by
    /// `(project_id, session_id)`, at most `limit`.
    async fn list_legacy_sessions(
        &self,
        org_id: &str,
        query: &SessionQuery,
        limit: usize,
    ) -> Result<Vec<SessionRow>>;

    /// False when there was no such session.
    async fn delete_legacy_session(&self, key: &ProjectAccess, session_id: &str) -> Result<bool>;

    /// Replaces the group configuration of project `key`. `NotFound` when the project
    /// does not exist.
    async fn put_legacy_group(&self, group: &GroupRow) -> Result<()>;

    /// The group configuration of project `key`; `None` when the project does not exist.
    async fn get_legacy_group(&self, key: &ProjectAccess) -> Result<Option<GroupRow>>;

    /// The projects of org `org_id` as groups matching `query` (a user or agent filter
    /// matches the stored lists), ordered bytewise by project id, at most `limit`.
    async fn list_legacy_groups(
        &self,
        org_id: &str,
        query: &GroupQuery,
        limit: usize,
    ) -> Result<Vec<GroupRow>>;
}

/// `current` with `added` merged in: sorted, without repeats.
pub fn merged(current: &[String], added: &[String]) -> Vec<String> {
    let set: std::collections::BTreeSet<&String> = current.iter().chain(added).collect();
    set.into_iter().cloned().collect()
}
