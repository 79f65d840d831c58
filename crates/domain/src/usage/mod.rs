//! What language-model and embedder calls cost, per org, project and purpose, and the
//! orgs' daily token budgets (`budget`). Figures are added to one row per (org,
//! project, purpose, UTC hour), so the table stays small however many calls are made.
//! Recording never fails the work it measures: a store error is logged and the figures
//! of that call are lost.

mod budget;
mod metered;

pub use budget::Budget;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::error::{Result, Violations};
use crate::model::ids::{or_universal, validate_id};
use crate::model::{ProjectHandle, ProjectKey};
use crate::store::{Store, UsageEntry};
use memmachine_core::access::OrgAccess;

/// The purpose of embedder calls (the language model's are `llm::Purpose::as_str`).
pub const EMBEDDING: &str = "embedding";

/// Every purpose figures are kept for, in the order reports list them.
pub const PURPOSES: [&str; 4] = ["extraction", "consolidation", "summary", EMBEDDING];

const HOUR_MICROS: i64 = 3_600_000_000;
const DAY_MICROS: i64 = 24 * HOUR_MICROS;

/// Whose work a call is: the org and the project (empty for org-level work).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub org_id: String,
    pub project_id: String,
}

impl Scope {
    pub fn new(org_id: impl Into<String>, project_id: impl Into<String>) -> Scope {
        Scope {
            org_id: org_id.into(),
            project_id: project_id.into(),
        }
    }
}

/// The figures of one purpose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    pub purpose: String,
    pub calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

/// What `GetUsage` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// One entry per purpose, zeros included.
    pub usage: Vec<Figures>,
    pub budget: Budget,
}

/// Records usage and keeps budgets; cheap to clone.
#[derive(Clone)]
pub struct Usage {
    store: Arc<dyn Store>,
    /// The budget of orgs without their own; 0 is unlimited.
    default_daily_tokens: i64,
    /// The orgs this process saw paused, so a pause and its end are each logged once.
    paused: Arc<Mutex<HashSet<String>>>,
    /// Embedding figures not yet written: searches embed their query, and one write per
    /// search would load the store's writer; they are added up here and written once a
    /// second (what a crash loses: at most that second's query embeddings).
    pending: Arc<Mutex<Pending>>,
    /// Project keys by handle, for the background embedding of episodes (handles are
    /// never reused, so an entry never goes stale; cleared when it grows large).
    keys: Arc<Mutex<HashMap<ProjectHandle, ProjectKey>>>,
}

/// Embedding calls and tokens not yet written, by (org, project, hour).
type Pending = HashMap<(String, String, i64), (i64, i64)>;

/// How often pending embedding figures are written.
const FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

