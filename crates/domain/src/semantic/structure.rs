//! Managing what semantic memory is organised by: set types, sets, categories (with
//! templates and disabling) and tags. Every id is checked against the caller's project:
//! what it does not see is `NotFound`.

use std::collections::BTreeMap;

use super::categories::{self, Effective};
use super::model::{Category, CategoryOwner, NewSetType, SetConfig, SetKind, SetRow, SetType};
use super::{
    MAX_SET_TYPE_TAGS, MAX_TEXT_BYTES, SemanticMemory, SetEntry, check_id, check_name, check_text,
    new_category, not_found, sets, user_set_type, visible_set,
};
use crate::error::{Error, Result, Violations};
use memmachine_core::access::OpenProject;

impl SemanticMemory {
    // Sets and set types.

    pub(super) async fn visible_sets(&self, project: &OpenProject) -> Result<Vec<SetRow>> {
        self.store.list_sets(project.access()).await
    }

    /// The set with this id, if the project sees it. A set the caller names itself (by
    /// MemMachine's convention, or one of the project's own not made yet) is made on first
    /// use, inside the caller's project; any other id is `NotFound`.
    pub(super) async fn set(&self, project: &OpenProject, set_id: &str) -> Result<SetRow> {
        if let Some(set) = self.store.find_set(set_id).await?
            && visible_set(project, &set)
        {
            return Ok(set);
        }
        let Some(mut named) = sets::named_set(project.access(), set_id) else {
            return Err(not_found("set", set_id));
        };
        if named.kind == SetKind::User {
            named.set_type = user_set_type(&self.store.list_set_types(project.access()).await?);
        }
        let made = self
            .store
            .ensure_sets(project.access(), vec![named])
            .await?;
        made.into_iter()
            .next()
            .filter(|set| visible_set(project, set))
            .ok_or_else(|| not_found("set", set_id))
    }

    pub(super) async fn set_type(&self, project: &OpenProject, id: &str) -> Result<SetType> {
        self.store
            .list_set_types(project.access())
            .await?
            .into_iter()
            .find(|t| t.id == id)
            .ok_or_else(|| not_found("set type", id))
    }

    pub async fn create_set_type(
        &self,
        project: &OpenProject,
        is_org_level: bool,
        tags: &[String],
        name: &str,
        description: &str,
    ) -> Result<String> {
        let mut violations = Violations::default();
        let mut sorted: Vec<String> = tags.iter().map(|t| t.trim().to_string()).collect();
        sorted.sort();
        sorted.dedup();
        // No tags, as MemMachine allows: one set of the type holds every message.
        if sorted.len() > MAX_SET_TYPE_TAGS {
            violations.add("metadata_tags", format!("at most {MAX_SET_TYPE_TAGS} keys"));
        }
        for (i, tag) in sorted.iter().enumerate() {
            check_id(&mut violations, &format!("metadata_tags[{i}]"), tag);
        }
        check_text(&mut violations, "name", name, MAX_TEXT_BYTES);
        check_text(&mut violations, "description", description, MAX_TEXT_BYTES);
        violations.into_result()?;
        let created = self
            .store
            .create_set_type(
                project.access(),
                NewSetType {
                    id: uuid::Uuid::new_v4().to_string(),
                    is_org_level,
                    name: name.to_string(),
                    description: description.to_string(),
                    tags: sorted,
                },
            )
            .await?;
        Ok(created.id)
    }

    pub async fn list_set_types(&self, project: &OpenProject) -> Result<Vec<SetType>> {
        self.store.list_set_types(project.access()).await
    }

    pub async fn delete_set_type(&self, project: &OpenProject, id: &str) -> Result<()> {
        let set_type = self.set_type(project, id).await?;
        self.store.delete_set_type(set_type.internal_id).await?;
        Ok(())
    }

    /// The id of the set `metadata_tags` (keys of `set_metadata`) select; the set is
    /// created if it does not exist.
    pub async fn get_set_id(
        &self,
        project: &OpenProject,
        is_org_level: bool,
        metadata_tags: &[String],
        set_metadata: &BTreeMap<String, String>,
    ) -> Result<String> {
        let mut violations = Violations::default();
        if metadata_tags.len() > MAX_SET_TYPE_TAGS {
            violations.add("metadata_tags", format!("at most {MAX_SET_TYPE_TAGS} keys"));
        }
        let mut tags = BTreeMap::new();
        for (i, tag) in metadata_tags.iter().enumerate().take(MAX_SET_TYPE_TAGS + 1) {
            check_id(&mut violations, &format!("metadata_tags[{i}]"), tag);
            // A tag without a value is left out, as MemMachine does (no tags: the
            // project's or org's own set).
            if let Some(value) = set_metadata.get(tag) {
                tags.insert(tag.clone(), value.clone());
            }
        }
        violations.into_result()?;
        let set_types = self.store.list_set_types(project.access()).await?;
        let mut set = sets::requested_set(project.access(), is_org_level, &tags, &set_types);
        if set.kind == SetKind::User {
            set.set_type = user_set_type(&set_types);
        }
        let id = set.set_id.clone();
        self.store.ensure_sets(project.access(), vec![set]).await?;
        Ok(id)
    }

