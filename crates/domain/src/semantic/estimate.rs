//! What extracting a project's queued messages will cost, before a worker spends it,
//! and the per-project pause that holds them back (stored where the queue's claim reads
//! it, so every replica honours it).
//!
//! The estimate follows what the workers do: each set's queued messages go in batches of
//! up to `max_batch`, and each batch makes one call per category the set uses. Prompt
//! tokens are counted as the server counts a call whose endpoint does not report them (a
//! quarter of the characters of the messages sent): per call the category's fixed
//! prompt with the features it would show now, plus each message's text and header.
//! Not counted: corrections after an invalid answer, earlier messages shown as context,
//! features the batch itself adds, and consolidations.

use super::SemanticMemory;
use super::categories::Effective;
use super::features;
use super::ingest::IngestSettings;
use super::model::{Feature, SetRow};
use super::prompts;
use crate::error::Result;
use crate::llm::estimate_tokens;
use crate::model::Episode;
use crate::usage::Budget;
use memmachine_core::access::ProjectAccess;

/// Completion tokens guessed per call: an answer's JSON framing (an empty answer,
/// `{"commands":[]}`, is about this).
pub const COMPLETION_TOKENS_PER_CALL: i64 = 10;
/// ...and per message in the call: about two thirds of one command (tag, feature,
/// value, message number), the rate of a chatty conversation. A guess, not a measure.
pub const COMPLETION_TOKENS_PER_MESSAGE: i64 = 20;

/// A project's extraction backlog and what it will cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    pub project_id: String,
    /// Whether the project's extraction is paused (its messages wait until resumed).
    pub paused: bool,
    /// Distinct messages queued (one queued for several sets counts once).
    pub pending_messages: i64,
    /// Sets with queued messages of the project (the org's shared sets included).
    pub sets: i64,
    /// Most messages per batch.
    pub max_batch: i64,
    /// Batches the sets' queues make, and model calls (one per category per batch).
    pub batches: i64,
    pub calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// The org's budget now.
    pub budget: Budget,
}

impl Estimate {
    /// Language-model tokens the org may still spend today; `None`: unlimited.
    pub fn tokens_left_today(&self) -> Option<i64> {
        (self.budget.daily_tokens > 0)
            .then(|| (self.budget.daily_tokens - self.budget.used_today).max(0))
    }
}

/// What one set's queue will cost.
#[derive(Debug, Default)]
struct SetCost {
    batches: i64,
    calls: i64,
    prompt_tokens: i64,
    completion_tokens: i64,
}

/// A message header as the prompt writes it, for a message of no text: what each
/// message adds besides its text.
fn header_only() -> Episode {
    Episode {
        uid: uuid::Uuid::nil(),
        content: String::new(),
        producer_id: "user".into(),
        producer_role: "user".into(),
        produced_for_id: String::new(),
        sequence_num: 0,
        episode_type: "message".into(),
        content_type: "string".into(),
        created_at_micros: chrono::Utc::now().timestamp_micros(),
        metadata: Default::default(),
        expires_at_micros: None,
    }
}

fn prompt_chars(category: &Effective, shown: &[&Feature], messages: &[&Episode]) -> i64 {
    prompts::extraction(category, shown, &[], messages)
        .iter()
        .map(|m| m.content.chars().count() as i64)
        .sum()
}

impl SemanticMemory {
    /// Whether the project's extraction is paused.
    pub async fn extraction_paused(&self, project: &ProjectAccess) -> Result<bool> {
        self.store.extraction_paused(project).await
    }

    /// Pauses or resumes the project's extraction (adds go on being queued); the state
    /// now. Resuming wakes the workers.
    pub async fn set_extraction_paused(
        &self,
        project: &ProjectAccess,
        paused: bool,
    ) -> Result<bool> {
        self.store.set_extraction_paused(project, paused).await?;
        if !paused {
            self.notify_queued();
        }
        Ok(paused)
    }

    /// The project's backlog and its estimated cost, with the org's budget.
    pub async fn estimate_extraction(&self, project: &ProjectAccess) -> Result<Estimate> {
        let settings = &self.ingest;
        let paused = self.store.extraction_paused(project).await?;
        let queued = self.store.queued_for_extraction(project).await?;
        let max_batch = settings.max_batch.max(1) as i64;
        let mut estimate = Estimate {
            project_id: project.project_id.clone(),
            paused,
            pending_messages: queued.messages,
            sets: queued.sets.len() as i64,
            max_batch,
            batches: 0,
            calls: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            budget: Budget::default(),
        };
        for set in &queued.sets {
            // A set deleted since it was read has nothing left to cost.
            let Some(row) = self.store.find_set(&set.set_id).await? else {
                continue;
            };
            let cost = self
                .set_cost(&row, set.messages, set.chars, max_batch, settings)
                .await?;
            estimate.batches += cost.batches;
            estimate.calls += cost.calls;
            estimate.prompt_tokens += cost.prompt_tokens;
            estimate.completion_tokens += cost.completion_tokens;
        }
        if let Some(usage) = &self.usage {
            estimate.budget = usage.budget(&project.org_id).await?;
        }
        Ok(estimate)
    }

    async fn set_cost(
        &self,
        set: &SetRow,
        messages: i64,
        chars: i64,
        max_batch: i64,
        settings: &IngestSettings,
    ) -> Result<SetCost> {
        let batches = messages.div_euclid(max_batch) + i64::from(messages % max_batch != 0);
        let mut cost = SetCost {
            batches,
            ..SetCost::default()
        };
        let header = header_only();
        for category in self.effective_categories(set).await? {
            let current = self
                .store
                .category_features(set.internal_id, &features::category_key(&category.name))
                .await?;
            let shown: Vec<&Feature> = current.iter().take(settings.max_current_features).collect();
            let fixed = prompt_chars(&category, &shown, &[]);
            let per_message = prompt_chars(&category, &shown, &[&header]) - fixed;
            let sent = batches * fixed + messages * per_message + chars;
            cost.calls += batches;
            cost.prompt_tokens += estimate_tokens(sent.max(0) as usize) as i64;
            cost.completion_tokens +=
                batches * COMPLETION_TOKENS_PER_CALL + messages * COMPLETION_TOKENS_PER_MESSAGE;
        }
        Ok(cost)
    }
}
