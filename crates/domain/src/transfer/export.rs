//! Writing a store's rows as an export file, through the store traits only.
//!
//! Order (so that equal stores give byte-identical files): the format line; then org by
//! org (in id order) each project of the org (by id) with its episodes (by sequence
//! number), their vectors (with `vectors`) and its summary; then the org's semantic rows
//! in the order the store made them: set types, sets, categories (each followed by its
//! tags), disabled default categories (by set, then name), features, feature vectors,
//! the features' kept versions.
//! Citations are listed by uid.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use super::Counts;
use super::format::{
    CategoryLine, DisabledCategoryLine, EpisodeLine, EpisodicLine, FeatureLine, FeatureVectorLine,
    FeatureVersionLine, FormatLine, Line, ProjectConfigLine, ProjectLine, SetLine, SetTypeLine,
    SummaryLine, TagLine, VERSION, VectorLine,
};
use crate::error::{Error, Result};
use crate::model::ids::validate_id;
use crate::model::{FeatureId, Project, ProjectHandle, ProjectKey, SetId, SetTypeId};
use crate::semantic::model::{CategoryOwner, SetRow, SetType};
use crate::store::Store;
use memmachine_core::access::Access;

/// Rows read from the store per call.
const PAGE: usize = 1000;

/// What to export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// Only this org's projects.
    pub org: Option<String>,
    /// Only this project of `org` (its own rows: the org-level set types and sets its
    /// org shares are exported with the whole org only).
    pub project: Option<String>,
    /// Episode and feature vectors too.
    pub vectors: bool,
}

/// Writes lines, counting them and reporting progress.
struct Sink<'a> {
    out: &'a mut (dyn Write + Send),
    counts: Counts,
    progress: &'a mut (dyn FnMut(&Counts) + Send),
    /// Episodes left out because they expired (the sweeper has yet to delete them):
    /// their vectors and citations are left out too.
    expired: std::collections::HashSet<uuid::Uuid>,
}

impl Sink<'_> {
    fn put(&mut self, line: Line) -> Result<()> {
        let mut text = line.to_json()?;
        text.push('\n');
        self.out
            .write_all(text.as_bytes())
            .map_err(|err| Error::Unavailable(format!("writing the export: {err}")))?;
        self.counts.count(&line);
        let rows = self.counts.rows();
        if rows > 0
            && !matches!(line, Line::Format(_))
            && rows.is_multiple_of(super::PROGRESS_EVERY)
        {
            (self.progress)(&self.counts);
        }
        Ok(())
    }
}

/// The projects `options` asks for, by key.
async fn selected(store: &dyn Store, options: &ExportOptions) -> Result<Vec<Project>> {
    match (&options.org, &options.project) {
        (None, Some(_)) => Err(Error::invalid("project", "--project needs --org")),
        (Some(org), Some(project)) => {
            let key = ProjectKey::parse(org, project)?;
            match store.get_project(&Access::system(key.clone())).await? {
                Some(project) => Ok(vec![project]),
                None => Err(Error::NotFound(format!("project {key} does not exist"))),
            }
        }
        (org, None) => {
            if let Some(org) = org {
                validate_id("org", org)?;
            }
            let mut projects: Vec<Project> = Vec::new();
            loop {
                let after = projects.last().map(|p| p.key.clone());
                let page = store
                    .list_projects(org.as_deref(), after.as_ref(), PAGE)
                    .await?;
                let done = page.len() < PAGE;
                projects.extend(page);
                if done {
                    break;
                }
            }
            if let (Some(org), true) = (org, projects.is_empty()) {
                return Err(Error::NotFound(format!("org {org} has no projects")));
            }
            Ok(projects)
        }
    }
}