    /// The sets the project sees (all, or those `set_metadata` selects).
    pub async fn list_sets(
        &self,
        project: &OpenProject,
        set_metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SetEntry>> {
        let sets = self.selected_sets(project, set_metadata).await?;
        let set_types = self.store.list_set_types(project.access()).await?;
        Ok(sets
            .into_iter()
            .map(|set| {
                let set_type = set_types
                    .iter()
                    .find(|t| Some(t.internal_id) == set.set_type);
                SetEntry {
                    name: set_type.map(|t| t.name.clone()).unwrap_or_default(),
                    description: set_type.map(|t| t.description.clone()).unwrap_or_default(),
                    set,
                }
            })
            .collect())
    }

    /// The visible sets `set_metadata` selects (empty: all of them).
    pub(super) async fn selected_sets(
        &self,
        project: &OpenProject,
        set_metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SetRow>> {
        let sets = self.visible_sets(project).await?;
        if set_metadata.is_empty() {
            return Ok(sets);
        }
        let set_types = self.store.list_set_types(project.access()).await?;
        let ids = sets::selected_ids(project.access(), set_metadata, &set_types);
        Ok(sets
            .into_iter()
            .filter(|s| ids.contains(&s.set_id))
            .collect())
    }

    pub async fn configure_set(
        &self,
        project: &OpenProject,
        set_id: &str,
        embedder: Option<&str>,
        llm: Option<&str>,
    ) -> Result<()> {
        let set = self.set(project, set_id).await?;
        let mut config = set.config.clone();
        if let Some(name) = embedder {
            if let Err(message) = self.embedders.validate(name) {
                return Err(Error::invalid("embedder_name", message));
            }
            config.embedder = name.to_string();
        }
        if let Some(name) = llm {
            let served = self.llm.as_ref().map(|m| m.id().to_string());
            if !name.is_empty() && Some(name) != served.as_deref() {
                return Err(Error::invalid(
                    "llm_name",
                    format!(
                        "{name:?} is not a language model of this server (it has {})",
                        served.as_deref().unwrap_or("none")
                    ),
                ));
            }
            config.llm = name.to_string();
        }
        self.store
            .configure_set(set.internal_id, SetConfig { ..config })
            .await
    }

    // Categories and tags.

    /// The categories ingestion uses for a set.
    pub async fn effective_categories(&self, set: &SetRow) -> Result<Vec<Effective>> {
        let mut owners = vec![CategoryOwner::Set(set.internal_id)];
        if let Some(t) = set.set_type {
            owners.push(CategoryOwner::SetType(t));
        }
        let all = self.store.categories_of(&owners).await?;
        let (own, templates): (Vec<Category>, Vec<Category>) = all
            .into_iter()
            .partition(|c| c.owner == CategoryOwner::Set(set.internal_id));
        let disabled = self.store.disabled_categories(set.internal_id).await?;
        Ok(categories::resolve(
            &own,
            &templates,
            categories::defaults(set.kind),
            &disabled,
        ))
    }

    pub(super) fn check_category(name: &str, prompt: &str, description: &str) -> Result<()> {
        let mut violations = Violations::default();
        // Category names follow the contract's id rule (they name things in requests).
        check_id(&mut violations, "category_name", name);
        if prompt.trim().is_empty() {
            violations.add("prompt", "must not be empty");
        }
        check_text(&mut violations, "prompt", prompt, MAX_TEXT_BYTES);
        check_text(&mut violations, "description", description, MAX_TEXT_BYTES);
        violations.into_result()
    }

    pub async fn add_category(
        &self,
        project: &OpenProject,
        set_id: &str,
        name: &str,
        prompt: &str,
        description: &str,
    ) -> Result<String> {
        Self::check_category(name, prompt, description)?;
        let set = self.set(project, set_id).await?;
        let category = self
            .store
            .add_category(
                CategoryOwner::Set(set.internal_id),
                new_category(name, prompt, description),
            )
            .await?;
        Ok(category.id)
    }

    pub async fn add_category_template(
        &self,
        project: &OpenProject,
        set_type_id: &str,
        name: &str,
        prompt: &str,
        description: &str,
    ) -> Result<String> {
        Self::check_category(name, prompt, description)?;
        let set_type = self.set_type(project, set_type_id).await?;
        let category = self
            .store
            .add_category(
                CategoryOwner::SetType(set_type.internal_id),
                new_category(name, prompt, description),
            )
            .await?;
        Ok(category.id)
    }

    pub async fn list_category_templates(
        &self,
        project: &OpenProject,
        set_type_id: &str,
    ) -> Result<Vec<Category>> {
        let set_type = self.set_type(project, set_type_id).await?;
        self.store
            .categories_of(&[CategoryOwner::SetType(set_type.internal_id)])
            .await
    }

    /// The category, if the project sees its owner; else `NotFound`.
    pub async fn get_category(&self, project: &OpenProject, id: &str) -> Result<Category> {
        let Some(category) = self.store.find_category(id).await? else {
            return Err(not_found("category", id));
        };
        let visible = match category.owner {
            CategoryOwner::Set(set) => self
                .visible_sets(project)
                .await?
                .iter()
                .any(|s| s.internal_id == set),
            CategoryOwner::SetType(t) => self
                .store
                .list_set_types(project.access())
                .await?
                .iter()
                .any(|s| s.internal_id == t),
        };
        if visible {
            Ok(category)
        } else {
            Err(not_found("category", id))
        }
    }

    pub async fn disable_category(
        &self,
        project: &OpenProject,
        set_id: &str,
        name: &str,
    ) -> Result<()> {
        let mut violations = Violations::default();
        check_name(&mut violations, "category_name", name);
        violations.into_result()?;
        let set = self.set(project, set_id).await?;
        self.store
            .disable_category(set.internal_id, name.trim())
            .await
    }

    /// The sets that use the category: its own set, or the sets of its set type that do
    /// not override it.
    pub async fn category_set_ids(&self, project: &OpenProject, id: &str) -> Result<Vec<String>> {
        let category = self.get_category(project, id).await?;
        Ok(self
            .sets_using(project, &category)
            .await?
            .into_iter()
            .map(|s| s.set_id)
            .collect())
    }

    pub(super) async fn sets_using(
        &self,
        project: &OpenProject,
        category: &Category,
    ) -> Result<Vec<SetRow>> {
        match category.owner {
            CategoryOwner::Set(set) => Ok(self
                .visible_sets(project)
                .await?
                .into_iter()
                .filter(|s| s.internal_id == set)
                .collect()),
            CategoryOwner::SetType(t) => {
                let mut using = Vec::new();
                for set in self.store.sets_of_type(t).await? {
                    let own = self
                        .store
                        .categories_of(&[CategoryOwner::Set(set.internal_id)])
                        .await?;
                    if !own
                        .iter()
                        .any(|c| c.name.eq_ignore_ascii_case(&category.name))
                    {
                        using.push(set);
                    }
                }
                Ok(using)
            }
        }
    }

    /// Deletes the category, its tags and the features the sets using it hold in it.
    pub async fn delete_category(&self, project: &OpenProject, id: &str) -> Result<()> {
        let category = self.get_category(project, id).await?;
        let sets = self.sets_using(project, &category).await?;
        self.store
            .delete_category(
                category.internal_id,
                &sets.iter().map(|s| s.internal_id).collect::<Vec<_>>(),
            )
            .await
    }

    pub async fn add_tag(
        &self,
        project: &OpenProject,
        category_id: &str,
        name: &str,
        description: &str,
    ) -> Result<String> {
        let mut violations = Violations::default();
        check_name(&mut violations, "tag_name", name);
        check_text(
            &mut violations,
            "tag_description",
            description,
            MAX_TEXT_BYTES,
        );
        violations.into_result()?;
        let category = self.get_category(project, category_id).await?;
        let tag = self
            .store
            .add_tag(
                category.internal_id,
                &uuid::Uuid::new_v4().to_string(),
                name.trim(),
                description,
            )
            .await?;
        Ok(tag.id)
    }

    pub async fn delete_tag(&self, project: &OpenProject, id: &str) -> Result<()> {
        let Some(tag) = self.store.find_tag(id).await? else {
            return Err(not_found("tag", id));
        };
        let mut owners: Vec<CategoryOwner> = self
            .visible_sets(project)
            .await?
            .iter()
            .map(|s| CategoryOwner::Set(s.internal_id))
            .collect();
        owners.extend(
            self.store
                .list_set_types(project.access())
                .await?
                .iter()
                .map(|t| CategoryOwner::SetType(t.internal_id)),
        );
        let visible = self
            .store
            .categories_of(&owners)
            .await?
            .iter()
            .any(|c| c.internal_id == tag.category);
        if !visible {
            return Err(not_found("tag", id));
        }
        self.store.delete_tag(tag.internal_id).await
    }
}
