//! Reading an export file into a store, through the store traits only.
//!
//! The file is read twice. The first pass checks every line (its JSON, its kind, that
//! what it names comes earlier in the file or exists in the target) and the target
//! (projects that exist, public ids that are taken) and refuses, before anything is
//! written, a file naming a project the target has, unless `replace`: then those
//! projects are deleted first (and the org-level set types and sets of the file that
//! the target has). The universal project always exists: it counts as existing only
//! when it holds episodes. The second pass writes, in batches.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::Counts;
use super::format::{FeatureLine, Line, VERSION};
use crate::error::{Error, Result};
use crate::model::{
    CategoryId, Episode, EpisodeHandle, EpisodicConfig, FeatureId, Project, ProjectConfig,
    ProjectHandle, ProjectKey, SetId, SetTypeId,
};
use crate::semantic::features::{match_key, normalise};
use crate::semantic::model::{
    CategoryOwner, NewCategory, NewFeature, SetConfig, SetKind, SetRow, SetType, Summary,
};
use crate::store::{ChangedBy, RestoredFeature, RestoredVersion, Store};
use memmachine_core::access::{Access, ProjectAccess};

/// What may have made a feature version, as the file names it.
const KNOWN_CHANGES: &[&str] = &[
    "extraction",
    "consolidation",
    "manual",
    "deletion",
    "unknown",
];

/// Rows written per call.
const BATCH: usize = 1000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Delete the projects of the file that the target has (and the org-level set types
    /// and sets of the file that it has) before writing them again.
    pub replace: bool,
}

fn bad(line: usize, why: impl Into<String>) -> Error {
    Error::invalid(format!("line {line}"), why)
}

/// The numbered lines of the file (blank lines skipped), parsed.
fn read(path: &Path) -> Result<impl Iterator<Item = Result<(usize, Line)>>> {
    let file = std::fs::File::open(path)
        .map_err(|err| Error::Unavailable(format!("cannot open {}: {err}", path.display())))?;
    let path = path.to_path_buf();
    Ok(BufReader::new(file)
        .lines()
        .enumerate()
        .filter_map(move |(index, text)| {
            let number = index + 1;
            match text {
                Err(err) => Some(Err(Error::Unavailable(format!(
                    "reading {} at line {number}: {err}",
                    path.display()
                )))),
                Ok(text) if text.trim().is_empty() => None,
                Ok(text) => Some(Line::parse(number, &text).map(|line| (number, line))),
            }
        }))
}

fn key(line: usize, org_id: &str, project_id: &str) -> Result<ProjectKey> {
    match ProjectKey::parse(org_id, project_id) {
        Ok(key) if key.org_id == org_id && key.project_id == project_id => Ok(key),
        Ok(_) => Err(bad(line, "org_id and project_id must not be empty")),
        Err(err) => Err(bad(line, err.to_string())),
    }
}

/// An import writes the file's projects for the operator who runs it: no caller to
/// check, so every access it uses comes through the system door.
fn system(key: &ProjectKey) -> ProjectAccess {
    Access::system(key.clone())
}

fn first_of(line: usize, kind: &str, id: &str, seen: bool) -> Result<()> {
    if seen {
        return Err(bad(line, format!("{kind} {id} appears twice in the file")));
    }
    Ok(())
}

/// What the first pass learnt from the file.
#[derive(Default)]
struct Plan {
    /// In file order, with the line that declares each.
    projects: Vec<(ProjectKey, usize)>,
    project_index: HashMap<ProjectKey, usize>,
    /// Episode uid -> its project (index).
    episodes: HashMap<uuid::Uuid, usize>,
    seqs: HashSet<(usize, i64)>,
    summaries: HashSet<usize>,
    set_types: HashSet<String>,
    /// Set id -> its org.
    sets: HashMap<String, String>,
    categories: HashSet<String>,
    tags: HashSet<String>,
    features: HashSet<String>,
    /// Org-level set types and sets of the file (the ones `replace` may delete first).
    org_set_types: Vec<(String, usize)>,
    org_sets: Vec<(String, usize)>,
    /// Rows named but not in the file: looked for in the target (public id -> line).
    target_set_types: BTreeMap<String, usize>,
    target_sets: BTreeMap<String, usize>,
    target_categories: BTreeMap<String, usize>,
    target_features: BTreeMap<String, usize>,
    /// Episodes cited but not in the file: uid -> (line, the citing feature's set id).
    target_citations: HashMap<uuid::Uuid, (usize, String)>,
}