/// Writes the export file of `store` to `out`; `progress` hears of every
/// `PROGRESS_EVERY` rows written. Returns what was written.
pub async fn export(
    store: &dyn Store,
    options: &ExportOptions,
    out: &mut (dyn Write + Send),
    progress: &mut (dyn FnMut(&Counts) + Send),
) -> Result<Counts> {
    let projects = selected(store, options).await?;
    let mut sink = Sink {
        out,
        counts: Counts::default(),
        progress,
        expired: Default::default(),
    };
    sink.put(Line::Format(FormatLine { version: VERSION }))?;
    let mut by_org: BTreeMap<String, Vec<Project>> = BTreeMap::new();
    for project in projects {
        by_org
            .entry(project.key.org_id.clone())
            .or_default()
            .push(project);
    }
    let whole_orgs = options.project.is_none();
    for (org, projects) in &by_org {
        for project in projects {
            export_project(store, project, options.vectors, &mut sink).await?;
        }
        export_semantic(store, org, projects, whole_orgs, options.vectors, &mut sink).await?;
    }
    sink.out
        .flush()
        .map_err(|err| Error::Unavailable(format!("writing the export: {err}")))?;
    Ok(sink.counts)
}

async fn export_project(
    store: &dyn Store,
    project: &Project,
    vectors: bool,
    sink: &mut Sink<'_>,
) -> Result<()> {
    // An export reads the whole store for its operator: no caller to check.
    let key = &Access::system(project.key.clone());
    sink.put(Line::Project(ProjectLine {
        org_id: key.org_id.clone(),
        project_id: key.project_id.clone(),
        description: project.description.clone(),
        config: ProjectConfigLine {
            embedder: project.config.embedder.clone(),
            reranker: project.config.reranker.clone(),
        },
        episodic: EpisodicLine {
            enabled: project.episodic.enabled,
            long_term_memory_enabled: project.episodic.long_term_memory_enabled,
            short_term_memory_enabled: project.episodic.short_term_memory_enabled,
            participant_aware: project.episodic.participant_aware,
            episode_retention_micros: project.episodic.episode_retention_micros,
            ranking_weights: project.episodic.ranking_weights,
        },
        created_at_micros: project.created_at_micros,
    }))?;
    let expiry = crate::episodic::expiry::Expiry::of(&project.episodic);
    let mut after = i64::MIN;
    loop {
        let page = store.list_episodes(key, None, after, PAGE).await?;
        for e in &page {
            if !expiry.keep(&mut e.clone()) {
                sink.expired.insert(e.uid);
                continue;
            }
            sink.put(Line::Episode(EpisodeLine {
                org_id: key.org_id.clone(),
                project_id: key.project_id.clone(),
                uid: e.uid,
                sequence_num: e.sequence_num,
                content: e.content.clone(),
                producer_id: e.producer_id.clone(),
                producer_role: e.producer_role.clone(),
                produced_for_id: e.produced_for_id.clone(),
                episode_type: e.episode_type.clone(),
                content_type: e.content_type.clone(),
                created_at_micros: e.created_at_micros,
                metadata: e.metadata.clone(),
                expires_at_micros: e.expires_at_micros,
            }))?;
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = last.sequence_num,
            _ => break,
        }
    }
    if vectors {
        let mut after = i64::MIN;
        loop {
            let page = store.episode_vectors(key, after, PAGE).await?;
            for v in &page {
                if sink.expired.contains(&v.uid) {
                    continue;
                }
                sink.put(Line::Vector(VectorLine {
                    org_id: key.org_id.clone(),
                    project_id: key.project_id.clone(),
                    uid: v.uid,
                    embedder: v.embedder.clone(),
                    vector: v.vector.clone(),
                }))?;
            }
            match page.last() {
                Some(last) if page.len() == PAGE => after = last.sequence_num,
                _ => break,
            }
        }
    }
    if let Some(summary) = store.summary(key).await? {
        sink.put(Line::Summary(SummaryLine {
            org_id: key.org_id.clone(),
            project_id: key.project_id.clone(),
            text: summary.text,
            first_seq: summary.first_seq,
            last_seq: summary.last_seq,
            updated_at_micros: summary.updated_at_micros,
        }))?;
    }
    Ok(())
}

