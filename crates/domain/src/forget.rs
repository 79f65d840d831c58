//! Forgetting a subject (`LifecycleService.ForgetSubject`): in the named projects (or
//! every project of the org), the episodes it produced or that were produced for it,
//! its user set with every feature in it, and what derives from those episodes (the
//! citations of shared features, the features left citing nothing, summaries, vectors,
//! queued work), with a receipt of counts only.

use std::sync::Arc;

use crate::error::{Error, Result, Violations};
use crate::model::ProjectKey;
use crate::model::ids::validate_id;
use crate::projects::Projects;
use crate::retrieval::index_cache::IndexCache;
use crate::semantic::sets::user_set;
use crate::store::{ForgetCounts, ForgetReceipt, ProjectForget, Store};
use memmachine_core::access::{OrgAccess, ProjectAccess};

/// Most projects one forget may name (empty names every project of the org).
pub const MAX_FORGET_PROJECTS: usize = 100;
/// Longest subject, in bytes: a producer id is never longer.
pub const MAX_SUBJECT_BYTES: usize = 1024;
/// Episodes deleted per transaction: a subject may have tens of thousands, and SQLite
/// has one writer, so each batch is short and the forget resumes where a crash left it.
const BATCH: usize = 200;
/// The least pause between two batches, so a forget shares the machine with searches.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

#[derive(Clone)]
pub struct Forget {
    store: Arc<dyn Store>,
    projects: Projects,
    /// Caught up after each batch; its segments of the project deleted at the end.
    index: Option<Arc<IndexCache>>,
}

impl Forget {
    pub fn new(store: Arc<dyn Store>, projects: Projects) -> Forget {
        Forget {
            store,
            projects,
            index: None,
        }
    }

    /// Brings the cached indexes up to each batch as it is removed, in the forget's own
    /// task: otherwise the next search of the project applies the batch's removals.
    pub fn with_index(mut self, index: Arc<IndexCache>) -> Forget {
        self.index = Some(index);
        self
    }

