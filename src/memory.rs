//! The memory domain: routes adds, searches, lists and deletes by memory type to the
//! episodic and semantic modules, after resolving the project (never creating it).

use crate::episodic::{EpisodicMemory, EpisodicSearch, MessageInput, SearchInput};
use crate::error::{Error, Result};
use crate::model::{Episode, ProjectKey};
use crate::projects::Projects;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    Episodic,
    Semantic,
}

const SEMANTIC_UNIMPLEMENTED: &str =
    "semantic memory is not available yet in this server; use MEMORY_TYPE_EPISODIC";

/// Whether a request naming `types` (empty = every enabled type) reaches episodic memory.
/// A request for semantic memory alone is `Unimplemented` until that module lands.
fn wants_episodic(types: &[MemoryKind]) -> Result<bool> {
    if types.is_empty() || types.contains(&MemoryKind::Episodic) {
        Ok(true)
    } else {
        Err(Error::Unimplemented(SEMANTIC_UNIMPLEMENTED.into()))
    }
}

#[derive(Clone)]
pub struct Memories {
    projects: Projects,
    episodic: EpisodicMemory,
}

impl Memories {
    pub fn new(projects: Projects, episodic: EpisodicMemory) -> Memories {
        Memories { projects, episodic }
    }

    pub async fn add(
        &self,
        org_id: &str,
        project_id: &str,
        types: &[MemoryKind],
        messages: Vec<MessageInput>,
    ) -> Result<Vec<uuid::Uuid>> {
        let key = ProjectKey::parse(org_id, project_id)?;
        wants_episodic(types)?;
        let project = self.projects.get(&key).await?;
        self.episodic.add(&project, messages).await
    }

    pub async fn search(
        &self,
        org_id: &str,
        project_id: &str,
        types: &[MemoryKind],
        input: SearchInput,
    ) -> Result<EpisodicSearch> {
        let key = ProjectKey::parse(org_id, project_id)?;
        wants_episodic(types)?;
        let project = self.projects.get(&key).await?;
        self.episodic.search(&project, input).await
    }

    pub async fn list(
        &self,
        org_id: &str,
        project_id: &str,
        kind: Option<MemoryKind>,
        page_size: Option<i32>,
        page_token: &str,
        filter: &str,
    ) -> Result<(Vec<Episode>, String)> {
        let key = ProjectKey::parse(org_id, project_id)?;
        if kind == Some(MemoryKind::Semantic) {
            return Err(Error::Unimplemented(SEMANTIC_UNIMPLEMENTED.into()));
        }
        self.episodic
            .list(&key, page_size, page_token, filter)
            .await
    }

    pub async fn delete_episodes(
        &self,
        org_id: &str,
        project_id: &str,
        ids: &[String],
    ) -> Result<u64> {
        let key = ProjectKey::parse(org_id, project_id)?;
        self.episodic.delete(&key, ids).await
    }

    pub async fn delete_features(
        &self,
        org_id: &str,
        project_id: &str,
        _ids: &[String],
    ) -> Result<u64> {
        ProjectKey::parse(org_id, project_id)?;
        Err(Error::Unimplemented(SEMANTIC_UNIMPLEMENTED.into()))
    }
}
