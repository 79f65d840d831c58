//! The ingestion workers: each claims one set's queued messages under a lease when the
//! set has enough of them or its oldest has waited long enough, asks the model once per
//! category for the whole batch, validates the answers and applies them together with
//! marking the batch done, in one transaction. A model that cannot be reached leaves the
//! batch queued with exponential backoff; an answer still invalid after a few
//! corrections, or a request the endpoint refuses as sent, marks the batch failed after
//! a few attempts (logged without content, counted), so no worker loops on it. An
//! endpoint that refuses every call ([`crate::llm::health`]) is only probed, by one
//! worker at a time, and its batches stay queued.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::SemanticMemory;
use super::categories::Effective;
use super::features;
use super::model::{Batch, ClaimRule, Feature, FeatureOp, SetRow};
use super::prompts::{self, CommandKind};
use crate::backoff::Backoff;
use crate::llm::{ChatRequest, LanguageModel, LlmError, Purpose};
use crate::metrics::Metrics;
use crate::model::Episode;
use crate::model::{EpisodeHandle, FeatureId, SetId};
use crate::runtime_settings::RuntimeSettings;
use crate::usage::Scope;

/// Settings of semantic ingestion.
#[derive(Debug, Clone, Copy)]
pub struct IngestSettings {
    /// A set is ingested once it has this many queued messages...
    pub trigger_messages: usize,
    /// ...or its oldest queued message waited this long.
    pub trigger_age: Duration,
    /// Most messages per batch (one model call per category each).
    pub max_batch: usize,
    /// How long a claim holds before another worker may take the batch.
    pub lease: Duration,
    /// Corrections asked of the model after an invalid answer.
    pub max_corrections: u32,
    /// A tag with this many features of a category is consolidated.
    pub consolidation_threshold: usize,
    /// Most current features shown to the model per category.
    pub max_current_features: usize,
    /// Workers claiming batches at once.
    pub workers: usize,
}

impl IngestSettings {
    /// When a set is ingested: after this many queued messages, or this long.
    pub fn triggers(&self) -> (usize, Duration) {
        (self.trigger_messages, self.trigger_age)
    }
}

impl Default for IngestSettings {
    fn default() -> Self {
        crate::flags::defaults::<Flags>()
            .settings()
            .expect("the declared defaults are valid")
    }
}

/// Semantic ingestion's flags, environment variables and config file keys.
#[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
// Sections share one command: clap's group per struct name would clash.
#[group(skip)]
pub struct Flags {
    /// A set's queued messages are ingested once it has this many
    #[arg(
        long,
        env = "MEMMACHINE_SEMANTIC_TRIGGER_MESSAGES",
        default_value_t = 5
    )]
    pub semantic_trigger_messages: usize,
    /// ...or once the oldest waited this many seconds
    #[arg(long, env = "MEMMACHINE_SEMANTIC_TRIGGER_AGE", default_value_t = 300.0)]
    pub semantic_trigger_age: f64,
    /// Seconds a claimed batch is held before another worker may take it
    #[arg(long, env = "MEMMACHINE_SEMANTIC_LEASE", default_value_t = 300.0)]
    pub semantic_lease: f64,
    /// Most messages of a set sent to the model in one extraction call (1 to 100).
    /// Small local models cite and describe one message well and a batch poorly
    #[arg(long, env = "MEMMACHINE_SEMANTIC_BATCH_MESSAGES", default_value_t = 1)]
    pub semantic_batch_messages: usize,
    /// A tag's features are merged by the model once a category has this many (at
    /// least 2)
    #[arg(long, env = "MEMMACHINE_CONSOLIDATION_THRESHOLD", default_value_t = 20)]
    pub consolidation_threshold: usize,
}

impl Flags {
    pub fn settings(&self) -> Result<IngestSettings, String> {
        if self.semantic_trigger_messages == 0 {
            return Err("--semantic-trigger-messages must be at least 1".into());
        }
        if !(1..=100).contains(&self.semantic_batch_messages) {
            return Err("--semantic-batch-messages must be between 1 and 100".into());
        }
        Ok(IngestSettings {
            trigger_messages: self.semantic_trigger_messages,
            trigger_age: crate::flags::seconds(self.semantic_trigger_age, "semantic-trigger-age")?,
            max_batch: self.semantic_batch_messages,
            lease: crate::flags::positive(self.semantic_lease, "semantic-lease")?,
            max_corrections: 2,
            consolidation_threshold: self.consolidation_threshold.max(2),
            max_current_features: 50,
            workers: 4,
        })
    }
}