impl Plan {
    fn project(&self, line: usize, org_id: &str, project_id: &str) -> Result<usize> {
        let key = key(line, org_id, project_id)?;
        self.project_index.get(&key).copied().ok_or_else(|| {
            bad(
                line,
                format!("project {key} is not declared earlier in the file"),
            )
        })
    }

    fn check(&mut self, number: usize, line: &Line) -> Result<()> {
        match line {
            Line::Format(f) => {
                if number != 1 || f.version != VERSION {
                    return Err(bad(
                        number,
                        format!(
                            "a format line (version {}) is allowed only as the first line, \
                             with version {VERSION}",
                            f.version
                        ),
                    ));
                }
            }
            Line::Project(p) => {
                p.episodic
                    .ranking_weights
                    .validate()
                    .map_err(|why| Error::invalid("ranking_weights", why))?;
                let key = key(number, &p.org_id, &p.project_id)?;
                if self.project_index.contains_key(&key) {
                    return Err(bad(
                        number,
                        format!("project {key} appears twice in the file"),
                    ));
                }
                self.project_index.insert(key.clone(), self.projects.len());
                self.projects.push((key, number));
            }
            Line::Episode(e) => {
                let project = self.project(number, &e.org_id, &e.project_id)?;
                let seen = self.episodes.insert(e.uid, project).is_some();
                first_of(number, "episode", &e.uid.to_string(), seen)?;
                if !self.seqs.insert((project, e.sequence_num)) {
                    return Err(bad(
                        number,
                        format!(
                            "sequence number {} appears twice in its project",
                            e.sequence_num
                        ),
                    ));
                }
            }
            Line::Vector(v) => {
                let project = self.project(number, &v.org_id, &v.project_id)?;
                if self.episodes.get(&v.uid) != Some(&project) {
                    return Err(bad(
                        number,
                        format!(
                            "the vector's episode {} is not an episode of {}/{} earlier in the file",
                            v.uid, v.org_id, v.project_id
                        ),
                    ));
                }
            }
            Line::Summary(s) => {
                let project = self.project(number, &s.org_id, &s.project_id)?;
                let seen = !self.summaries.insert(project);
                first_of(number, "a summary of project", &s.project_id, seen)?;
            }
            Line::SetType(t) => {
                let seen = !self.set_types.insert(t.id.clone());
                first_of(number, "set type", &t.id, seen)?;
                match &t.project_id {
                    Some(p) => {
                        self.project(number, &t.org_id, p)?;
                    }
                    None => self.org_set_types.push((t.id.clone(), number)),
                }
            }
            Line::Set(s) => {
                let seen = self
                    .sets
                    .insert(s.set_id.clone(), s.org_id.clone())
                    .is_some();
                first_of(number, "set", &s.set_id, seen)?;
                if SetKind::parse(&s.set_kind).is_none() {
                    return Err(bad(number, format!("unknown set_kind {:?}", s.set_kind)));
                }
                match &s.project_id {
                    Some(p) => {
                        self.project(number, &s.org_id, p)?;
                    }
                    None => self.org_sets.push((s.set_id.clone(), number)),
                }
                if let Some(t) = &s.set_type {
                    self.set_type_ref(number, t);
                }
            }
            Line::Category(c) => {
                let seen = !self.categories.insert(c.id.clone());
                first_of(number, "category", &c.id, seen)?;
                match (&c.set_id, &c.set_type) {
                    (Some(s), None) => self.set_ref(number, s),
                    (None, Some(t)) => self.set_type_ref(number, t),
                    _ => {
                        return Err(bad(
                            number,
                            "a category names exactly one owner: set_id or set_type",
                        ));
                    }
                }
            }
            Line::Tag(t) => {
                let seen = !self.tags.insert(t.id.clone());
                first_of(number, "tag", &t.id, seen)?;
                if !self.categories.contains(&t.category_id) {
                    self.target_categories
                        .entry(t.category_id.clone())
                        .or_insert(number);
                }
            }
            Line::DisabledCategory(d) => self.set_ref(number, &d.set_id),
            Line::Feature(f) => {
                let seen = !self.features.insert(f.id.clone());
                first_of(number, "feature", &f.id, seen)?;
                if !f.metadata.is_object() {
                    return Err(bad(number, "a feature's metadata is a JSON object"));
                }
                self.set_ref(number, &f.set_id);
                for uid in &f.citations {
                    if !self.episodes.contains_key(uid) {
                        self.target_citations
                            .entry(*uid)
                            .or_insert((number, f.set_id.clone()));
                    }
                }
            }
            Line::FeatureVersion(v) => {
                if !v.metadata.is_object() {
                    return Err(bad(number, "a feature version's metadata is a JSON object"));
                }
                if !KNOWN_CHANGES.contains(&v.changed_by.as_str()) {
                    return Err(bad(
                        number,
                        format!("unknown changed_by {:?}", v.changed_by),
                    ));
                }
                self.set_ref(number, &v.set_id);
            }
            Line::FeatureVector(v) => {
                if !self.features.contains(&v.feature_id) {
                    self.target_features
                        .entry(v.feature_id.clone())
                        .or_insert(number);
                }
            }
        }
        Ok(())
    }

