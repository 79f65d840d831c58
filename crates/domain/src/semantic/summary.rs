//! Short-term summaries: when a project's short-term window overflows (by messages or
//! characters), the episodes leaving it are folded by the model into a rolling summary,
//! in the background, and stored. A summary never outlives what it summarises: the
//! store drops it when an episode it covers is deleted, and it is rebuilt from what
//! remains.

use std::sync::Arc;
use std::time::Duration;

use super::SemanticMemory;
use super::prompts;
use crate::llm::{ChatRequest, LanguageModel, Purpose};
use crate::model::Episode;
use crate::runtime_settings::RuntimeSettings;
use memmachine_core::access::{Access, ProjectAccess};

/// Episodes folded in per model call.
const FOLD_BATCH: usize = 50;
const POLL: Duration = Duration::from_secs(1);
const RETRY: Duration = Duration::from_secs(30);

/// The short-term window.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Most recent episodes kept verbatim.
    pub messages: usize,
    /// Most characters they may hold together (0: no bound).
    pub chars: usize,
}

/// The recent episodes the window keeps, oldest first, from the most recent `recent`
/// (oldest first).
pub fn kept(window: Window, recent: Vec<Episode>) -> Vec<Episode> {
    if window.chars == 0 {
        return recent;
    }
    let mut total = 0;
    let mut start = recent.len();
    for (i, episode) in recent.iter().enumerate().rev() {
        total += episode.content.chars().count();
        if total > window.chars && start < recent.len() {
            break;
        }
        start = i;
        if total > window.chars {
            break;
        }
    }
    recent.into_iter().skip(start).collect()
}

/// Starts the summariser (only with a model).
/// The window's length in characters is read from `runtime` on each pass, so a change of
/// the short-term capacity applies at once.
pub fn spawn(memory: SemanticMemory, messages: usize, runtime: RuntimeSettings) {
    let Some(model) = memory.model().cloned() else {
        return;
    };
    tokio::spawn(async move {
        let mut cursor = 0;
        loop {
            let window = Window {
                messages,
                chars: runtime.current().short_term_chars,
            };
            if window.messages == 0 {
                tokio::time::sleep(POLL).await;
                continue;
            }
            match memory.store().projects_changed(cursor).await {
                Ok((projects, next)) => {
                    let mut failed = false;
                    for key in projects {
                        // Over its budget: no summary now; the next change after it
                        // resumes folds everything that left the window meanwhile.
                        if memory.is_paused(&key.org_id).await {
                            continue;
                        }
                        // A background fold: no caller asked.
                        let access = Access::system(key.clone());
                        if let Err(err) = fold(&memory, &model, window, &access).await {
                            tracing::warn!(project = %key, error = %err, "summarising failed; retrying later");
                            failed = true;
                        }
                    }
                    if failed {
                        tokio::time::sleep(RETRY).await;
                    } else {
                        cursor = next;
                    }
                }
                Err(crate::error::Error::Closed) => return,
                Err(err) => {
                    tracing::warn!(error = %err, "looking for projects to summarise failed")
                }
            }
            tokio::time::sleep(POLL).await;
        }
    });
}

/// Folds the episodes that left the project's window into its summary.
async fn fold(
    memory: &SemanticMemory,
    model: &Arc<dyn LanguageModel>,
    window: Window,
    key: &ProjectAccess,
) -> crate::error::Result<()> {
    let store = memory.store();
    loop {
        let recent = match store.recent_episodes(key, None, window.messages).await {
            Ok(recent) => recent,
            Err(crate::error::Error::NotFound(_)) => return Ok(()),
            Err(err) => return Err(err),
        };
        if recent.len() < window.messages && window.chars == 0 {
            return Ok(());
        }
        let kept = kept(window, recent);
        let Some(first_kept) = kept.first().map(|e| e.sequence_num) else {
            return Ok(());
        };
        let current = store.summary(key).await?;
        let after = current.as_ref().map_or(0, |s| s.last_seq);
        let leaving = store
            .episodes_between(key, after, first_kept - 1, FOLD_BATCH)
            .await?;
        let Some(last) = leaving.last().map(|e| e.sequence_num) else {
            return Ok(());
        };
        let request = ChatRequest {
            purpose: Purpose::Summary,
            messages: prompts::summary(current.as_ref().map(|s| s.text.as_str()), &leaving),
            json_schema: None,
        };
        let completion = model
            .complete(&request)
            .await
            .map_err(|err| crate::error::Error::Unavailable(err.to_string()))?;
        let scope = crate::usage::Scope::new(key.org_id.clone(), key.project_id.clone());
        memory
            .record_usage(
                &scope,
                request.purpose.as_str(),
                completion.prompt_tokens,
                completion.completion_tokens,
            )
            .await;
        // A reasoning model's thinking is not the summary; nothing left is no summary.
        let text = crate::llm::answer::without_reasoning(&completion.content)
            .trim()
            .to_string();
        if text.is_empty() {
            return Err(crate::error::Error::Unavailable(
                "the language model answered an empty summary".into(),
            ));
        }
        let summary = super::model::Summary {
            text,
            first_seq: current
                .as_ref()
                .map_or(leaving[0].sequence_num, |s| s.first_seq),
            last_seq: last,
            updated_at_micros: chrono::Utc::now().timestamp_micros(),
        };
        let previous = current.map(|s| s.last_seq);
        if !store.put_summary(key, summary, previous).await? {
            // Changed meanwhile (an episode it covered was deleted): start again.
            continue;
        }
        tracing::debug!(project = %key, through_seq = last, "short-term summary updated");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(seq: i64, content: &str) -> Episode {
        Episode {
            uid: uuid::Uuid::new_v4(),
            content: content.into(),
            producer_id: "a".into(),
            producer_role: String::new(),
            produced_for_id: String::new(),
            sequence_num: seq,
            episode_type: "message".into(),
            content_type: "string".into(),
            created_at_micros: 0,
            metadata: Default::default(),
            expires_at_micros: None,
        }
    }

    #[test]
    fn the_window_keeps_what_fits_in_characters() {
        let recent = vec![episode(1, "aaaa"), episode(2, "bbbb"), episode(3, "cc")];
        let all = Window {
            messages: 3,
            chars: 0,
        };
        assert_eq!(kept(all, recent.clone()).len(), 3);
        let six = Window {
            messages: 3,
            chars: 6,
        };
        let seqs: Vec<i64> = kept(six, recent.clone())
            .iter()
            .map(|e| e.sequence_num)
            .collect();
        assert_eq!(seqs, [2, 3]);
        // The newest is always kept, even when it alone is too long.
        let one = Window {
            messages: 3,
            chars: 1,
        };
        let seqs: Vec<i64> = kept(one, recent).iter().map(|e| e.sequence_num).collect();
        assert_eq!(seqs, [3]);
    }
}