/// A batch's retry delay: doubling from 2 s to 15 min, up to a quarter taken off.
const BACKOFF: Backoff = Backoff {
    first: Duration::from_secs(2),
    max: Duration::from_secs(900),
    jitter: 0.25,
};
/// Attempts of a batch whose request the endpoint refuses as sent (`LlmError::Rejected`)
/// before its messages are marked failed.
const MAX_REFUSED_ATTEMPTS: u32 = 3;
/// How often an idle worker looks for sets that became ready by age.
const POLL: Duration = Duration::from_millis(500);

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The delay before the next try of a batch tried `attempts` times ([`BACKOFF`]); at
/// least what the endpoint asked for.
fn backoff(attempts: u32, retry_after: Option<Duration>) -> Duration {
    BACKOFF.delay(attempts).max(retry_after.unwrap_or_default())
}

/// Why a batch was not applied.
enum Outcome {
    /// The model could not be reached: try again later.
    Retry(String, Option<Duration>),
    /// The endpoint refused this request in every form: try again a few times, then
    /// give up on it.
    Refused(String),
    /// The model's answers stayed invalid: give up on these messages.
    Invalid(String),
}

/// Starts the ingestion workers (only with a model); they stop once the store closes.
/// The triggers are read from `runtime` at each claim, so a change applies at once.
pub fn spawn_workers(
    memory: SemanticMemory,
    settings: IngestSettings,
    runtime: RuntimeSettings,
    metrics: Arc<Metrics>,
) {
    let Some(model) = memory.model().cloned() else {
        return;
    };
    let consolidated = Consolidated::default();
    for _ in 0..settings.workers.max(1) {
        let worker = Worker {
            memory: memory.clone(),
            model: model.clone(),
            settings,
            runtime: runtime.clone(),
            metrics: metrics.clone(),
            consolidated: consolidated.clone(),
        };
        tokio::spawn(worker.run());
    }
}

struct Worker {
    memory: SemanticMemory,
    model: Arc<dyn LanguageModel>,
    settings: IngestSettings,
    runtime: RuntimeSettings,
    metrics: Arc<Metrics>,
    consolidated: Consolidated,
}

/// How many features each (set, category and tag) had after its last consolidation, so a
/// tag the model chose to keep as it is is not sent again on every batch.
type Consolidated = Arc<std::sync::Mutex<std::collections::HashMap<(SetId, String), usize>>>;

impl Worker {
    fn rule(&self) -> ClaimRule {
        let runtime = self.runtime.current();
        ClaimRule {
            min_messages: runtime.trigger_messages.max(1),
            max_age_micros: runtime.trigger_age.as_micros() as i64,
            max_batch: self.settings.max_batch.max(1),
            lease_micros: self.settings.lease.as_micros() as i64,
            now_micros: now_micros(),
        }
    }