    fn set_ref(&mut self, line: usize, set_id: &str) {
        if !self.sets.contains_key(set_id) {
            self.target_sets.entry(set_id.to_string()).or_insert(line);
        }
    }

    fn set_type_ref(&mut self, line: usize, id: &str) {
        if !self.set_types.contains(id) {
            self.target_set_types.entry(id.to_string()).or_insert(line);
        }
    }
}

/// What the target holds that the import deletes first or refers to.
#[derive(Default)]
struct Target {
    /// Projects deleted first (`replace`).
    replaced: Vec<ProjectKey>,
    /// Org-level sets and set types deleted first (`replace`), internal ids.
    replaced_sets: Vec<SetId>,
    replaced_set_types: Vec<SetTypeId>,
    /// Everything that goes with those deletions (internal ids).
    doomed_sets: HashSet<SetId>,
    doomed_set_types: HashSet<SetTypeId>,
    /// Episodes cited but not in the file, with their handles.
    citations: HashMap<uuid::Uuid, EpisodeHandle>,
}

fn taken(line: usize, what: &str, id: &str) -> Error {
    Error::AlreadyExists(format!(
        "line {line}: {what} {id} already exists in the target, outside the projects \
         being imported; nothing was written"
    ))
}

fn missing(line: usize, what: &str, id: &str) -> Error {
    bad(
        line,
        format!("{what} {id} is neither earlier in the file nor in the target"),
    )
}