/// The start of the UTC day holding `micros`.
fn day_start(micros: i64) -> i64 {
    micros.div_euclid(DAY_MICROS) * DAY_MICROS
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The org id as the rest of the API takes it (empty: universal), validated.
pub fn org(org_id: &str) -> Result<&str> {
    let org_id = or_universal(org_id);
    validate_id("org_id", org_id)?;
    Ok(org_id)
}

impl Usage {
    /// Must be called within a Tokio runtime: it starts the writer of embedding figures,
    /// which ends with the last clone.
    pub fn new(store: Arc<dyn Store>, default_daily_tokens: u64) -> Usage {
        let usage = Usage {
            store,
            default_daily_tokens: i64::try_from(default_daily_tokens).unwrap_or(i64::MAX),
            paused: Arc::default(),
            pending: Arc::default(),
            keys: Arc::default(),
        };
        let (store, pending) = (usage.store.clone(), Arc::downgrade(&usage.pending));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(FLUSH).await;
                let Some(pending) = pending.upgrade() else {
                    return;
                };
                let drained: Vec<_> = pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .drain()
                    .collect();
                drop(pending);
                for ((org_id, project_id, hour_micros), (calls, tokens)) in drained {
                    let entry = UsageEntry {
                        org_id,
                        project_id,
                        purpose: EMBEDDING.to_string(),
                        hour_micros,
                        calls,
                        prompt_tokens: tokens,
                        completion_tokens: 0,
                    };
                    if let Err(err) = store.record_usage(&entry).await {
                        tracing::warn!(org = %entry.org_id, error = %err, "recording embedding usage failed");
                    }
                }
            }
        });
        usage
    }

    /// Adds one embedder call of `tokens` for the project by its handle (a project
    /// deleted meanwhile is not counted), written within a second.
    pub async fn record_project_embedding(&self, project: ProjectHandle, tokens: u64) {
        const MAX_KEYS: usize = 10_000;
        let known = self
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&project)
            .cloned();
        let key = match known {
            Some(key) => key,
            None => match self.store.project_key(project).await {
                Ok(Some(key)) => {
                    let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
                    if keys.len() >= MAX_KEYS {
                        keys.clear();
                    }
                    keys.insert(project, key.clone());
                    key
                }
                _ => return,
            },
        };
        self.record_embedding(&Scope::new(key.org_id, key.project_id), tokens);
    }

    /// Adds one embedder call of `tokens` under `scope`, written within a second.
    pub fn record_embedding(&self, scope: &Scope, tokens: u64) {
        let hour = now_micros().div_euclid(HOUR_MICROS) * HOUR_MICROS;
        let key = (
            or_universal(&scope.org_id).to_string(),
            scope.project_id.clone(),
            hour,
        );
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let figures = pending.entry(key).or_default();
        figures.0 += 1;
        figures.1 = figures
            .1
            .saturating_add(i64::try_from(tokens).unwrap_or(i64::MAX));
    }

    /// Adds one call's tokens under `scope` and `purpose`; a language-model call that
    /// takes the org to its budget pauses its semantic ingestion.
    pub async fn record(&self, scope: &Scope, purpose: &str, prompt: u64, completion: u64) {
        self.record_calls(scope, purpose, 1, prompt, completion)
            .await
    }

    /// As [`Usage::record`], for `calls` calls at once.
    pub async fn record_calls(
        &self,
        scope: &Scope,
        purpose: &str,
        calls: u64,
        prompt: u64,
        completion: u64,
    ) {
        let now = now_micros();
        let entry = UsageEntry {
            org_id: or_universal(&scope.org_id).to_string(),
            project_id: scope.project_id.clone(),
            purpose: purpose.to_string(),
            hour_micros: now.div_euclid(HOUR_MICROS) * HOUR_MICROS,
            calls: calls as i64,
            prompt_tokens: i64::try_from(prompt).unwrap_or(i64::MAX),
            completion_tokens: i64::try_from(completion).unwrap_or(i64::MAX),
        };
        if let Err(err) = self.store.record_usage(&entry).await {
            tracing::warn!(org = %entry.org_id, purpose, error = %err, "recording model usage failed");
            return;
        }
        if purpose != EMBEDDING
            && let Err(err) = self.enforce(&entry.org_id, now).await
        {
            tracing::warn!(org = %entry.org_id, error = %err, "checking the org's token budget failed");
        }
    }

    /// The org's figures per purpose since `since_micros` (default: the start of the
    /// current UTC day; counted by whole hours, from the one holding `since`), of one
    /// project when given, and its budget.
    pub async fn report(
        &self,
        access: &OrgAccess,
        project_id: Option<&str>,
        since_micros: Option<i64>,
    ) -> Result<Report> {
        let mut violations = Violations::default();
        let org_id = violations.check(org(access.org_id())).unwrap_or_default();
        if let Some(project_id) = project_id.filter(|p| !p.is_empty()) {
            violations.check(validate_id("project_id", project_id));
        }
        let now = now_micros();
        if since_micros.is_some_and(|s| s > now) {
            violations.add("since", "must not be in the future");
        }
        violations.into_result()?;
        let since = since_micros.unwrap_or_else(|| day_start(now));
        let since = since.div_euclid(HOUR_MICROS) * HOUR_MICROS;
        let project_id = project_id.filter(|p| !p.is_empty());
        let totals = self.store.usage_since(access, project_id, since).await?;
        let usage = PURPOSES
            .iter()
            .map(|purpose| {
                let found = totals.iter().find(|t| t.purpose == *purpose);
                Figures {
                    purpose: purpose.to_string(),
                    calls: found.map_or(0, |t| t.calls),
                    prompt_tokens: found.map_or(0, |t| t.prompt_tokens),
                    completion_tokens: found.map_or(0, |t| t.completion_tokens),
                }
            })
            .collect();
        let budget = self.budget(org_id).await?;
        Ok(Report { usage, budget })
    }
}
