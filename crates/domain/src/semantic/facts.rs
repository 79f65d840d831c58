//! Features by hand and by query: add, get, update, delete, search and list, within the
//! sets the caller's project sees.

use std::collections::{BTreeMap, HashSet};

use super::categories::{self, Effective};
use super::model::{Feature, FeatureUpdate, SetRow};
use super::{
    FeatureChange, FeatureInput, FeatureSearch, MAX_VALUE_BYTES, ScoredFeature, SemanticMemory,
    check_id, check_metadata, check_name, check_text, features, history, indexed_of, not_found,
    parse_filter, parse_uids, search, sets, visible_set,
};
use crate::error::{Error, Result, Violations};
use crate::model::{FeatureId, SetId};
use memmachine_core::access::OpenProject;

/// How many features a ranking answers, above which score, as of when (micros; `None`:
/// now).
pub struct Cut {
    pub top_k: usize,
    pub score_threshold: Option<f64>,
    pub as_of: Option<i64>,
}

/// A page of a listing: its size, the token of the page before, as of when (micros).
pub struct Page<'a> {
    pub size: Option<i32>,
    pub token: &'a str,
    pub as_of: Option<i64>,
}

impl SemanticMemory {
    // Features.

    /// The embedder id a set's features are embedded with (`None`: no vectors).
    pub fn embedder_for(&self, project: &OpenProject, set: &SetRow) -> Option<String> {
        let name = if set.config.embedder.is_empty() {
            &project.config.embedder
        } else {
            &set.config.embedder
        };
        self.embedders.for_project(name).map(|e| e.id().to_string())
    }