/// Checks the target against the plan; writes nothing.
async fn survey(store: &dyn Store, plan: &Plan, replace: bool) -> Result<Target> {
    let mut target = Target::default();
    let mut refused = Vec::new();
    for (key, _) in &plan.projects {
        let access = system(key);
        let Some(project) = store.get_project(&access).await? else {
            continue;
        };
        let holds_episodes = store.count_episodes(&access).await? > 0;
        if key.is_universal() && !holds_episodes && !replace {
            continue; // always there: imported into as it is
        }
        if !replace {
            refused.push(key.to_string());
            continue;
        }
        for t in store.list_set_types(&access).await? {
            if t.project == Some(project.internal_id) {
                target.doomed_set_types.insert(t.internal_id);
            }
        }
        for s in store.list_sets(&access).await? {
            if s.project == Some(project.internal_id) {
                target.doomed_sets.insert(s.internal_id);
            }
        }
        target.replaced.push(key.clone());
    }
    if !refused.is_empty() {
        return Err(Error::AlreadyExists(format!(
            "the target already has project{} {} (--replace deletes {} first); nothing was \
             written",
            if refused.len() == 1 { "" } else { "s" },
            refused.join(", "),
            if refused.len() == 1 { "it" } else { "them" },
        )));
    }
    // Org-level rows of the file that the target has: replaced, or refused.
    for (id, line) in &plan.org_set_types {
        if let Some(t) = store.find_set_type(id).await? {
            if target.doomed_set_types.contains(&t.internal_id) {
                continue;
            }
            if !replace || t.project.is_some() {
                return Err(taken(*line, "set type", id));
            }
            target.replaced_set_types.push(t.internal_id);
            target.doomed_set_types.insert(t.internal_id);
        }
    }
    for (id, line) in &plan.org_sets {
        if let Some(s) = store.find_set(id).await? {
            if target.doomed_sets.contains(&s.internal_id) {
                continue;
            }
            if !replace || s.project.is_some() {
                return Err(taken(*line, "set", id));
            }
            target.replaced_sets.push(s.internal_id);
            target.doomed_sets.insert(s.internal_id);
        }
    }
    let owners: Vec<CategoryOwner> = target
        .doomed_sets
        .iter()
        .map(|s| CategoryOwner::Set(*s))
        .chain(
            target
                .doomed_set_types
                .iter()
                .map(|t| CategoryOwner::SetType(*t)),
        )
        .collect();
    let mut doomed_tags = HashSet::new();
    if !owners.is_empty() {
        for c in store.categories_of(&owners).await? {
            doomed_tags.extend(c.tags.iter().map(|t| t.internal_id));
        }
    }
    // The file's project-level rows whose ids the target has outside what is deleted
    // first (set types and sets of the file's projects are new, or replaced).
    let owned_by_doomed = |owner: CategoryOwner| match owner {
        CategoryOwner::Set(s) => target.doomed_sets.contains(&s),
        CategoryOwner::SetType(t) => target.doomed_set_types.contains(&t),
    };
    for id in &plan.set_types {
        if let Some(t) = store.find_set_type(id).await?
            && !target.doomed_set_types.contains(&t.internal_id)
        {
            return Err(taken_id("set type", id));
        }
    }
    for id in plan.sets.keys() {
        if let Some(s) = store.find_set(id).await?
            && !target.doomed_sets.contains(&s.internal_id)
        {
            return Err(taken_id("set", id));
        }
    }
    for id in &plan.categories {
        if let Some(c) = store.find_category(id).await?
            && !owned_by_doomed(c.owner)
        {
            return Err(taken_id("category", id));
        }
    }
    for id in &plan.tags {
        if let Some(t) = store.find_tag(id).await?
            && !doomed_tags.contains(&t.internal_id)
        {
            return Err(taken_id("tag", id));
        }
    }
    // What the file names but does not hold must be in the target, and stay there.
    for (id, line) in &plan.target_set_types {
        match store.find_set_type(id).await? {
            Some(t) if !target.doomed_set_types.contains(&t.internal_id) => {}
            _ => return Err(missing(*line, "set type", id)),
        }
    }
    let mut set_orgs: HashMap<&str, String> = plan
        .sets
        .iter()
        .map(|(id, org)| (id.as_str(), org.clone()))
        .collect();
    for (id, line) in &plan.target_sets {
        match store.find_set(id).await? {
            Some(s) if !target.doomed_sets.contains(&s.internal_id) => {
                set_orgs.insert(id, s.org_id);
            }
            _ => return Err(missing(*line, "set", id)),
        }
    }
    for (id, line) in &plan.target_categories {
        match store.find_category(id).await? {
            Some(c) if !owned_by_doomed(c.owner) => {}
            _ => return Err(missing(*line, "category", id)),
        }
    }
    for (id, line) in &plan.target_features {
        match store.find_feature(id).await? {
            Some(f) if !target.doomed_sets.contains(&f.set) => {}
            _ => return Err(missing(*line, "feature", id)),
        }
    }
    target.citations = cited_in_target(store, plan, &set_orgs).await?;
    Ok(target)
}

fn taken_id(what: &str, id: &str) -> Error {
    Error::AlreadyExists(format!(
        "{what} {id} of the file already exists in the target, outside the projects being \
         imported; nothing was written"
    ))
}