    async fn run(self) {
        let wake = self.memory.wake_handle();
        loop {
            let notified = wake.notified();
            if let Some(wait) = self.model.health().and_then(|h| h.wait()) {
                // A failing endpoint: another worker probes it, or the next probe is due
                // later; waking now and then picks up a retry asked for meanwhile.
                let _ = tokio::time::timeout(wait.min(POLL * 4), notified).await;
                continue;
            }
            let claimed = self.memory.store().claim_batch(self.rule()).await;
            match claimed {
                Ok(Some(batch)) => self.ingest(batch).await,
                Ok(None) => {
                    let _ = tokio::time::timeout(POLL, notified).await;
                }
                // The store closed: the server is gone.
                Err(crate::error::Error::Closed) => return,
                Err(err) => {
                    tracing::warn!(error = %err, "claiming a semantic batch failed");
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }

    async fn ingest(&self, batch: Batch) {
        let store = self.memory.store();
        let set_id = batch.set.set_id.clone();
        let count = batch.messages.len();
        let scope = self.scope_of(&batch.set).await;
        match self.distil(&batch, &scope).await {
            Ok((ops, touched)) => {
                let embedder = self.embedder_of(&batch.set).await;
                let added = ops.len();
                match store.apply_batch(&batch, ops, embedder.clone()).await {
                    Ok(true) => {
                        self.metrics.record_semantic("batch_applied", 1);
                        self.metrics
                            .record_semantic("messages_ingested", count as u64);
                        self.metrics
                            .record_semantic("commands_applied", added as u64);
                        tracing::debug!(set = %set_id, messages = count, commands = added, "semantic batch applied");
                        self.consolidate(&batch.set, touched, embedder, &scope)
                            .await;
                    }
                    Ok(false) => {
                        // The lease expired, or an episode of the batch was deleted
                        // meanwhile: give back what is still ours, to be claimed afresh.
                        tracing::info!(set = %set_id, "semantic batch changed under its lease; it runs again");
                        let _ = store.release_batch(&batch, now_micros()).await;
                    }
                    Err(err) => {
                        tracing::warn!(set = %set_id, error = %err, "applying a semantic batch failed; it stays queued");
                        let _ = store
                            .release_batch(
                                &batch,
                                now_micros() + backoff(batch.attempts, None).as_micros() as i64,
                            )
                            .await;
                    }
                }
            }
            Err(Outcome::Refused(reason)) if batch.attempts + 1 >= MAX_REFUSED_ATTEMPTS => {
                self.give_up(&batch, &format!("the language model refused it: {reason}"))
                    .await;
            }
            Err(Outcome::Retry(reason, retry_after)) => {
                self.retry_later(&batch, &reason, retry_after).await;
            }
            Err(Outcome::Refused(reason)) => self.retry_later(&batch, &reason, None).await,
            Err(Outcome::Invalid(reason)) => self.give_up(&batch, &reason).await,
        }
    }

    fn endpoint_failing(&self) -> bool {
        self.model.health().is_some_and(|h| h.failing().is_some())
    }

    /// Leaves the batch queued, to be claimed again after its backoff.
    async fn retry_later(&self, batch: &Batch, reason: &str, retry_after: Option<Duration>) {
        let delay = backoff(batch.attempts, retry_after);
        if self.endpoint_failing() {
            // Said once, when it began failing; each batch's retry is only for debugging.
            tracing::debug!(set = %batch.set.set_id, attempts = batch.attempts + 1, error = %reason, "the language model is failing; the batch stays queued");
        } else {
            tracing::warn!(
                set = %batch.set.set_id,
                messages = batch.messages.len(),
                attempts = batch.attempts + 1,
                retry_in_secs = delay.as_secs_f64(),
                error = %reason,
                "the language model failed; the batch stays queued"
            );
        }
        self.metrics.record_semantic("batch_retried", 1);
        let not_before = now_micros() + delay.as_micros() as i64;
        if let Err(err) = self.memory.store().release_batch(batch, not_before).await {
            tracing::warn!(error = %err, "releasing a semantic batch failed");
        }
    }

    /// Marks the batch's messages failed, so no worker loops on them.
    async fn give_up(&self, batch: &Batch, reason: &str) {
        let count = batch.messages.len();
        tracing::warn!(
            set = %batch.set.set_id,
            messages = count,
            reason = %reason,
            "semantic ingestion gave up on a batch; its messages are marked failed"
        );
        self.metrics.record_semantic("batch_failed", 1);
        self.metrics
            .record_semantic("messages_failed", count as u64);
        if let Err(err) = self.memory.store().fail_batch(batch, reason).await {
            tracing::warn!(error = %err, "marking a semantic batch failed did not work");
        }
    }

    /// Whose work the set's ingestion is, for usage: its org and its project's id
    /// (empty for an org-level set, or a project deleted meanwhile).
    async fn scope_of(&self, set: &SetRow) -> Scope {
        let project_id = match set.project {
            Some(project) => match self.memory.store().project_key(project).await {
                Ok(Some(key)) => key.project_id,
                _ => String::new(),
            },
            None => String::new(),
        };
        Scope::new(set.org_id.clone(), project_id)
    }

    /// The embedder id of a set's features (`None`: none).
    async fn embedder_of(&self, set: &SetRow) -> Option<String> {
        if !set.config.embedder.is_empty() {
            return self
                .memory
                .embedders()
                .for_project(&set.config.embedder)
                .map(|e| e.id().to_string());
        }
        // Org-level sets have no project: they use the server's default embedder.
        let name = match set.project {
            Some(project) => match self.memory.store().project_config(project).await {
                Ok(Some(config)) => config.embedder,
                _ => return None,
            },
            None => String::new(),
        };
        self.memory
            .embedders()
            .for_project(&name)
            .map(|e| e.id().to_string())
    }

    /// The commands for a batch, one model call per category, and the (category, tag)
    /// pairs they touched.
    async fn distil(
        &self,
        batch: &Batch,
        scope: &Scope,
    ) -> Result<(Vec<FeatureOp>, BTreeSet<(String, String)>), Outcome> {
        let categories = self
            .memory
            .effective_categories(&batch.set)
            .await
            .map_err(|err| Outcome::Retry(err.to_string(), None))?;
        let messages: Vec<&Episode> = batch.messages.iter().map(|(_, e)| e).collect();
        if categories.is_empty() {
            return Ok((Vec::new(), BTreeSet::new()));
        }
        let context = self.context(batch).await?;
        let context: Vec<&Episode> = context.iter().collect();
        let mut ops = Vec::new();
        let mut touched = BTreeSet::new();
        for category in &categories {
            let current = self
                .memory
                .store()
                .category_features(
                    batch.set.internal_id,
                    &features::category_key(&category.name),
                )
                .await
                .map_err(|err| Outcome::Retry(err.to_string(), None))?;
            let shown = most_relevant(&current, &messages, self.settings.max_current_features);
            let commands = self
                .ask(category, &shown, &context, &messages, scope)
                .await?;
            for command in commands {
                let citations: Vec<EpisodeHandle> = if command.messages.is_empty() {
                    batch.messages.iter().map(|(id, _)| *id).collect()
                } else {
                    command
                        .messages
                        .iter()
                        .map(|i| batch.messages[*i].0)
                        .collect()
                };
                touched.insert((category.name.clone(), command.tag.clone()));
                let feature = features::new_feature(
                    &category.name,
                    &category.id,
                    &command.tag,
                    &command.feature,
                    &command.value,
                    serde_json::Value::Object(Default::default()),
                );
                ops.push(match command.kind {
                    CommandKind::Add => FeatureOp::Add { feature, citations },
                    CommandKind::Update => FeatureOp::Update { feature, citations },
                    CommandKind::Delete => FeatureOp::Delete {
                        match_key: feature.match_key,
                    },
                });
            }
        }
        Ok((ops, touched))
    }

    /// What the batch's messages answer: for each, the message just before it when
    /// someone else said it (an assistant's question, say) and it is not in the batch.
    async fn context(&self, batch: &Batch) -> Result<Vec<Episode>, Outcome> {
        let rows: Vec<EpisodeHandle> = batch.messages.iter().map(|(row, _)| *row).collect();
        let preceding = self
            .memory
            .store()
            .preceding_episodes(&rows)
            .await
            .map_err(|err| Outcome::Retry(err.to_string(), None))?;
        let mut seen = std::collections::HashSet::new();
        Ok(preceding
            .into_iter()
            .zip(&batch.messages)
            .filter_map(|(before, (_, message))| {
                let (row, episode) = before?;
                let other = episode.producer_id != message.producer_id;
                (other && !rows.contains(&row) && seen.insert(row)).then_some(episode)
            })
            .collect())
    }

    /// One extraction call (with its corrections) for one category.
    async fn ask(
        &self,
        category: &Effective,
        current: &[&Feature],
        context: &[&Episode],
        messages: &[&Episode],
        scope: &Scope,
    ) -> Result<Vec<prompts::Command>, Outcome> {
        let mut request = ChatRequest {
            purpose: Purpose::Extraction,
            messages: prompts::extraction(category, current, context, messages),
            json_schema: Some(prompts::extraction_schema(&category.tags, messages.len())),
        };
        let mut last_error = String::new();
        for _ in 0..=self.settings.max_corrections {
            let answer = self.complete(&request, scope).await?;
            match prompts::parse_commands(&answer, &category.tags, messages.len()) {
                Ok(commands) => return Ok(commands),
                Err(error) => {
                    self.metrics.record_semantic("invalid_answers", 1);
                    request
                        .messages
                        .extend(prompts::correction(&answer, &error));
                    last_error = error;
                }
            }
        }
        Err(Outcome::Invalid(format!(
            "category {:?}: {last_error}",
            category.name
        )))
    }

    /// One call; its tokens are counted for `scope` whether or not its answer is of use
    /// (an invalid answer was still paid for).
    async fn complete(&self, request: &ChatRequest, scope: &Scope) -> Result<String, Outcome> {
        match self.model.complete(request).await {
            Ok(completion) => {
                self.memory
                    .record_usage(
                        scope,
                        request.purpose.as_str(),
                        completion.prompt_tokens,
                        completion.completion_tokens,
                    )
                    .await;
                Ok(completion.content)
            }
            Err(LlmError::Unavailable {
                message,
                retry_after,
            }) => Err(Outcome::Retry(message, retry_after)),
            Err(LlmError::Failed(message)) => Err(Outcome::Retry(message, None)),
            Err(LlmError::Rejected(message)) => Err(Outcome::Refused(message)),
        }
    }

    /// Merges the features of each touched tag that passed the threshold.
    async fn consolidate(
        &self,
        set: &SetRow,
        touched: BTreeSet<(String, String)>,
        embedder: Option<String>,
        scope: &Scope,
    ) {
        let store = self.memory.store();
        for (category, tag) in touched {
            let Ok(all) = store
                .category_features(set.internal_id, &features::category_key(&category))
                .await
            else {
                continue;
            };
            let tag_key = features::normalise(&tag);
            let group: Vec<Feature> = all
                .into_iter()
                .filter(|f| features::normalise(&f.tag) == tag_key)
                .collect();
            let threshold = self.settings.consolidation_threshold.max(2);
            let key = (set.internal_id, features::match_key(&category, &tag, ""));
            let last = self.consolidated_count(&key);
            // Again only once the tag has grown by half the threshold since last time.
            if group.len() < threshold || last.is_some_and(|n| group.len() < n + threshold / 2) {
                continue;
            }
            self.record_consolidated(key.clone(), group.len());
            let request = ChatRequest {
                purpose: Purpose::Consolidation,
                messages: prompts::consolidation(&category, &tag, &group),
                json_schema: Some(prompts::consolidation_schema()),
            };
            let answer = match self.complete(&request, scope).await {
                Ok(answer) => answer,
                Err(
                    Outcome::Retry(reason, _) | Outcome::Refused(reason) | Outcome::Invalid(reason),
                ) => {
                    tracing::warn!(set = %set.set_id, error = %reason, "consolidation skipped: the model failed");
                    continue;
                }
            };
            let plan = match prompts::parse_consolidation(&answer, &group) {
                Ok(plan) => plan,
                Err(error) => {
                    tracing::warn!(set = %set.set_id, error = %error, "consolidation skipped: invalid answer");
                    continue;
                }
            };
            let keep: std::collections::HashSet<&str> =
                plan.keep.iter().map(String::as_str).collect();
            let remove: Vec<FeatureId> = group
                .iter()
                .filter(|f| !keep.contains(f.id.as_str()))
                .map(|f| f.internal_id)
                .collect();
            if remove.is_empty() {
                continue;
            }
            self.record_consolidated(key, group.len() - remove.len() + plan.add.len());
            let category_id = group
                .first()
                .map(|f| f.category_id.clone())
                .unwrap_or_default();
            let add = plan
                .add
                .iter()
                .map(|(t, feature, value)| {
                    let t = if t.is_empty() { &tag } else { t };
                    features::new_feature(
                        &category,
                        &category_id,
                        t,
                        feature,
                        value,
                        Default::default(),
                    )
                })
                .collect();
            match store
                .consolidate(set.internal_id, &remove, add, embedder.clone())
                .await
            {
                Ok(()) => self.metrics.record_semantic("consolidated", 1),
                Err(err) => tracing::warn!(set = %set.set_id, error = %err, "consolidation failed"),
            }
        }
    }
}

impl Worker {
    fn consolidated_count(&self, key: &(SetId, String)) -> Option<usize> {
        let map = self.consolidated.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).copied()
    }

    fn record_consolidated(&self, key: (SetId, String), count: usize) {
        let mut map = self.consolidated.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(key, count);
    }
}

/// The current features most relevant to the batch first (by words shared with it),
/// at most `limit`.
fn most_relevant<'a>(
    current: &'a [Feature],
    messages: &[&Episode],
    limit: usize,
) -> Vec<&'a Feature> {
    if current.len() <= limit {
        return current.iter().collect();
    }
    let words: std::collections::HashSet<String> = messages
        .iter()
        .flat_map(|m| crate::retrieval::tokenize::query_terms(&m.content))
        .collect();
    let mut scored: Vec<(usize, &Feature)> = current
        .iter()
        .map(|f| {
            let text = format!("{} {} {}", f.tag, f.feature, f.value);
            let shared = crate::retrieval::tokenize::query_terms(&text)
                .iter()
                .filter(|t| words.contains(*t))
                .count();
            (shared, f)
        })
        .collect();
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.updated_at_micros.cmp(&a.1.updated_at_micros))
    });
    scored.into_iter().take(limit).map(|(_, f)| f).collect()
}
