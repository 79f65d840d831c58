//! Daily token budgets: an org whose language-model tokens of the current UTC day reach
//! its budget has its semantic ingestion paused (its queue kept) until the next UTC
//! midnight, or until its budget is raised. Embedder calls are counted but not
//! budgeted. The pause is a row the queue's claim reads, so every replica honours it.

use super::{DAY_MICROS, EMBEDDING, Usage, day_start, now_micros, org};
use crate::error::{Error, Result};
use memmachine_core::access::Access;

/// An org's budget as reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budget {
    /// Tokens per UTC day; 0 is unlimited.
    pub daily_tokens: i64,
    /// Language-model tokens (prompt and completion) used since the start of the UTC day.
    pub used_today: i64,
    /// While paused: when ingestion resumes (microseconds).
    pub paused_until: Option<i64>,
}

impl Usage {
    /// The org's budget: its own if set, else the server's default.
    async fn daily_tokens(&self, org_id: &str) -> Result<i64> {
        Ok(self
            .store
            .budget(org_id)
            .await?
            .unwrap_or(self.default_daily_tokens))
    }

    async fn used_today(&self, org_id: &str, now: i64) -> Result<i64> {
        // Budget enforcement on the org's own calls, or a worker's: no caller to check.
        let org = Access::system_org(org_id);
        let totals = self.store.usage_since(&org, None, day_start(now)).await?;
        Ok(totals
            .iter()
            .filter(|t| t.purpose != EMBEDDING)
            .map(|t| t.prompt_tokens.saturating_add(t.completion_tokens))
            .fold(0i64, i64::saturating_add))
    }

    /// Pauses the org when it is at or over its budget, lifts a pause it no longer
    /// needs; the resulting budget.
    pub(super) async fn enforce(&self, org_id: &str, now: i64) -> Result<Budget> {
        let daily_tokens = self.daily_tokens(org_id).await?;
        let used_today = self.used_today(org_id, now).await?;
        let over = daily_tokens > 0 && used_today >= daily_tokens;
        let stored = self.store.pause(org_id).await?;
        let paused_until = if over {
            let until = day_start(now) + DAY_MICROS;
            if stored != Some(until) {
                self.store.set_pause(org_id, Some(until)).await?;
            }
            Some(until)
        } else {
            if stored.is_some() {
                self.store.set_pause(org_id, None).await?;
            }
            None
        };
        self.log_change(org_id, paused_until, daily_tokens, used_today);
        Ok(Budget {
            daily_tokens,
            used_today,
            paused_until,
        })
    }

    /// Says once when this process sees an org paused, and once when it sees it resume.
    fn log_change(&self, org_id: &str, paused_until: Option<i64>, daily: i64, used: i64) {
        let mut paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        match paused_until {
            Some(until) if paused.insert(org_id.to_string()) => {
                let until = chrono::DateTime::from_timestamp_micros(until)
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_default();
                tracing::info!(org = org_id, daily_tokens = daily, used_today = used, paused_until = %until,
                    "the org reached its daily token budget; its semantic ingestion is paused (its queue is kept)");
            }
            None if paused.remove(org_id) => {
                tracing::info!(
                    org = org_id,
                    daily_tokens = daily,
                    used_today = used,
                    "the org is within its daily token budget again; its semantic ingestion resumes"
                );
            }
            _ => {}
        }
    }

    /// The org's budget, what it used today and whether it is paused (a pause past its
    /// end, or one a raised default no longer needs, is lifted on the way).
    pub async fn budget(&self, org_id: &str) -> Result<Budget> {
        self.enforce(org(org_id)?, now_micros()).await
    }

    /// Whether the org's pause holds now (a store error counts as not paused: the
    /// budget is a cap on spending, not a reason to stop serving).
    pub async fn is_paused(&self, org_id: &str) -> bool {
        matches!(self.store.pause(org_id).await, Ok(Some(until)) if until > now_micros())
    }

    /// Sets the org's own daily budget (0: unlimited); the ingestion of an org under its
    /// new budget resumes at once, that of one over it is paused.
    pub async fn set_budget(&self, org_id: &str, daily_tokens: i64) -> Result<Budget> {
        let org_id = org(org_id)?;
        if daily_tokens < 0 {
            return Err(Error::invalid(
                "daily_tokens",
                "must be 0 (unlimited) or a positive number of tokens",
            ));
        }
        self.store.set_budget(org_id, daily_tokens).await?;
        self.enforce(org_id, now_micros()).await
    }
}