/// Handles of the cited episodes that are not in the file, found in the projects of
/// their feature's org that the file does not hold (which are left as they are).
async fn cited_in_target(
    store: &dyn Store,
    plan: &Plan,
    set_orgs: &HashMap<&str, String>,
) -> Result<HashMap<uuid::Uuid, EpisodeHandle>> {
    let mut by_org: BTreeMap<&str, Vec<uuid::Uuid>> = BTreeMap::new();
    for (uid, (_, set_id)) in &plan.target_citations {
        if let Some(org) = set_orgs.get(set_id.as_str()) {
            by_org.entry(org).or_default().push(*uid);
        }
    }
    let mut found = HashMap::new();
    for (org, uids) in by_org {
        let mut after: Option<ProjectKey> = None;
        loop {
            let page = store
                .list_projects(Some(org), after.as_ref(), BATCH)
                .await?;
            for project in &page {
                if plan.project_index.contains_key(&project.key) {
                    continue;
                }
                let handles = store.episode_handles(&system(&project.key), &uids).await?;
                for (uid, handle) in uids.iter().zip(handles) {
                    if let Some(handle) = handle {
                        found.insert(*uid, handle);
                    }
                }
            }
            if page.len() < BATCH {
                break;
            }
            after = page.last().map(|p| p.key.clone());
        }
    }
    let mut unresolved: Vec<(usize, uuid::Uuid)> = plan
        .target_citations
        .iter()
        .filter(|(uid, _)| !found.contains_key(*uid))
        .map(|(uid, (line, _))| (*line, *uid))
        .collect();
    unresolved.sort_unstable();
    if let Some((line, uid)) = unresolved.first() {
        return Err(missing(*line, "cited episode", &uid.to_string()));
    }
    Ok(found)
}

/// Rows waiting to be written together.
enum Pending {
    None,
    Episodes(ProjectKey, Vec<Episode>),
    Vectors(String, Vec<(EpisodeHandle, Vec<f32>)>),
    Features(Vec<RestoredFeature>),
    FeatureVectors(String, Vec<(String, Vec<f32>)>),
}

/// The second pass: public references to the target's handles, and batches.
struct Writer<'a> {
    store: &'a dyn Store,
    handles: HashMap<uuid::Uuid, EpisodeHandle>,
    set_types: HashMap<String, SetTypeId>,
    sets: HashMap<String, SetId>,
    categories: HashMap<String, CategoryId>,
    features: HashMap<String, FeatureId>,
    pending: Pending,
}

