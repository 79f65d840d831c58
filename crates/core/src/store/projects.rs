//! Projects: created, listed, deleted and configured by their public key.

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{EpisodicConfig, EpisodicConfigUpdate, Project, ProjectConfig, ProjectKey};

#[async_trait]
pub trait ProjectStore: Send + Sync {
    /// `AlreadyExists` when the project exists.
    async fn create_project(
        &self,
        key: &ProjectAccess,
        description: &str,
        config: &ProjectConfig,
    ) -> Result<Project>;

    async fn get_project(&self, key: &ProjectAccess) -> Result<Option<Project>>;

    /// Projects ordered by `(org_id, project_id)`, after `after`, optionally in one org.
    async fn list_projects(
        &self,
        org_id: Option<&str>,
        after: Option<&ProjectKey>,
        limit: usize,
    ) -> Result<Vec<Project>>;

    /// Removes the project and all its memories in one transaction; false when absent.
    async fn delete_project(&self, key: &ProjectAccess) -> Result<bool>;

    /// `None` when the project does not exist.
    async fn update_episodic_config(
        &self,
        key: &ProjectAccess,
        update: EpisodicConfigUpdate,
    ) -> Result<Option<EpisodicConfig>>;
}