    pub(super) async fn category_of_set(&self, set: &SetRow, name: &str) -> Result<Effective> {
        self.effective_categories(set)
            .await?
            .into_iter()
            .find(|c| c.name.eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "category {name:?} is not a category of set {} (add it with AddCategory)",
                    set.set_id
                ))
            })
    }

    /// The category a feature filed (or refiled) by hand takes: the set's own, or a
    /// built-in one. MemMachine's project sets have `profile` built in (here user sets
    /// do), so a feature may be kept under a built-in category in any set.
    async fn filing_category(&self, set: &SetRow, name: &str) -> Result<Effective> {
        match self.category_of_set(set, name).await {
            Err(Error::NotFound(message)) => {
                categories::builtin(name).ok_or(Error::NotFound(message))
            }
            found => found,
        }
    }

    pub async fn add_feature(&self, project: &OpenProject, input: FeatureInput) -> Result<String> {
        let mut violations = Violations::default();
        check_id(&mut violations, "set_id", &input.set_id);
        check_name(&mut violations, "category_name", &input.category_name);
        check_name(&mut violations, "tag", &input.tag);
        check_name(&mut violations, "feature", &input.feature);
        check_text(&mut violations, "value", &input.value, MAX_VALUE_BYTES);
        check_metadata(&mut violations, "feature_metadata", &input.metadata);
        if input.citations.len() > self.limits.max_page_size {
            violations.add(
                "citations",
                format!("at most {}", self.limits.max_page_size),
            );
        }
        let uids = parse_uids(&mut violations, "citations", &input.citations);
        violations.into_result()?;
        let set = self.set(project, &input.set_id).await?;
        let category = self.filing_category(&set, &input.category_name).await?;
        let citations = self.store.resolve_episodes(project.access(), &uids).await?;
        let feature = features::new_feature(
            &category.name,
            &category.id,
            &input.tag,
            &input.feature,
            &input.value,
            input.metadata,
        );
        let embedder = self.embedder_for(project, &set);
        let stored = self
            .store
            .add_feature(set.internal_id, feature, &citations, embedder)
            .await?;
        Ok(stored.id)
    }

    /// The feature, if the project sees its set; else `NotFound`.
    pub async fn get_feature(&self, project: &OpenProject, id: &str) -> Result<Feature> {
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(not_found("feature", id));
        }
        let Some(feature) = self.store.find_feature(id).await? else {
            return Err(not_found("feature", id));
        };
        match self.store.find_set(&feature.set_id).await? {
            Some(set) if visible_set(project, &set) => Ok(feature),
            _ => Err(not_found("feature", id)),
        }
    }

    pub async fn update_feature(
        &self,
        project: &OpenProject,
        id: &str,
        change: FeatureChange,
    ) -> Result<()> {
        let mut violations = Violations::default();
        for (field, value) in [
            ("category_name", &change.category_name),
            ("tag", &change.tag),
            ("feature", &change.feature),
        ] {
            if let Some(value) = value {
                check_name(&mut violations, field, value);
            }
        }
        if let Some(value) = &change.value {
            check_text(&mut violations, "value", value, MAX_VALUE_BYTES);
        }
        if let Some(metadata) = &change.metadata {
            check_metadata(&mut violations, "metadata", metadata);
        }
        violations.into_result()?;
        let current = self.get_feature(project, id).await?;
        let set = self.set(project, &current.set_id).await?;
        let category = match &change.category_name {
            Some(name) => {
                let c = self.filing_category(&set, name).await?;
                Some((c.name, c.id))
            }
            None => None,
        };
        let category_name = category
            .as_ref()
            .map_or(current.category.as_str(), |c| c.0.as_str());
        let tag = change.tag.as_deref().unwrap_or(&current.tag);
        let feature = change.feature.as_deref().unwrap_or(&current.feature);
        let keyed = category.is_some() || change.tag.is_some() || change.feature.is_some();
        let update = FeatureUpdate {
            match_key: keyed.then(|| features::match_key(category_name, tag, feature)),
            value_key: change.value.as_ref().map(|v| features::normalise(v)),
            category,
            tag: change.tag.map(|t| t.trim().to_string()),
            feature: change.feature.map(|f| f.trim().to_string()),
            value: change.value.map(|v| v.trim().to_string()),
            metadata: change.metadata,
        };
        let embedder = self.embedder_for(project, &set);
        self.store
            .update_feature(current.internal_id, update, embedder)
            .await
    }

    /// Deletes features of the sets the project sees, all or none.
    pub async fn delete_features(&self, project: &OpenProject, ids: &[String]) -> Result<u64> {
        let mut violations = Violations::default();
        if ids.is_empty() {
            violations.add("feature_ids", "must name at least one feature");
        }
        if ids.len() > self.limits.max_page_size {
            violations.add(
                "feature_ids",
                format!("at most {} per call", self.limits.max_page_size),
            );
        }
        violations.into_result()?;
        let mut internal = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            match self.get_feature(project, id).await {
                Ok(f) => internal.push(f.internal_id),
                Err(Error::NotFound(_)) => missing.push(id.as_str()),
                Err(err) => return Err(err),
            }
        }
        if !missing.is_empty() {
            return Err(Error::NotFound(format!(
                "features not in this project: {}",
                missing.join(", ")
            )));
        }
        internal.sort_unstable();
        internal.dedup();
        self.store.delete_features(&internal).await
    }

    /// Features ranked by the query across the selected sets, with one score.
    pub async fn search(
        &self,
        project: &OpenProject,
        input: FeatureSearch,
    ) -> Result<Vec<ScoredFeature>> {
        let mut violations = Violations::default();
        violations.check(self.limits.query("query", &input.query));
        let top_k = violations.check(self.limits.page_size("top_k", input.top_k, 10));
        let filter = violations.check(parse_filter("filter", &input.filter));
        if input.score_threshold.is_some_and(f64::is_nan) {
            violations.add("score_threshold", "must be a number");
        }
        violations.into_result()?;
        let (top_k, filter) = (top_k.expect("validated"), filter.expect("validated"));
        let cut = Cut {
            top_k,
            score_threshold: input.score_threshold,
            as_of: input.as_of,
        };
        self.rank(
            project,
            &input.query,
            &input.set_metadata,
            filter.as_ref(),
            cut,
        )
        .await
    }

    /// `search` after validation: also the semantic half of `SearchMemories`.
    pub async fn rank(
        &self,
        project: &OpenProject,
        query: &str,
        set_metadata: &BTreeMap<String, String>,
        filter: Option<&crate::model::filter::Expr>,
        cut: Cut,
    ) -> Result<Vec<ScoredFeature>> {
        let Cut {
            top_k,
            score_threshold,
            as_of,
        } = cut;
        // Empty set metadata: every set the project sees, which is all the index holds.
        let selected: Option<HashSet<String>> = if set_metadata.is_empty() {
            None
        } else {
            let set_types =
                crate::round_trips::call(self.store.list_set_types(project.access())).await?;
            Some(
                sets::selected_ids(project.access(), set_metadata, &set_types)
                    .into_iter()
                    .collect(),
            )
        };
        // As of a past time: an index of the versions valid then, built for this call.
        let (index, mut snapshot) = match history::past(as_of) {
            None => (self.indexes.current(&self.store, project).await?, None),
            Some(at) => {
                let sets = self.visible_set_ids(project).await?;
                let (index, features) = self.snapshot(&sets, at).await?;
                (index, Some(features))
            }
        };
        if index.is_empty() {
            return Ok(Vec::new());
        }
        let embedder = self.embedders.for_project(&project.config.embedder);
        let vector = match embedder {
            None => None,
            Some(e) => match crate::search_time::embed_query(e.as_ref(), query).await {
                Ok(v) => {
                    let scope =
                        crate::usage::Scope::new(&project.key.org_id, &project.key.project_id);
                    let chars = query.chars().count();
                    self.record_embedding(&scope, crate::llm::estimate_tokens(chars));
                    Some((e.id().to_string(), v))
                }
                Err(err) => {
                    tracing::warn!(error = %err, "query embedding failed; ranking features by text");
                    None
                }
            },
        };
        let ranked = index.rank(
            query,
            vector.as_ref().map(|(id, v)| (id.as_str(), v.as_slice())),
            selected.as_ref(),
            filter,
            top_k,
        );
        let ranked: Vec<(i64, f64)> = ranked
            .into_iter()
            .map(|(id, score)| (id, score as f64))
            .filter(|(_, score)| score_threshold.is_none_or(|t| *score >= t))
            .collect();
        let features = match snapshot.as_mut() {
            Some(then) => ranked.iter().filter_map(|r| then.remove(&r.0)).collect(),
            None => {
                let ids: Vec<FeatureId> = ranked.iter().map(|r| FeatureId::from_raw(r.0)).collect();
                crate::round_trips::call(self.store.features(&ids)).await?
            }
        };
        Ok(features
            .into_iter()
            .filter_map(|feature| {
                let score = ranked.iter().find(|r| r.0 == feature.internal_id.raw())?.1;
                Some(ScoredFeature { feature, score })
            })
            .collect())
    }

    /// One page of the selected sets' features in id order passing `filter` within
    /// `scope` (a narrowing the transport built), and the next page's token.
    pub async fn list(
        &self,
        project: &OpenProject,
        page: Page<'_>,
        filter: &str,
        scope: Option<&crate::model::filter::Expr>,
        set_metadata: &BTreeMap<String, String>,
    ) -> Result<(Vec<Feature>, String)> {
        let Page {
            size: page_size,
            token: page_token,
            as_of,
        } = page;
        let mut violations = Violations::default();
        let limit = violations.check(self.limits.page_size("page_size", page_size, 100));
        let filter = violations.check(parse_filter("filter", filter));
        let as_of = history::past(as_of);
        let mut after = None;
        let mut offset = 0usize;
        if as_of.is_some() && !page_token.is_empty() {
            // As of a past time the page is a window of the versions valid then.
            match page_token.strip_prefix("a").and_then(|n| n.parse().ok()) {
                Some(n) => offset = n,
                None => violations.add("page_token", "is not a token this server issued"),
            }
        } else if !page_token.is_empty() {
            match page_token
                .strip_prefix("f")
                .and_then(|n| n.parse::<i64>().ok())
            {
                Some(n) if n >= 0 => after = Some(FeatureId::from_raw(n)),
                _ => violations.add("page_token", "is not a token this server issued"),
            }
        }
        violations.into_result()?;
        let (limit, filter) = (
            limit.expect("validated"),
            crate::model::filter::confine(filter.expect("validated"), scope.cloned()),
        );
        let sets = self.selected_sets(project, set_metadata).await?;
        let set_ids: Vec<SetId> = sets.iter().map(|s| s.internal_id).collect();
        if let Some(at) = as_of {
            let passing: Vec<Feature> = history::features_as_of(self.store.as_ref(), &set_ids, at)
                .await?
                .into_iter()
                .filter(|feature| {
                    filter.as_ref().is_none_or(|f| {
                        let indexed = search::FeatureFields::of(indexed_of(feature)).2;
                        crate::model::filter_eval::matches(f, &indexed)
                    })
                })
                .collect();
            let end = offset.saturating_add(limit).min(passing.len());
            let next = if end < passing.len() {
                format!("a{end}")
            } else {
                String::new()
            };
            let page = passing
                .into_iter()
                .skip(offset)
                .take(end.saturating_sub(offset))
                .collect();
            return Ok((page, next));
        }
        let mut page = Vec::new();
        loop {
            let chunk = self.store.list_features(&set_ids, after, limit + 1).await?;
            let exhausted = chunk.len() <= limit;
            for feature in chunk {
                after = Some(feature.internal_id);
                let passes = filter.as_ref().is_none_or(|f| {
                    let indexed = search::FeatureFields::of(indexed_of(&feature)).2;
                    crate::model::filter_eval::matches(f, &indexed)
                });
                if passes {
                    page.push(feature);
                    if page.len() > limit {
                        break;
                    }
                }
            }
            if page.len() > limit || exhausted {
                break;
            }
        }
        let next = if page.len() > limit {
            page.truncate(limit);
            format!("f{}", page[limit - 1].internal_id)
        } else {
            String::new()
        };
        Ok((page, next))
    }

    /// The project's rolling summary, if there is one.
    pub async fn summaries(&self, project: &OpenProject) -> Result<Vec<String>> {
        Ok(
            crate::round_trips::call(self.store.summary(project.access()))
                .await?
                .map(|s| vec![s.text])
                .unwrap_or_default(),
        )
    }
}