impl Writer<'_> {
    async fn flush(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => {}
            Pending::Episodes(key, episodes) => {
                let uids: Vec<uuid::Uuid> = episodes.iter().map(|e| e.uid).collect();
                let handles = self.store.restore_episodes(&system(&key), episodes).await?;
                self.handles.extend(uids.into_iter().zip(handles));
            }
            Pending::Vectors(embedder, vectors) => {
                self.store.store_embeddings(&embedder, vectors).await?;
            }
            Pending::Features(features) => {
                let ids: Vec<String> = features.iter().map(|f| f.feature.id.clone()).collect();
                let internal = self.store.restore_features(features).await?;
                self.features.extend(ids.into_iter().zip(internal));
            }
            Pending::FeatureVectors(embedder, vectors) => {
                let mut rows = Vec::with_capacity(vectors.len());
                for (id, vector) in vectors {
                    rows.push((self.feature(&id).await?, vector));
                }
                self.store.store_feature_embeddings(&embedder, rows).await?;
            }
        }
        Ok(())
    }

    fn full(&self) -> bool {
        match &self.pending {
            Pending::None => false,
            Pending::Episodes(_, rows) => rows.len() >= BATCH,
            Pending::Vectors(_, rows) => rows.len() >= BATCH,
            Pending::Features(rows) => rows.len() >= BATCH,
            Pending::FeatureVectors(_, rows) => rows.len() >= BATCH,
        }
    }

    async fn set_type(&mut self, id: &str) -> Result<SetTypeId> {
        if let Some(t) = self.set_types.get(id) {
            return Ok(*t);
        }
        let t = self
            .store
            .find_set_type(id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("set type {id} does not exist")))?;
        self.set_types.insert(id.to_string(), t.internal_id);
        Ok(t.internal_id)
    }

    async fn set(&mut self, id: &str) -> Result<SetId> {
        if let Some(s) = self.sets.get(id) {
            return Ok(*s);
        }
        let s = self
            .store
            .find_set(id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("set {id} does not exist")))?;
        self.sets.insert(id.to_string(), s.internal_id);
        Ok(s.internal_id)
    }

    async fn category(&mut self, id: &str) -> Result<CategoryId> {
        if let Some(c) = self.categories.get(id) {
            return Ok(*c);
        }
        let c = self
            .store
            .find_category(id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("category {id} does not exist")))?;
        self.categories.insert(id.to_string(), c.internal_id);
        Ok(c.internal_id)
    }

    async fn feature(&mut self, id: &str) -> Result<FeatureId> {
        if let Some(f) = self.features.get(id) {
            return Ok(*f);
        }
        let f = self
            .store
            .find_feature(id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("feature {id} does not exist")))?;
        self.features.insert(id.to_string(), f.internal_id);
        Ok(f.internal_id)
    }

    fn handle(&self, uid: &uuid::Uuid) -> Result<EpisodeHandle> {
        self.handles
            .get(uid)
            .copied()
            .ok_or_else(|| Error::NotFound(format!("episode {uid} was not imported")))
    }

    async fn restored_feature(&mut self, f: FeatureLine) -> Result<RestoredFeature> {
        let set = self.set(&f.set_id).await?;
        let citations = f
            .citations
            .iter()
            .map(|uid| self.handle(uid))
            .collect::<Result<Vec<EpisodeHandle>>>()?;
        Ok(RestoredFeature {
            set,
            feature: NewFeature {
                match_key: match_key(&f.category, &f.tag, &f.feature),
                value_key: normalise(&f.value),
                id: f.id,
                category: f.category,
                category_id: f.category_id,
                tag: f.tag,
                feature: f.feature,
                value: f.value,
                metadata: f.metadata,
            },
            citations,
            created_at_micros: f.created_at_micros,
            updated_at_micros: f.updated_at_micros,
        })
    }

    async fn write(&mut self, line: Line) -> Result<()> {
        // Rows of another kind (or project, or embedder) than those waiting: write those
        // first, so that what a line names is in the store before it.
        let joins = match (&self.pending, &line) {
            (Pending::Episodes(key, _), Line::Episode(e)) => {
                key.org_id == e.org_id && key.project_id == e.project_id
            }
            (Pending::Vectors(embedder, _), Line::Vector(v)) => *embedder == v.embedder,
            (Pending::Features(_), Line::Feature(_)) => true,
            (Pending::FeatureVectors(embedder, _), Line::FeatureVector(v)) => {
                *embedder == v.embedder
            }
            _ => false,
        };
        if !joins || self.full() {
            self.flush().await?;
        }
        match line {
            Line::Format(_) => {}
            Line::Project(p) => {
                // Its handle is ignored: the target store gives the project its own.
                let project = Project {
                    internal_id: ProjectHandle::from_raw(0),
                    key: ProjectKey {
                        org_id: p.org_id,
                        project_id: p.project_id,
                    },
                    description: p.description,
                    config: ProjectConfig {
                        embedder: p.config.embedder,
                        reranker: p.config.reranker,
                    },
                    episodic: EpisodicConfig {
                        enabled: p.episodic.enabled,
                        long_term_memory_enabled: p.episodic.long_term_memory_enabled,
                        short_term_memory_enabled: p.episodic.short_term_memory_enabled,
                        participant_aware: p.episodic.participant_aware,
                        episode_retention_micros: p.episodic.episode_retention_micros,
                        ranking_weights: p.episodic.ranking_weights,
                    },
                    created_at_micros: p.created_at_micros,
                };
                self.store.restore_project(&project).await?;
            }
            Line::Episode(e) => {
                let episode = Episode {
                    uid: e.uid,
                    content: e.content,
                    producer_id: e.producer_id,
                    producer_role: e.producer_role,
                    produced_for_id: e.produced_for_id,
                    sequence_num: e.sequence_num,
                    episode_type: e.episode_type,
                    content_type: e.content_type,
                    created_at_micros: e.created_at_micros,
                    metadata: e.metadata,
                    expires_at_micros: e.expires_at_micros,
                };
                match &mut self.pending {
                    Pending::Episodes(_, rows) => rows.push(episode),
                    _ => {
                        let key = ProjectKey {
                            org_id: e.org_id,
                            project_id: e.project_id,
                        };
                        self.pending = Pending::Episodes(key, vec![episode]);
                    }
                }
            }
            Line::Vector(v) => {
                let row = (self.handle(&v.uid)?, v.vector);
                match &mut self.pending {
                    Pending::Vectors(_, rows) => rows.push(row),
                    _ => self.pending = Pending::Vectors(v.embedder, vec![row]),
                }
            }
            Line::Summary(s) => {
                let key = Access::system(ProjectKey {
                    org_id: s.org_id,
                    project_id: s.project_id,
                });
                let summary = Summary {
                    text: s.text,
                    first_seq: s.first_seq,
                    last_seq: s.last_seq,
                    updated_at_micros: s.updated_at_micros,
                };
                // A project whose episodes were deleted since the summariser last
                // looked refuses one summary (and forgets the deletions).
                let mut stored = false;
                for _ in 0..2 {
                    let previous = self.store.summary(&key).await?.map(|s| s.last_seq);
                    if self
                        .store
                        .put_summary(&key, summary.clone(), previous)
                        .await?
                    {
                        stored = true;
                        break;
                    }
                }
                if !stored {
                    return Err(Error::Unavailable(format!(
                        "the summary of {key} was not stored (it changed meanwhile)"
                    )));
                }
            }
            Line::SetType(t) => {
                let project = t.project_id.map(|project_id| ProjectKey {
                    org_id: t.org_id.clone(),
                    project_id,
                });
                // Its handle is ignored: the target store gives the set type its own.
                let set_type = SetType {
                    internal_id: SetTypeId::from_raw(0),
                    id: t.id,
                    org_id: t.org_id,
                    project: None,
                    is_org_level: t.is_org_level,
                    name: t.name,
                    description: t.description,
                    tags: t.tags,
                    created_at_micros: t.created_at_micros,
                };
                let stored = self
                    .store
                    .restore_set_type(project.map(Access::system).as_ref(), &set_type)
                    .await?;
                self.set_types.insert(stored.id, stored.internal_id);
            }
            Line::Set(s) => {
                let set_type = match &s.set_type {
                    Some(id) => Some(self.set_type(id).await?),
                    None => None,
                };
                let project = s.project_id.map(|project_id| ProjectKey {
                    org_id: s.org_id.clone(),
                    project_id,
                });
                let kind = SetKind::parse(&s.set_kind).ok_or_else(|| {
                    Error::invalid("set_kind", format!("unknown set kind {:?}", s.set_kind))
                })?;
                let set = SetRow {
                    internal_id: SetId::from_raw(0),
                    set_id: s.set_id,
                    org_id: s.org_id,
                    project: None,
                    kind,
                    set_type,
                    tags: s.tags,
                    config: SetConfig {
                        embedder: s.embedder,
                        llm: s.llm,
                    },
                    created_at_micros: s.created_at_micros,
                };
                let stored = self
                    .store
                    .restore_set(project.map(Access::system).as_ref(), &set)
                    .await?;
                self.sets.insert(stored.set_id, stored.internal_id);
            }
            Line::Category(c) => {
                let owner = match (&c.set_id, &c.set_type) {
                    (Some(set), _) => CategoryOwner::Set(self.set(set).await?),
                    (None, Some(t)) => CategoryOwner::SetType(self.set_type(t).await?),
                    (None, None) => return Err(Error::invalid("category", "no owner")),
                };
                let new = NewCategory {
                    id: c.id,
                    name: c.name,
                    prompt: c.prompt,
                    description: c.description,
                };
                let stored = self.store.add_category(owner, new).await?;
                self.categories.insert(stored.id, stored.internal_id);
            }
            Line::Tag(t) => {
                let category = self.category(&t.category_id).await?;
                self.store
                    .add_tag(category, &t.id, &t.name, &t.description)
                    .await?;
            }
            Line::DisabledCategory(d) => {
                let set = self.set(&d.set_id).await?;
                self.store.disable_category(set, &d.name).await?;
            }
            Line::Feature(f) => {
                let feature = self.restored_feature(f).await?;
                match &mut self.pending {
                    Pending::Features(rows) => rows.push(feature),
                    _ => self.pending = Pending::Features(vec![feature]),
                }
            }
            Line::FeatureVersion(v) => {
                let set = self.set(&v.set_id).await?;
                // A version's citations are what it cited and is still stored: an episode
                // the file does not hold is left out.
                let citations = v
                    .citations
                    .iter()
                    .filter_map(|uid| self.handle(uid).ok())
                    .collect();
                let changed_by = match v.changed_by.as_str() {
                    "extraction" => ChangedBy::Extraction,
                    "consolidation" => ChangedBy::Consolidation,
                    "manual" => ChangedBy::Manual,
                    "deletion" => ChangedBy::Deletion,
                    _ => ChangedBy::Unknown,
                };
                let restored = RestoredVersion {
                    feature_id: v.feature_id,
                    origin_id: v.origin_id,
                    set,
                    category: v.category,
                    category_id: v.category_id,
                    tag: v.tag,
                    feature: v.feature,
                    value: v.value,
                    metadata: v.metadata,
                    citations,
                    valid_from_micros: v.valid_from_micros,
                    valid_to_micros: v.valid_to_micros,
                    changed_by,
                };
                self.store.restore_feature_versions(vec![restored]).await?;
            }
            Line::FeatureVector(v) => match &mut self.pending {
                Pending::FeatureVectors(_, rows) => rows.push((v.feature_id, v.vector)),
                _ => {
                    self.pending =
                        Pending::FeatureVectors(v.embedder, vec![(v.feature_id, v.vector)]);
                }
            },
        }
        Ok(())
    }
}

