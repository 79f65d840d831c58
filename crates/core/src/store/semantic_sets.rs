//! Semantic memory's sets: set types, sets, their categories and tags.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::access::ProjectAccess;
use crate::error::Result;
use crate::model::{CategoryId, ProjectConfig, ProjectHandle, SetId, SetTypeId, TagId};

/// What a feature set gathers: the whole org, one project, one producer (a "user set")
/// or the messages carrying a set type's metadata tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetKind {
    Org,
    Project,
    User,
    Custom,
}

impl SetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SetKind::Org => "org",
            SetKind::Project => "project",
            SetKind::User => "user",
            SetKind::Custom => "custom",
        }
    }

    pub fn parse(text: &str) -> Option<SetKind> {
        Some(match text {
            "org" => SetKind::Org,
            "project" => SetKind::Project,
            "user" => SetKind::User,
            "custom" => SetKind::Custom,
            _ => return None,
        })
    }
}

/// A kind of set defined by a project: messages carrying all its metadata tags land in
/// the set of their values. Org-level set types make sets shared by the org's projects.
#[derive(Debug, Clone, PartialEq)]
pub struct SetType {
    /// The store's handle.
    pub internal_id: SetTypeId,
    /// The public id.
    pub id: String,
    pub org_id: String,
    /// The project of a project-level set type (its internal id); `None` for org-level
    /// ones, shared by the org's projects.
    pub project: Option<ProjectHandle>,
    pub is_org_level: bool,
    pub name: String,
    pub description: String,
    /// Metadata keys, sorted and distinct.
    pub tags: Vec<String>,
    pub created_at_micros: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewSetType {
    pub id: String,
    pub is_org_level: bool,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
}

/// A set as the domain derives it from a message or a request.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSet {
    pub set_id: String,
    pub kind: SetKind,
    /// Shared by the org's projects (no project of its own).
    pub org_level: bool,
    /// The set type it comes from (internal id), for custom sets.
    pub set_type: Option<SetTypeId>,
    /// The metadata keys and the values that select it.
    pub tags: BTreeMap<String, String>,
}

/// Per-set settings (`ConfigureSet`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetConfig {
    /// Embedder name for its features; empty: the project's.
    pub embedder: String,
    /// Language model name; empty: the server's.
    pub llm: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SetRow {
    pub internal_id: SetId,
    pub set_id: String,
    pub org_id: String,
    /// The project it belongs to (internal id); `None` for org-level sets.
    pub project: Option<ProjectHandle>,
    pub kind: SetKind,
    pub set_type: Option<SetTypeId>,
    pub tags: BTreeMap<String, String>,
    pub config: SetConfig,
    pub created_at_micros: i64,
}

/// Whom a category belongs to: a set (its own) or a set type (a template its sets
/// inherit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CategoryOwner {
    Set(SetId),
    SetType(SetTypeId),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Category {
    pub internal_id: CategoryId,
    pub id: String,
    pub owner: CategoryOwner,
    pub name: String,
    pub prompt: String,
    pub description: String,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewCategory {
    pub id: String,
    pub name: String,
    pub prompt: String,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub internal_id: TagId,
    pub id: String,
    pub category: CategoryId,
    pub name: String,
    pub description: String,
}

/// Set types, sets, and their categories and tags.
#[async_trait]
pub trait SemanticSets: Send + Sync {
    /// `AlreadyExists` naming the existing one when a visible set type has the same
    /// level and tags.
    async fn create_set_type(&self, key: &ProjectAccess, set_type: NewSetType) -> Result<SetType>;

    /// The project's own set types and its org's org-level ones.
    async fn list_set_types(&self, key: &ProjectAccess) -> Result<Vec<SetType>>;

    /// Deletes it with its templates; its sets stay (as sets of no type).
    async fn delete_set_type(&self, internal_id: SetTypeId) -> Result<bool>;

    /// Creates the sets that do not exist (by `set_id`) and returns all of them.
    async fn ensure_sets(&self, key: &ProjectAccess, sets: Vec<NewSet>) -> Result<Vec<SetRow>>;

    async fn find_set(&self, set_id: &str) -> Result<Option<SetRow>>;

    /// The configuration of the project with this internal id (`None`: it is gone).
    async fn project_config(&self, project: ProjectHandle) -> Result<Option<ProjectConfig>>;

    /// The project's sets and its org's org-level sets, by set id.
    async fn list_sets(&self, key: &ProjectAccess) -> Result<Vec<SetRow>>;

    async fn configure_set(&self, set: SetId, config: SetConfig) -> Result<()>;

    /// `AlreadyExists` when the owner has a category of that name.
    async fn add_category(&self, owner: CategoryOwner, category: NewCategory) -> Result<Category>;

    async fn find_category(&self, id: &str) -> Result<Option<Category>>;

    /// Categories (with their tags) owned by these owners.
    async fn categories_of(&self, owners: &[CategoryOwner]) -> Result<Vec<Category>>;

    /// Deletes the category, its tags and the features of `sets` in a category of its
    /// name (the sets that used it).
    async fn delete_category(&self, internal_id: CategoryId, sets: &[SetId]) -> Result<()>;

    async fn disable_category(&self, set: SetId, name: &str) -> Result<()>;

    async fn disabled_categories(&self, set: SetId) -> Result<Vec<String>>;

    /// Sets of the set type (internal ids).
    async fn sets_of_type(&self, set_type: SetTypeId) -> Result<Vec<SetRow>>;

    /// `AlreadyExists` when the category has a tag of that name.
    async fn add_tag(
        &self,
        category: CategoryId,
        id: &str,
        name: &str,
        description: &str,
    ) -> Result<Tag>;

    async fn find_tag(&self, id: &str) -> Result<Option<Tag>>;

    async fn delete_tag(&self, internal_id: TagId) -> Result<()>;
}
