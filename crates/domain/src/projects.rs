//! The project domain: creation, lookup, listing, deletion and per-project episodic
//! configuration. Shared by every transport.

use std::sync::Arc;

use crate::embed::Embedders;
use crate::error::{Error, Result, Violations};
use crate::limits::Limits;
use crate::model::ids::validate_id;
use crate::model::{EpisodicConfig, EpisodicConfigUpdate, Project, ProjectConfig, ProjectKey};
use crate::rerank::Rerankers;
use crate::store::Store;
use memmachine_core::access::{OpenProject, ProjectAccess};

/// Longest project description, in bytes.
const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Longest embedder or reranker name, in bytes.
const MAX_CONFIG_NAME_BYTES: usize = 128;

#[derive(Clone)]
pub struct Projects {
    store: Arc<dyn Store>,
    limits: Limits,
    /// The embedders a project may name.
    embedders: Embedders,
    /// The rerankers a project may name, besides the ranking modes.
    rerankers: Rerankers,
    /// Whose index segments go with a deleted project.
    index: Option<Arc<crate::retrieval::index_cache::IndexCache>>,
}

impl Projects {
    pub fn new(store: Arc<dyn Store>, limits: Limits, embedders: Embedders) -> Projects {
        Projects {
            store,
            limits,
            embedders,
            rerankers: Rerankers::default(),
            index: None,
        }
    }

    /// Deletes a deleted project's index segments with it.
    pub fn with_index(mut self, index: Arc<crate::retrieval::index_cache::IndexCache>) -> Self {
        self.index = Some(index);
        self
    }

    /// Lets projects name one of `rerankers` in `config.reranker`.
    pub fn with_rerankers(mut self, rerankers: Rerankers) -> Self {
        self.rerankers = rerankers;
        self
    }

    pub async fn create(
        &self,
        key: &ProjectAccess,
        description: &str,
        config: ProjectConfig,
    ) -> Result<Project> {
        let mut violations = Violations::default();
        if description.len() > MAX_DESCRIPTION_BYTES {
            violations.add(
                "description",
                format!("must be at most {MAX_DESCRIPTION_BYTES} bytes"),
            );
        }
        for (field, value) in [
            ("config.embedder", &config.embedder),
            ("config.reranker", &config.reranker),
        ] {
            if value.len() > MAX_CONFIG_NAME_BYTES {
                violations.add(
                    field,
                    format!("must be at most {MAX_CONFIG_NAME_BYTES} bytes"),
                );
            }
        }
        if let Err(message) = self.rerankers.validate(&config.reranker) {
            violations.add("config.reranker", message);
        }
        if let Err(message) = self.embedders.validate(&config.embedder) {
            violations.add("config.embedder", message);
        }
        violations.into_result()?;
        self.store.create_project(key, description, &config).await
    }

    /// The project, or `NotFound`.
    pub async fn get(&self, key: &ProjectAccess) -> Result<OpenProject> {
        let project = crate::round_trips::call(self.store.get_project(key)).await?;
        key.open(project.ok_or_else(|| not_found(key))?)
    }

    /// One page of projects (of one org when `org_id` is given) and the next page's token.
    pub async fn list(
        &self,
        org_id: Option<&str>,
        page_size: Option<i32>,
        page_token: &str,
    ) -> Result<(Vec<Project>, String)> {
        let mut violations = Violations::default();
        let org_id = org_id.map(crate::model::ids::or_universal);
        if let Some(org) = org_id {
            violations.check(validate_id("org_id", org));
        }
        let limit = violations.check(self.limits.page_size("page_size", page_size, 100));
        let after = violations.check(decode_project_token(page_token));
        violations.into_result()?;
        let limit = limit.expect("validated");
        let mut projects = self
            .store
            .list_projects(org_id, after.flatten().as_ref(), limit + 1)
            .await?;
        let next = crate::model::page::cut(&mut projects, limit, |last| {
            format!("{}/{}", last.key.org_id, last.key.project_id)
        });
        Ok((projects, next))
    }

    /// Every project (of one org when `org_id` is given), read page after page.
    pub async fn list_all(&self, org_id: Option<&str>) -> Result<Vec<Project>> {
        let page_size = i32::try_from(self.limits.max_page_size).unwrap_or(i32::MAX);
        let (mut all, mut token) = (Vec::new(), String::new());
        loop {
            let (page, next) = self.list(org_id, Some(page_size), &token).await?;
            all.extend(page);
            if next.is_empty() {
                return Ok(all);
            }
            token = next;
        }
    }

    /// Removes the project and all its memories before answering.
    pub async fn delete(&self, key: &ProjectAccess) -> Result<()> {
        if key.is_universal() {
            return Err(Error::FailedPrecondition(
                "the project universal/universal always exists and cannot be deleted".into(),
            ));
        }
        if self.store.delete_project(key).await? {
            if let Some(index) = &self.index {
                index.erase(key).await;
            }
            tracing::info!(project = %key, "project deleted");
            Ok(())
        } else {
            Err(not_found(key))
        }
    }

    pub async fn episode_count(&self, key: &ProjectAccess) -> Result<i64> {
        self.store.count_episodes(key).await
    }

    pub async fn episodic_config(&self, key: &ProjectAccess) -> Result<EpisodicConfig> {
        Ok(self.get(key).await?.episodic)
    }

    pub async fn update_episodic_config(
        &self,
        key: &ProjectAccess,
        update: EpisodicConfigUpdate,
    ) -> Result<EpisodicConfig> {
        if let Some(Some(micros)) = update.episode_retention_micros
            && !(1..=MAX_RETENTION_MICROS).contains(&micros)
        {
            return Err(Error::invalid(
                "episode_retention",
                "must be positive and at most 100 years (zero clears it)",
            ));
        }
        // Each weight is checked on its own: valid weights updated stay valid.
        if let Err((field, why)) = update.ranking_weights.check() {
            return Err(Error::invalid(format!("ranking_weights.{field}"), why));
        }
        self.store
            .update_episodic_config(key, update)
            .await?
            .ok_or_else(|| not_found(key))
    }
}

/// Longest episode retention accepted: 100 years (longer is a mistake, not a policy).
pub const MAX_RETENTION_MICROS: i64 = 100 * 366 * 24 * 3600 * 1_000_000;

pub fn not_found(key: &ProjectKey) -> Error {
    Error::NotFound(format!("project {key} does not exist"))
}

/// A project page token is `org_id/project_id` of the last project of the previous page.
fn decode_project_token(token: &str) -> Result<Option<ProjectKey>> {
    if token.is_empty() {
        return Ok(None);
    }
    let invalid = || Error::invalid("page_token", "is not a token this server issued");
    let (org, project) = token.split_once('/').ok_or_else(invalid)?;
    if org.is_empty() || project.is_empty() {
        return Err(invalid());
    }
    ProjectKey::parse(org, project)
        .map(Some)
        .map_err(|_| invalid())
}