/// The semantic rows of `org` that belong to `projects` and, for a whole org, the
/// org-level ones its projects share.
async fn export_semantic(
    store: &dyn Store,
    org: &str,
    projects: &[Project],
    whole_org: bool,
    vectors: bool,
    sink: &mut Sink<'_>,
) -> Result<()> {
    // Which rows are exported, and every visible set type's public id (a set may name
    // an org-level one that is not exported).
    let mut project_of: HashMap<ProjectHandle, &ProjectKey> = HashMap::new();
    let mut set_types: BTreeMap<SetTypeId, SetType> = BTreeMap::new();
    let mut sets: BTreeMap<SetId, SetRow> = BTreeMap::new();
    let mut type_ids: HashMap<SetTypeId, String> = HashMap::new();
    for project in projects {
        project_of.insert(project.internal_id, &project.key);
        let ours = |owner: Option<ProjectHandle>| match owner {
            Some(p) => p == project.internal_id,
            None => whole_org,
        };
        for t in store
            .list_set_types(&Access::system(project.key.clone()))
            .await?
        {
            type_ids.insert(t.internal_id, t.id.clone());
            if ours(t.project) && t.org_id == org {
                set_types.insert(t.internal_id, t);
            }
        }
        for s in store
            .list_sets(&Access::system(project.key.clone()))
            .await?
        {
            if ours(s.project) && s.org_id == org {
                sets.insert(s.internal_id, s);
            }
        }
    }
    let project_id = |owner: Option<ProjectHandle>| -> Result<Option<String>> {
        owner
            .map(|p| {
                project_of
                    .get(&p)
                    .map(|key| key.project_id.clone())
                    .ok_or_else(|| {
                        Error::Internal(format!(
                            "a row of org {org} names project {p}, which is not exported"
                        ))
                    })
            })
            .transpose()
    };
    for t in set_types.values() {
        sink.put(Line::SetType(SetTypeLine {
            id: t.id.clone(),
            org_id: t.org_id.clone(),
            project_id: project_id(t.project)?,
            is_org_level: t.is_org_level,
            name: t.name.clone(),
            description: t.description.clone(),
            tags: t.tags.clone(),
            created_at_micros: t.created_at_micros,
        }))?;
    }
    for s in sets.values() {
        let set_type = s
            .set_type
            .map(|t| {
                type_ids.get(&t).cloned().ok_or_else(|| {
                    Error::Internal(format!("set {} names a set type no project sees", s.set_id))
                })
            })
            .transpose()?;
        sink.put(Line::Set(SetLine {
            set_id: s.set_id.clone(),
            org_id: s.org_id.clone(),
            project_id: project_id(s.project)?,
            set_kind: s.kind.as_str().to_string(),
            set_type,
            tags: s.tags.clone(),
            embedder: s.config.embedder.clone(),
            llm: s.config.llm.clone(),
            created_at_micros: s.created_at_micros,
        }))?;
    }
    let owners: Vec<CategoryOwner> = set_types
        .keys()
        .map(|t| CategoryOwner::SetType(*t))
        .chain(sets.keys().map(|s| CategoryOwner::Set(*s)))
        .collect();
    if !owners.is_empty() {
        for c in store.categories_of(&owners).await? {
            let (set_id, set_type) = match c.owner {
                CategoryOwner::Set(s) => (sets.get(&s).map(|s| s.set_id.clone()), None),
                CategoryOwner::SetType(t) => (None, set_types.get(&t).map(|t| t.id.clone())),
            };
            sink.put(Line::Category(CategoryLine {
                id: c.id.clone(),
                set_id,
                set_type,
                name: c.name.clone(),
                prompt: c.prompt.clone(),
                description: c.description.clone(),
            }))?;
            for tag in &c.tags {
                sink.put(Line::Tag(TagLine {
                    id: tag.id.clone(),
                    category_id: c.id.clone(),
                    name: tag.name.clone(),
                    description: tag.description.clone(),
                }))?;
            }
        }
    }
    for s in sets.values() {
        for name in store.disabled_categories(s.internal_id).await? {
            sink.put(Line::DisabledCategory(DisabledCategoryLine {
                set_id: s.set_id.clone(),
                name,
            }))?;
        }
    }
    if sets.is_empty() {
        return Ok(());
    }
    let set_ids: Vec<SetId> = sets.keys().copied().collect();
    let mut feature_ids: HashMap<FeatureId, String> = HashMap::new();
    // Each feature's current version: when it began and what made it (after the history).
    let mut current = Vec::new();
    let mut after = None;
    loop {
        let page = store.list_features(&set_ids, after, PAGE).await?;
        for f in &page {
            if vectors {
                feature_ids.insert(f.internal_id, f.id.clone());
            }
            let mut citations = f.citations.clone();
            citations.retain(|uid| !sink.expired.contains(uid));
            citations.sort_unstable();
            current.push(FeatureVersionLine {
                feature_id: f.id.clone(),
                origin_id: f.id.clone(),
                set_id: f.set_id.clone(),
                category: f.category.clone(),
                category_id: f.category_id.clone(),
                tag: f.tag.clone(),
                feature: f.feature.clone(),
                value: f.value.clone(),
                metadata: f.metadata.clone(),
                citations: citations.clone(),
                valid_from_micros: f.valid_from_micros,
                valid_to_micros: None,
                changed_by: change_name(f.changed_by).to_string(),
            });
            sink.put(Line::Feature(FeatureLine {
                id: f.id.clone(),
                set_id: f.set_id.clone(),
                category: f.category.clone(),
                category_id: f.category_id.clone(),
                tag: f.tag.clone(),
                feature: f.feature.clone(),
                value: f.value.clone(),
                metadata: f.metadata.clone(),
                citations,
                created_at_micros: f.created_at_micros,
                updated_at_micros: f.updated_at_micros,
            }))?;
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.internal_id),
            _ => break,
        }
    }
    if vectors {
        for set in &set_ids {
            for f in store.indexed_features(&[*set]).await? {
                let (Some((embedder, vector)), Some(id)) =
                    (f.vector, feature_ids.get(&f.internal_id))
                else {
                    continue;
                };
                sink.put(Line::FeatureVector(FeatureVectorLine {
                    feature_id: id.clone(),
                    embedder,
                    vector,
                }))?;
            }
        }
    }
    // The features' history, deleted features' included, in the order it was kept.
    for v in store.versions_of_sets(&set_ids).await? {
        let mut citations = v.citations;
        citations.sort_unstable();
        sink.put(Line::FeatureVersion(FeatureVersionLine {
            feature_id: v.feature_id,
            origin_id: v.origin_id,
            set_id: v.set_id,
            category: v.category,
            category_id: v.category_id,
            tag: v.tag,
            feature: v.feature,
            value: v.value,
            metadata: v.metadata,
            citations,
            valid_from_micros: v.valid_from_micros,
            valid_to_micros: Some(v.valid_to_micros.unwrap_or(v.valid_from_micros)),
            changed_by: change_name(v.changed_by).to_string(),
        }))?;
    }
    for line in current {
        sink.put(Line::FeatureVersion(line))?;
    }
    Ok(())
}

/// What made a version, as the file names it.
pub fn change_name(change: crate::store::ChangedBy) -> &'static str {
    use crate::store::ChangedBy;
    match change {
        ChangedBy::Unknown => "unknown",
        ChangedBy::Extraction => "extraction",
        ChangedBy::Consolidation => "consolidation",
        ChangedBy::Manual => "manual",
        ChangedBy::Deletion => "deletion",
    }
}