    /// Forgets `subject` in the projects (all of the org when empty); with `dry_run`,
    /// counts what it would remove, removes nothing and keeps no receipt. A project
    /// named that does not exist is `NotFound`, before anything is removed.
    pub async fn forget_subject(
        &self,
        org: &OrgAccess,
        subject: &str,
        project_ids: &[String],
        dry_run: bool,
    ) -> Result<ForgetReceipt> {
        let org_id = org.org_id();
        let mut violations = Violations::default();
        violations.check(validate_id("org_id", org_id));
        if subject.is_empty() {
            violations.add("subject", "must name the producer or recipient to forget");
        } else if subject.len() > MAX_SUBJECT_BYTES {
            violations.add(
                "subject",
                format!("must be at most {MAX_SUBJECT_BYTES} bytes"),
            );
        }
        if project_ids.len() > MAX_FORGET_PROJECTS {
            violations.add(
                "project_ids",
                format!("at most {MAX_FORGET_PROJECTS} per call (empty: every project)"),
            );
        }
        let mut keys = Vec::with_capacity(project_ids.len());
        for (i, project) in project_ids.iter().enumerate() {
            if let Some(key) = violations.check(org.project(project)) {
                keys.push(key);
            } else {
                violations.add(format!("project_ids[{i}]"), "is not a valid project id");
            }
        }
        violations.into_result()?;
        keys.sort_by(|a, b| a.project_id.cmp(&b.project_id));
        keys.dedup();
        if keys.is_empty() {
            keys = self
                .projects
                .list_all(Some(org_id))
                .await?
                .into_iter()
                .map(|p| org.project_key(p.key))
                .collect::<Result<_>>()?;
        } else {
            for key in &keys {
                self.projects.get(key).await?;
            }
        }
        let mut lines = Vec::with_capacity(keys.len());
        let mut dropped_sets = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let set = self.store.find_set(&user_set(key, subject).set_id).await?;
            let counts = if dry_run {
                dropped_sets.extend(set.map(|s| s.internal_id));
                self.store
                    .forget_preview(key, subject, &before(&keys[..i]), &dropped_sets)
                    .await?
            } else {
                self.forget_in(key, subject, set.map(|s| s.internal_id))
                    .await?
            };
            lines.push(ProjectForget {
                project_id: key.project_id.clone(),
                counts,
            });
        }
        let receipt = ForgetReceipt {
            receipt_id: if dry_run {
                String::new()
            } else {
                uuid::Uuid::new_v4().to_string()
            },
            org_id: org_id.to_string(),
            subject: subject.to_string(),
            dry_run,
            completed_at_micros: chrono::Utc::now().timestamp_micros(),
            projects: lines,
        };
        if !dry_run {
            self.store.save_forget_receipt(&receipt).await?;
            tracing::info!(
                org = org_id,
                receipt = %receipt.receipt_id,
                projects = receipt.projects.len(),
                "subject forgotten"
            );
        }
        Ok(receipt)
    }

    /// Forgets the subject in one project: its user set first, then its episodes batch
    /// by batch (each batch one transaction; a re-run finds what a crash left).
    async fn forget_in(
        &self,
        key: &ProjectAccess,
        subject: &str,
        set: Option<crate::model::SetId>,
    ) -> Result<ForgetCounts> {
        let mut counts = ForgetCounts::default();
        if let Some(set) = set {
            let features = self.store.drop_set(set).await?;
            counts.sets += 1;
            counts.features += features.len() as u64;
            // A forgotten feature's earlier values are forgotten with it.
            self.store.delete_feature_history(&features).await?;
        }
        loop {
            let started = std::time::Instant::now();
            let uids = self.store.subject_episodes(key, subject, BATCH).await?;
            if uids.is_empty() {
                // Before it reports done: no index segment keeps the subject's terms.
                if let Some(index) = &self.index {
                    index.erase(key).await;
                }
                return Ok(counts);
            }
            // Versions of surviving features that cited these episodes go first: their
            // citation rows cascade away with the episodes.
            let handles: Vec<_> = self
                .store
                .episode_handles(key, &uids)
                .await?
                .into_iter()
                .flatten()
                .collect();
            self.store.delete_versions_citing(&handles).await?;
            let forgotten = self.store.forget_episodes(key, &uids).await?;
            // The deletion of a forgotten feature records a final version: drop it all.
            self.store
                .delete_feature_history(&forgotten.features)
                .await?;
            if forgotten.counts.episodes == 0 {
                // Another writer deleted them meanwhile; look again.
                continue;
            }
            counts.add(forgotten.counts);
            if let Some(index) = &self.index {
                // Searches catch up by themselves; this only spares them the work.
                if let Err(err) = index.refresh(key).await {
                    tracing::debug!(error = %err, "catching the index up after a batch failed");
                }
            }
            // At most half the time is the forget's: it is not latency-bound, and on a
            // small machine each batch's work is taken from the searches running beside.
            tokio::time::sleep(started.elapsed().max(PAUSE)).await;
        }
    }

    /// The receipt of a past forget in this org; `NotFound` for another org's.
    pub async fn receipt(&self, org: &OrgAccess, receipt_id: &str) -> Result<ForgetReceipt> {
        let org_id = org.org_id();
        let mut violations = Violations::default();
        violations.check(validate_id("org_id", org_id));
        if receipt_id.is_empty() || receipt_id.len() > 64 {
            violations.add("receipt_id", "must be a receipt id (1 to 64 bytes)");
        }
        violations.into_result()?;
        self.store
            .forget_receipt(org, receipt_id)
            .await?
            .ok_or_else(|| {
                Error::NotFound(format!("no forget receipt {receipt_id} in org {org_id}"))
            })
    }
}

/// The keys of the projects forgotten before one, for its preview.
fn before(keys: &[ProjectAccess]) -> Vec<ProjectKey> {
    keys.iter().map(|k| k.key().clone()).collect()
}