/// Reads the export file at `path` into `store`; `progress` hears of every
/// `PROGRESS_EVERY` rows written. Returns what was written.
pub async fn import(
    store: &dyn Store,
    path: &Path,
    options: &ImportOptions,
    progress: &mut (dyn FnMut(&Counts) + Send),
) -> Result<Counts> {
    let mut plan = Plan::default();
    let mut first = true;
    for line in read(path)? {
        let (number, line) = line?;
        if first && !matches!(line, Line::Format(_)) {
            return Err(bad(
                number,
                format!(
                    "not a memmachine export: the first line is {{\"kind\":\"format\",\
                     \"version\":{VERSION}}}"
                ),
            ));
        }
        first = false;
        plan.check(number, &line)?;
    }
    if first {
        return Err(Error::invalid(
            "input",
            format!("{} is empty, not a memmachine export", path.display()),
        ));
    }
    let target = survey(store, &plan, options.replace).await?;

    // Nothing was written so far. What is replaced goes first.
    for key in &target.replaced {
        store.delete_project(&system(key)).await?;
    }
    for set in &target.replaced_sets {
        store.delete_set(*set).await?;
    }
    for set_type in &target.replaced_set_types {
        store.delete_set_type(*set_type).await?;
    }
    let mut writer = Writer {
        store,
        handles: target.citations,
        set_types: HashMap::new(),
        sets: HashMap::new(),
        categories: HashMap::new(),
        features: HashMap::new(),
        pending: Pending::None,
    };
    let mut counts = Counts::default();
    let mut last = 0;
    for line in read(path)? {
        let (number, line) = line?;
        counts.count(&line);
        let rows = counts.rows();
        writer
            .write(line)
            .await
            .map_err(|err| at_line(number, err))?;
        if rows > 0 && rows.is_multiple_of(super::PROGRESS_EVERY) {
            // Reported once the rows are in the store.
            writer.flush().await.map_err(|err| at_line(number, err))?;
            progress(&counts);
        }
        last = number;
    }
    writer.flush().await.map_err(|err| at_line(last, err))?;
    Ok(counts)
}

/// A write that failed, with the line it was for (rows of earlier lines are in the
/// store: the import stopped half-way).
fn at_line(line: usize, err: Error) -> Error {
    let why = format!("importing line {line} failed (what came before it was written): {err}");
    match err {
        Error::AlreadyExists(_) => Error::AlreadyExists(why),
        Error::NotFound(_) => Error::NotFound(why),
        Error::InvalidArgument(_) => Error::FailedPrecondition(why),
        Error::Closed => Error::Closed,
        Error::Unavailable(_) => Error::Unavailable(why),
        _ => Error::Internal(why),
    }
}
